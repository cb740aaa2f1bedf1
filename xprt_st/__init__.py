"""xprt-st: cross-passage retrieval pre-training (xPRT) and RetroMAE for sentence-transformers.

The public API, importable from the top level (resolved lazily so ``import xprt_st`` stays cheap)::

    from xprt_st import mine, GroupBuilder, MiningConfig          # documents -> groups
    from xprt_st import XPRTLoss, CrossPassageLoss, RetroMAELoss  # losses for SentenceTransformerTrainer
    from xprt_st import XPRTTrainer, load_recipe, train_recipe    # training with loss-owned modules
    from xprt_st import trainer_setup                             # what xprt-st train builds, for a script
    from xprt_st import evaluate_models, finetune_compare         # offline mteb evaluation
    from xprt_st import load_heldout_task, LabelFreeEvaluator     # the label-free check (held-out documents)
    from xprt_st.interpolate import interpolate, select_alpha     # start/trained weight interpolation
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "xprt_st.mining": ("GroupBuilder", "MiningConfig", "mine", "merge", "write_report"),
    "xprt_st.losses": (
        "CrossPassageLoss",
        "CrossFillInLoss",
        "SelfFillInLoss",
        "MLMLoss",
        "UniformityLoss",
        "RetentionLoss",
        "WithRetention",
        "XPRTLoss",
        "RetroMAELoss",
        "FillInDecoder",
    ),
    "xprt_st.training": ("XPRTTrainer", "TermScheduleCallback", "Schedule", "train_recipe", "trainer_setup"),
    "xprt_st.recipe": ("load_recipe", "Recipe"),
    "xprt_st.evaluation": ("evaluate_models", "EvaluationReport", "overlap_thirds"),
    "xprt_st.finetune": ("finetune_compare",),
    "xprt_st.evaluation.label_free": ("load_heldout_task", "score_model"),
    "xprt_st.training.label_free": ("LabelFreeEvaluator",),
    "xprt_st.models": ("DEFAULT_MODEL", "load_model", "attach_mlm_head"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:  # noqa: ANN401 (any exported object)
    if name not in _WHERE:
        raise AttributeError(f"module 'xprt_st' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
