"""Per-query analyses: nDCG@10 by hand, and the paper's split of queries into word-overlap thirds.

The paper splits ArguAna's queries into thirds by word overlap with their counter-argument and
reports nDCG@10 per third: xPRT gains in every third, a bag-of-words retriever loses in the lowest.

Word overlap, precisely (:func:`word_overlap`): both texts are lower-cased and cut into word types
with the regular expression ``\\w+`` (Unicode letters, digits and underscore); the overlap is the
Jaccard coefficient ``|Q ∩ D| / |Q ∪ D|`` of the two sets (0 when both are empty). A document's text
is its title and text joined, as the model reads it. A query with several relevant documents takes
the largest overlap among its documents with a positive judgement.

Thirds (:func:`split_into_thirds`): queries sorted by overlap ascending, ties by query id; the first
``n // 3`` (+1 when ``n % 3 > 0``) are "low", the next ``n // 3`` (+1 when ``n % 3 > 1``) "middle",
the rest "high". A third's score is the plain mean of its queries' nDCG@10.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xprt_st.evaluation.readers import BEIRData

if TYPE_CHECKING:
    from rich.table import Table

    from xprt_st.evaluation.run import EvaluationReport

THIRD_NAMES = ("low", "middle", "high")
_WORD = re.compile(r"\w+")


def word_set(text: str) -> set[str]:
    """Lower-cased word types of ``text`` (``\\w+`` tokens)."""
    return set(_WORD.findall(text.lower()))


def word_overlap(query: str, target: str) -> float:
    """Jaccard coefficient of the lower-cased word sets of ``query`` and ``target``."""
    q, d = word_set(query), word_set(target)
    union = q | d
    return len(q & d) / len(union) if union else 0.0


def query_overlaps(data: BEIRData) -> dict[str, float]:
    """Each query's word overlap with its relevant document (the largest when it has several)."""
    return {
        qid: max(word_overlap(data.queries[qid], data.document_text(doc_id)) for doc_id, rel in docs.items() if rel > 0)
        for qid, docs in data.qrels.items()
    }


def split_into_thirds(values: Mapping[str, float]) -> list[list[str]]:
    """Query ids sorted by value (ties by id) and cut into three parts whose sizes differ by at most one."""
    ordered = sorted(values, key=lambda qid: (values[qid], qid))
    n = len(ordered)
    sizes = [n // 3 + (1 if i < n % 3 else 0) for i in range(3)]
    return [ordered[: sizes[0]], ordered[sizes[0] : sizes[0] + sizes[1]], ordered[sizes[0] + sizes[1] :]]


@dataclass
class OverlapThird:
    """One third of the queries: its name, ids and overlap range."""

    name: str
    query_ids: list[str]
    min_overlap: float
    max_overlap: float


def overlap_thirds(data: BEIRData) -> list[OverlapThird]:
    """Split the queries of ``data`` into low / middle / high word-overlap thirds."""
    overlaps = query_overlaps(data)
    thirds = []
    for name, ids in zip(THIRD_NAMES, split_into_thirds(overlaps), strict=True):
        values = [overlaps[qid] for qid in ids]
        thirds.append(OverlapThird(name, ids, min(values, default=math.nan), max(values, default=math.nan)))
    return thirds


@dataclass
class ThirdScore:
    """Mean nDCG@10 of one model on one overlap third, and its gain over the reference model."""

    task: str
    model: str
    third: str
    n_queries: int
    min_overlap: float
    max_overlap: float
    ndcg_at_10: float
    gain: float | None
    reference: str | None


def ndcg_by_third(
    thirds: Sequence[OverlapThird],
    per_query: Mapping[str, Mapping[str, float]],
    *,
    reference: str | None = None,
    task: str = "",
) -> list[ThirdScore]:
    """Mean per-query nDCG@10 of each model in each third; ``gain`` = model minus ``reference``.

    Args:
        thirds: from :func:`overlap_thirds`.
        per_query: model -> query id -> nDCG@10; every query of every third must be present.
        reference: the model the gains are measured against (None: no gains).
        task: the task name the rows carry.
    """
    means: dict[tuple[str, str], float] = {}
    for model, scores in per_query.items():
        for third in thirds:
            missing = [qid for qid in third.query_ids if qid not in scores]
            if missing:
                raise KeyError(f"model {model!r} has no per-query score for {len(missing)} queries, e.g. {missing[0]}")
            values = [scores[qid] for qid in third.query_ids]
            means[model, third.name] = sum(values) / len(values) if values else math.nan
    if reference is not None and reference not in per_query:
        raise KeyError(f"reference model {reference!r} not among {list(per_query)}")
    return [
        ThirdScore(
            task=task,
            model=model,
            third=third.name,
            n_queries=len(third.query_ids),
            min_overlap=third.min_overlap,
            max_overlap=third.max_overlap,
            ndcg_at_10=means[model, third.name],
            gain=None if reference is None else means[model, third.name] - means[reference, third.name],
            reference=reference,
        )
        for model in per_query
        for third in thirds
    ]


def overlap_thirds_report(report: EvaluationReport, task: str, reference: str | None = None) -> list[ThirdScore]:
    """:func:`ndcg_by_third` for one local retrieval task of an :class:`~xprt_st.evaluation.run.EvaluationReport`.

    ``reference`` defaults to the first model of the report.
    """
    task_object = report.task_objects.get(task)
    data = getattr(type(task_object), "beir", None)
    if data is None or task not in report.per_query:
        raise ValueError(
            f"overlap thirds need a local retrieval task with per-query scores; {task!r} is not one "
            "(use a named local retrieval task or a BEIR folder)"
        )
    per_query = {model: report.per_query[task][model] for model in report.models}
    return ndcg_by_third(
        overlap_thirds(data), per_query, reference=reference if reference is not None else report.models[0], task=task
    )


def write_thirds_csv(rows: Sequence[ThirdScore], path: str | Path) -> Path:
    """Write overlap-third rows as CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(ThirdScore.__dataclass_fields__))
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    return path


def thirds_rich_table(rows: Sequence[ThirdScore], title: str = "nDCG@10 by word-overlap third") -> Table:
    """A rich table: one row per model, one column per third (score and gain over the reference)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    table.add_column("task")
    table.add_column("model", style="bold")
    thirds = list(dict.fromkeys(row.third for row in rows))
    ranges = {row.third: (row.min_overlap, row.max_overlap, row.n_queries) for row in rows}
    for third in thirds:
        low, high, n = ranges[third]
        table.add_column(f"{third} (n={n})\noverlap {low:.3f}-{high:.3f}", justify="right")
    for task, model in dict.fromkeys((row.task, row.model) for row in rows):
        cells = []
        for third in thirds:
            row = next(r for r in rows if r.task == task and r.model == model and r.third == third)
            gain = "" if row.gain is None or model == row.reference else f" ({row.gain:+.4f})"
            style = "red" if row.gain is not None and row.gain < 0 else None
            text = f"{row.ndcg_at_10:.4f}{gain}"
            cells.append(f"[{style}]{text}[/{style}]" if style else text)
        table.add_row(escape(task), escape(model), *cells)
    return table


def dcg(relevances: Sequence[float]) -> float:
    """Discounted cumulative gain with linear gain, as trec_eval: ``sum(rel_i / log2(i + 1))``, i from 1."""
    return sum(rel / math.log2(rank + 2) for rank, rel in enumerate(relevances))


def ndcg_at_k(ranking: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of one ranked list of document ids against the judgements of one query.

    Gains are the judgement values (negative ones count as 0); the ideal list sorts all judgements of
    the query. Returns 0 when the query has no positive judgement.
    """
    ideal = dcg(sorted((max(0, rel) for rel in relevant.values()), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(0, relevant.get(doc_id, 0)) for doc_id in ranking[:k]]) / ideal
