"""What a quickstart run's figures say: the scores before and after with their intervals, the label-free check, the
titles and headings, and the notes on what they mean (``summary.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xprt_st.evaluation.bootstrap import GAIN, interval_fields, paired_interval, retrieval_items
from xprt_st.evaluation.hybrid_lines import serve_hybrid
from xprt_st.evaluation.lexical import BM25
from xprt_st.evaluation.run import EvaluationReport
from xprt_st.quickstart.config import HYBRID_START, HYBRID_TRAINED
from xprt_st.quickstart.notes import passes_note, task_corpus_note, task_corpus_overlap
from xprt_st.stage_timing import stage

__all__ = ["hybrid_summary", "label_free_summary", "run_notes", "scores_summary", "titles_summary"]


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


def titles_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """``titles:DIR`` of ``trained`` against ``start``: the held-out titles and headings as queries, or None.

    The record of :func:`xprt_st.evaluation.titles.comparison_record` (both nDCG@10 scores, the difference and
    its paired interval over queries), how many of its queries are plain-text ``first_lines``, and the task's
    ``caveat`` when it has one (few queries, or first lines as its titles); None when mining kept fewer than 2
    titles or headings (a corpus without them). People wrote titles and headings, not the mining model, so unlike
    the label-free check of :func:`label_free_summary` the task does not favour the miner
    (docs/results/12-titles-and-headings.md).
    """
    from xprt_st.encode_backend import load_encoder
    from xprt_st.evaluation.label_free import HeldOutError
    from xprt_st.evaluation.titles import comparison_record, load_titles_task, score_model

    try:
        task = load_titles_task(mined)
    except HeldOutError:  # no held-out part, or no titles in it (NoTitlesError)
        return None
    with stage("titles: start"):
        before = score_model(load_encoder(start, encode_backend, mined, precision=precision), task)
    with stage("titles: trained"):
        after = score_model(load_encoder(trained, encode_backend, mined, precision=precision), task)
    record = comparison_record(after.per_query, before.per_query) | {"first_lines": task.first_lines}
    return record | ({"caveat": task.caveat} if task.caveat else {})


def label_free_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """The label-free check of ``trained`` against ``start`` on the held-out part of ``mined``, or None without one.

    The record of :func:`xprt_st.evaluation.label_free.comparison`: both nDCG@10 scores, the difference with
    its paired bootstrap interval, and the 10-NN overlap with the start. The training run wrote it to
    ``trained/label_free.json`` when it trained on ``mined``; it is read from there rather than encoded again.
    When the held-out part holds fewer than 2 anchors (a small corpus's draw), the record is
    ``{"queries": n, "skipped": why}`` instead.
    """
    from xprt_st.encode_backend import load_encoder
    from xprt_st.evaluation.label_free import (
        TooFewAnchorsError,
        comparison,
        load_heldout_task,
        read_heldout,
        score_model,
    )
    from xprt_st.training.label_free import RESULT_FILE

    if read_heldout(mined) is None:
        return None
    try:
        heldout = load_heldout_task(mined)
    except TooFewAnchorsError as error:
        return {"queries": error.anchors, "skipped": str(error)}
    written = Path(trained) / RESULT_FILE
    if written.is_file():
        record = json.loads(written.read_text(encoding="utf-8"))
        same_data = Path(record.get("data", "")).resolve() == Path(mined).resolve()
        if same_data and record.get("queries") == len(heldout.queries):
            return record
    with stage("label-free: start"):
        before = score_model(load_encoder(start, encode_backend, mined, precision=precision), heldout)
    with stage("label-free: trained"):
        after = score_model(load_encoder(trained, encode_backend, mined, precision=precision), heldout)
    return comparison(after, before)


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
