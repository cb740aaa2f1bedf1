"""The stages the commands are made of: mining (all shards, or one, then the merge), the chain after the merge, and
training (``xprt-st train``'s run folder, and a recipe trained into a folder of its own: the quickstart's
``model/``, finetune-compare's ``pretrained/``, each of compare's models). Every recipe is trained here, through
:func:`train_into`.

``xprt-st mine`` is ``run_pipeline([MineStage, AfterMergeStage])``; neither has a fingerprint of its own, since mining
keeps its own record of what made a folder (its manifest, refused with ``MiningConfigError`` when the settings
differ) and the chain after the merge reuses what ``stats.json`` says is there
(:func:`xprt_st.mining.after_merge.has_hard_negatives`). The quickstart's ``mined/`` and hard negatives are the same
two classes, the first given a fingerprint, the second a check of the merged groups (:mod:`xprt_st.quickstart.stages`).
``xprt-st train`` is ``run_pipeline([TrainStage])``: its
``check()`` is every check of the run before a model loads (:func:`xprt_st.training.run.check_training`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from xprt_st.fingerprint import SetBy
from xprt_st.mining.after_merge import AfterMerge, finish_mining, has_hard_negatives, has_lexical_candidates
from xprt_st.mining.config import MiningConfig
from xprt_st.mining.engines.base import ShardResult
from xprt_st.mining.layout import MiningLayout, read_stats

if TYPE_CHECKING:  # training loads torch and transformers: imported when a TrainStage checks, not for mining
    from xprt_st.output_folder import OutputFolder
    from xprt_st.recipe import Recipe
    from xprt_st.training.run import TrainPlan, TrainSettings


logger = logging.getLogger(__name__)


def _silent(line: str) -> None:
    del line


def timed(name: str | None) -> contextlib.AbstractContextManager[None]:
    """The stage-table row ``name`` (:func:`xprt_st.stage_timing.stage`), or nothing when None."""
    from xprt_st.stage_timing import stage

    return contextlib.nullcontext() if name is None else stage(name)


@dataclass(frozen=True)
class MineSettings:
    """What :class:`MineStage` mines: a corpus into ``output``, or the stored run of ``merge_dir`` merged again."""

    mining: MiningConfig
    corpus: tuple[str | Path, ...] = ()
    output: Path | None = None
    merge_dir: Path | None = None
    """A stored run to merge again with ``mining``'s merge settings (no corpus, no ``output``)."""
    engine: str = "local"
    shard_index: int | None = None
    overwrite: bool = False
    num_workers: int | None = None
    ray_address: str | None = None
    progress: bool = True

    @property
    def folder(self) -> Path:
        """The mined folder: ``merge_dir`` or ``output``."""
        folder = self.merge_dir if self.merge_dir is not None else self.output
        if folder is None:
            raise ValueError("MineSettings needs output (or merge_dir)")
        return Path(folder)


def remerge_note(output: Path, config: MiningConfig) -> str | None:
    """The line a resumed run prints when it merges again with other merge settings than its ``stats.json``
    records (:data:`MiningConfig.MERGE_FIELDS`, e.g. ``--holdout`` or ``--seed``): the groups and the held-out draw
    are replaced, so a model trained on the earlier merge no longer matches the folder. None when they are equal."""
    from xprt_st.fingerprint import describe_differences, differences

    previous = (read_stats(output, unfinished_ok=True) or {}).get("settings", {})
    merged = {key: previous[key] for key in MiningConfig.MERGE_FIELDS if key in previous}
    found = differences(merged, {key: getattr(config, key) for key in merged})
    if not found:
        return None
    pairs = [(before, after) for key, before, after in found if key == "pairs"]
    serves = ""
    if pairs:  # the recipes the folder fits change with its pairs
        serves = f"; it now serves recipes made for --pairs {pairs[0][1]}, no longer those for {pairs[0][0]}"
    return (
        f"re-merging {output} with other merge settings ({describe_differences(found)}): its groups and held-out "
        f"draw are replaced, and a model trained on the earlier merge is refused on mined:{output} by the held-out "
        f"contract{serves} (mine into a new --output to keep both)"
    )


class MineStage:
    """Mine a corpus (or merge a stored run again); afterwards :attr:`stats` is the merge's statistics, or None
    when only this job's shard was mined (:attr:`shard` then says which; the merge waits for the other shards) or
    when the pipeline reused the folder.

    ``xprt-st mine``'s stage has no fingerprint (mining's manifest decides what a rerun resumes); the quickstart's
    ``mined/`` gives one (``fingerprint``), which the pipeline then reuses by, with ``set_by`` naming the options
    that decide its keys, ``output`` the held folder whose manifest records the stage's folder before it is written,
    ``corpus`` the documents made when the stage runs (the quickstart's copy of its first pages) in place of
    ``config.corpus``, and ``timed_as`` the row of the command's stage table the mining goes to.
    """

    def __init__(
        self,
        config: MineSettings,
        say: Callable[[str], None] = _silent,
        *,
        name: str = "mine",
        folder: str = "",
        fingerprint: dict[str, Any] | None = None,
        set_by: dict[str, SetBy] | None = None,
        output: OutputFolder | None = None,
        corpus: Callable[[], tuple[str | Path, ...]] | None = None,
        timed_as: str | None = None,
    ) -> None:
        self.config = config
        self.say = say
        self.name, self.folder = name, folder
        self.fingerprint_record = fingerprint
        self.set_by = set_by or {}
        self.output = output
        self.corpus = corpus
        self.timed_as = timed_as
        self.stats: dict[str, Any] | None = None
        self.shard: ShardResult | None = None

    def fingerprint(self) -> dict[str, Any] | None:
        """What decides the folder, when given; else None: mining's own manifest decides what a rerun resumes and
        refuses a folder mined otherwise."""
        return self.fingerprint_record

    def check(self) -> None:
        """Nothing beyond the config's own validation: mining checks its sources and folder before any work."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Mine into the configured folder (``folder``, the pipeline's output, is the same one)."""
        from xprt_st.mining.merge import merge
        from xprt_st.mining.mine import run_mining

        settings = self.config
        if settings.merge_dir is not None:
            remerge = remerge_note(Path(settings.merge_dir), settings.mining)
            if remerge is not None:  # --merge DIR with other merge settings changes what DIR serves
                self.say(remerge)
            self.stats = merge(settings.merge_dir, settings.mining, progress=settings.progress)
            return {"groups": self.stats.get("groups")}
        if self.output is not None and self.folder:
            self.output.record(self.folder)
        corpus = self.corpus() if self.corpus is not None else settings.corpus
        output = settings.folder
        stored = MiningLayout(output)
        # a run of other settings is refused by run_mining: no "resuming" line before that refusal
        if (
            not settings.overwrite
            and stored.stored_settings() is not None
            and not stored.changed_settings(settings.mining.stage_settings())
        ):
            self.say(
                f"resuming the mining run stored in {output}: {stored.stored_chunks()} scored chunks are kept, only "
                "the missing work is done (--overwrite mines again from scratch)"
            )
            remerge = remerge_note(output, settings.mining)
            if remerge is not None:
                self.say(remerge)
        with timed(self.timed_as):
            result = run_mining(
                list(corpus),
                output,
                settings.mining,
                engine=settings.engine,
                shard_index=settings.shard_index,
                progress=settings.progress,
                overwrite=settings.overwrite,
                num_workers=settings.num_workers,
                ray_address=settings.ray_address,
            )
        if isinstance(result, ShardResult):
            self.shard = result
            return {"shard": result.shard_index, "chunks_computed": result.chunks_computed}
        self.stats = result
        return {"groups": result.get("groups")}


class AfterMergeStage:
    """The chain after the merge (:func:`xprt_st.mining.after_merge.finish_mining`) on what ``mined`` merged (or
    the folder it reused); nothing when it mined only a shard. Afterwards :attr:`stats` is the folder's statistics.

    ``before`` is a check of the merged folder before the chain adds to it (the quickstart's: enough groups for one
    step); ``name`` and ``folder`` are the pipeline's (the quickstart's ``hard negatives`` in ``mined/``), and
    ``timed_as`` the row of the command's stage table the passes go to.
    """

    def __init__(
        self,
        config: AfterMerge,
        mined: MineStage,
        model: object = None,
        say: Callable[[str], None] = _silent,
        *,
        name: str = "after merge",
        folder: str = "",
        before: Callable[[Path], None] | None = None,
        timed_as: str | None = None,
    ) -> None:
        self.config = config
        self.mined = mined
        self.model = model
        self.say = say
        self.name, self.folder = name, folder
        self.before = before
        self.timed_as = timed_as
        self.stats: dict[str, Any] | None = None

    def fingerprint(self) -> None:
        """None: ``stats.json`` records what the chain added, and :func:`finish_mining` reuses it."""
        return None

    def check(self) -> None:
        """The passes' counts and ratio are in range and fit the pairs mined, and the mining model's name resolves
        (no model loaded) when a step will encode with it after the merge of a stored run (a fresh run's mining
        loads it first and names it itself).

        Raises:
            MiningConfigError: a count below 0, a ratio outside (0, 1], hard negatives of random spans.
            ModelLoadError: the mining model's name does not resolve.
        """
        from xprt_st.mining.config import MiningConfigError
        from xprt_st.models import ModelLoadError, resolve_model_name

        steps = self.config
        counts = {"--hard-negatives": steps.hard_negatives, "--lexical-candidates": steps.lexical_candidates}
        for option, count in counts.items():
            if count < 0:
                raise MiningConfigError(f"{option} must be >= 0, got {count}")
        if not 0 < steps.max_ratio <= 1:
            raise MiningConfigError(f"--hard-negative-max-ratio must be in (0, 1], got {steps.max_ratio}")
        if steps.hard_negatives > 0 and self.mined.config.mining.pairs == "random-span":
            raise MiningConfigError(
                "--hard-negatives needs mined groups (an anchor and its positive), not --pairs random-span"
            )
        encodes = self.config.hard_negatives > 0 or bool(self.config.structure)
        if encodes and self.mined.config.merge_dir is not None and isinstance(self.model, str | Path | None):
            try:
                resolve_model_name(self.model)
            except ModelLoadError as error:
                raise ModelLoadError(f"--mining-model: {error}") from error

    def run(self, folder: Path) -> dict[str, Any]:
        """Add what :attr:`config` asks to the mined folder."""
        del folder
        if self.mined.shard is not None:
            return {"skipped": "only a shard was mined"}
        mined = self.mined.config.folder
        if self.before is not None:
            self.before(mined)
        steps = self.config
        added = {"hard_negatives": steps.hard_negatives, "lexical_candidates": steps.lexical_candidates}
        kept = not (
            (steps.hard_negatives and not has_hard_negatives(mined, steps.hard_negatives, steps.max_ratio))
            or (steps.lexical_candidates and not has_lexical_candidates(mined, steps.lexical_candidates))
        )
        with MiningLayout(mined).lock(), timed(None if kept else self.timed_as):  # one writer, first pass to last
            self.stats = finish_mining(mined, steps, model=self.model, stats=self.mined.stats, say=self.say)
        record = {"groups": self.stats.get("groups"), **{key: n for key, n in added.items() if n}}
        return record | ({"kept": kept} if any(added.values()) else {})


@dataclass
class TrainStage:
    """Train a recipe on a mined folder into the run folder (:func:`xprt_st.training.run.run_training`).

    :meth:`check` runs every check that needs no model (output folder, starting model, resume and fork
    checkpoints, the mined data, the held-out contract) and keeps what it found (:attr:`plan`) for :meth:`run`.
    """

    config: TrainSettings
    plan: TrainPlan | None = field(default=None, init=False)
    name: ClassVar[str] = "train"
    folder: ClassVar[str] = ""

    def fingerprint(self) -> None:
        """None: a run folder keeps its own record of what made it, and train keeps its own rule for it. A
        checkpoint records the recipe, the data's identity and the processes, and a resume that differs is
        refused naming each difference (:func:`xprt_st.training.run.check_resume_inputs`). A finished run is
        refused without ``--resume`` (a resume with a larger ``--max-steps`` trains further), and ``--overwrite``
        always trains again. Neither is a reuse by an equal fingerprint."""
        return None

    def check(self) -> None:
        """Every check of the run before a model loads (:func:`xprt_st.training.run.check_training`)."""
        from xprt_st.training.run import check_training

        self.plan = check_training(self.config)

    def run(self, folder: Path) -> dict[str, Any]:
        """Take the run folder and train (``folder``, the pipeline's output, is the configured one)."""
        from xprt_st.training.run import check_training, run_training

        del folder
        plan = self.plan if self.plan is not None else check_training(self.config)
        output = run_training(plan)
        return {"model": str(output), "trained": plan.finished is None}


@dataclass(frozen=True)
class RecipeRun:
    """What a trained folder is made of: the recipe, its mined data, the start and the retention term's text."""

    recipe: Callable[[], Recipe]
    """The recipe, resolved when the stage runs (the quickstart's steps follow the groups mined just before)."""
    data: Path
    model: str | None = None
    """The starting model, overriding the recipe's (None: the recipe's)."""
    retention_data: Path | None = None
    """A mined folder whose (anchor, positive) the retention term reads (compare's, the same for every recipe)."""


def train_into(folder: Path, run: RecipeRun, how: str, *, progress: bool = False, recipe: Recipe | None = None) -> bool:
    """Go on in ``folder`` as ``how`` says (:func:`xprt_st.training.checkpoints.continuation`): ``kept`` trains
    nothing, ``resume`` continues from the newest whole checkpoint, ``restart`` deletes what a stopped run left (only
    what train wrote) and trains, ``train`` trains; returns whether it trained. The one call of
    :func:`xprt_st.training.train_recipe` into a folder of its own (``recipe``: ``run.recipe()`` already resolved)."""
    if how == "kept":
        return False
    from xprt_st.training import train_recipe

    train_recipe(
        recipe if recipe is not None else run.recipe(),
        data=run.data,
        output=folder,
        resume="last" if how == "resume" else None,
        model=run.model,
        progress=progress,
        overwrite=how == "restart",
        retention_data=run.retention_data,
    )
    return True


@dataclass
class RecipeStage:
    """Train a recipe into a folder of its own (the quickstart's ``model/``, finetune-compare's ``pretrained/``):
    the pipeline reuses it by its fingerprint; a rerun of equal settings keeps the model a run finished, resumes one
    stopped after a checkpoint, and starts again over one stopped before any (:func:`train_into`). Afterwards
    :attr:`outcome` says which (``kept``, ``resume``, ``restart``, ``train``)."""

    name: str
    folder: str
    config: RecipeRun
    fingerprint_record: dict[str, Any] | Callable[[], dict[str, Any]]
    """What decides the folder (a callable: worked out once, when the pipeline first asks, which checks it)."""
    output: OutputFolder | None = None
    """The held output folder, whose manifest records :attr:`folder` before it is written."""
    progress: bool = False
    timed_as: str = "train"
    """The row of the command's stage table the training time goes to."""
    outcome: str = field(default="", init=False)
    _fingerprint: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def fingerprint(self) -> dict[str, Any]:
        """What decides the folder."""
        if self._fingerprint is None:
            record = self.fingerprint_record
            self._fingerprint = record() if callable(record) else record
        return self._fingerprint

    def check(self) -> None:
        """The fingerprint can be worked out (a recipe and its overrides load), before any model does."""
        self.fingerprint()

    def run(self, folder: Path) -> dict[str, Any]:
        """Resolve the recipe, then keep, resume or train."""
        from xprt_st.stage_timing import stage
        from xprt_st.training.checkpoints import continuation

        recipe = self.config.recipe()
        self.outcome = continuation(folder)
        if self.outcome == "resume":
            logger.warning("%s holds checkpoints of a stopped run of these settings: resuming it", folder)
        if self.outcome != "kept":
            if self.output is not None:
                self.output.record(self.folder)
            with stage(self.timed_as):
                train_into(folder, self.config, self.outcome, progress=self.progress, recipe=recipe)
        return {
            "outcome": self.outcome,
            "trained": self.outcome != "kept",
            "steps": recipe.training.max_steps,
            "resumed": self.outcome == "resume",
        }
