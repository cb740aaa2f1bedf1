"""finetune-compare's one reusable stage: the model it pre-trains with ``--recipe`` into ``OUTPUT/pretrained``.

Everything else a run writes (the fine-tuned models, the tables) is computed again on every run. Pre-training is
the slow part, and a rerun into the same ``--output`` may reuse it, but only when it was made with the same
settings: its fingerprint (:mod:`xprt_st.fingerprint`) holds the recipe and its resolved values (the
``--pretrain-set`` overrides included), the mined folder and what its ``stats.json`` says of it, and the starting
model. It is a stage of the stage layer (:func:`pretrained_stage`, run by :func:`xprt_st.pipeline.run_pipeline`),
whose one reuse policy compares the fingerprint. Equal: a finished model is reused, a killed one resumes from its
last checkpoint (or starts again when it saved none; :func:`xprt_st.training.checkpoints.continuation`). Different,
or recorded by an older xprt-st: the rerun stops before any work with one line naming each difference and the ways
on (``--overwrite``, or a new ``--output``). Before, every rerun with ``--recipe`` stopped with train's message about
``--resume last``, an option finetune-compare does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.fingerprint import recipe_values
from xprt_st.pipeline.stages import RecipeRun, RecipeStage, train_into

if TYPE_CHECKING:
    from xprt_st.output_folder import OutputFolder
    from xprt_st.recipe import Recipe

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


def pretraining_recipe(recipe: str | Path, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """``recipe`` with the ``--pretrain-set`` ``overrides`` (dotted recipe keys), named as the command's flags in
    its messages."""
    from xprt_st.recipe import load_recipe

    labels = override_labels(overrides)
    return load_recipe(recipe, overrides=dict(overrides) if overrides else None, override_labels=labels)


def pretraining_run(
    recipe: str | Path, mined: str | Path, base: str | Path | None, overrides: Mapping[str, Any] | None = None
) -> RecipeRun:
    """What the pre-trained model is made of: the recipe from ``base`` (None: the default model, not the recipe's:
    base is what the comparison starts from) on the mined folder."""
    from xprt_st.models import DEFAULT_MODEL

    start = DEFAULT_MODEL if base is None else str(base)
    return RecipeRun(recipe=partial(pretraining_recipe, recipe, overrides), data=Path(mined), model=start)


def pretrain_from_recipe(
    recipe: str | Path,
    mined: str | Path,
    base: str | Path | None,
    output: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> Path:
    """Produce the pre-trained model from Python: train ``recipe`` from ``base`` on a mined folder (``xprt-st
    mine``) into ``output``; ``overrides`` are dotted recipe keys, e.g. ``{"training.max_steps": 100}`` (the
    command's ``--pretrain-set KEY=VALUE``, as its messages call them). finetune-compare runs the same as a stage
    (:func:`pretrained_stage`), which also keeps or resumes what a run of the same settings left.

    Returns:
        The folder of the pre-trained model.
    """
    run = pretraining_run(recipe, mined, base, overrides)
    resolved = run.recipe()  # a bad override is the flag's, found before anything is written
    train_into(Path(output), run, "train", progress=progress, recipe=resolved)
    return Path(output)


@dataclass(frozen=True)
class PretrainSettings:
    """What finetune-compare pre-trains: ``recipe`` (with the ``--pretrain-set`` ``overrides``) from ``base`` on the
    mined folder ``mined``."""

    recipe: str | Path
    mined: str | Path
    base: str | Path | None = None
    overrides: Mapping[str, Any] | None = None


def pretrained_stage(settings: PretrainSettings, output: OutputFolder, progress: bool = False) -> RecipeStage:
    """Pre-train into ``OUTPUT/pretrained`` (:class:`xprt_st.pipeline.stages.RecipeStage`), or keep or resume what
    a run of the same settings left there (see the module); afterwards its ``outcome`` says which (``kept``,
    ``resume``, ``restart``, ``train``)."""
    run = pretraining_run(settings.recipe, settings.mined, settings.base, settings.overrides)
    fingerprint = partial(pretraining_fingerprint, settings.recipe, settings.mined, settings.base, settings.overrides)
    return RecipeStage(PRETRAINED, PRETRAINED, run, fingerprint, output=output, progress=progress, timed_as=PRETRAINED)
