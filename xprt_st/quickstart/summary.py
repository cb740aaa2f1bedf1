"""What a quickstart run's figures say: the scores before and after with their intervals, the label-free check, the
titles and headings, and the notes on what they mean (``summary.json``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.evaluation.bootstrap import GAIN, interval_fields, paired_interval, retrieval_items
from xprt_st.evaluation.heldout_checks import HeldoutCheck
from xprt_st.evaluation.hybrid_lines import serve_hybrid
from xprt_st.evaluation.lexical import BM25
from xprt_st.evaluation.run import EvaluationReport
from xprt_st.mining.layout import read_stats
from xprt_st.quickstart.config import HYBRID_START, HYBRID_TRAINED, MINED
from xprt_st.quickstart.notes import passes_note, task_corpus_note, task_corpus_overlap

if TYPE_CHECKING:
    from xprt_st.evaluation.label_free import HeldOut

__all__ = [
    "hybrid_summary",
    "label_free_summary",
    "run_notes",
    "scores_summary",
    "titles_summary",
    "training_label_free",
    "write_summary",
]


def run_notes(
    steps: int, batch_size: int, groups: int, corpus: tuple[str, ...], task: Path | None, mining_fields: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The notes on what the run's figures mean (``summary.json``'s ``notes``), and the task's corpus overlap.

    ``passes`` when ``steps`` of ``batch_size`` make more than one pass over the ``groups`` mined groups;
    ``task_corpus`` when the labelled ``task`` ranks mostly other documents than the ``corpus`` trained on (read with
    ``mining_fields``). The overlap (``summary.json``'s ``task_corpus_overlap``) is None without both. See
    :mod:`xprt_st.quickstart.notes`.
    """
    notes: dict[str, str] = {}
    passes = passes_note(steps, batch_size, groups)
    if passes is not None:
        notes["passes"] = passes
    overlap = None
    if corpus and task is not None:
        overlap = task_corpus_overlap(task, list(corpus), mining_fields)
        other = task_corpus_note(str(task), overlap)
        if other is not None:
            notes["task_corpus"] = other
    return notes, overlap


def training_label_free(heldout: HeldOut, trained: Path | str | None) -> dict[str, Any] | None:
    """The label-free record the training run wrote to ``trained/label_free.json`` when it trained on the folder of
    ``heldout`` with the same anchors, else None (the label-free check's ``stored`` rule in a quickstart)."""
    from xprt_st.training.label_free import RESULT_FILE

    written = Path(str(trained)) / RESULT_FILE
    if not written.is_file():
        return None
    record = json.loads(written.read_text(encoding="utf-8"))
    same_data = Path(record.get("data", "")).resolve() == Path(heldout.path).resolve()
    return record if same_data and record.get("queries") == len(heldout.queries) else None


def _one_check(
    check: HeldoutCheck, mined: Path, start: str | None, trained: Path, encode_backend: str, precision: str
) -> dict[str, Any] | None:
    """One check of ``mined``'s held-out part, ``trained`` against ``start``, as the quickstart's stage scores it."""
    from xprt_st.pipeline.heldout import HeldoutChecksStage, HeldoutSettings

    mined = Path(mined)
    models = {"start": start, "trained": trained}
    stage = HeldoutChecksStage(HeldoutSettings(mined.name, models, (check,), encode_backend, precision))
    stage.run(mined.parent)
    return stage.results[check.name]


def titles_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """``titles:DIR`` of ``trained`` against ``start``: the held-out titles and headings as queries, or None.

    The record of :func:`xprt_st.evaluation.titles.comparison_record` (both nDCG@10 scores, the difference and
    its paired interval over queries), how many of its queries are plain-text ``first_lines``, and the task's
    ``caveat`` when it has one (few queries, or first lines as its titles); None when mining kept fewer than 2
    titles or headings (a corpus without them). People wrote titles and headings, not the mining model, so unlike
    the label-free check of :func:`label_free_summary` the task does not favour the miner
    (docs/results/12-titles-and-headings.md). The quickstart's check (:data:`xprt_st.evaluation.titles.TITLES_CHECK`).
    """
    from xprt_st.evaluation.titles import TITLES_CHECK

    return _one_check(TITLES_CHECK, mined, start, trained, encode_backend, precision)


def label_free_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """The label-free check of ``trained`` against ``start`` on the held-out part of ``mined``, or None without one.

    The record of :func:`xprt_st.evaluation.label_free.comparison`: both nDCG@10 scores, the difference with
    its paired bootstrap interval, and the 10-NN overlap with the start. The training run wrote it to
    ``trained/label_free.json`` when it trained on ``mined``; it is read from there rather than encoded again
    (:func:`training_label_free`). When the held-out part holds fewer than 2 anchors (a small corpus's draw), the
    record is ``{"queries": n, "skipped": why}`` instead.
    """
    from xprt_st.evaluation.label_free import LABEL_FREE_CHECK

    check = replace(LABEL_FREE_CHECK, stored=training_label_free)
    return _one_check(check, mined, start, trained, encode_backend, precision)


def write_summary(
    folder: Path,
    report: EvaluationReport | None,
    heldout: dict[str, dict[str, Any] | None],
    *,
    steps_given: int | None,
    batch_size: int,
    corpus: tuple[str, ...],
    task: Path | None,
    mining_fields: dict[str, Any],
    config_record: dict[str, Any],
    stages: list[dict[str, Any]],
) -> dict[str, Any]:
    """Write ``folder/summary.json`` from the run's scores (``report``, None without a labelled task), its held-out
    checks (``heldout``, by check name) and its stage table (``stages``); return what it wrote
    (:func:`~xprt_st.quickstart.run.run_quickstart` says what it holds)."""
    from xprt_st.quickstart.defaults import corpus_steps
    from xprt_st.quickstart.notes import training_passes

    stats = read_stats(folder / MINED) or {}
    groups = int(stats.get("groups", 0))
    steps = steps_given if steps_given is not None else corpus_steps(groups, batch_size)
    notes, overlap = run_notes(steps, batch_size, groups, corpus, task, mining_fields)
    summary = scores_summary(report, stats, {**config_record, "max_steps": steps})
    summary["label_free"] = heldout.get("label_free")
    summary["titles"] = heldout.get("titles")
    summary["training_passes"] = round(training_passes(steps, batch_size, groups), 3)
    summary["notes"] = notes
    summary["task_corpus_overlap"] = overlap
    summary["stages"] = stages
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def scores_summary(
    report: EvaluationReport | None, stats: dict[str, Any], config_record: dict[str, Any]
) -> dict[str, Any]:
    """The scores part of ``summary.json``: the run's settings (``config_record``), the mining statistics, each task's
    score before and after, the gain and its paired 95% interval, and BM25's line (the lexical reference) with the
    trained model's difference from it; empty scores without a labelled task (the label-free check is then the only
    comparison)."""
    if report is None:  # a user corpus without a labelled task: the label-free check is the only comparison
        return {"config": config_record, "mining": stats, "scores": {}, "gain": {}, "interval": {}, "gained": None}
    before, after = report.models[:2]
    scores = {model: {task: report.score(model, task) for task in report.tasks} for model in (before, after)}
    intervals, over_bm25 = {}, {}
    for task in report.tasks:
        per_query = report.per_query.get(task, {})
        interval = reference = None
        if before in per_query and after in per_query:
            interval = paired_interval(retrieval_items(per_query[after], per_query[before]))
        if after in per_query and BM25 in per_query:
            reference = paired_interval(retrieval_items(per_query[after], per_query[BM25]))
        intervals[task] = interval_fields(interval)
        over_bm25[task] = interval_fields(reference) | {"difference": None if reference is None else reference.estimate}
    return {
        "config": config_record,
        "mining": stats,
        "scores": scores,
        "hybrid": hybrid_summary(report, before, after),
        "gain": {task: scores[after][task] - scores[before][task] for task in report.tasks},
        "interval": intervals,
        "gained": all(fields["verdict"] == GAIN for fields in intervals.values()),
        # the lexical reference (xprt_st.evaluation.lexical): BM25's score and the trained model's difference from it
        "bm25": {
            "scores": {task: report.score(BM25, task) for task in report.tasks} if BM25 in report.models else {},
            "after_minus_bm25": over_bm25,
        },
    }


def hybrid_summary(report: EvaluationReport, start: str, trained: str) -> dict[str, Any]:
    """Each task's hybrids (BM25 fused with the start, and with the trained model): their scores, the trained
    hybrid's paired interval against the start's (does pre-training still add to a hybrid?), and whether a hybrid is
    ahead of every single model (``serve_hybrid``: the better hybrid's interval above 0 against the start, the
    trained model and BM25 alike). Empty where the report has no hybrid line."""
    if HYBRID_START not in report.models or HYBRID_TRAINED not in report.models:
        return {}
    hybrids = (HYBRID_START, HYBRID_TRAINED)
    summary: dict[str, Any] = {
        "scores": {name: {task: report.score(name, task) for task in report.tasks} for name in hybrids},
        "trained_minus_start": {},
        "serve_hybrid": {},
    }
    for task in report.tasks:
        per_query = report.per_query.get(task, {})
        if not all(name in per_query for name in (*hybrids, start, trained, BM25)):
            summary["trained_minus_start"][task] = interval_fields(None) | {"difference": None}
            summary["serve_hybrid"][task] = None
            continue
        interval = paired_interval(retrieval_items(per_query[HYBRID_TRAINED], per_query[HYBRID_START]))
        summary["trained_minus_start"][task] = interval_fields(interval) | {"difference": interval.estimate}
        summary["serve_hybrid"][task] = serve_hybrid(report, task)
    return summary
