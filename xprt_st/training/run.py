"""Run a recipe end to end: validate the data, build the model and loss, train, export.

This is what ``xprt-st train`` calls; it is usable from Python and notebooks too::

    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe

    recipe = load_recipe("change-only-positive", overrides={"training.max_steps": 100})
    train_recipe(recipe, data="mined/", output="runs/step1")
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from xprt_st.columns import LABEL
from xprt_st.fingerprint import flattened
from xprt_st.mining.layout import HELDOUT_DIR
from xprt_st.models import check_model
from xprt_st.objectives import get_objective
from xprt_st.output_folder import OutputFolder, OutputFolderError, command_folder
from xprt_st.precision import ResolvedPrecision, resolve_precision
from xprt_st.recipe import Recipe
from xprt_st.training.checkpoints import checkpoint_folders, checkpoint_problem, unusable_checkpoints_message
from xprt_st.training.data import STATS_FILE, MinedData, load_recipe_data
from xprt_st.training.fork import check_fork, same_model, trainer_class
from xprt_st.training.heldout_contract import check_start, run_record
from xprt_st.training.label_free import HeldOutCheck, check_heldout, finish
from xprt_st.training.memory import check_step_memory, padded_length
from xprt_st.training.pace import PaceCallback
from xprt_st.training.recipe_setup import trainer_setup
from xprt_st.training.trainer import (
    TRAINING_STATE_DIR,
    TrainingStateError,
    last_complete_checkpoint,
    read_training_config,
)

logger = logging.getLogger(__name__)


def resolve_checkpoint(output: Path, resume: str | Path | None) -> Path | None:
    """The checkpoint to resume from: None, the newest complete one (``"last"``), or a given folder."""
    if resume is None:
        return None
    if str(resume) in {"last", "auto", "true"}:
        return _last_usable_checkpoint(output)
    checkpoint = Path(resume)
    if not (checkpoint / "trainer_state.json").is_file():
        raise TrainingStateError(
            f"--resume {checkpoint}: not a checkpoint folder (no trainer_state.json); "
            f"pass a {output}/checkpoint-N folder or 'last'"
        )
    read_training_config(checkpoint)
    problem = checkpoint_problem(checkpoint)
    if problem is not None:
        raise TrainingStateError(
            f"--resume {checkpoint}: {problem}. Resume from an earlier checkpoint, or --resume last to take the "
            "newest readable one."
        )
    return checkpoint


def _last_usable_checkpoint(output: Path) -> Path:
    """``--resume last``: the newest readable checkpoint; newer broken ones are named in a warning, none is an error."""
    if not checkpoint_folders(output):
        raise TrainingStateError(
            f"--resume last: {output} holds no checkpoint-N folder; drop --resume to start a new run there"
        )
    checkpoint = last_complete_checkpoint(output)
    if checkpoint is None:
        raise TrainingStateError(f"--resume last: {unusable_checkpoints_message(output)}")
    names = [folder.name for folder in checkpoint_folders(output)]
    newer = names[: names.index(checkpoint.name)]
    if newer:
        logger.warning(
            "resuming from %s: the newer %s cannot be resumed from (see above); it is overwritten when the run "
            "reaches that step again, or delete it yourself",
            checkpoint,
            ", ".join(newer),
        )
    return checkpoint


def check_output_outside_data(output: Path, data: Path) -> None:
    """Refuse an ``--output`` that is the ``--mined`` folder or inside it: checkpoints would be written into the mined
    dataset (and a later ``mine --overwrite`` or re-mine of that folder would delete the run).

    Raises:
        OutputFolderError: naming both folders and the fix.
    """
    out, mined = output.resolve(), data.resolve()
    if out == mined or mined in out.parents:
        where = "is" if out == mined else "is inside"
        raise OutputFolderError(
            f"--output {output} {where} the --mined folder {data}: the run would write its checkpoints and model into "
            "the mined dataset. Choose an --output outside it (e.g. runs/NAME)."
        )


RESUME_FREE = (
    "name",
    "description",
    "source",
    "training.model",
    "training.max_steps",
    "training.epochs",
    "training.save_steps",
    "training.save_total_limit",
    "training.logging_steps",
    "training.dataloader_num_workers",
    "training.eval_steps",
    "training.keep_best",
)
"""Recipe values a resume may change: how long the run goes on (its schedules follow ``max_steps``), what it saves,
logs and checks, and names (the starting model is checked on its own). Every other value is the run's: the batch
layout and seed fix which groups each step trains on, the objective and retention what it learns, and the learning
rate, warm-up, scheduler and weight decay come back from the checkpoint's optimizer and scheduler, so a new value
would be silently ignored."""
DATA_IDENTITY = ("groups", "documents", "settings")
"""Entries of the mining statistics that identify the data a run trained on (timings are left out)."""


def check_resume_inputs(
    checkpoint: Path,
    recorded: dict[str, Any],
    recipe: Recipe,
    data: Path,
    mining_stats: dict[str, Any],
    world_size: int,
) -> None:
    """Refuse to resume ``checkpoint`` on other data, other recipe values or another number of processes.

    The Trainer resumes by skipping the batches already trained on; with another data folder, re-mined data, a
    changed batch size, accumulation or seed, or another world size, those would be other groups and the run
    would silently train on a mix. Any other recipe value but those of :data:`RESUME_FREE` is refused too: a new
    objective or retention trains a mix, and a new learning rate or warm-up is ignored (the optimizer and scheduler
    come back from the checkpoint). Values the checkpoint does not record (older versions) are not checked.

    Raises:
        TrainingStateError: listing every difference, with the value to pass to resume.
    """
    problems: list[str] = []
    recorded_data = recorded.get("data")
    if recorded_data is not None and Path(recorded_data).resolve() != data.resolve():
        problems.append(f"it was trained on --mined {recorded_data}, not {data} (pass --mined {recorded_data})")
    elif "mining_stats" in recorded:
        before, now = (
            {key: json.loads(json.dumps(stats.get(key))) for key in DATA_IDENTITY}
            for stats in (recorded["mining_stats"], mining_stats)
        )
        changed = [f"{key} {before[key]!r} -> {now[key]!r}" for key in DATA_IDENTITY if before[key] != now[key]]
        if changed:
            problems.append(
                f"the data in {data} changed since the checkpoint was written ({STATS_FILE}: {'; '.join(changed)}); "
                "resume needs the data the run started on"
            )
    if isinstance(recorded.get("recipe"), dict):
        before, now = flattened(recorded["recipe"]), flattened(recipe.to_dict())
        for key in sorted(before.keys() - set(RESUME_FREE)):
            if before[key] != now.get(key):
                problems.append(f"{key} was {before[key]!r} when it was written, now {now.get(key)!r}")
    if recorded.get("world_size") not in (None, world_size):
        problems.append(f"it ran on {recorded['world_size']} process(es), not {world_size}")
    if problems:
        raise TrainingStateError(
            f"cannot resume {checkpoint}: " + "; ".join(problems) + ". Resume with the same inputs, or train into a "
            "new --output."
        )


def _check_fresh_output(output: Path) -> None:
    if checkpoint_folders(output):
        if last_complete_checkpoint(output) is None:
            raise OutputFolderError(unusable_checkpoints_message(output))
        raise OutputFolderError(
            f"{output} already holds checkpoints of an earlier run; continue it with --resume last, "
            "choose another --output, or pass --overwrite to delete that run and start again"
        )
    if (output / "modules.json").is_file():
        raise OutputFolderError(
            f"{output} already holds a trained model; choose another --output, or pass --overwrite to delete it"
        )


def finished_message(output: Path, checkpoint: Path, recipe: Recipe) -> str | None:
    """Why resuming ``checkpoint`` would train nothing: the run reached its last step and saved its final model.

    None when steps are left (a larger ``max_steps`` than the checkpoint's run continues it) or when the final
    model was not written from this step (a run killed after its last checkpoint resumes to save it).
    """
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        final = read_training_config(output) if (output / "modules.json").is_file() else None
    except (OSError, ValueError, TrainingStateError):
        return None
    step = int(state.get("global_step", 0))
    target = recipe.training.max_steps
    if target <= 0:  # --epochs: the run's steps per epoch times the epochs asked for now (a resume may add some)
        steps, epochs = int(state.get("max_steps") or 0), float(state.get("num_train_epochs") or 0)
        target = math.ceil(steps / epochs * recipe.training.epochs - 1e-9) if steps and epochs > 0 else steps
    if target <= 0 or step < target or final is None or final.get("global_step") != step:
        return None
    return (
        f"{output} is finished: {checkpoint.name} is at step {step} of {target} and the final model in {output} was "
        "saved from it, so there is nothing to resume and nothing was trained. To train further, start a new run "
        f"from it (--model {output} --output NEW_FOLDER) or resume with a larger --max-steps (or --epochs)."
    )


@dataclass(frozen=True)
class TrainSettings:
    """One training run: the recipe, the mined folder it trains on, the run folder, and how the run starts
    (fresh, ``resume`` or ``fork_from``); what :func:`check_training` checks and :func:`run_training` trains.

    The arguments of :func:`train_recipe`, with ``model_option``: the option to blame for the starting model, which
    is then resolved (nothing loaded) before any work; None leaves it to the load (the Python API).
    """

    recipe: Recipe
    data: Path
    output: Path
    resume: str | Path | None = None
    model: str | None = None
    progress: bool = True
    callbacks: tuple[TrainerCallback, ...] = ()
    fork_from: str | Path | None = None
    retention_data: str | Path | None = None
    overwrite: bool = False
    model_option: str | None = None


@dataclass(frozen=True)
class TrainPlan:
    """What :func:`check_training` found before any model loads, for :func:`run_training`: the recipe with its
    precision resolved, the checkpoint to resume or fork from, the starting model, and everything the run reads from
    the mined folder (its groups, its held-out task and the held-out contract's record), read once."""

    settings: TrainSettings
    recipe: Recipe
    precision: ResolvedPrecision
    starting_model: str | None
    mined: MinedData | None
    """None when there is nothing to train (:attr:`finished`)."""
    checkpoint: Path | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    """The resumed checkpoint's training config (empty without ``resume``)."""
    fork: Path | None = None
    finished: str | None = None
    """Why resuming trains nothing (:func:`finished_message`): the run is finished; None otherwise."""
    heldout: HeldOutCheck | None = None
    """The mined folder's held-out part, read and checked (:func:`~xprt_st.training.label_free.check_heldout`)."""
    record: dict[str, Any] | None = None
    """The held-out contract's record of the run (:func:`~xprt_st.training.heldout_contract.run_record`)."""


def check_training(settings: TrainSettings) -> TrainPlan:
    """Every check of a training run that needs no model: the output folder (a writable path outside the mined
    folder, holding no files ``train`` did not write, no earlier run unless resumed or ``overwrite``), the starting
    model's name, the resume or fork checkpoint and what it records (data, recipe values, processes, starting model),
    the mined data (columns, enough rows) and the held-out contract. Nothing is written and no model is loaded.

    Raises:
        xprt_st.errors.XPRTError: the first problem, naming the option to blame (``OutputFolderError``,
            ``TrainingStateError``, ``ModelLoadError``, the data and held-out errors).
    """
    output, data, recipe = settings.output, settings.data, settings.recipe
    resume, fork_from, model = settings.resume, settings.fork_from, settings.model
    folder = command_folder(output, "train")
    folder.check_path()
    check_output_outside_data(output, data)
    folder.check()  # files train did not write are refused before any model loads
    if settings.model_option is not None and resume is None and fork_from is None:  # else the checkpoint records it
        check_model(model or recipe.training.model, settings.model_option)
    if settings.overwrite and (resume is not None or fork_from is not None):
        raise TrainingStateError(
            "--overwrite deletes the run in --output and starts again; it cannot be combined with --resume or "
            "--fork-from"
        )
    recipe, precision = resolved_precision(recipe)
    if fork_from is not None and resume is not None:
        raise TrainingStateError("--fork-from starts a new run from another run's checkpoint; it cannot --resume")
    checkpoint = resolve_checkpoint(output, resume)
    starting_model, fork, recorded = model or recipe.training.model, None, {}
    if fork_from is not None:
        fork, starting_model = check_fork(fork_from, recipe, model)
    elif checkpoint is not None:
        recorded = read_training_config(checkpoint)
        if model is not None and not same_model(model, recorded["starting_model"]):
            raise TrainingStateError(
                f"{checkpoint} was trained from {recorded['starting_model']!r}, not {model!r}; "
                "drop --model to resume (the retention teacher must be the original starting model)"
            )
        starting_model = recorded["starting_model"]
        finished = finished_message(output, checkpoint, recipe)
        if finished is not None:  # nothing to train: the data is not read again
            return TrainPlan(settings, recipe, precision, starting_model, None, checkpoint, recorded, finished=finished)
    if checkpoint is None and not settings.overwrite:  # --overwrite deletes the earlier run when it takes the folder
        _check_fresh_output(output)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    mined = load_recipe_data(recipe, data, world)
    if checkpoint is not None:
        check_resume_inputs(checkpoint, recorded, recipe, mined.path, mined.stats, world)
    has_heldout = (Path(mined.path) / HELDOUT_DIR).is_dir()
    # the held-out contract: what this run trains on, its start's and trunk's included (a later check reads it)
    if has_heldout:
        check_start(mined.path, (starting_model, fork_from), keep_best=recipe.training.keep_best)
    # the label-free task reads before any model loads, once (too few anchors: a warning when the run starts); a
    # folder without a held-out part is read only where keep_best or eval_steps ask for one
    training = recipe.training
    asked = has_heldout or training.keep_best or training.eval_steps is not None
    heldout = check_heldout(mined.path, training) if asked else HeldOutCheck()
    # the documents this run, its start and its trunk trained on: read from the folder here, not after the model loads
    record = run_record(mined.path, mined.dataset.unique(LABEL), ancestors=(starting_model, fork_from))
    return TrainPlan(
        settings, recipe, precision, starting_model, mined, checkpoint, recorded, fork, heldout=heldout, record=record
    )


def run_training(plan: TrainPlan) -> Path:
    """Take the run folder and train what :func:`check_training` planned; return the run folder.

    The folder is taken through :func:`xprt_st.output_folder.command_folder`: one run at a time (a second gets the
    holder's pid, host and start); ``overwrite`` deletes what an earlier ``train`` wrote. Under torchrun the first
    process holds it for all.
    """
    settings = plan.settings
    folder = command_folder(settings.output, "train", overwrite=settings.overwrite)
    if int(os.environ.get("RANK", "0")) != 0:
        folder.check()
        return _train(plan, folder=None)
    with folder:
        return _train(plan, folder=folder)


def train_recipe(
    recipe: Recipe,
    data: str | Path,
    output: str | Path,
    resume: str | Path | None = None,
    model: str | None = None,
    progress: bool = True,
    callbacks: Sequence[TrainerCallback] = (),
    fork_from: str | Path | None = None,
    retention_data: str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Train ``recipe`` on the mined folder ``data``; write checkpoints and the final model to ``output``.

    Args:
        recipe: a validated recipe (:func:`xprt_st.recipe.load_recipe`).
        data: folder written by ``xprt-st mine``.
        output: run folder: ``checkpoint-N/`` while training, then the final model with ``training_state/``.
        resume: ``"last"`` or a checkpoint folder; the starting model recorded there is reloaded, so the
            retention teacher is the original starting model, not the checkpoint.
        model: starting model overriding the recipe; refused on resume when it differs from the recorded one.
        progress: draw the rich progress display; without it, each log entry is a log line.
        callbacks: extra Trainer callbacks.
        fork_from: a checkpoint of ANOTHER run (the trunk) to continue with this recipe's objective and data, into
            the new ``output``: the trunk's encoder, optimizer state, learning-rate schedule and step carry over
            (:mod:`xprt_st.training.fork`); the recipe's schedule values must be the trunk's.
        retention_data: a mined folder whose (anchor, positive) the retention term reads instead of the recipe's own
            pair, row by row (:mod:`xprt_st.training.retention_text`); ``xprt-st compare`` passes its mined folder so
            every recipe's retention term reads the same text. Ignored without retention or when it is ``data``.
        overwrite: delete what an earlier ``train`` wrote into ``output`` (only that: the manifest's files and
            ``checkpoint-N`` folders) and start again.

    The output folder is taken through :func:`xprt_st.output_folder.command_folder` before anything is loaded: one
    run at a time (a second gets the holder's pid, host and start), and a folder holding files ``train`` did not
    write (a user's README.md, a mined folder, another command's model) is refused.

    Returns:
        The output folder, which loads with ``SentenceTransformer(str(output))``.
    """
    settings = TrainSettings(
        recipe,
        Path(data),
        Path(output),
        resume=resume,
        model=model,
        progress=progress,
        callbacks=tuple(callbacks),
        fork_from=fork_from,
        retention_data=retention_data,
        overwrite=overwrite,
    )
    return run_training(check_training(settings))


def resolved_precision(recipe: Recipe) -> tuple[Recipe, ResolvedPrecision]:
    """``recipe`` with ``training.precision: auto`` resolved for the device torch trains on (:mod:`xprt_st.precision`),
    so the run records, and a resume compares, the precision that ran; fp16 and explicit values pass through."""
    requested = recipe.training.precision
    if requested == "fp16":
        import torch

        if not torch.cuda.is_available():
            logger.warning(
                "--precision fp16 on a CPU: most CPUs have no fast fp16 path (it is usually slower than fp32) and "
                "fp16's narrow range can overflow; --precision auto runs bf16 where the CPU computes it, else fp32"
            )
        return recipe, ResolvedPrecision("fp16", "asked for fp16")
    resolved = resolve_precision(requested)
    training = dataclasses.replace(recipe.training, precision=resolved.precision)
    return dataclasses.replace(recipe, training=training), resolved


def _train(plan: TrainPlan, folder: OutputFolder | None) -> Path:
    """:func:`run_training` once the output folder is held (``folder``; None on the processes that do not hold it)."""
    settings, recipe, precision, checkpoint = plan.settings, plan.recipe, plan.precision, plan.checkpoint
    output, mined, fork = settings.output, plan.mined, plan.fork
    logger.info("precision: %s (%s)", precision.precision, precision.reason)
    if plan.finished is not None or mined is None:
        logger.warning("%s", plan.finished)
        return output
    if checkpoint is not None:
        if plan.recorded.get("recipe", {}).get("name") not in (None, recipe.name):
            logger.warning("resuming a %r checkpoint with recipe %r", plan.recorded["recipe"]["name"], recipe.name)
    # The same setup a Python script gets from trainer_setup (docs/training.md, "From Python").
    pace = PaceCallback(mined.path)  # texts a second and step/forward, for the log, the record and the stage table
    setup = trainer_setup(
        recipe,
        mined,
        output,
        model=plan.starting_model,
        progress=settings.progress,
        callbacks=(*settings.callbacks, pace),
        retention_data=settings.retention_data,
        fork_from=settings.fork_from,
        heldout=plan.heldout,
        record=plan.record,
    )
    setup.training_metadata["precision_reason"] = precision.reason
    sentence_model, label_free = setup.model, setup.evaluator
    # The step's estimated peak against the device, before anything is trained (CUDA: one-line error).
    objective = get_objective(recipe.objective.name).with_args(recipe.objective.args)  # + hard-negative columns
    columns = objective.dataset_columns(recipe.retention.enabled)
    check_step_memory(
        sentence_model,
        setup.loss,
        len(columns),
        recipe.training.batch_size,
        padded_length(sentence_model, setup.train_dataset, columns[0]),
        recipe.training.precision,
        setup.args.device,
    )
    # A new run from a model trained by xprt-st (any recipe): its encoder and MLM head carry over, the rest
    # of the objective starts fresh. Only a resumed checkpoint restores a run's own loss state.
    trainer = setup.trainer(trainer_class(fork is not None), warm_start=checkpoint is None and fork is None)
    resume_from = fork if fork is not None else checkpoint
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    measured = pace.pace()  # this run's steps (a resume's own, not the first's)
    trainer.training_metadata["pace"] = measured.to_dict()
    logger.info("%s", measured.line())
    # the final model's names are recorded as they appear, so a run killed while saving leaves them to its rerun
    with folder.writing() if folder is not None else contextlib.nullcontext():
        setup.save(trainer, output)
        if label_free is not None and trainer.is_world_process_zero():
            finish(
                label_free,
                sentence_model,
                output,
                trainer.state.best_model_checkpoint,
                trainer.state.global_step,
                log_history=trainer.state.log_history,
            )
    logger.info("saved the final model to %s (training state in %s/%s)", output, output, TRAINING_STATE_DIR)
    return output
