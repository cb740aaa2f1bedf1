"""finetune-compare: does the gain of a pre-trained model survive supervised fine-tuning?

The paper measured xPRT without fine-tuning; a search team fine-tunes anyway. This module fine-tunes
the base model and the pre-trained model under identical settings and seeds with
MultipleNegativesRankingLoss, evaluates the four models (``base``, ``pretrained``, ``base+ft``,
``pretrained+ft``) on the same held-out queries, and reports the gain of pre-training before and
after fine-tuning, overall and per sub-domain, each gain with a paired bootstrap 95% interval over
the test queries (:mod:`xprt_st.evaluation.bootstrap`), flagging sub-domains that lose (the paper
saw drops on domains far from web text: TREC-COVID, FiQA).

Labelled data, in order of preference:

- a pairs file (``--train-pairs``: JSONL or TSV with ``query`` and ``positive`` columns, optionally a
  sub-domain column); the whole evaluation task is then the test set;
- BEIR train judgements (``qrels/train.tsv`` in the same folder, ``train_split="train"``);
- neither: the task's test queries are split into a train fold and a test fold, deterministically
  by seed (:func:`split_queries`); train pairs are (query, text of each relevant document).

Everything that is bookkeeping (folds, sub-domains, per-domain means, gains, flags) is a pure
function here, testable without training.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentence_transformers import SentenceTransformer

from xprt_st.evaluation.bootstrap import LOSS, Interval, paired_interval, retrieval_items
from xprt_st.evaluation.local import BEIRData, TaskLoadError, make_retrieval_task

if TYPE_CHECKING:
    from rich.console import Group

logger = logging.getLogger(__name__)

ROLES = ("base", "pretrained", "base+ft", "pretrained+ft")
"""The four models of the comparison, in table order."""

OVERALL = "overall"
"""The row of all test queries together."""

NO_DOMAIN = "(none)"
"""Sub-domain of a query whose record has no sub-domain value."""


# --------------------------------------------------------------------------------------------------
# Labelled pairs and folds (pure)
# --------------------------------------------------------------------------------------------------


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
        raise ValueError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    ids = sorted(set(query_ids))
    if len(ids) < 2:
        raise ValueError(f"need at least 2 queries to split into train and test folds, got {len(ids)}")
    random.Random(seed).shuffle(ids)
    n_test = min(len(ids) - 1, max(1, round(len(ids) * test_fraction)))
    return sorted(ids[n_test:]), sorted(ids[:n_test])


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
    pattern = re.compile(domain_pattern) if domain_pattern else None
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


# --------------------------------------------------------------------------------------------------
# Scores, gains, flags (pure)
# --------------------------------------------------------------------------------------------------


def domain_means(per_query: Mapping[str, float], domains: Mapping[str, str]) -> dict[str, float]:
    """Mean per-query score overall and per sub-domain (none when ``domains`` is empty); only queries
    present in ``per_query`` count."""
    groups: dict[str, list[float]] = {OVERALL: []}
    for qid, value in per_query.items():
        groups[OVERALL].append(value)
        if domains:
            groups.setdefault(domains.get(qid, NO_DOMAIN), []).append(value)
    return {name: sum(values) / len(values) for name, values in groups.items() if values}


def domain_counts(query_ids: Sequence[str], domains: Mapping[str, str]) -> dict[str, int]:
    """Number of queries overall and per sub-domain (none when ``domains`` is empty)."""
    counts = {OVERALL: len(query_ids)}
    for qid in query_ids if domains else []:
        name = domains.get(qid, NO_DOMAIN)
        counts[name] = counts.get(name, 0) + 1
    return counts


@dataclass
class GainRow:
    """Scores of the four models on one sub-domain and the gains of pre-training.

    ``gain_before`` = pretrained - base; ``gain_after`` = (pretrained+ft) - (base+ft);
    ``flag`` names where pre-training loses by more than the tolerance, and says so when the loss's
    95% interval includes 0. ``*_low`` / ``*_high`` bound each gain's paired bootstrap 95% interval
    over the sub-domain's test queries and ``verdict_*`` reads it (gain, loss, no clear difference);
    NaN and ``""`` when there is no interval (no per-query scores, or a single query).
    """

    domain: str
    n_queries: int
    base: float
    pretrained: float
    base_ft: float
    pretrained_ft: float
    gain_before: float
    gain_after: float
    flag: str
    before_low: float = math.nan
    before_high: float = math.nan
    after_low: float = math.nan
    after_high: float = math.nan
    verdict_before: str = ""
    verdict_after: str = ""


def gain_intervals(
    per_query: Mapping[str, Mapping[str, float]], domains: Mapping[str, str] | None = None
) -> dict[str, tuple[Interval | None, Interval | None]]:
    """Paired bootstrap 95% intervals of the gain before and after fine-tuning, overall and per sub-domain.

    Both gains are means of per-query nDCG@10 differences on the same test queries
    (pretrained - base; pretrained+ft - base+ft), so the queries of each sub-domain are resampled with
    :func:`xprt_st.evaluation.bootstrap.paired_interval`. A sub-domain with one query has no interval (None).

    Args:
        per_query: role (:data:`ROLES`) -> query id -> nDCG@10, the same queries for every role.
        domains: query id -> sub-domain; None or empty: overall only.
    """
    groups: dict[str, list[str]] = {OVERALL: sorted(per_query["base"])}
    for qid in groups[OVERALL] if domains else []:
        groups.setdefault(domains.get(qid, NO_DOMAIN), []).append(qid)
    intervals = {}
    for name, ids in groups.items():
        pair = []
        for model, reference in (("pretrained", "base"), ("pretrained+ft", "base+ft")):
            if len(ids) < 2:
                pair.append(None)
                continue
            items = retrieval_items({q: per_query[model][q] for q in ids}, {q: per_query[reference][q] for q in ids})
            pair.append(paired_interval(items))
        intervals[name] = (pair[0], pair[1])
    return intervals


def compare_gains(
    scores: Mapping[str, Mapping[str, float]],
    counts: Mapping[str, int] | None = None,
    *,
    tolerance: float = 0.0,
    intervals: Mapping[str, tuple[Interval | None, Interval | None]] | None = None,
) -> list[GainRow]:
    """Gain rows, overall first then sub-domains by name, from role -> domain -> score.

    Args:
        scores: for each role in :data:`ROLES`, a mapping domain -> mean score.
        counts: domain -> number of test queries (for the table).
        tolerance: a gain below ``-tolerance`` is flagged as a loss.
        intervals: domain -> (interval of the gain before, after) fine-tuning (:func:`gain_intervals`).
    """
    missing = [role for role in ROLES if role not in scores]
    if missing:
        raise KeyError(f"scores lack role(s) {missing}; need all of {list(ROLES)}")
    domains = sorted(set().union(*(set(scores[role]) for role in ROLES)) - {OVERALL})
    rows = []
    for domain in ([OVERALL] if OVERALL in scores["base"] else []) + domains:
        values = {role: scores[role].get(domain, math.nan) for role in ROLES}
        before = values["pretrained"] - values["base"]
        after = values["pretrained+ft"] - values["base+ft"]
        pair = (intervals or {}).get(domain, (None, None))
        # A loss whose interval includes 0 is still named (the point estimate lost) but marked as such.
        losses = [
            name + (" (95% CI includes 0)" if interval is not None and interval.verdict != LOSS else "")
            for name, gain, interval in (("before", before, pair[0]), ("after", after, pair[1]))
            if gain < -tolerance
        ]
        flag = f"loses {' and '.join(losses)} fine-tuning" if losses else ""
        bounds = [(i.low, i.high, i.verdict) if i is not None else (math.nan, math.nan, "") for i in pair]
        rows.append(
            GainRow(
                domain=domain,
                n_queries=int((counts or {}).get(domain, 0)),
                base=values["base"],
                pretrained=values["pretrained"],
                base_ft=values["base+ft"],
                pretrained_ft=values["pretrained+ft"],
                gain_before=before,
                gain_after=after,
                flag=flag,
                before_low=bounds[0][0],
                before_high=bounds[0][1],
                after_low=bounds[1][0],
                after_high=bounds[1][1],
                verdict_before=bounds[0][2],
                verdict_after=bounds[1][2],
            )
        )
    return rows


@dataclass
class FinetuneSettings:
    """Fine-tuning settings shared by both models (identical runs but for the starting weights).

    Attributes:
        epochs: passes over the training pairs.
        batch_size: pairs per batch; the other positives of the batch are the negatives of MNRL.
        learning_rate: peak learning rate (linear decay after warm-up).
        warmup_ratio: fraction of steps of linear warm-up.
        scale: MNRL's inverse temperature (20 = temperature 0.05, the sentence-transformers default).
        seed: seed of weight init of new layers, data order and dropout.
    """

    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    scale: float = 20.0
    seed: int = 0


@dataclass
class CompareResult:
    """Everything a finetune-compare run produced: the fold plan, settings, scores and gain rows."""

    task: str
    plan: FoldPlan
    settings: FinetuneSettings
    models: dict[str, str]
    rows: list[GainRow]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "task": self.task,
            "models": self.models,
            "plan": asdict(self.plan),
            "settings": asdict(self.settings),
            "rows": [asdict(row) for row in self.rows],
            "per_query_ndcg_at_10": self.per_query,
        }
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        return path

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(GainRow.__dataclass_fields__))
            writer.writeheader()
            for row in self.rows:
                writer.writerow(asdict(row))
        return path

    def rich_table(self) -> Group:
        """The printed result, readable at 80 columns: scores, gains with their 95% intervals, then flags.

        Two narrow tables (one row per sub-domain each) instead of one wide one, so no domain name or
        flag is cut; verdicts and flags are spelled out in full below them.
        """
        from rich import box
        from rich.console import Group
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        def table(title: str) -> Table:
            grid = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            grid.add_column("domain", no_wrap=True)
            grid.add_column("n", justify="right", no_wrap=True)
            return grid

        n_test = len(self.plan.test_query_ids)
        scores = table(f"finetune-compare on {self.task}: nDCG@10 ×100, {n_test} test queries")
        for role in ROLES:
            scores.add_column(role, justify="right", no_wrap=True)
        gains = table(escape("gain of pre-training ×100 [paired bootstrap 95% CI]"))
        gains.add_column("before fine-tuning", justify="right", no_wrap=True)
        gains.add_column("after fine-tuning", justify="right", no_wrap=True)
        for row in self.rows:
            values = (row.base, row.pretrained, row.base_ft, row.pretrained_ft)
            scores.add_row(row.domain, str(row.n_queries), *(f"{100 * value:.2f}" for value in values))
            gains.add_row(
                row.domain,
                str(row.n_queries),
                _gain_cell(row.gain_before, row.before_low, row.before_high),
                _gain_cell(row.gain_after, row.after_low, row.after_high),
            )
        notes = [Text("")]
        for stage, attribute in (("before", "verdict_before"), ("after", "verdict_after")):
            by_verdict: dict[str, list[str]] = {}
            for row in self.rows:
                by_verdict.setdefault(getattr(row, attribute) or "no interval", []).append(row.domain)
            parts = [f"{verdict}: {', '.join(names)}" for verdict, names in sorted(by_verdict.items())]
            notes.append(Text(f"{stage} fine-tuning: " + "; ".join(parts)))
        notes.append(Text("(gain or loss only where the 95% interval excludes 0)", style="dim"))
        for row in self.rows:
            if row.flag:
                notes.append(Text(f"{row.domain}: {row.flag}", style="red"))
        return Group(scores, Text(""), gains, *notes)


def _gain_cell(gain: float, low: float, high: float) -> str:
    """``+1.23 [-0.40, +2.85]`` (×100), or the bare gain without an interval."""
    if math.isnan(low):
        return f"{100 * gain:+.2f}"
    return f"{100 * gain:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"


# --------------------------------------------------------------------------------------------------
# Training and the end-to-end comparison (edges: models, trainer, mteb)
# --------------------------------------------------------------------------------------------------


def finetune(
    model: SentenceTransformer,
    pairs: Sequence[LabelledPair],
    settings: FinetuneSettings,
    output_dir: str | Path,
) -> SentenceTransformer:
    """Fine-tune a deep copy of ``model`` on (query, positive) pairs with MultipleNegativesRankingLoss.

    The copy is trained and returned; ``model`` is left untouched. Batches never hold two identical
    texts (the NO_DUPLICATES sampler) so an in-batch negative is never a copy of the positive.
    """
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from transformers import set_seed

    if not pairs:
        raise ValueError("no training pairs to fine-tune on")
    set_seed(settings.seed)
    student = copy.deepcopy(model)
    dataset = Dataset.from_dict({"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        warmup_ratio=settings.warmup_ratio,
        seed=settings.seed,
        data_seed=settings.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, len(pairs) // settings.batch_size // 5),
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = SentenceTransformerTrainer(
        model=student,
        args=args,
        train_dataset=dataset,
        loss=MultipleNegativesRankingLoss(student, scale=settings.scale),
    )
    trainer.train()
    return student


def pretrain_from_recipe(
    recipe: str | Path,
    mined: str | Path,
    base: str | Path | None,
    output: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> Path:
    """Produce the pre-trained model: train ``recipe`` from ``base`` on a mined folder (``xprt-st mine``).

    A thin call of :func:`xprt_st.training.train_recipe` so that finetune-compare can start from a
    recipe and a corpus; ``overrides`` are dotted recipe keys, e.g. ``{"training.max_steps": 100}``.

    Returns:
        The folder of the pre-trained model.
    """
    from xprt_st.models import DEFAULT_MODEL
    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe

    loaded = load_recipe(recipe, overrides=dict(overrides) if overrides else None)
    # None means the default model, not the recipe's: base is what the comparison starts from.
    return train_recipe(loaded, mined, output, model=DEFAULT_MODEL if base is None else str(base), progress=progress)


def finetune_compare(
    base: str | Path | SentenceTransformer | None,
    pretrained: str | Path | SentenceTransformer,
    data: BEIRData,
    *,
    task: str = "task",
    ignore_identical_ids: bool = False,
    train_pairs: Sequence[LabelledPair] | None = None,
    test_fraction: float = 0.5,
    domains: Mapping[str, str] | None = None,
    settings: FinetuneSettings | None = None,
    output_dir: str | Path = "xprt-finetune",
    save_models: bool = False,
    eval_batch_size: int = 64,
    device: str | None = None,
    tolerance: float = 0.0,
) -> CompareResult:
    """Fine-tune base and pre-trained models identically and compare the four on held-out queries.

    Args:
        base: the starting model (name, folder, loaded model; None = the offline default).
        pretrained: the model after (xPRT) continued pre-training from ``base``.
        data: the retrieval task (test judgements; also the source of train pairs without ``train_pairs``).
        task: its name in tables.
        ignore_identical_ids: never count a document whose id is the query's (ArguAna).
        train_pairs: labelled pairs; None splits ``data``'s queries into folds (:func:`plan_folds`).
        test_fraction: share of queries in the test fold when splitting.
        domains: query id -> sub-domain (see :func:`query_domains`); None = overall only.
        settings: fine-tuning settings, identical for both models.
        output_dir: trainer scratch space and, with ``save_models``, the two fine-tuned models.
        tolerance: a gain below ``-tolerance`` is flagged.
    """
    from xprt_st.evaluation.run import evaluate_model, model_label
    from xprt_st.models import load_model

    settings = settings or FinetuneSettings()
    output_dir = Path(output_dir)
    domains = dict(domains or {})
    plan, pairs = plan_folds(
        data, train_pairs=train_pairs, test_fraction=test_fraction, seed=settings.seed, domains=domains
    )
    logger.info(
        "folds (%s): %d train queries, %d test queries, %d train pairs",
        plan.source,
        len(plan.train_query_ids),
        len(plan.test_query_ids),
        len(pairs),
    )
    test_task = make_retrieval_task(
        restrict_queries(data, plan.test_query_ids), f"{task}-test", ignore_identical_ids=ignore_identical_ids
    )
    loaded = {
        role: spec if isinstance(spec, SentenceTransformer) else load_model(spec, device=device)
        for role, spec in (("base", base), ("pretrained", pretrained))
    }
    lengths = {role: model.max_seq_length for role, model in loaded.items()}
    if lengths["base"] != lengths["pretrained"]:
        # the same texts must reach both models: score (and fine-tune) the pre-trained one at the base's limit
        logger.warning(
            "the pre-trained model reads %s tokens and the base %s: both are fine-tuned and scored at %s",
            lengths["pretrained"],
            lengths["base"],
            lengths["base"],
        )
        loaded["pretrained"].max_seq_length = lengths["base"]
    names = {"base": model_label(base), "pretrained": model_label(pretrained)}
    names.update({"base+ft": f"{names['base']}+ft", "pretrained+ft": f"{names['pretrained']}+ft"})
    for role in ("base", "pretrained"):
        loaded[f"{role}+ft"] = finetune(loaded[role], pairs, settings, output_dir / f"trainer-{role}")
        if save_models:
            loaded[f"{role}+ft"].save(str(output_dir / f"{role}+ft"))
    per_query: dict[str, dict[str, float]] = {}
    for role in ROLES:
        _, values = evaluate_model(loaded[role], [test_task], label=role, batch_size=eval_batch_size, cache_dir=None)
        per_query[role] = values[f"{task}-test"]
    scores = {role: domain_means(per_query[role], domains) for role in ROLES}
    counts = domain_counts(plan.test_query_ids, domains)
    rows = compare_gains(scores, counts, tolerance=tolerance, intervals=gain_intervals(per_query, domains))
    return CompareResult(task=task, plan=plan, settings=settings, models=names, rows=rows, per_query=per_query)
