"""finetune-compare's labelled data: pairs from a file or from judgements, folds of queries, sub-domains (pure)."""

from __future__ import annotations

import csv
import json
import logging
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xprt_st.errors import XPRTError
from xprt_st.evaluation.readers import BEIRData, TaskLoadError

logger = logging.getLogger(__name__)

NO_DOMAIN = "(none)"
"""Sub-domain of a query whose record has no sub-domain value."""


class FinetuneInputError(XPRTError, ValueError):
    """A finetune-compare setting or input that cannot run (a fraction out of range, too few queries, a pattern that
    is not a regular expression, options that do not go together), refused before any model trains."""


@dataclass(frozen=True)
class LabelledPair:
    """One training example: a query, a relevant passage, and optionally its sub-domain."""

    query: str
    positive: str
    domain: str | None = None


def read_pairs(
    path: str | Path,
    *,
    query_field: str = "query",
    positive_field: str = "positive",
    domain_field: str | None = None,
) -> list[LabelledPair]:
    """Read query/positive pairs from a JSONL file (one object a line) or a TSV file with a header row.

    Raises:
        TaskLoadError: the file is missing, a line is malformed, or a named field is absent (with the line).
    """
    path = Path(path)
    if not path.is_file():
        raise TaskLoadError(f"pairs file {path} does not exist")
    needed = [query_field, positive_field] + ([domain_field] if domain_field else [])
    records: list[tuple[int, dict[str, Any]]] = []
    with path.open(encoding="utf-8", newline="") as handle:
        if path.suffix in {".tsv", ".tab"}:
            reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            records = [(number, row) for number, row in enumerate(reader, start=2)]
        else:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append((number, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise TaskLoadError(f"{path}, line {number}: not valid JSON ({error.msg})") from error
    pairs = []
    for number, record in records:
        missing = [name for name in needed if record.get(name) in (None, "")]
        if missing:
            raise TaskLoadError(
                f"{path}, line {number}: missing field(s) {', '.join(missing)}; fields present: {', '.join(record)}"
            )
        pairs.append(
            LabelledPair(
                str(record[query_field]),
                str(record[positive_field]),
                str(record[domain_field]) if domain_field else None,
            )
        )
    if not pairs:
        raise TaskLoadError(f"pairs file {path} holds no pairs")
    return pairs


def split_queries(
    query_ids: Sequence[str], *, test_fraction: float = 0.5, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Split query ids into (train, test) folds, deterministically for a seed.

    The sorted ids are shuffled with ``random.Random(seed)``; the first ``round(n * test_fraction)``
    (at least 1, at most n - 1) form the test fold. Both folds are returned sorted.
    """
    if not 0 < test_fraction < 1:
        raise FinetuneInputError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    ids = sorted(set(query_ids))
    if len(ids) < 2:
        raise FinetuneInputError(f"need at least 2 queries to split into train and test folds, got {len(ids)}")
    random.Random(seed).shuffle(ids)
    n_test = min(len(ids) - 1, max(1, round(len(ids) * test_fraction)))
    return sorted(ids[n_test:]), sorted(ids[:n_test])


def check_domain_pattern(domain_pattern: str | None) -> re.Pattern[str] | None:
    """``--domain-pattern`` compiled, or None; a pattern that is not a regular expression is refused.

    Example:
        >>> check_domain_pattern("(["), None  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FinetuneInputError: --domain-pattern '([': not a regular expression (unterminated character set at position 1)
    """
    if not domain_pattern:
        return None
    try:
        return re.compile(domain_pattern)
    except re.error as error:
        raise FinetuneInputError(f"--domain-pattern {domain_pattern!r}: not a regular expression ({error})") from error


def query_domains(
    data: BEIRData,
    query_ids: Sequence[str] | None = None,
    *,
    domain_field: str | None = None,
    domain_pattern: str | None = None,
) -> dict[str, str]:
    """Sub-domain of each query: a field of its JSON record (top level or under ``metadata``), or
    group 1 (else the whole match) of a regular expression searched in the query id. Queries without a
    value get :data:`NO_DOMAIN`; with neither option every query is :data:`NO_DOMAIN`.

    Example: ArguAna ids look like ``test-environment-aeghhgwpe-pro02a``; ``^test-([a-z]+)-`` gives the
    debate theme (``environment``).
    """
    ids = list(data.queries) if query_ids is None else list(query_ids)
    pattern = check_domain_pattern(domain_pattern)
    domains = {}
    for qid in ids:
        value: Any = None
        if domain_field:
            record = data.query_records.get(qid, {})
            value = record.get(domain_field)
            if value is None and isinstance(record.get("metadata"), dict):
                value = record["metadata"].get(domain_field)
        elif pattern is not None:
            match = pattern.search(qid)
            if match:
                value = match.group(1) if match.groups() else match.group(0)
        domains[qid] = str(value) if value not in (None, "") else NO_DOMAIN
    return domains


def restrict_queries(data: BEIRData, query_ids: Sequence[str]) -> BEIRData:
    """``data`` with only the given queries (the corpus unchanged)."""
    keep = [qid for qid in query_ids if qid in data.qrels]
    return replace(
        data,
        queries={qid: data.queries[qid] for qid in keep},
        qrels={qid: data.qrels[qid] for qid in keep},
        query_records={qid: data.query_records[qid] for qid in keep if qid in data.query_records},
    )


def beir_train_pairs(
    data: BEIRData, query_ids: Sequence[str] | None = None, domains: Mapping[str, str] | None = None
) -> list[LabelledPair]:
    """One pair per (query, relevant document) with a positive judgement: (query text, document text)."""
    pairs = []
    for qid in sorted(data.qrels if query_ids is None else query_ids):
        for doc_id in sorted(doc for doc, rel in data.qrels[qid].items() if rel > 0):
            pairs.append(LabelledPair(data.queries[qid], data.document_text(doc_id), (domains or {}).get(qid)))
    return pairs


@dataclass
class FoldPlan:
    """Which queries train and which test, and where the training pairs come from."""

    source: str
    train_query_ids: list[str]
    test_query_ids: list[str]
    n_train_pairs: int
    seed: int
    test_fraction: float | None = None


def plan_folds(
    data: BEIRData,
    *,
    train_pairs: Sequence[LabelledPair] | None = None,
    test_fraction: float = 0.5,
    seed: int = 0,
    domains: Mapping[str, str] | None = None,
) -> tuple[FoldPlan, list[LabelledPair]]:
    """Decide the folds: given pairs train and all queries test; otherwise split the queries by seed."""
    if train_pairs is not None:
        test_ids = sorted(data.qrels)
        test_texts = {data.queries[qid] for qid in test_ids}
        leaked = sum(pair.query in test_texts for pair in train_pairs)
        if leaked:
            logger.warning("%d training pair(s) have a query identical to a test query", leaked)
        plan = FoldPlan("given pairs", [], test_ids, len(train_pairs), seed)
        return plan, list(train_pairs)
    train_ids, test_ids = split_queries(list(data.qrels), test_fraction=test_fraction, seed=seed)
    pairs = beir_train_pairs(data, train_ids, domains)
    plan = FoldPlan("split of the task's queries", train_ids, test_ids, len(pairs), seed, test_fraction)
    return plan, pairs
