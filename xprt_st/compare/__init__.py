"""Side-by-side comparison of pre-training objectives: one corpus, one starting model, only the objective changes.

This reproduces, at small scale, the paper's main comparison (Table 1, and the ablations of Table 3):
with corpus, steps, batch and schedule fixed, does xPRT improve on its starting model while objectives
that rebuild a passage from itself (RetroMAE, TSDAE, self-only) and random positives do not?

One run, driven by a :class:`CompareConfig` (``benchmarks/compare-cpu.yaml``, ``benchmarks/compare-gpu.yaml``):

1. **Corpus**: a seeded sample of each source (``max_documents``), HTML pages reduced to their main text
   with the miner's own extractor, written once to ``RUN/corpus/corpus.jsonl.gz``. A source may instead be an
   evaluation task's own documents (``{task: nfcorpus}``: in-domain pre-training, issue 25): only the BEIR
   folder's ``corpus.jsonl`` is read, titles prepended as a first sentence (``titles: prepend``) or dropped,
   the documents' own ids kept; its queries and qrels are never opened.
2. **Mining**: :func:`xprt_st.mining.mine` into ``RUN/mined``; the ablation datasets (random positives,
   random spans) are re-merged from the same stored passages and scores into ``RUN/data/<variant>``
   (no re-encoding), so every recipe reads the same documents and passages; a recipe that requires
   ``hard_negatives: K`` reads ``RUN/data/hard-negatives-K``: the same groups with K hard-negative columns
   (:mod:`xprt_st.mining.hard_negatives`, one encoding pass of the mining model).
3. **Training**: every recipe with the same overrides (steps, batch, learning rate, sequence length,
   seed) into ``RUN/seed-S/<recipe>``; a folder counts as done only once its ``COMPLETE`` marker is
   written, a run killed mid-way resumes from its last complete checkpoint.
4. **Evaluation**: the starting model and every result on the same tasks at the same sequence length,
   with mteb's result cache keyed by the weights (``RUN/eval-cache``), plus one ``RUN/scores/*.json``
   per model; finished evaluations are never repeated.
5. **Report**: ``RUN/compare.md`` (per-seed tables, the gain over the start averaged over tasks, and
   its spread across seeds; every gain with its paired bootstrap 95% interval over queries or STS pairs
   and a verdict over seeds, :mod:`xprt_st.evaluation.bootstrap`), ``RUN/compare.csv`` (long format, with
   the intervals) and ``RUN/compare.png``. The scores files keep each model's per-item scores for this.

Example:
    >>> from xprt_st.compare import load_compare_config, run_compare
    >>> config = load_compare_config("benchmarks/compare-cpu.yaml")  # doctest: +SKIP
    >>> summary = run_compare(config, "runs/compare-cpu")  # doctest: +SKIP

Modules, one idea each: :mod:`~xprt_st.compare.config` (the YAML, validated), :mod:`~xprt_st.compare.corpus`
(the document sample), :mod:`~xprt_st.compare.variants` (the ablations' data), :mod:`~xprt_st.compare.run`
(training and evaluation, locks and resume), :mod:`~xprt_st.compare.reuse` (the corpus and scores a rerun takes,
checked against the files that made them), :mod:`~xprt_st.compare.results` (the scores read back) and
:mod:`~xprt_st.compare.report` (markdown, CSV, plot, the printed table).
"""

from __future__ import annotations

from xprt_st.compare.command import run_compare
from xprt_st.compare.config import (
    COMPARISON_RECIPES,
    CONFIG_FILE,
    MODEL_SHAPING_KEYS,
    CompareConfig,
    CompareConfigError,
    CorpusSource,
    TaskSpec,
    load_compare_config,
    resolve_compare_tasks,
)
from xprt_st.compare.corpus import CORPUS_FILE, build_corpus
from xprt_st.compare.report import MEAN_TASK, READING, gain_table, markdown_report, write_report
from xprt_st.compare.results import START_LABEL, CompareResult, collect_results
from xprt_st.compare.run import (
    COMPLETE,
    TIMINGS_FILE,
    check_unchanged,
)
from xprt_st.compare.variants import data_variant, prepare_variant

__all__ = [
    "COMPARISON_RECIPES",
    "COMPLETE",
    "CONFIG_FILE",
    "CORPUS_FILE",
    "MEAN_TASK",
    "MODEL_SHAPING_KEYS",
    "READING",
    "START_LABEL",
    "TIMINGS_FILE",
    "CompareConfig",
    "CompareConfigError",
    "CompareResult",
    "CorpusSource",
    "TaskSpec",
    "build_corpus",
    "check_unchanged",
    "collect_results",
    "data_variant",
    "gain_table",
    "load_compare_config",
    "markdown_report",
    "prepare_variant",
    "resolve_compare_tasks",
    "run_compare",
    "write_report",
]
