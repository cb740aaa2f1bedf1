"""The quickstart's stages, run by :func:`xprt_st.pipeline.run_pipeline` in this order:

- :class:`MinedStage` (``mined/``, fingerprinted): mine the documents, as ``xprt-st mine`` does given the same options;
- :class:`HardNegativesStage`: check that the groups fill a step, then add the hard negatives the recipe reads
  (:func:`xprt_st.mining.after_merge.finish_mining`, the chain every entry point runs), unless the folder has them;
- :func:`model_stage` (``model/``, fingerprinted): train the recipe (the pipeline's
  :class:`~xprt_st.pipeline.stages.RecipeStage`), unless the folder holds its trained model (a run stopped after a
  checkpoint resumes from it);
- :class:`ScoresStage`: score the start, the trained model and BM25, the label-free check, the titles, and write
  ``summary.json`` (:mod:`xprt_st.quickstart.summary`).

Each holds its own settings (a dataclass below it, made from the quickstart's config by
:func:`xprt_st.quickstart.run.quickstart_stages`) and the held output folder (whose manifest records what a stage
writes before it writes), and reads what the stages before it wrote from the folder, so a stage the pipeline reuses
is read the same way as one that ran.
"""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from xprt_st.evaluation.lexical import BM25, HYBRID_PREFIX
from xprt_st.evaluation.run import evaluate_models
from xprt_st.fingerprint import SetBy
from xprt_st.mining import mine
from xprt_st.mining.after_merge import AfterMerge, finish_mining, has_hard_negatives, has_lexical_candidates
from xprt_st.mining.config import MiningConfigError
from xprt_st.mining.layout import read_stats
from xprt_st.output_folder import OutputFolder
from xprt_st.pipeline.stages import RecipeRun, RecipeStage
from xprt_st.quickstart.config import (
    HYBRID_START,
    HYBRID_TRAINED,
    MINED,
    MODEL,
    QUICKSTART_CORPUS,
    QuickstartInputError,
)
from xprt_st.quickstart.defaults import DEFAULTS, corpus_steps
from xprt_st.quickstart.notes import passes_note, training_passes
from xprt_st.quickstart.summary import label_free_summary, run_notes, scores_summary, titles_summary
from xprt_st.recipe import Recipe, load_recipe
from xprt_st.stage_timing import StageTimer, stage

logger = logging.getLogger(__name__)

__all__ = [
    "HardNegativesSettings",
    "HardNegativesStage",
    "MinedSettings",
    "MinedStage",
    "ModelSettings",
    "ScoresSettings",
    "ScoresStage",
    "after_merge",
    "mine_documents",
    "model_recipe",
    "model_stage",
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
    run_folder: str = ""
    """The ``--output`` folder, which a refusal names."""


def mine_documents(settings: MinedSettings, corpus: list[str | Path], mined: Path, progress: bool) -> dict[str, Any]:
    """Mine ``corpus`` into ``mined`` with the quickstart's settings (what ``xprt-st mine`` writes given the same
    options); the hard negatives a recipe reads follow in :class:`HardNegativesStage`.

    Raises:
        QuickstartInputError: ``mined`` holds another run's mining (kept, not mixed with this one).
    """
    try:
        with stage("mine"):
            return mine(
                corpus,
                mined,
                **settings.fields,
                holdout=settings.holdout,
                model=settings.model,
                threshold_quantile=settings.threshold_quantile,
                max_tokens=settings.max_tokens,
                seed=settings.seed,
                encode_backend=settings.encode_backend,
                precision=settings.precision,
                progress=progress,
            )
    except MiningConfigError as error:  # OUTPUT/mined is another run's: its groups are kept, not mixed with these
        raise QuickstartInputError(
            f"--output {settings.run_folder}: {error.reason} Give a new --output folder, or delete {mined} to mine "
            "again."
        ) from error


def first_documents(source: Path, count: int, target: Path) -> Path:
    """Copy the first ``count`` records of the gzipped JSONL ``source`` into ``target`` (plain JSONL)."""
    if count < 1:
        raise ValueError(f"max_documents must be at least 1, got {count}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as reader, target.open("w", encoding="utf-8") as writer:
        for _, line in zip(range(count), reader, strict=False):
            writer.write(line)
    return target


@dataclass
class MinedStage:
    """Mine the documents into ``mined/`` (:func:`mine_documents`); its fingerprint is the plan's."""

    config: MinedSettings
    fingerprint_record: dict[str, Any]
    """What decides ``mined/`` (:meth:`QuickstartConfig.mining_fingerprint`)."""
    output: OutputFolder
    progress: bool = True
    name: ClassVar[str] = MINED
    folder: ClassVar[str] = MINED
    set_by: ClassVar[dict[str, SetBy]] = {"pairs": SetBy("--recipe", "mined"), "rank_by": SetBy("--recipe", "fused")}
    """The mining keys the recipe decides (:func:`~xprt_st.quickstart.config.recipe_mining`; the quickstart has no
    ``--pairs`` or ``--rank-by``), left out of the fingerprint at their defaults."""

    def fingerprint(self) -> dict[str, Any]:
        """What decides ``mined/``."""
        return self.fingerprint_record

    def check(self) -> None:
        """Nothing beyond :func:`~xprt_st.quickstart.run.plan_quickstart`'s checks of the corpus."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Mine; a rerun of the same settings resumes from the chunks the folder keeps."""
        self.output.record(MINED)
        corpus = list(self.config.sources)
        if self.config.max_documents is not None:
            self.output.record(SUBSET)
            corpus = [first_documents(QUICKSTART_CORPUS, self.config.max_documents, self.output.path / SUBSET)]
        stats = mine_documents(self.config, corpus, folder, self.progress)
        return {"groups": int(stats.get("groups", 0))}


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


@dataclass
class HardNegativesStage:
    """Check that the mined groups fill one step, then give them the hard-negative columns the recipe reads, unless
    ``mined/`` has them already. No fingerprint: the folder's ``stats.json`` records what it holds
    (:func:`~xprt_st.mining.after_merge.has_hard_negatives`)."""

    config: HardNegativesSettings
    output: OutputFolder
    name: ClassVar[str] = "hard negatives"
    folder: ClassVar[str] = MINED

    def fingerprint(self) -> None:
        """None: ``stats.json`` says whether the columns are there."""
        return None

    def check(self) -> None:
        """Nothing before the mining: the groups are counted once mined."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Refuse too few groups to train on (the mining is kept), then add the recipe's hard negatives."""
        settings, steps = self.config, self.config.after
        groups = groups_in(folder)
        trained = (self.output.path / MODEL / "modules.json").is_file()
        if not trained and groups < settings.batch_size:
            raise QuickstartInputError(
                f"{settings.given}: {groups} groups were mined ({folder}), fewer than the {settings.batch_size} of one "
                f"step (--batch-size); give more documents or --batch-size {max(2, groups)} (the same --output reuses "
                "the mining)"
            )
        record = {"hard_negatives": steps.hard_negatives}
        if steps.lexical_candidates:
            record["lexical_candidates"] = steps.lexical_candidates
        missing = (steps.hard_negatives and not has_hard_negatives(folder, steps.hard_negatives, steps.max_ratio)) or (
            steps.lexical_candidates and not has_lexical_candidates(folder, steps.lexical_candidates)
        )
        if missing:
            with stage("hard negatives"):
                finish_mining(folder, steps, model=settings.model)
            return record
        return {**record, "kept": True}


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
    """What the run is scored on and how, and what ``summary.json`` records of its settings."""

    tasks: tuple[str, ...]
    model: str | None
    """The starting model, scored beside the trained one."""
    recipe: str
    seed: int
    encode_backend: str
    precision: str
    """The encodings' precision."""
    max_steps: int | None
    batch_size: int
    corpus: tuple[str, ...]
    task: Path | None
    mining_fields: dict[str, Any]
    config_record: dict[str, Any]
    """The quickstart's settings as ``summary.json`` records them (the steps filled in once the groups are known)."""


@dataclass
class ScoresStage:
    """Score the start, the trained model, BM25 and each model's hybrid with BM25 on the labelled tasks
    (``evaluation/``), the label-free check and the titles, and write ``summary.json``; afterwards :attr:`summary` is
    what it wrote."""

    config: ScoresSettings
    output: OutputFolder
    timer: StageTimer | None = None
    summary: dict[str, Any] = field(default_factory=dict, init=False)
    name: ClassVar[str] = "scores"
    folder: ClassVar[str] = ""

    def fingerprint(self) -> None:
        """None: scores are reused through the evaluation's cache, keyed by each model's weights."""
        return None

    def check(self) -> None:
        """Nothing beyond :func:`~xprt_st.quickstart.run.plan_quickstart`'s check of the task folder."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Evaluate before and after, then write ``summary.json`` (:func:`~xprt_st.quickstart.run.run_quickstart`
        says what it holds)."""
        settings = self.config
        mined, model_dir = folder / MINED, folder / MODEL
        stats = read_stats(mined) or {}
        groups = int(stats.get("groups", 0))
        steps = steps_for(settings.max_steps, groups, settings.batch_size)
        notes, overlap = run_notes(steps, settings.batch_size, groups, settings.corpus, settings.task,
                                   settings.mining_fields)  # fmt: skip
        report = None
        if settings.tasks:
            self.output.record("evaluation")
            with stage(f"evaluate: {', '.join(settings.tasks)}"):
                start = settings.model or "default"
                report = evaluate_models(  # BM25 and the hybrids as reference lines: a search team's first question
                    [start, model_dir, BM25, f"{HYBRID_PREFIX}{start}", f"{HYBRID_PREFIX}{model_dir}"],
                    list(settings.tasks),
                    labels=["starting model", f"after {settings.recipe}", BM25, HYBRID_START, HYBRID_TRAINED],
                    seed=settings.seed,
                    cache_dir=folder / "evaluation" / "cache",
                    show_progress=False,
                    encode_backend=settings.encode_backend,
                    backend_cache=mined,
                    precision=settings.precision,
                )
            report.write(folder / "evaluation")
        summary = scores_summary(report, stats, {**settings.config_record, "max_steps": steps})
        encoding = {"encode_backend": settings.encode_backend, "precision": settings.precision}
        summary["label_free"] = label_free_summary(mined, settings.model, model_dir, **encoding)
        summary["titles"] = titles_summary(mined, settings.model, model_dir, **encoding)
        summary["training_passes"] = round(training_passes(steps, settings.batch_size, groups), 3)
        summary["notes"] = notes
        summary["task_corpus_overlap"] = overlap
        summary["stages"] = self.timer.rows() if self.timer is not None else []
        self.output.record("summary.json")
        (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        self.summary = summary
        return {"gained": summary["gained"]}
