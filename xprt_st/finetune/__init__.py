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
function, testable without training.

Modules: :mod:`~xprt_st.finetune.folds` (labelled pairs, folds, sub-domains), :mod:`~xprt_st.finetune.gains`
(per-domain means, gains, intervals, flags), :mod:`~xprt_st.finetune.result` (settings, the result, its files
and table), :mod:`~xprt_st.finetune.run` (fine-tuning and the end-to-end comparison) and
:mod:`~xprt_st.finetune.pretrained` (the ``--recipe`` model a rerun reuses only when made with the same settings).
"""

from __future__ import annotations

from xprt_st.finetune.folds import (
    NO_DOMAIN,
    FoldPlan,
    LabelledPair,
    beir_train_pairs,
    plan_folds,
    query_domains,
    read_pairs,
    restrict_queries,
    split_queries,
)
from xprt_st.finetune.gains import OVERALL, ROLES, GainRow, compare_gains, domain_counts, domain_means, gain_intervals
from xprt_st.finetune.pretrained import pretrain_from_recipe
from xprt_st.finetune.result import FinetuneResult, FinetuneSettings
from xprt_st.finetune.run import finetune, finetune_compare

__all__ = [
    "NO_DOMAIN",
    "OVERALL",
    "ROLES",
    "FinetuneResult",
    "FinetuneSettings",
    "FoldPlan",
    "GainRow",
    "LabelledPair",
    "beir_train_pairs",
    "compare_gains",
    "domain_counts",
    "domain_means",
    "finetune",
    "finetune_compare",
    "gain_intervals",
    "plan_folds",
    "pretrain_from_recipe",
    "query_domains",
    "read_pairs",
    "restrict_queries",
    "split_queries",
]
