"""Compatibility names: the former one-module miner, now split (see :mod:`xprt_st.mining`).

Kept so code written against ``xprt_st.mining.builder`` keeps working; new code imports from
:mod:`xprt_st.mining` (or the module that owns the name: ``config``, ``layout``, ``merge``, ``stats``).
"""

from __future__ import annotations

from xprt_st.mining.config import (
    MiningConfig,
    MiningConfigError,
    MiningError,
    MiningInputError,
    MiningOutputError,
    NoGroupsError,
)
from xprt_st.mining.layout import (
    COMPLETE,
    CONFIG_FILE,
    DF_FILE,
    INPUTS_KEY,
    META_FILE,
    PASSAGES_FILE,
    REPORT_FILE,
    STATS_FILE,
    load_passages,
)
from xprt_st.mining.merge import effective_threshold, merge, related_columns
from xprt_st.mining.mine import GroupBuilder, ShardResult, mine
from xprt_st.mining.stats import SKIP_FIXES, SUMMARY_KEYS, summary_table

__all__ = [
    "COMPLETE",
    "CONFIG_FILE",
    "DF_FILE",
    "INPUTS_KEY",
    "META_FILE",
    "PASSAGES_FILE",
    "REPORT_FILE",
    "SKIP_FIXES",
    "STATS_FILE",
    "SUMMARY_KEYS",
    "GroupBuilder",
    "MiningConfig",
    "MiningConfigError",
    "MiningError",
    "MiningInputError",
    "MiningOutputError",
    "NoGroupsError",
    "ShardResult",
    "effective_threshold",
    "load_passages",
    "merge",
    "mine",
    "related_columns",
    "summary_table",
]
