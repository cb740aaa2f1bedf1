"""``XPRTTrainer``: a ``SentenceTransformerTrainer`` that also owns the loss's own modules.

Pre-training with a fill-in decoder trains modules that live in the loss, not in the model: the
decoder, the conditioning projection, the MLM head. sentence-transformers optimizes them but does not
save them, restore them, or synchronise their gradients across processes. This trainer does all three
and keeps them out of the serving model:

- every checkpoint (and the final output folder) holds a plain SentenceTransformer plus
  ``training_state/loss_modules.safetensors`` and ``training_state/config.json`` (the starting model,
  the loss class and its config, the recipe and the mining statistics);
- ``resume_from_checkpoint`` restores the loss-owned tensors together with the model;
- under ``torchrun`` / ``accelerate launch`` the loss-owned tensors start identical on every process
  (broadcast from rank 0) and their gradients are averaged before clipping and the optimizer step;
- a non-finite loss stops training on every process with a message naming the terms, and a checkpoint
  whose weights are not finite is never written;
- batches spread documents (:class:`~xprt_st.training.sampler.DocumentSpreadBatchSampler`) when the
  dataset has a ``label`` column, and a warning names the share of rows left without any negative.

The ``training_state/`` of the final output folder serves one purpose: a NEW run that starts from that
folder takes its MLM head (:meth:`XPRTTrainer.warm_start_loss_modules`); only ``--resume`` of a
``checkpoint-N`` folder restores a run's whole state.
"""

from __future__ import annotations

import json
import logging
import math
import os
import weakref
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
from sentence_transformers.base.sampler import BatchSamplers
from torch import Tensor, nn
from torch.utils.data import BatchSampler
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from xprt_st import __version__
from xprt_st.columns import LABEL
from xprt_st.errors import XPRTError
from xprt_st.models import drop_dangling_auto_map
from xprt_st.training.checkpoints import (
    CHECKPOINT_MARGIN_BYTES,
    LOSS_STATE_FILE,
    TRAINING_CONFIG_FILE,
    TRAINING_STATE_DIR,
    CheckpointSpaceError,
    CheckpointWriteError,
    checkpoint_bytes,
    last_complete_checkpoint,
    saved_tokenizer_bytes,
    space_problem,
    tensor_bytes,
    write_error,
)
from xprt_st.training.distributed import (
    all_gather_labels,
    all_reduce_gradients,
    any_process,
    broadcast_tensors,
    loss_owned_parameters,
    loss_owned_state,
    release_process_group_at_exit,
    world_size,
)
from xprt_st.training.model_card import config_dict, insert_pretraining_section, loss_terms, pretraining_section
from xprt_st.training.sampler import DocumentSpreadBatchSampler, documents_fill_a_batch
from xprt_st.training.schedules import TermScheduleCallback

logger = logging.getLogger(__name__)

TRAINING_STATE_FORMAT = 1
NO_NEGATIVE_WARN_SHARE = 0.25
"""Share of trained rows without any negative (every group in the batch from their document) that is warned about."""
WARM_START_MODULES = ("mlm_head",)
"""Loss-owned modules a NEW run takes from a trained folder: the MLM head belongs with the encoder's
vocabulary; every other module (decoder, projections) is built fresh for the new objective."""


class NonFiniteLossError(XPRTError, FloatingPointError):
    """The training loss became NaN or infinite; training stopped before any update or checkpoint."""

    exit_code = 1  # stopped after work that is kept
    heading = "training stopped"


class NonFiniteWeightsError(XPRTError, FloatingPointError):
    """Model or loss weights are NaN or infinite; the checkpoint was not written."""

    exit_code = 1  # stopped after work that is kept
    heading = "training stopped"


class TrainingStateError(XPRTError, RuntimeError):
    """A checkpoint's loss-owned state does not match the loss being trained."""


def read_training_config(path: str | Path) -> dict[str, Any]:
    """The ``training_state/config.json`` of a checkpoint or output folder.

    Raises:
        TrainingStateError: when the folder has no training state (e.g. a plain exported model).
    """
    config_path = Path(path) / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE
    if not config_path.is_file():
        raise TrainingStateError(
            f"{path} has no {TRAINING_STATE_DIR}/{TRAINING_CONFIG_FILE}: it was not written by XPRTTrainer, "
            "so its loss modules (decoder, projection, MLM head) cannot be restored"
        )
    return json.loads(config_path.read_text(encoding="utf-8"))


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
    except TypeError:
        if isinstance(value, dict):
            return {str(key): _json_safe(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [_json_safe(item) for item in value]
        return repr(value)
    return value


class _LossStateSyncCallback(TrainerCallback):
    """Broadcast loss-owned tensors from rank 0 when training starts (what DDP does for the model).

    It holds the trainer weakly: a strong reference would make trainer -> callbacks -> trainer a cycle that
    keeps the DDP wrapper and its process group alive until interpreter shutdown.
    """

    def __init__(self, trainer: XPRTTrainer) -> None:
        super().__init__()
        self._trainer = weakref.ref(trainer)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        trainer = self._trainer()
        if trainer is None:
            return
        trainer._owned_parameters = trainer.loss_owned_parameters()
        broadcast_tensors(list(trainer.loss_owned_state().values()))
        if world_size() > 1:
            release_process_group_at_exit()


class _DiskSpaceCallback(TrainerCallback):
    """Refuse to train before the first step when one checkpoint does not fit on the output folder's disk."""

    def __init__(self, trainer: XPRTTrainer) -> None:
        super().__init__()
        self._trainer = weakref.ref(trainer)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        trainer = self._trainer()
        if trainer is not None:
            trainer.check_checkpoint_space(state.max_steps)


class XPRTTrainer(SentenceTransformerTrainer):
    """``SentenceTransformerTrainer`` that saves, restores and synchronises loss-owned modules.

    Takes every argument of :class:`~sentence_transformers.SentenceTransformerTrainer`, plus:

    Args:
        starting_model: name or path of the model training started from. It is recorded in every
            checkpoint so a resumed run rebuilds the retention teacher from the ORIGINAL model, not from
            the checkpoint. Defaults to the model's ``_name_or_path``.
        training_metadata: JSON-serialisable facts written to ``training_state/config.json`` and the
            model card, e.g. ``{"recipe": {...}, "data": "mined/", "mining_stats": {...}}``.

    Loss-owned tensors are those registered on the loss that do not belong to a sentence-transformers
    model inside it (see :func:`xprt_st.training.distributed.loss_owned_state`).

    Example::

        trainer = XPRTTrainer(model=model, args=args, train_dataset=groups, loss=loss, starting_model="e5")
        trainer.train()                                  # or train(resume_from_checkpoint="out/checkpoint-500")
        trainer.save_model("out")                        # out/ loads with SentenceTransformer("out")
    """

    def __init__(
        self,
        *args: Any,
        starting_model: str | None = None,
        training_metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        model = kwargs.get("model", args[0] if args else None)
        if isinstance(model, SentenceTransformer) and model.tokenizer is None:
            raise ValueError("the model has no tokenizer; xPRT training needs a text model that ships one")
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None and training_args.per_device_train_batch_size < 2:
            raise ValueError(
                f"per_device_train_batch_size is {training_args.per_device_train_batch_size}; in-batch "
                "negatives need at least 2 groups per batch (use --batch-size 2 or more)"
            )
        super().__init__(*args, **kwargs)
        self.starting_model = starting_model or _name_or_path(self.model)
        self.training_metadata = dict(training_metadata or {})
        self._owned_parameters: list[nn.Parameter] = self.loss_owned_parameters()
        self._last_terms: dict[str, float] = {}
        self._rows_seen = 0
        self._rows_without_negative = 0
        self._warned_no_negative = False
        self._tokenizer_bytes: int | None = None
        self.add_callback(_LossStateSyncCallback(self))
        self.add_callback(_DiskSpaceCallback(self))
        self.model.model_card_data.set_losses([module for _, module in loss_terms(self._loss_root())])

    # ---- loss-owned state ------------------------------------------------------------------------

    def _loss_root(self) -> nn.Module:
        return nn.ModuleDict(self.loss) if isinstance(self.loss, dict) else self.loss

    def loss_owned_state(self) -> dict[str, Tensor]:
        """Loss-owned tensors by name (``decoder.layer.0...``; prefixed by dataset name for dict losses)."""
        return loss_owned_state(self._loss_root())

    def loss_owned_parameters(self) -> list[nn.Parameter]:
        """Trainable loss-owned parameters, in the same order on every process."""
        return loss_owned_parameters(self._loss_root())

    def save_training_state(self, output_dir: str | Path) -> Path:
        """Write ``training_state/`` (loss-owned tensors + config) into ``output_dir``; return that folder."""
        folder = Path(output_dir) / TRAINING_STATE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        state = {name: tensor.detach().cpu().clone().contiguous() for name, tensor in self.loss_owned_state().items()}
        tmp = folder / f".{LOSS_STATE_FILE}.tmp"
        save_file(state, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, folder / LOSS_STATE_FILE)
        root = self._loss_root()
        config = {
            "format": TRAINING_STATE_FORMAT,
            "xprt_st_version": __version__,
            "starting_model": self.starting_model,
            "global_step": self.state.global_step,
            "loss": f"{type(root).__module__}.{type(root).__qualname__}",
            "loss_config": _json_safe(config_dict(root)),
            "tensors": {name: list(tensor.shape) for name, tensor in state.items()},
            **_json_safe(self.training_metadata),
        }
        tmp = folder / f".{TRAINING_CONFIG_FILE}.tmp"
        tmp.write_text(json.dumps(config, indent=2), encoding="utf-8")
        os.replace(tmp, folder / TRAINING_CONFIG_FILE)
        return folder

    def load_training_state(self, checkpoint_dir: str | Path) -> None:
        """Copy the loss-owned tensors saved in ``checkpoint_dir/training_state`` into the loss.

        Raises:
            TrainingStateError: when the file is missing or its tensors do not match the loss (names or
                shapes), which means the checkpoint was made with another recipe or loss.
        """
        path = Path(checkpoint_dir) / TRAINING_STATE_DIR / LOSS_STATE_FILE
        current = self.loss_owned_state()
        if not path.is_file():
            if not current:
                return
            raise TrainingStateError(
                f"{checkpoint_dir} has no {TRAINING_STATE_DIR}/{LOSS_STATE_FILE}, so the loss modules "
                f"({', '.join(sorted(current)[:5])}...) cannot be restored; resume from a checkpoint written by "
                "XPRTTrainer"
            )
        saved = load_file(str(path))
        missing = sorted(set(current) - set(saved))
        unexpected = sorted(set(saved) - set(current))
        mismatched = [
            f"{name} {tuple(saved[name].shape)} vs {tuple(current[name].shape)}"
            for name in sorted(set(current) & set(saved))
            if saved[name].shape != current[name].shape
        ]
        if missing or unexpected or mismatched:
            raise TrainingStateError(
                f"the loss state in {path} does not match {type(self._loss_root()).__name__}: "
                f"missing {missing or 'none'}; unexpected {unexpected or 'none'}; "
                f"shape mismatch {mismatched or 'none'}. "
                "Resume with the recipe and objective arguments the checkpoint was made with."
            )
        with torch.no_grad():
            for name, tensor in current.items():
                tensor.copy_(saved[name].to(device=tensor.device, dtype=tensor.dtype))
        logger.info("restored %d loss-owned tensors from %s", len(current), path)

    def warm_start_loss_modules(self, model_dir: str | Path) -> list[str]:
        """Start a NEW run's loss modules from the trained xprt-st folder ``model_dir``, where they carry over.

        The encoder comes with the folder itself. Of its ``training_state/``, only the MLM head is taken (matched
        by its path below ``mlm_head.`` and its shape, whatever loss it was trained in); the decoder and every
        other module the new objective needs start fresh, and the log says which. A mismatch is never an error
        here: restoring a run's own state is :meth:`load_training_state`, used by resume.

        Returns:
            The names of the loss-owned tensors that were copied.
        """
        path = Path(model_dir) / TRAINING_STATE_DIR / LOSS_STATE_FILE
        current = self.loss_owned_state()
        saved = load_file(str(path)) if path.is_file() else {}
        recorded = Path(model_dir) / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE
        trained_with = json.loads(recorded.read_text(encoding="utf-8")).get("loss", "?") if recorded.is_file() else "?"
        by_key = {key: tensor for name, tensor in saved.items() if (key := _warm_start_key(name)) is not None}
        taken = [
            name
            for name, tensor in current.items()
            if (key := _warm_start_key(name)) in by_key and by_key[key].shape == tensor.shape
        ]
        with torch.no_grad():
            for name in taken:
                tensor = current[name]
                tensor.copy_(by_key[_warm_start_key(name)].to(device=tensor.device, dtype=tensor.dtype))
        fresh = sorted({name.split(".", 1)[0] for name in current if name not in taken})
        logger.info(
            "%s is a trained xprt-st model (loss %s): this new run starts from its encoder%s; fresh for %s: %s. "
            "Its other training state is not used (only --resume of a checkpoint-N folder restores a run's own "
            "state).",
            model_dir,
            trained_with.rsplit(".", 1)[-1],
            f" and its MLM head ({len(taken)} tensors)" if taken else "",
            type(self._loss_root()).__name__,
            ", ".join(fresh) if fresh else "nothing",
        )
        return taken

    def _non_finite_tensor(self) -> str | None:
        """Name of the first model or loss-owned tensor with a NaN or infinite value, else None."""
        named = [(f"model.{name}", tensor) for name, tensor in self.model.state_dict().items()]
        named += [(f"loss.{name}", tensor) for name, tensor in self.loss_owned_state().items()]
        for name, tensor in named:
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                return name
        return None

    # ---- disk space ------------------------------------------------------------------------------

    def checkpoint_bytes(self) -> int:
        """Bytes one checkpoint of this run takes (see :func:`xprt_st.training.checkpoints.checkpoint_bytes`)."""
        if self._tokenizer_bytes is None:
            self._tokenizer_bytes = saved_tokenizer_bytes(getattr(self.model, "tokenizer", None))
        return checkpoint_bytes(
            self.model.state_dict().values(),
            self.loss_owned_state().values(),
            [*self.model.parameters(), *self.loss_owned_parameters()],
            tokenizer_bytes=self._tokenizer_bytes,
        )

    def check_checkpoint_space(self, max_steps: int) -> None:
        """Raise :class:`CheckpointSpaceError` before any step when one checkpoint does not fit on the output disk.

        Warns when the checkpoints kept at once (``save_total_limit`` + 1 while the next is written) and the
        final model may not fit. Every process takes part, so all stop together under ``torchrun``.
        """
        problem = None
        if self.args.should_save:
            one = self.checkpoint_bytes()
            final = tensor_bytes(self.model.state_dict().values()) + tensor_bytes(self.loss_owned_state().values())
            final += self._tokenizer_bytes or 0
            final += CHECKPOINT_MARGIN_BYTES
            if self.args.save_strategy == "no":  # only the final model is written
                one, kept = final, 0
            else:
                every = self.args.save_steps
                every = max(1, math.ceil(max_steps * every)) if every < 1 else every  # a ratio of the run's steps
                steps = self.args.save_strategy == "steps" and max_steps > 0
                saves = max(1, int(max_steps // every)) if steps else 1
                kept = min(saves, self.args.save_total_limit + 1) if self.args.save_total_limit else saves
            Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
            problem = space_problem(self.args.output_dir, one, whole_run=kept * one + final)
        if any_process(problem is not None, device=self.args.device):
            raise CheckpointSpaceError(problem or "another process found too little free space for a checkpoint")

    # ---- Trainer hooks ---------------------------------------------------------------------------

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Tensor] | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        broken = self._non_finite_tensor()
        if broken is not None:
            raise NonFiniteWeightsError(
                f"{broken} holds NaN or infinite values at step {self.state.global_step}; nothing was written to "
                f"{output_dir}. Resume from the last good checkpoint with a lower learning rate."
            )
        if not self.args.should_save:
            # transformers 5 calls ``_save`` on every rank and lets its own ``_save`` return on the others;
            # sentence-transformers' override writes on every rank, so two processes raced on the same files.
            return
        try:
            super()._save(output_dir, state_dict)
            drop_dangling_auto_map(output_dir)
            self.save_training_state(output_dir)
            self._add_card_section(Path(output_dir) / "README.md")
        except (OSError, RuntimeError, SafetensorError) as error:
            if isinstance(error, CheckpointWriteError):
                raise
            raise write_error(output_dir, error, self.checkpoint_bytes()) from error

    def _save_checkpoint(self, model: nn.Module, trial: Any) -> None:
        broken = self._non_finite_tensor()
        if any_process(broken is not None, device=self.args.device):
            last = last_complete_checkpoint(self.args.output_dir)
            raise NonFiniteWeightsError(
                f"weights are NaN or infinite at step {self.state.global_step} ({broken or 'on another process'}); "
                f"the checkpoint was not written. Last good checkpoint: {last or 'none'}. "
                "Resume from it with a lower learning rate."
            )
        try:
            super()._save_checkpoint(model, trial)
        except (OSError, RuntimeError, SafetensorError) as error:
            if isinstance(error, CheckpointWriteError):
                raise
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            raise write_error(folder, error, self.checkpoint_bytes()) from error

    def _load_from_checkpoint(self, checkpoint_path: str, model: nn.Module | None = None) -> None:
        super()._load_from_checkpoint(checkpoint_path)
        self.load_training_state(checkpoint_path)

    def get_batch_sampler(
        self,
        dataset: Dataset,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> BatchSampler | None:
        """The default sampler becomes :class:`DocumentSpreadBatchSampler` for group datasets (with ``label``).

        A sampler chosen in the training arguments is kept. When the dataset has fewer documents than a batch
        holds, no batch can spread them: the plain random order is kept and a warning says so.
        """
        default = self.args.batch_sampler in (BatchSamplers.BATCH_SAMPLER, BatchSamplers.BATCH_SAMPLER.value)
        if default and isinstance(dataset, Dataset) and LABEL in dataset.column_names:
            if documents_fill_a_batch(dataset, batch_size):
                return DocumentSpreadBatchSampler(
                    dataset,
                    batch_size,
                    drop_last,
                    valid_label_columns=valid_label_columns,
                    generator=generator,
                    seed=seed,
                )
            logger.warning(
                "the training data has fewer documents than the %d groups of a batch, so batches must repeat "
                "documents and same-document groups are no negatives for each other; use more documents or a "
                "smaller batch size",
                batch_size,
            )
        return super().get_batch_sampler(dataset, batch_size, drop_last, valid_label_columns, generator, seed)

    def _count_rows_without_negative(self, labels: Tensor | None) -> None:
        """Count rows whose batch (on every process) holds no group of another document, and warn once.

        For such a row every in-batch candidate is masked as same-document: contrastive terms are 0 for it.
        """
        if labels is None or labels.dim() != 1 or labels.is_floating_point():
            return
        everywhere = all_gather_labels(labels)
        without = int((everywhere[None, :] == labels[:, None]).all(dim=1).sum())
        self._rows_seen += labels.numel()
        self._rows_without_negative += without
        share = self._rows_without_negative / self._rows_seen
        if not self._warned_no_negative and without and share >= NO_NEGATIVE_WARN_SHARE:
            self._warned_no_negative = True
            logger.warning(
                "%d of the %d rows trained so far (%.0f%%) had no negative: every other group in their batch "
                "comes from the same document, so in-batch contrastive terms are 0 for them. Mine more documents, "
                "lower the batch size, or keep the default DocumentSpreadBatchSampler.",
                self._rows_without_negative,
                self._rows_seen,
                100 * share,
            )

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Tensor | int | None = None
    ) -> Tensor:
        loss = super().training_step(model, inputs, num_items_in_batch)
        # DDP has just averaged the model's gradients; do the same for the loss's own, once per optimizer step.
        if self.accelerator.sync_gradients:
            all_reduce_gradients(self._owned_parameters)
        return loss

    def _clip_grad_norm(self, model: nn.Module) -> Tensor:
        # The base Trainer clips only the model's parameters; the decoder's must share the same norm.
        parameters = [*model.parameters(), *self._owned_parameters]
        return self.accelerator.clip_grad_norm_(parameters, self.args.max_grad_norm)

    def track_loss_components(self, loss: dict[str, Tensor]) -> None:
        self._last_terms = {key: float(value.detach().float()) for key, value in loss.items()}
        super().track_loss_components(loss)

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Tensor | tuple[Tensor, dict[str, Any]]:
        self._last_terms = {}
        if self.model.training:
            self._count_rows_without_negative(inputs.get(LABEL))
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = result[0] if isinstance(result, tuple) else result
        if self.model.training and any_process(not bool(torch.isfinite(loss.detach()).all()), device=loss.device):
            terms = ", ".join(f"{key}={value:.4g}" for key, value in self._last_terms.items())
            terms = terms or f"loss={float(loss):.4g}"
            last = last_complete_checkpoint(self.args.output_dir)
            raise NonFiniteLossError(
                f"the training loss is not finite at step {self.state.global_step + 1} on this or another process "
                f"({terms}); training stopped before the update and no checkpoint was written. "
                f"Last good checkpoint: {last or 'none'}. Lower the learning rate, use fp32/bf16 instead of fp16, "
                "or check the data of this step."
            )
        return result

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            for callback in self.callback_handler.callbacks:
                if isinstance(callback, TermScheduleCallback):
                    logs = {**logs, **{key: round(value, 6) for key, value in callback.current.items()}}
        super().log(logs, start_time)

    # ---- model card ------------------------------------------------------------------------------

    def card_section(self) -> str:
        """Markdown stating the recipe, the mining statistics and every loss term with its citation."""
        return pretraining_section(
            self.starting_model, len(self.loss_owned_state()), self.training_metadata, self._loss_root()
        )

    def _add_card_section(self, readme: Path) -> None:
        insert_pretraining_section(readme, self.card_section())


def _name_or_path(model: nn.Module) -> str:
    first = model[0] if isinstance(model, SentenceTransformer) else None
    auto_model = getattr(first, "auto_model", None)
    return str(getattr(getattr(auto_model, "config", None), "_name_or_path", "") or "unknown")


def _warm_start_key(name: str) -> str | None:
    """The path of a loss-owned tensor below a module a new run takes over (``mlm_head.``), else None."""
    for module in WARM_START_MODULES:
        prefix = f"{module}."
        if name.startswith(prefix):
            return name
        if f".{prefix}" in name:
            return prefix + name.split(f".{prefix}", 1)[1]
    return None
