"""The hybrid lines of a closing table: each dense model fused with BM25, whether pre-training still adds to a hybrid,
and whether a hybrid should be served instead of any single model.

A team that serves BM25 and a dense model together asks two questions a table of single models cannot answer: does
the trained model's hybrid beat the start's hybrid (or did training learn what BM25 already gives), and is a hybrid
ahead of every single model, so that it is what to serve. ``xprt-st evaluate`` with ``bm25`` among its models adds
``hybrid:MODEL`` for each dense model (:func:`with_hybrids`) and answers both (:func:`serve_hybrid`); the quickstart
and compare ask the same of their start and trained models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from xprt_st.evaluation.bootstrap import GAIN, paired_interval, retrieval_items
from xprt_st.evaluation.lexical import BM25, HYBRID_PREFIX, is_lexical_spec

if TYPE_CHECKING:
    from xprt_st.evaluation.run import EvaluationReport

__all__ = ["hybrid_labels", "serve_hybrid", "serve_hybrid_lines", "with_hybrids"]


def with_hybrids(specs: Sequence[str], labels: Sequence[str] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``specs`` (and their ``labels``) with ``hybrid:MODEL`` appended for each dense model that has none, when
    ``bm25`` is among them; unchanged otherwise. A given label ``L`` names its hybrid ``hybrid:L``.

    Example:
        >>> with_hybrids(["default", "runs/a", "bm25"])
        (('default', 'runs/a', 'bm25', 'hybrid:default', 'hybrid:runs/a'), ())
        >>> with_hybrids(["default", "bm25", "hybrid:default"], ["start", "bm25", "fused"])
        (('default', 'bm25', 'hybrid:default'), ('start', 'bm25', 'fused'))
    """
    if BM25 not in specs:
        return tuple(specs), tuple(labels)
    fused = {spec[len(HYBRID_PREFIX) :] for spec in specs if spec.startswith(HYBRID_PREFIX)}
    dense = [index for index, spec in enumerate(specs) if not is_lexical_spec(spec) and spec not in fused]
    added = tuple(f"{HYBRID_PREFIX}{specs[index]}" for index in dense)
    named = tuple(f"{HYBRID_PREFIX}{labels[index]}" for index in dense) if labels else ()
    return (*specs, *added), (*labels, *named)


def hybrid_labels(report: EvaluationReport) -> list[str]:
    """The report's hybrid lines (labels that start with ``hybrid:``), in table order."""
    return [model for model in report.models if model.startswith(HYBRID_PREFIX)]


def serve_hybrid(report: EvaluationReport, task: str) -> str | None:
    """The best hybrid on ``task`` where it is ahead of every single model (each dense model and BM25), each beyond
    its paired 95% interval over queries; None where none is, or the task has no per-query scores."""
    per_query = report.per_query.get(task, {})
    hybrids = [name for name in hybrid_labels(report) if name in per_query]
    singles = [name for name in report.models if name not in hybrids and name in per_query]
    if not hybrids or not singles:
        return None
    best = max(hybrids, key=lambda name: report.score(name, task))
    ahead = all(
        paired_interval(retrieval_items(per_query[best], per_query[single])).verdict == GAIN for single in singles
    )
    return best if ahead else None


def serve_hybrid_lines(report: EvaluationReport) -> list[str]:
    """One line per task where a hybrid is ahead of every single model (:func:`serve_hybrid`): what to serve."""
    lines = []
    for task in report.tasks:
        best = serve_hybrid(report, task)
        if best is not None:
            lines.append(
                f"{task}: serve {best} (BM25 fused with {best[len(HYBRID_PREFIX) :]} by reciprocal ranks): it is ahead "
                "of every single model, BM25 included, each beyond its 95% interval"
            )
    return lines
