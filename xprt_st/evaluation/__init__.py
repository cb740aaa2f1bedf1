"""Evaluation through mteb, offline-capable: local BEIR/STS tasks, side-by-side model tables, analyses.

- :mod:`xprt_st.evaluation.readers`: BEIR folders and STS files read into plain data, deterministic subsampling.
- :mod:`xprt_st.evaluation.tasks`: that data as in-memory mteb tasks (per-query and per-pair scores kept).
- :mod:`xprt_st.evaluation.catalog`: the named local tasks (``arguana``, ``stsb``, ``sickr``, ``sts12``-``sts15``,
  ``python-faq``) and the resolution of a task spec.
- :mod:`xprt_st.evaluation.run`: :func:`evaluate_models` into an :class:`EvaluationReport`
  (rich table, CSV, JSON, bar plot), one mteb result key per model's weights.
- :mod:`xprt_st.evaluation.analysis`: per-query nDCG@10 and the paper's word-overlap thirds.
"""

from __future__ import annotations

from xprt_st.evaluation.analysis import (
    OverlapThird,
    ThirdScore,
    ndcg_at_k,
    ndcg_by_third,
    overlap_thirds,
    overlap_thirds_report,
    word_overlap,
)
from xprt_st.evaluation.catalog import LOCAL_TASKS, beir_task, load_local_task, resolve_tasks
from xprt_st.evaluation.readers import BEIRData, STSData, TaskLoadError, read_beir_folder, read_sts_file, subsample_beir
from xprt_st.evaluation.run import EvaluationReport, TaskScore, evaluate_models, model_fingerprint
from xprt_st.evaluation.tasks import make_retrieval_task, make_sts_task

__all__ = [
    "LOCAL_TASKS",
    "BEIRData",
    "EvaluationReport",
    "OverlapThird",
    "STSData",
    "TaskLoadError",
    "TaskScore",
    "ThirdScore",
    "beir_task",
    "evaluate_models",
    "load_local_task",
    "make_retrieval_task",
    "make_sts_task",
    "model_fingerprint",
    "ndcg_at_k",
    "ndcg_by_third",
    "overlap_thirds",
    "overlap_thirds_report",
    "read_beir_folder",
    "read_sts_file",
    "resolve_tasks",
    "subsample_beir",
    "word_overlap",
]
