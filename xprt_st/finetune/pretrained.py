"""finetune-compare's one reusable stage: the model it pre-trains with ``--recipe`` into ``OUTPUT/pretrained``.

Everything else a run writes (the fine-tuned models, the tables) is computed again on every run. Pre-training is
the slow part, and a rerun into the same ``--output`` may reuse it, but only when it was made with the same
settings: its fingerprint (:mod:`xprt_st.fingerprint`) holds the recipe and its resolved values (the
``--pretrain-set`` overrides included), the mined folder and what its ``stats.json`` says of it, and the starting
model. It is a stage of the stage layer (:class:`PretrainedStage`, run by :func:`xprt_st.pipeline.run_pipeline`),
whose one reuse policy compares the fingerprint. Equal: a finished model is reused, a killed one resumes from its
last checkpoint (or starts again when it saved none; :func:`xprt_st.training.checkpoints.continuation`). Different,
or recorded by an older xprt-st: the rerun stops before any work with one line naming each difference and the ways
on (``--overwrite``, or a new ``--output``). Before, every rerun with ``--recipe`` stopped with train's message about
``--resume last``, an option finetune-compare does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from xprt_st.fingerprint import recipe_values
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


def pretrain_from_recipe(
    recipe: str | Path,
    mined: str | Path,
    base: str | Path | None,
    output: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
    resume: bool = False,
    overwrite: bool = False,
) -> Path:
    """Produce the pre-trained model: train ``recipe`` from ``base`` on a mined folder (``xprt-st mine``).

    A thin call of :func:`xprt_st.training.train_recipe` so that finetune-compare can start from a
    recipe and a corpus; ``overrides`` are dotted recipe keys, e.g. ``{"training.max_steps": 100}`` (the
    command's ``--pretrain-set KEY=VALUE``, as its messages call them). ``resume`` continues a killed run in
    ``output`` from its last checkpoint; ``overwrite`` deletes what it left (:class:`PretrainedStage` decides which).

    Returns:
        The folder of the pre-trained model.
    """
    from xprt_st.models import DEFAULT_MODEL
    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe

    labels = override_labels(overrides)
    loaded = load_recipe(recipe, overrides=dict(overrides) if overrides else None, override_labels=labels)
    # None means the default model, not the recipe's: base is what the comparison starts from.
    start = DEFAULT_MODEL if base is None else str(base)
    return train_recipe(
        loaded, mined, output, resume="last" if resume else None, model=start, progress=progress, overwrite=overwrite
    )


@dataclass(frozen=True)
class PretrainSettings:
    """What finetune-compare pre-trains: ``recipe`` (with the ``--pretrain-set`` ``overrides``) from ``base`` on the
    mined folder ``mined``."""

    recipe: str | Path
    mined: str | Path
    base: str | Path | None = None
    overrides: Mapping[str, Any] | None = None


@dataclass
class PretrainedStage:
    """Pre-train into ``OUTPUT/pretrained`` (:func:`pretrain_from_recipe`), or keep or resume what a run of the same
    settings left there (see the module); afterwards :attr:`outcome` says which (``kept``, ``resume``, ``restart``,
    ``train``: :func:`xprt_st.training.checkpoints.continuation`)."""

    config: PretrainSettings
    output: OutputFolder
    progress: bool = False
    outcome: str = field(default="", init=False)
    _fingerprint: dict[str, Any] | None = field(default=None, init=False, repr=False)
    name: ClassVar[str] = PRETRAINED
    folder: ClassVar[str] = PRETRAINED

    def fingerprint(self) -> dict[str, Any]:
        """What decides the model (:func:`pretraining_fingerprint`), worked out once."""
        if self._fingerprint is None:
            config = self.config
            self._fingerprint = pretraining_fingerprint(config.recipe, config.mined, config.base, config.overrides)
        return self._fingerprint

    def check(self) -> None:
        """The recipe and its overrides load (:meth:`fingerprint` loads them), before any model does."""
        self.fingerprint()

    def run(self, folder: Path) -> dict[str, Any]:
        """Pre-train, resume or keep (:func:`xprt_st.training.checkpoints.continuation`)."""
        from xprt_st.training.checkpoints import continuation

        self.outcome = continuation(folder)
        if self.outcome != "kept":
            self.output.record(PRETRAINED)
            settings = self.config
            pretrain_from_recipe(
                settings.recipe, settings.mined, settings.base, folder, overrides=settings.overrides,
                progress=self.progress, resume=self.outcome == "resume", overwrite=self.outcome == "restart",
            )  # fmt: skip
        return {"outcome": self.outcome}
