"""Mining: turn a document corpus into xPRT training groups (anchor + related passages of the same page).

Public API::

    from xprt_st.mining import GroupBuilder, MiningConfig, mine, merge, write_report, load_heldout

Modules, in the order data flows: ``reader`` (records) -> ``stages`` (split, count, score: records in,
records and counts out) with ``encoder`` (the model) -> ``merge`` (streamed groups) -> ``stats``;
``layout`` names every file of the output folder; ``engines/`` decide who runs the stages
(``local``, ``ray``) and ``mine`` is where one is chosen; ``after_merge`` is the chain that follows the merge.
"""

from __future__ import annotations

from xprt_st.mining.ablations import random_related, random_spans
from xprt_st.mining.config import (
    MiningConfig,
    MiningConfigError,
    MiningError,
    MiningInputError,
    MiningOutputError,
    NoGroupsError,
)
from xprt_st.mining.groups import (
    DEFAULT_THRESHOLD_QUANTILE,
    DEFAULT_TOP_K,
    PAPER_THRESHOLD,
    DocumentGroups,
    RelatedRanking,
    document_groups,
    rank_related,
    select_anchors,
)
from xprt_st.mining.holdout import is_held_out
from xprt_st.mining.layout import load_heldout, load_passages
from xprt_st.mining.merge import merge, related_columns
from xprt_st.mining.mine import GroupBuilder, mine, run_mining
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.reader import (
    CorpusColumnError,
    CorpusError,
    CorpusReadError,
    check_sources,
    extract_main_text,
    input_identity,
    iter_corpus,
)
from xprt_st.mining.report import threshold_sweep, write_report
from xprt_st.mining.scoring import (
    TfidfScorer,
    centrality,
    cosine_matrix,
    descending_ranks,
    reciprocal_rank_fusion,
    tfidf_cosine,
)
from xprt_st.mining.stats import summary_table

__all__ = [
    "DEFAULT_THRESHOLD_QUANTILE",
    "DEFAULT_TOP_K",
    "PAPER_THRESHOLD",
    "CorpusColumnError",
    "CorpusError",
    "CorpusReadError",
    "DocumentGroups",
    "GroupBuilder",
    "MiningConfig",
    "MiningConfigError",
    "MiningError",
    "MiningInputError",
    "MiningOutputError",
    "NoGroupsError",
    "PassageSplitter",
    "RelatedRanking",
    "TfidfScorer",
    "centrality",
    "check_sources",
    "cosine_matrix",
    "descending_ranks",
    "document_groups",
    "extract_main_text",
    "input_identity",
    "is_held_out",
    "iter_corpus",
    "load_heldout",
    "load_passages",
    "merge",
    "mine",
    "random_related",
    "random_spans",
    "rank_related",
    "reciprocal_rank_fusion",
    "related_columns",
    "run_mining",
    "select_anchors",
    "summary_table",
    "tfidf_cosine",
    "threshold_sweep",
    "write_report",
]
