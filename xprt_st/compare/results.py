"""The scores of a comparison run, read back from its folder, with gains, intervals and verdicts."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xprt_st.compare.config import CompareConfig
    from xprt_st.evaluation.bootstrap import Interval
    from xprt_st.evaluation.run import EvaluationReport

START_LABEL = "start"
REFERENCE_LABEL = "bm25"
"""The lexical reference scored beside the start on the retrieval tasks (``run/scores/KEY/bm25.json``)."""


HYBRID_FOLDER = "hybrid"


def hybrid_file(run: Path, config: CompareConfig, label: str, seed: int | None = None) -> Path:
    """Where the hybrid of ``label`` is kept: the start's without a seed, a recipe's under its seed."""
    folder = Path(run) / "scores" / config.evaluation_key() / HYBRID_FOLDER
    return folder / f"{label}.json" if seed is None else folder / f"seed-{seed}" / f"{label}.json"


def read_hybrids(run: Path, config: CompareConfig, labels: Sequence[str], start: str) -> dict[int, dict[str, Any]]:
    """``{seed: {label: record}}`` of the hybrids kept in ``run``: ``start`` (the start's, under every seed) and each
    recipe's of ``labels``; a seed without a recipe's hybrid is left out."""
    kept: dict[int, dict[str, Any]] = {}
    start_file = hybrid_file(run, config, start)
    if not start_file.is_file():
        return kept
    start_record = json.loads(start_file.read_text(encoding="utf-8"))
    for seed in config.seeds:
        rows = {
            label: json.loads(path.read_text(encoding="utf-8"))
            for label in labels
            if (path := hybrid_file(run, config, label, seed)).is_file()
        }
        if rows:
            kept[seed] = {start: start_record, **rows}
    return kept


def per_item_record(report: EvaluationReport, label: str) -> dict[str, dict[str, Any]]:
    """Each task's per-item scores of ``label`` (queries' nDCG@10, pairs' cosine and gold), as a scores file keeps
    them: what the report's bootstrap resamples."""
    items: dict[str, dict[str, Any]] = {}
    for task in report.tasks:
        if label in report.per_query.get(task, {}):
            items[task] = {"kind": "retrieval", "ndcg_at_10": report.per_query[task][label]}
        elif label in report.per_pair.get(task, {}):
            items[task] = {"kind": "sts", **report.per_pair[task][label]}
    return items


@dataclass
class CompareResult:
    """Scores of one comparison run: ``scores[seed][model][task]`` (the start under every seed)."""

    tasks: list[str]
    metrics: dict[str, str]
    models: list[str]
    seeds: list[int]
    scores: dict[int, dict[str, dict[str, float]]]
    per_item: dict[int, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    """``per_item[seed][model][task]``: the stored per-item record (:func:`xprt_st.evaluation.bootstrap.paired_items`);
    absent for scores written before per-item scores were kept: their differences have no interval."""
    reference: dict[str, Any] = field(default_factory=dict)
    """BM25's stored record (``scores``, ``per_item``) on the retrieval tasks; empty when it was not scored (a run
    without a retrieval task, or made before the reference was kept). Never part of a mean or a gain."""
    hybrids: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """``hybrids[seed][model]``: the stored record of BM25 fused with the start and with each recipe's model
    (:mod:`xprt_st.compare.hybrids`) on the retrieval tasks; never part of a mean or a gain."""
    _intervals: dict[tuple[int, str, str | None, str], Interval | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def gain(self, seed: int, model: str) -> float:
        """Mean over tasks of (model - start)."""
        start, row = self.scores[seed][START_LABEL], self.scores[seed][model]
        return statistics.fmean(row[t] - start[t] for t in self.tasks)

    def mean(self, seed: int, model: str) -> float:
        """Mean over tasks of ``model``'s scores in one seed."""
        return statistics.fmean(self.scores[seed][model][t] for t in self.tasks)

    def seed_gains(self, model: str) -> list[float]:
        """:meth:`gain` in every seed that has ``model``, in seed order."""
        return [self.gain(s, model) for s in self.seeds if model in self.scores[s]]

    def task_gain(self, model: str, task: str) -> float:
        """Mean over the seeds that have ``model`` of (model - start) on one task."""
        rows = [self.scores[s] for s in self.seeds if model in self.scores[s]]
        return statistics.fmean(row[model][task] - row[START_LABEL][task] for row in rows)

    def interval(self, seed: int, model: str, task: str | None = None, reference: str = START_LABEL) -> Interval | None:
        """Paired bootstrap 95% interval of (model - reference) in one seed: on ``task``, or (None) the mean over tasks.

        ``reference`` is the start by default; another recipe's label gives a head-to-head interval (both
        models were scored on the same items). None when a needed per-item record is missing. The mean over
        tasks is resampled within each task jointly (:func:`xprt_st.evaluation.bootstrap.pooled_interval`).
        """
        key = (seed, model, task, reference)
        if key not in self._intervals:
            from xprt_st.evaluation.bootstrap import paired_interval, paired_items, pooled_interval

            rows = self.per_item.get(seed, {})
            base, mine = rows.get(reference, {}), rows.get(model, {})
            needed = self.tasks if task is None else [task]
            if model == reference or any(t not in base or t not in mine for t in needed):
                self._intervals[key] = None
            else:
                items = [paired_items(mine[t], base[t]) for t in needed]
                self._intervals[key] = paired_interval(items[0]) if task is not None else pooled_interval(items)
        return self._intervals[key]

    def start_minus_reference(self, task: str) -> Interval | None:
        """Paired bootstrap 95% interval of (start - BM25) on one retrieval task; None without both records."""
        from xprt_st.evaluation.bootstrap import paired_interval, paired_items

        start = next((self.per_item[s].get(START_LABEL, {}) for s in self.seeds), {})
        lexical = self.reference.get("per_item", {})
        if task not in start or task not in lexical:
            return None
        return paired_interval(paired_items(start[task], lexical[task]))

    def hybrid_interval(self, seed: int, model: str, task: str) -> Interval | None:
        """Paired bootstrap 95% interval of (``model``'s hybrid - the start's hybrid) on one retrieval task in one
        seed; None without both records."""
        from xprt_st.evaluation.bootstrap import paired_interval, paired_items

        rows = self.hybrids.get(seed, {})
        mine = rows.get(model, {}).get("per_item", {})
        base = rows.get(START_LABEL, {}).get("per_item", {})
        if model == START_LABEL or task not in mine or task not in base:
            return None
        return paired_interval(paired_items(mine[task], base[task]))

    def verdict(self, model: str, task: str | None = None) -> str:
        """Verdict over the seeds that have ``model`` (gain, loss, no clear difference, seeds disagree, n/a)."""
        from xprt_st.evaluation.bootstrap import seeds_verdict

        return seeds_verdict([self.interval(s, model, task) for s in self.seeds if model in self.scores[s]])


def collect_results(run: Path, config: CompareConfig, tasks: list[str]) -> CompareResult:
    """Read ``run/scores`` into a :class:`CompareResult` (models that are not evaluated yet are left out)."""
    start_file = run / "scores" / config.evaluation_key() / f"{START_LABEL}.json"
    if not start_file.is_file():
        raise FileNotFoundError(
            f"{start_file} is missing: the starting model is not evaluated yet; run without --report-only"
        )
    start = json.loads(start_file.read_text(encoding="utf-8"))
    metrics = start["metrics"]
    scores: dict[int, dict[str, dict[str, float]]] = {}
    per_item: dict[int, dict[str, dict[str, dict[str, Any]]]] = {}
    models = [START_LABEL]
    seeds = []
    for seed in config.seeds:
        rows = {START_LABEL: start["scores"]}
        items = {START_LABEL: start.get("per_item", {})}
        for name in config.recipes:
            label = Path(name).stem
            path = run / "scores" / config.evaluation_key() / f"seed-{seed}" / f"{label}.json"
            if path.is_file():
                payload = json.loads(path.read_text(encoding="utf-8"))
                rows[label] = payload["scores"]
                items[label] = payload.get("per_item", {})
                if label not in models:
                    models.append(label)
        if len(rows) > 1:
            scores[seed] = rows
            per_item[seed] = items
            seeds.append(seed)
    reference_file = start_file.with_name(f"{REFERENCE_LABEL}.json")
    reference = json.loads(reference_file.read_text(encoding="utf-8")) if reference_file.is_file() else {}
    return CompareResult(
        hybrids=read_hybrids(run, config, models[1:], START_LABEL),
        tasks=tasks,
        metrics=metrics,
        models=models,
        seeds=seeds,
        scores=scores,
        per_item=per_item,
        reference=reference,
    )
