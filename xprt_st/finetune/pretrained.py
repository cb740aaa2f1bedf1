"""finetune-compare's one reusable stage: the model it pre-trains with ``--recipe`` into ``OUTPUT/pretrained``.

Everything else a run writes (the fine-tuned models, the tables) is computed again on every run. Pre-training is
the slow part, and a rerun into the same ``--output`` may reuse it, but only when it was made with the same
settings: its fingerprint (:mod:`xprt_st.fingerprint`) holds the recipe and its resolved values (the
``--pretrain-set`` overrides included), the mined folder and what its ``stats.json`` says of it, and the starting
model. Equal: a finished model is reused, a killed one resumes from its last checkpoint (or starts again when it
saved none). Different, or recorded by an older xprt-st: the rerun stops before any work with one line naming each
difference and the ways on (``--overwrite``, or a new ``--output``). Before, every rerun with ``--recipe`` stopped
with train's message about ``--resume last``, an option finetune-compare does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xprt_st.fingerprint import check_stage, recipe_values, write_fingerprint
from xprt_st.output_folder import OutputFolder

PRETRAINED = "pretrained"
"""The stage's folder name inside the ``--output`` of finetune-compare."""


def override_labels(overrides: Mapping[str, Any] | None) -> dict[str, str]:
    """How the recipe loader names each override in its messages: the command's ``--pretrain-set KEY``."""
    return {key: f"--pretrain-set {key}" for key in overrides or {}}


def pretraining_fingerprint(
    recipe: str | Path, mined: str | Path, base: str | Path | None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What decides the pre-trained model: the recipe, its resolved values, the mined folder (its path and its
    ``stats.json`` less the timings: a re-merge or new hard negatives change it) and the starting model."""
    from xprt_st.mining.layout import read_stats
    from xprt_st.recipe import load_recipe

    labels = override_labels(overrides)
    loaded = load_recipe(recipe, overrides=dict(overrides) if overrides else None, override_labels=labels)
    stats = read_stats(mined) or {}
    return {
        "recipe": str(recipe),
        "recipe_values": recipe_values(loaded.to_dict()),
        "mined": str(Path(mined).resolve()),
        "mined_stats": {key: value for key, value in stats.items() if not key.endswith("_seconds")},
        "model": "default" if base is None else str(base),
    }


@dataclass(frozen=True)
class StagePlan:
    """What a run does with ``OUTPUT/pretrained``: reuse the finished model, resume it, or train it afresh."""

    path: Path
    fingerprint: dict[str, Any]
    reuse: bool = False
    resume: bool = False
    overwrite: bool = False


def plan_pretraining(
    folder: OutputFolder,
    recipe: str | Path,
    mined: str | Path,
    base: str | Path | None,
    overrides: Mapping[str, Any] | None = None,
) -> StagePlan:
    """Decide, before any work, what to do with the stage in ``folder`` (see the module doc).

    Raises:
        xprt_st.fingerprint.FingerprintError: the stage there was made with other settings, or records none.
    """
    from xprt_st.training.checkpoints import last_complete_checkpoint

    path = folder.path / PRETRAINED
    fingerprint = pretraining_fingerprint(recipe, mined, base, overrides)
    if PRETRAINED not in folder.own():
        return StagePlan(path, fingerprint)
    check_stage(folder.path, PRETRAINED, fingerprint, "--output")
    if (path / "modules.json").is_file():
        return StagePlan(path, fingerprint, reuse=True)
    if last_complete_checkpoint(path) is not None:
        return StagePlan(path, fingerprint, resume=True)
    return StagePlan(path, fingerprint, overwrite=True)  # killed before its first checkpoint: nothing to keep


def start_pretraining(folder: OutputFolder, plan: StagePlan) -> None:
    """Record the stage as finetune-compare's and store its fingerprint, before it writes anything."""
    folder.record(PRETRAINED)
    write_fingerprint(folder.path, PRETRAINED, plan.fingerprint)
