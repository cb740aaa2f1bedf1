"""Fork a run: continue a checkpoint's encoder, optimizer state and learning-rate schedule with another objective.

The paper's first adoption step is "in an existing contrastive pre-training pipeline, replace random spans
with anchor paired with its most related passage". Measured fairly, that is a fork: one run trains to step
``k`` of ``N``, and from its checkpoint each branch continues to step ``N`` with the SAME optimizer state
(AdamW's moments and step counts of every encoder parameter), the SAME learning-rate schedule (the scheduler
resumes at step ``k``, no re-heating) and the same random state, while the objective and its data change.

``train_recipe(recipe, data, output, fork_from="trunk/checkpoint-k")`` does this (``xprt-st train --fork-from``
on the command line). What carries over and what starts fresh:

- the encoder's weights, optimizer moments, learning-rate schedule, global step and RNG state: from the trunk;
- loss-owned modules (a decoder, an MLM head): the tensors the trunk's loss also had, by name and shape, are
  copied; the others start fresh, and so do their optimizer moments (AdamW starts a parameter without state at
  its own step 1);
- the data: the branch's own dataset. The Trainer fast-forwards it past ``k`` batches as on any resume, so the
  branch reads its data in the order a run of its own would at step ``k``.

The recipe's schedule values must equal the trunk's (:data:`FORK_FIXED`), or the fork is refused before
anything is built: another ``max_steps`` or peak learning rate would be another schedule, not a continuation.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from xprt_st.recipe import Recipe
from xprt_st.training.trainer import (
    LOSS_STATE_FILE,
    TRAINING_STATE_DIR,
    TrainingStateError,
    XPRTTrainer,
    read_training_config,
)

logger = logging.getLogger(__name__)

FORK_FIXED = (
    "max_steps",
    "batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "lr_scheduler",
    "warmup_ratio",
    "weight_decay",
    "max_grad_norm",
    "precision",
    "seed",
)
"""``training.*`` values a branch must share with its trunk: together they are the schedule being continued."""

OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"


def same_model(given: str | Path, recorded: str | Path) -> bool:
    """Whether two model options name the same model: equal, or the same folder once resolved (``tiny`` and
    ``/abs/tiny``; the default's aliases)."""
    if str(given) == str(recorded):
        return True
    from xprt_st.models import ModelLoadError, is_default_model, resolve_model_name

    if is_default_model(given) and is_default_model(recorded):
        return True
    try:
        first, second = resolve_model_name(given), resolve_model_name(recorded)
    except ModelLoadError:
        return False
    return Path(first).expanduser().resolve() == Path(second).expanduser().resolve()


def check_fork(checkpoint: str | Path, recipe: Recipe, model: str | None = None) -> tuple[Path, str]:
    """Validate a fork of ``checkpoint`` into ``recipe``; return the checkpoint and the trunk's starting model.

    Raises:
        TrainingStateError: the folder is not a complete checkpoint (with its optimizer and scheduler state), the
            recipe's schedule differs from the trunk's (every difference listed), ``max_steps`` is not fixed, or
            ``model`` names another starting model than the trunk's.
    """
    checkpoint = Path(checkpoint)
    missing = [
        name for name in ("trainer_state.json", OPTIMIZER_FILE, SCHEDULER_FILE) if not (checkpoint / name).is_file()
    ]
    if missing:
        raise TrainingStateError(
            f"--fork-from {checkpoint}: not a complete checkpoint (missing {', '.join(missing)}); pass a "
            "checkpoint-N folder written by xprt-st train"
        )
    recorded = read_training_config(checkpoint)
    trunk = recorded.get("recipe", {}).get("training", {})
    problems = [
        f"training.{key} is {getattr(recipe.training, key)!r}, the trunk's is {trunk[key]!r}"
        for key in FORK_FIXED
        if key in trunk and trunk[key] != getattr(recipe.training, key)
    ]
    if recipe.training.max_steps <= 0:
        problems.append("training.max_steps must be set (the trunk's total), so the schedule's length is the trunk's")
    else:
        problems += _nothing_left(checkpoint, recipe.training.max_steps)
    if model is not None and not same_model(model, recorded["starting_model"]):
        problems.append(f"--model {model!r} differs from the trunk's starting model {recorded['starting_model']!r}")
    if problems:
        raise TrainingStateError(
            f"cannot fork {checkpoint} into recipe {recipe.name!r}: " + "; ".join(problems) + ". A fork continues "
            "the trunk's schedule: give the branch recipe the trunk's training values."
        )
    return checkpoint, str(recorded["starting_model"])


def _nothing_left(checkpoint: Path, max_steps: int) -> list[str]:
    """Why a branch from ``checkpoint`` would not train: no step left of ``max_steps``, or a learning rate of 0."""
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    step = int(state.get("global_step", 0))
    if step >= max_steps:
        return [
            f"the checkpoint is at step {step} of the trunk's {max_steps}, so the branch would train 0 steps (at the "
            "schedule's end, where the learning rate is 0); fork from an earlier checkpoint of the trunk"
        ]
    scheduler = torch.load(checkpoint / SCHEDULER_FILE, map_location="cpu", weights_only=True)
    rates = scheduler.get("_last_lr") if isinstance(scheduler, dict) else None
    if rates and all(float(rate) == 0.0 for rate in rates):
        return [
            f"the trunk's learning rate at step {step} is 0, so the branch would train {max_steps - step} steps "
            "without changing the encoder; fork from an earlier checkpoint, or train the trunk with another schedule"
        ]
    return []


def fork_optimizer_state(
    saved: dict[str, Any], current: dict[str, Any], shared: list[int], shapes: list[list[torch.Size]]
) -> dict[str, Any]:
    """The trunk's optimizer state laid out for the branch's optimizer (pure).

    Args:
        saved: the trunk's ``optimizer.state_dict()``.
        current: the branch optimizer's ``state_dict()`` (its layout: groups and parameter indices).
        shared: per group, how many leading parameters are the encoder's (the same, in the same order, in both:
            every loss registers its model first); they take the trunk's state. The branch's other parameters
            (loss-owned) get none, so the optimizer starts them fresh.
        shapes: per group, the shapes of the branch's parameters, to check that each state lands on its parameter.

    Returns:
        A state dict for ``branch_optimizer.load_state_dict``: the trunk's group hyper-parameters (learning rate at
        the fork included), the branch's parameter indices, the trunk's per-parameter state for the shared ones.

    Raises:
        TrainingStateError: the group counts differ or a state does not fit its parameter.
    """
    if len(saved["param_groups"]) != len(current["param_groups"]):
        raise TrainingStateError(
            f"the trunk's optimizer has {len(saved['param_groups'])} parameter groups, the branch's "
            f"{len(current['param_groups'])}; a fork needs the same grouping (same learning_rate_mapping)"
        )
    state: dict[int, Any] = {}
    groups = []
    for index, (old, new) in enumerate(zip(saved["param_groups"], current["param_groups"], strict=True)):
        if len(old["params"]) < shared[index]:
            raise TrainingStateError(
                f"optimizer group {index}: the trunk holds {len(old['params'])} parameters, fewer than the "
                f"{shared[index]} encoder parameters of the branch; the trunk was not trained on this encoder"
            )
        for position in range(shared[index]):
            old_id, new_id = old["params"][position], new["params"][position]
            if old_id not in saved["state"]:
                continue
            moments = saved["state"][old_id]
            for name, value in moments.items():
                if torch.is_tensor(value) and value.dim() > 0 and value.shape != shapes[index][position]:
                    raise TrainingStateError(
                        f"optimizer group {index}, parameter {position}: the trunk's {name} has shape "
                        f"{tuple(value.shape)}, the branch's parameter {tuple(shapes[index][position])}"
                    )
            state[new_id] = moments
        groups.append({**old, "params": list(new["params"])})
    return {"state": state, "param_groups": groups}


class ForkTrainer(XPRTTrainer):
    """An :class:`XPRTTrainer` whose ``train(resume_from_checkpoint=trunk)`` is a fork, not a resume.

    The encoder, its optimizer state, the scheduler, the step and the RNG come from the trunk checkpoint as on a
    resume; the loss-owned modules and their optimizer state are taken where the trunk had the same tensors and
    start fresh otherwise (see the module docstring).
    """

    def _encoder_parameters_per_group(self) -> list[int]:
        encoder = {id(parameter) for parameter in self.model.parameters()}
        counts = []
        for index, group in enumerate(self.optimizer.param_groups):
            flags = [id(parameter) in encoder for parameter in group["params"]]
            count = flags.index(False) if False in flags else len(flags)
            if any(flags[count:]):
                raise TrainingStateError(
                    f"optimizer group {index} mixes encoder and loss-owned parameters; a fork needs the encoder's first"
                )
            counts.append(count)
        return counts

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None:
            return
        saved = torch.load(Path(checkpoint) / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
        shapes = [[parameter.shape for parameter in group["params"]] for group in self.optimizer.param_groups]
        forked = fork_optimizer_state(saved, self.optimizer.state_dict(), self._encoder_parameters_per_group(), shapes)
        self.optimizer.load_state_dict(forked)
        self.lr_scheduler.load_state_dict(torch.load(Path(checkpoint) / SCHEDULER_FILE, weights_only=True))
        fresh = sum(len(group["params"]) for group in forked["param_groups"]) - len(forked["state"])
        logger.info(
            "forked %s: optimizer state of %d parameters (all the trunk's encoder had) and the learning-rate schedule "
            "at step %d carried over; %d parameters have none yet (loss-owned, or never updated in the trunk)",
            checkpoint,
            len(forked["state"]),
            self.lr_scheduler.last_epoch,
            fresh,
        )

    def load_training_state(self, checkpoint_dir: str | Path) -> None:
        """Load the trunk's loss-owned modules that this objective shares (same name and shape); the rest stay fresh."""
        path = Path(checkpoint_dir) / TRAINING_STATE_DIR / LOSS_STATE_FILE
        saved = load_file(str(path)) if path.is_file() else {}
        current = self.loss_owned_state()
        taken = [name for name, tensor in current.items() if name in saved and saved[name].shape == tensor.shape]
        with torch.no_grad():
            for name in taken:
                current[name].copy_(saved[name].to(device=current[name].device, dtype=current[name].dtype))
        fresh = sorted(set(current) - set(taken))
        logger.info(
            "forked %s into %s: %d loss-owned tensors carried over, fresh: %s",
            checkpoint_dir,
            type(self._loss_root()).__name__,
            len(taken),
            ", ".join(fresh[:6]) + (" ..." if len(fresh) > 6 else "") if fresh else "none",
        )


def trainer_class(fork: bool) -> type[XPRTTrainer]:
    """The trainer ``train_recipe`` builds: :class:`ForkTrainer` for a fork, else :class:`XPRTTrainer`."""
    return ForkTrainer if fork else XPRTTrainer
