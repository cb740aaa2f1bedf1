"""Offline evaluation data: BEIR-format folders and STS files turned into mteb tasks.

mteb's built-in tasks download their data from the Hugging Face hub. Everything here reads local
files instead and hands mteb an in-memory task (the pattern of ``mteb/mocks/mock_tasks``), so the
scoring code is mteb's own: pytrec_eval nDCG@10 for retrieval, cosine Spearman for STS.

Task specs understood by :func:`resolve_tasks`:

- a named local task (:data:`LOCAL_TASKS`: ``arguana``, ``stsb``, ``sickr``, ``sts12`` ... ``sts15``,
  ``python-faq``), read from ``data_dir`` (default ``../shared/data`` or ``$XPRT_DATA_DIR``);
- a BEIR folder path: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and ``qrels/test.tsv``;
- an STS file path: a tab-separated file ``sentence1<TAB>sentence2<TAB>score`` (header optional), the
  STS-B 7-field layout, or the SICK layout; or a SemEval STS folder of ``STS.input.*`` / ``STS.gs.*``;
- an MTEB task name (e.g. ``ArguAna``) when the hub is reachable; offline, names that have a local
  equivalent fall back to it.

Subsampling (``max_queries`` / ``max_corpus``) is deterministic for a given ``seed``: the kept queries
are a seeded sample of the sorted query ids; the corpus keeps every judged document of the kept
queries and fills up to ``max_corpus`` with a seeded sample of the other documents (sorted ids), so
the relevant documents are always present and the scores stay comparable between models.

This module gathers the public names of three: :mod:`~xprt_st.evaluation.readers` (files into plain data,
subsampling), :mod:`~xprt_st.evaluation.tasks` (plain data as mteb tasks) and
:mod:`~xprt_st.evaluation.catalog` (the named tasks and the resolution of a spec).
"""

from __future__ import annotations

from xprt_st.evaluation.catalog import (
    DATA_DIR_ENV,
    LOCAL_TASKS,
    PACKAGED_DATA,
    LocalTaskSpec,
    beir_task,
    default_data_dir,
    load_local_task,
    local_task_folder,
    resolve_beir,
    resolve_task,
    resolve_tasks,
    valid_task_names,
)
from xprt_st.evaluation.readers import (
    BEIRData,
    STSData,
    TaskLoadError,
    read_beir_folder,
    read_semeval_sts_folder,
    read_sts_file,
    subsample_beir,
    subsample_sts,
)
from xprt_st.evaluation.tasks import (
    PER_PAIR_KEY,
    PER_QUERY_KEY,
    RETRIEVAL_MAIN_SCORE,
    STS_MAIN_SCORE,
    LocalRetrievalTask,
    LocalSTSTask,
    make_retrieval_task,
    make_sts_task,
    task_label,
)

__all__ = [
    "DATA_DIR_ENV",
    "LOCAL_TASKS",
    "PACKAGED_DATA",
    "PER_PAIR_KEY",
    "PER_QUERY_KEY",
    "RETRIEVAL_MAIN_SCORE",
    "STS_MAIN_SCORE",
    "BEIRData",
    "LocalRetrievalTask",
    "LocalSTSTask",
    "LocalTaskSpec",
    "STSData",
    "TaskLoadError",
    "beir_task",
    "default_data_dir",
    "load_local_task",
    "local_task_folder",
    "make_retrieval_task",
    "make_sts_task",
    "read_beir_folder",
    "read_semeval_sts_folder",
    "read_sts_file",
    "resolve_beir",
    "resolve_task",
    "resolve_tasks",
    "subsample_beir",
    "subsample_sts",
    "task_label",
    "valid_task_names",
]
