"""What ``xprt-st train`` hands to the trainer, for a plain Python script: :func:`trainer_setup`.

:func:`xprt_st.training.train_recipe` builds its trainer from this function, so a script that uses it
trains exactly what the command line trains: the same model, loss and teacher, the same dataset columns,
the term schedules (retention 40 -> 0 and the recipe's own), the document-spread batches
(:class:`~xprt_st.training.sampler.DocumentSpreadBatchSampler`, chosen by :class:`XPRTTrainer` for a
dataset with a ``label`` column) and the saving of the loss-owned modules (``training_state/``)::

    from xprt_st import XPRTTrainer, load_recipe, trainer_setup

    setup = trainer_setup(load_recipe("change-only-positive"), data="mined/", output="runs/py")
    trainer = XPRTTrainer(**setup.trainer_kwargs())  # change what you like: setup.args, setup.callbacks ...
    trainer.train()
    setup.save(trainer)                              # runs/py loads with SentenceTransformer("runs/py")

``setup.trainer()`` is that trainer as ``train_recipe`` builds it (without the Trainer's printing callbacks,
and carrying over the MLM head of a start trained by xprt-st). What ``train_recipe`` adds around it: the
checks of the output folder, resume and fork, and the label-free record of a run on held-out documents.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments
from torch import nn
from transformers import TrainerCallback, set_seed
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from xprt_st.columns import LABEL, NEGATIVE_PREFIX
from xprt_st.models import frozen_copy, load_model
from xprt_st.objectives import build_loss, get_objective
from xprt_st.precision import resolve_precision, use_precision
from xprt_st.recipe import Recipe
from xprt_st.training.data import MinedData, load_recipe_data
from xprt_st.training.heldout_contract import RECORD_KEY, run_record
from xprt_st.training.label_free import (
    HeldOutCheck,
    LabelFreeEvaluator,
    check_heldout,
    evaluation_arguments,
    label_free_evaluator,
)
from xprt_st.training.progress import LogLinesCallback, RichProgressCallback, StageStepsCallback
from xprt_st.training.retention_text import add_retention_text, retention_positions
from xprt_st.training.schedules import Schedule, TermScheduleCallback
from xprt_st.training.trainer import TRAINING_STATE_DIR, XPRTTrainer

logger = logging.getLogger(__name__)


@dataclass
class TrainerSetup:
    """Everything a recipe's trainer is built from (see the module doc); :meth:`trainer_kwargs` passes it on."""

    model: SentenceTransformer
    """The starting model, its ``max_seq_length`` set to the recipe's training limit."""
    loss: nn.Module
    """The recipe's loss (with its retention teacher and loss-owned modules)."""
    args: SentenceTransformerTrainingArguments
    train_dataset: Dataset
    callbacks: list[TrainerCallback]
    """The term schedules first, then the caller's callbacks, then the progress display."""
    starting_model: str
    training_metadata: dict[str, Any]
    """Written to ``training_state/config.json`` and the model card: the recipe, the data, the mining statistics and
    the held-out contract's record (:func:`xprt_st.training.heldout_contract.run_record`)."""
    served_max_seq_length: int
    """The start's own token limit, which the saved model keeps (training may cut passages shorter)."""
    evaluator: LabelFreeEvaluator | None = None
    """The label-free check on the mined folder's held-out documents, or None without any."""
    mined: MinedData | None = field(default=None, repr=False)

    def trainer_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~xprt_st.training.XPRTTrainer` (and, but for the last two, of
        ``SentenceTransformerTrainer``)."""
        return {
            "model": self.model,
            "args": self.args,
            "train_dataset": self.train_dataset,
            "loss": self.loss,
            "evaluator": self.evaluator,
            "callbacks": list(self.callbacks),
            "starting_model": self.starting_model,
            "training_metadata": self.training_metadata,
        }

    def trainer(self, trainer_class: type[XPRTTrainer] = XPRTTrainer, *, warm_start: bool = True) -> XPRTTrainer:
        """The trainer ``train_recipe`` trains with: ``trainer_class(**self.trainer_kwargs())`` without the Trainer's
        own printing callbacks, and, when the start is a folder trained by xprt-st, with its MLM head carried
        over (:meth:`~xprt_st.training.XPRTTrainer.warm_start_loss_modules`; ``warm_start=False`` skips it, as a
        resumed run does)."""
        trainer = trainer_class(**self.trainer_kwargs())
        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        if warm_start and (Path(self.starting_model) / TRAINING_STATE_DIR).is_dir():
            trainer.warm_start_loss_modules(self.starting_model)
        return trainer

    def save(self, trainer: XPRTTrainer, output: str | Path | None = None) -> Path:
        """Save the trained model as ``train_recipe`` does: with the start's serving token limit restored."""
        folder = Path(output if output is not None else self.args.output_dir)
        self.model.max_seq_length = self.served_max_seq_length
        trainer.save_model(str(folder))
        return folder


def trainer_setup(
    recipe: Recipe,
    data: str | Path | MinedData,
    output: str | Path,
    *,
    model: str | None = None,
    progress: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
    retention_data: str | Path | None = None,
    fork_from: str | Path | None = None,
    heldout: HeldOutCheck | None = None,
    record: dict[str, Any] | None = None,
) -> TrainerSetup:
    """Build the model, loss, dataset, callbacks and training arguments of ``recipe`` on the mined folder ``data``.

    Seeds everything with ``recipe.training.seed`` first, so two setups of one recipe train identically.

    Args:
        recipe: a validated recipe (:func:`xprt_st.recipe.load_recipe`).
        data: a folder written by ``xprt-st mine`` (or its :func:`load_recipe_data`).
        output: the run folder (the Trainer's ``output_dir``).
        model: the starting model; default the recipe's ``training.model``.
        progress: the rich progress display; without it, one log line per logging step.
        callbacks: extra Trainer callbacks, placed after the schedules.
        retention_data: a mined folder whose (anchor, positive) the retention term reads instead
            (see :func:`xprt_st.training.train_recipe`).
        fork_from: the trunk checkpoint a forked run continues (:mod:`xprt_st.training.fork`): the documents its
            record names count as trained on too, as the start's do, in the run's held-out record.
        heldout: what the caller found in ``data``'s held-out part (:func:`xprt_st.training.label_free.check_heldout`,
            as train's checks do), so it is not read again; None reads it here.
        record: the held-out contract's record of the run, when the caller has read it
            (:func:`xprt_st.training.heldout_contract.run_record` of ``data``, the start and ``fork_from``, as
            train's checks do); None reads it here.

    Returns:
        The :class:`TrainerSetup`; ``XPRTTrainer(**setup.trainer_kwargs())`` is the command line's trainer.
    """
    mined = data if isinstance(data, MinedData) else load_recipe_data(recipe, data)
    objective = get_objective(recipe.objective.name).with_args(recipe.objective.args)  # + hard-negative columns
    retention = recipe.retention.enabled
    starting_model = model or recipe.training.model
    world = int(os.environ.get("WORLD_SIZE", "1"))

    # what the run reads from the mined folder besides its groups, before the model loads (train's checks read it)
    found = heldout if heldout is not None else check_heldout(mined.path, recipe.training)
    if record is None:
        record = run_record(mined.path, mined.dataset.unique(LABEL), ancestors=(starting_model, fork_from))
    set_seed(recipe.training.seed)
    sentence_model = load_model(starting_model)
    # training.max_seq_length cuts the training passages; the saved model keeps the start's serving limit, so
    # a model trained on 64-token passages still reads 256-token queries and documents like its start did
    served_max_seq_length = sentence_model.max_seq_length
    label_free = label_free_evaluator(found, recipe.training, served_max_seq_length)
    if label_free is not None:
        label_free.score_start(sentence_model)  # before any checkpoint is loaded: this is the starting model
    if recipe.training.max_seq_length is not None:
        sentence_model.max_seq_length = recipe.training.max_seq_length
    # Taken before any checkpoint is loaded into the model: the teacher is always the starting model.
    teacher = frozen_copy(sentence_model) if retention else None
    retention_text = retention and retention_data is not None and Path(retention_data).resolve() != mined.path.resolve()
    retention_columns = retention_positions(objective.dataset_columns(retention)) if retention_text else None
    dataset = mined.dataset
    if objective.prepare is not None:
        dataset = objective.prepare(dataset, recipe.training.seed)
    if teacher is not None:
        teacher = frozen_start(teacher, recipe, mined, dataset, objective.dataset_columns(retention))
    data_args = objective.from_data(dataset, sentence_model) if objective.from_data is not None else None
    loss = build_loss(
        recipe.objective.name,
        sentence_model,
        recipe.objective.args,
        teacher=teacher,
        retention_weight=recipe.retention.start,
        distributed=world > 1,
        retention_columns=retention_columns,
        data_args=data_args,
    )
    dataset = dataset.select_columns([*objective.dataset_columns(retention), "label"])
    if retention_text:
        dataset = add_retention_text(dataset, retention_data)

    schedules = {name: Schedule(spec.start, spec.end, spec.shape) for name, spec in recipe.schedules.items()}
    if retention:
        schedules["retention_weight"] = Schedule(recipe.retention.start, recipe.retention.end, recipe.retention.shape)
    all_callbacks: list[TrainerCallback] = list(callbacks)
    if schedules:
        all_callbacks.insert(0, TermScheduleCallback(loss, schedules))
    hard_negatives = sum(column.startswith(NEGATIVE_PREFIX) for column in objective.dataset_columns(retention))
    all_callbacks.append(
        RichProgressCallback(hard_negatives=hard_negatives) if progress else LogLinesCallback(hard_negatives)
    )
    all_callbacks.append(StageStepsCallback())

    return TrainerSetup(
        model=sentence_model,
        loss=loss,
        args=training_arguments(recipe, output, label_free),
        train_dataset=dataset,
        callbacks=all_callbacks,
        starting_model=starting_model,
        training_metadata={
            "recipe": recipe.to_dict(),
            "data": str(mined.path.resolve()),
            "mining_stats": mined.stats,
            "world_size": world,
            # the held-out contract's record: the documents this run, its start and its trunk trained on
            RECORD_KEY: record,
        },
        served_max_seq_length=served_max_seq_length,
        evaluator=label_free,
        mined=mined,
    )


def frozen_start(
    teacher: SentenceTransformer, recipe: Recipe, mined: MinedData, dataset: Dataset, columns: Sequence[str]
) -> nn.Module:
    """The frozen start as training runs it: at the trainer's precision (the trainer's autocast covers only the
    model it trains, so a bf16 run's teacher ran fp32 before), reading mining's stored vectors of the training
    texts where they are this start's (:mod:`xprt_st.training.stored_teacher`)."""
    from xprt_st.training.stored_teacher import stored_vector_teacher

    if training_precision(recipe) == "bf16":
        use_precision(teacher, "bf16")
    texts = {text for column in columns if column in dataset.column_names for text in dataset[column]}
    wrapped, note = stored_vector_teacher(teacher, mined.path, texts)
    logger.info(note)
    return wrapped


def training_precision(recipe: Recipe) -> str:
    """The precision the trainer runs: fp16 as asked, auto resolved for the device (bf16 or fp32)."""
    precision = recipe.training.precision
    return precision if precision == "fp16" else resolve_precision(precision).precision


def training_arguments(
    recipe: Recipe, output: str | Path, label_free: LabelFreeEvaluator | None = None
) -> SentenceTransformerTrainingArguments:
    """The Trainer arguments of ``recipe``'s ``training`` section, writing checkpoints into ``output``."""
    training = recipe.training
    precision = training_precision(recipe)
    return SentenceTransformerTrainingArguments(
        output_dir=str(output),
        max_steps=training.max_steps,
        num_train_epochs=training.epochs,
        per_device_train_batch_size=training.batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        learning_rate=training.learning_rate,
        lr_scheduler_type=training.lr_scheduler,
        warmup_steps=training.warmup_ratio,  # a float in [0, 1): transformers >= 5 reads it as a share of the steps
        weight_decay=training.weight_decay,
        max_grad_norm=training.max_grad_norm,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        # transformers refuses bf16 without a GPU unless told to train on the CPU, where bf16 autocast works
        use_cpu=precision == "bf16" and not torch.cuda.is_available(),
        seed=training.seed,
        data_seed=training.seed,
        save_strategy="steps",
        save_steps=training.save_steps,
        save_total_limit=training.save_total_limit,
        logging_steps=training.logging_steps,
        dataloader_drop_last=True,
        dataloader_num_workers=training.dataloader_num_workers,
        report_to=[],
        disable_tqdm=True,  # the rich display or the log lines report instead of tqdm and printed dicts
        **evaluation_arguments(label_free, training),
    )
