"""The quickstart's stages, the pipeline's own (:mod:`xprt_st.pipeline`), run by
:func:`xprt_st.pipeline.run_pipeline` in this order:

- :func:`mined_stage` (``mined/``, fingerprinted): mine the documents (a :class:`~xprt_st.pipeline.stages.MineStage`),
  as ``xprt-st mine`` does given the same options;
- :func:`hard_negatives_stage`: check that the groups fill a step, then add the hard negatives and lexical candidates
  the recipe reads (an :class:`~xprt_st.pipeline.stages.AfterMergeStage`), unless the folder has them;
- :func:`model_stage` (``model/``, fingerprinted): train the recipe (a
  :class:`~xprt_st.pipeline.stages.RecipeStage`), unless the folder holds its trained model (a run stopped after a
  checkpoint resumes from it);
- :func:`scores_stage`: score the start, the trained model, BM25 and their hybrids on the labelled tasks (an
  :class:`~xprt_st.pipeline.evaluate.EvaluateStage` into ``evaluation/``);
- :func:`heldout_stage`: the label-free check and the titles (a
  :class:`~xprt_st.pipeline.heldout.HeldoutChecksStage`).

``summary.json`` is then written from what they found (:func:`xprt_st.quickstart.summary.write_summary`). Each
stage gets its settings (a dataclass below, made from the quickstart's config by
:func:`xprt_st.quickstart.run.quickstart_stages`) and the held output folder (whose manifest records what a stage
writes before it writes), and reads what the stages before it wrote from the folder, so a stage the pipeline reuses
is read the same way as one that ran.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from xprt_st.evaluation.label_free import LABEL_FREE_CHECK
from xprt_st.evaluation.lexical import BM25, HYBRID_PREFIX
from xprt_st.evaluation.run import EvaluateConfig, EvaluationReport
from xprt_st.evaluation.titles import TITLES_CHECK
from xprt_st.fingerprint import SetBy
from xprt_st.mining.after_merge import AfterMerge
from xprt_st.mining.config import MiningConfig
from xprt_st.mining.layout import read_stats
from xprt_st.output_folder import OutputFolder
from xprt_st.pipeline.evaluate import EvaluateStage
from xprt_st.pipeline.heldout import HeldoutChecksStage, HeldoutSettings
from xprt_st.pipeline.stages import AfterMergeStage, MineSettings, MineStage, RecipeRun, RecipeStage
from xprt_st.quickstart.config import (
    HYBRID_START,
    HYBRID_TRAINED,
    MINED,
    MODEL,
    QUICKSTART_CORPUS,
    QuickstartInputError,
)
from xprt_st.quickstart.defaults import DEFAULTS, corpus_steps
from xprt_st.quickstart.notes import passes_note
from xprt_st.quickstart.summary import training_label_free
from xprt_st.recipe import Recipe, load_recipe

logger = logging.getLogger(__name__)

__all__ = [
    "QUICKSTART_CHECKS",
    "HardNegativesSettings",
    "MinedSettings",
    "ModelSettings",
    "ScoresSettings",
    "after_merge",
    "hard_negatives_stage",
    "heldout_stage",
    "mined_stage",
    "model_recipe",
    "model_stage",
    "scores_stage",
    "steps_for",
]

SUBSET = "corpus-subset.jsonl"
"""The first ``max_documents`` shipped pages, written for a quick look (``--max-documents``)."""


def groups_in(mined: Path) -> int:
    """How many groups the mined folder holds (its ``stats.json``)."""
    return int((read_stats(mined) or {}).get("groups", 0))


def steps_for(max_steps: int | None, groups: int, batch_size: int) -> int:
    """The steps trained: ``max_steps``, or without it (a user corpus without ``--max-steps``) the default of the
    mined groups, at most one pass (:func:`~xprt_st.quickstart.defaults.corpus_steps`)."""
    return max_steps if max_steps is not None else corpus_steps(groups, batch_size)


@dataclass(frozen=True)
class MinedSettings:
    """What ``mined/`` is made from: the documents, how mining reads them, what it holds out and with what model."""

    sources: tuple[str | Path, ...]
    """The user's corpus, or the shipped pages."""
    fields: dict[str, Any]
    """How mining reads them, and what the recipe asks of it (:meth:`QuickstartConfig.mining_fields`)."""
    holdout: float
    seed: int
    model: str | None
    threshold_quantile: float | None
    max_tokens: int
    encode_backend: str = "torch"
    precision: str = "fp32"
    max_documents: int | None = None
    """Mine only the first N shipped pages (written to ``corpus-subset.jsonl``); None mines them all."""


def first_documents(source: Path, count: int, target: Path) -> Path:
    """Copy the first ``count`` records of the gzipped JSONL ``source`` into ``target`` (plain JSONL)."""
    if count < 1:
        raise ValueError(f"max_documents must be at least 1, got {count}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as reader, target.open("w", encoding="utf-8") as writer:
        for _, line in zip(range(count), reader, strict=False):
            writer.write(line)
    return target


MINED_SET_BY = {"pairs": SetBy("--recipe", "mined"), "rank_by": SetBy("--recipe", "fused")}
"""The mining keys the recipe decides (:func:`~xprt_st.quickstart.config.recipe_mining`; the quickstart has no
``--pairs`` or ``--rank-by``), left out of the fingerprint at their defaults."""


def mining_config(settings: MinedSettings) -> MiningConfig:
    """The mining of ``mined/``: what ``xprt-st mine`` mines given the same options."""
    return MiningConfig(
        model=settings.model,
        **settings.fields,
        holdout=settings.holdout,
        threshold_quantile=settings.threshold_quantile,
        max_tokens=settings.max_tokens,
        seed=settings.seed,
        encode_backend=settings.encode_backend,
        precision=settings.precision,
    )


def _first_pages(count: int, output: OutputFolder) -> tuple[str | Path, ...]:
    output.record(SUBSET)
    return (first_documents(QUICKSTART_CORPUS, count, output.path / SUBSET),)


def mined_stage(
    settings: MinedSettings, fingerprint: dict[str, Any], output: OutputFolder, progress: bool = True
) -> MineStage:
    """Mine the documents into ``mined/``; ``fingerprint`` is the plan's (:meth:`QuickstartConfig.mining_fingerprint`).
    A rerun of the same settings resumes from the chunks the folder keeps."""
    mine = MineSettings(
        mining=mining_config(settings), corpus=settings.sources, output=output.path / MINED, progress=progress
    )
    first = None if settings.max_documents is None else partial(_first_pages, settings.max_documents, output)
    return MineStage(
        mine, name=MINED, folder=MINED, fingerprint=fingerprint, set_by=MINED_SET_BY, output=output, corpus=first,
        timed_as="mine",
    )  # fmt: skip


@dataclass(frozen=True)
class HardNegativesSettings:
    """The hard negatives the recipe reads, and the step the groups must fill."""

    after: AfterMerge
    """The chain after the merge: ``hard_negatives`` K (0: none) drawn with the quickstart's seed and backend, as
    ``xprt-st mine --hard-negatives K --seed S`` draws them."""
    model: str | None
    """The mining model, which encodes the candidates."""
    batch_size: int
    given: str = "--corpus"
    """What the documents were, for the refusal: ``--corpus`` or the shipped pages."""


def after_merge(recipe: Recipe, seed: int, encode_backend: str = "torch", precision: str = "fp32") -> AfterMerge:
    """The chain after the merge for ``recipe``: the hard negatives it reads (``change-only-positive-hard``), drawn
    with ``seed`` and the backend, as ``xprt-st mine --hard-negatives K --seed S`` draws them, and the lexical
    candidates (``hybrid-teacher-lexical``: ``--lexical-candidates L``)."""
    requires = recipe.data.requires
    count, lexical = (int(requires.get(key, 0) or 0) for key in ("hard_negatives", "lexical_candidates"))
    return AfterMerge(
        hard_negatives=count,
        lexical_candidates=lexical,
        seed=seed,
        encode_backend=encode_backend,
        precision=precision,
    )


def enough_groups(settings: HardNegativesSettings, output: OutputFolder, folder: Path) -> None:
    """Refuse too few mined groups to train one step on (the mining is kept), unless ``model/`` is trained already.

    Raises:
        QuickstartInputError: naming the documents, the count, ``--batch-size`` and the way on.
    """
    groups = groups_in(folder)
    trained = (output.path / MODEL / "modules.json").is_file()
    if not trained and groups < settings.batch_size:
        raise QuickstartInputError(
            f"{settings.given}: {groups} groups were mined ({folder}), fewer than the {settings.batch_size} of one "
            f"step (--batch-size); give more documents or --batch-size {max(2, groups)} (the same --output reuses "
            "the mining)"
        )


def hard_negatives_stage(settings: HardNegativesSettings, mined: MineStage, output: OutputFolder) -> AfterMergeStage:
    """Check that the mined groups fill one step (:func:`enough_groups`), then give them the columns the recipe reads,
    unless ``mined/`` has them already (its ``stats.json`` says so: no fingerprint)."""
    return AfterMergeStage(
        settings.after, mined, model=settings.model, name="hard negatives", folder=MINED,
        before=partial(enough_groups, settings, output), timed_as="hard negatives",
    )  # fmt: skip


@dataclass(frozen=True)
class ModelSettings:
    """What ``model/`` is trained with: the recipe and the quickstart's training settings."""

    recipe: str
    max_steps: int | None
    """None: the default of the mined groups, at most one pass (:func:`steps_for`)."""
    batch_size: int
    learning_rate: float
    max_seq_length: int
    seed: int
    precision: str
    model: str | None

    def recipe_for(self, steps: int) -> Recipe:
        """The recipe with these settings, trained ``steps`` steps."""
        return load_recipe(
            self.recipe,
            overrides={
                "training.max_steps": steps,
                "training.batch_size": self.batch_size,
                "training.learning_rate": self.learning_rate,
                "training.max_seq_length": self.max_seq_length,
                "training.seed": self.seed,
                "training.save_steps": steps,
                "training.precision": self.precision,
                **({"training.model": self.model} if self.model else {}),
            },
        )


def model_recipe(settings: ModelSettings, mined: Path) -> Recipe:
    """The recipe ``model/`` is trained with: ``settings`` and the steps the mined groups give without
    ``--max-steps``, each short schedule or repeated pass said on the log first."""
    groups = groups_in(mined)
    steps = steps_for(settings.max_steps, groups, settings.batch_size)
    if settings.max_steps is None and steps < DEFAULTS.corpus_max_steps:
        logger.warning(
            "%d groups were mined: training %d steps of %d, one pass over them, instead of the default %d "
            "(--max-steps sets it)", groups, steps, settings.batch_size, DEFAULTS.corpus_max_steps,
        )  # fmt: skip
    passes = passes_note(steps, settings.batch_size, groups)
    if passes is not None:
        logger.warning("%s", passes)
    return settings.recipe_for(steps)


def model_stage(
    settings: ModelSettings, fingerprint: dict[str, Any], output: OutputFolder, progress: bool = True
) -> RecipeStage:
    """Train the recipe on ``mined/`` into ``model/`` (:class:`xprt_st.pipeline.stages.RecipeStage`), unless
    ``model/`` holds the model a run of the same settings trained; ``fingerprint`` is the plan's (what decides
    ``model/`` beside its data: :meth:`QuickstartConfig.training_fingerprint`, the steps as given)."""
    mined = output.path / MINED
    run = RecipeRun(recipe=partial(model_recipe, settings, mined), data=mined)
    return RecipeStage(MODEL, MODEL, run, fingerprint, output=output, progress=progress)


@dataclass(frozen=True)
class ScoresSettings:
    """What the run is scored on and how: the labelled tasks and the held-out checks."""

    tasks: tuple[str, ...]
    model: str | None
    """The starting model, scored beside the trained one."""
    recipe: str
    seed: int
    encode_backend: str
    precision: str
    """The encodings' precision."""


def scores_stage(settings: ScoresSettings, output: OutputFolder) -> EvaluateStage | None:
    """Score the start, the trained model, BM25 and each model's hybrid with BM25 on the labelled tasks into
    ``evaluation/`` (BM25 and the hybrids as reference lines: a search team's first question); None without a
    labelled task."""
    if not settings.tasks:
        return None
    folder = output.path
    start, trained = settings.model or "default", str(folder / MODEL)
    config = EvaluateConfig(
        models=(start, trained, BM25, f"{HYBRID_PREFIX}{start}", f"{HYBRID_PREFIX}{trained}"),
        tasks=settings.tasks,
        label=("starting model", f"after {settings.recipe}", BM25, HYBRID_START, HYBRID_TRAINED),
        seed=settings.seed,
        output_dir=folder / "evaluation",
        cache_dir=folder / "evaluation" / "cache",
        encode_backend=settings.encode_backend,
        precision=settings.precision,
        backend_cache=folder / MINED,
    )
    return EvaluateStage(config, _write_report, held=output, made=(trained, f"{HYBRID_PREFIX}{trained}"))


def _write_report(report: EvaluationReport, held: OutputFolder) -> None:
    report.write(held.path / "evaluation")


QUICKSTART_CHECKS = (replace(LABEL_FREE_CHECK, stored=training_label_free), TITLES_CHECK)
"""The held-out checks of a quickstart: the label-free check (read from the training run's record where it wrote
one on the same held-out part) and the titles."""


def heldout_stage(settings: ScoresSettings, output: OutputFolder) -> HeldoutChecksStage:
    """The label-free check and the titles of ``mined/``'s held-out part, the trained model against the start."""
    models = {"start": settings.model, "trained": output.path / MODEL}
    return HeldoutChecksStage(
        HeldoutSettings(MINED, models, QUICKSTART_CHECKS, settings.encode_backend, settings.precision)
    )
