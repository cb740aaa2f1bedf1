"""Weight schedules for loss terms, applied by a trainer callback.

The paper lowers the retention weight from 40 to 0 over training. Any loss with a scheduled term
exposes the weight as a plain float attribute (``retention_weight`` for the retention term);
:class:`TermScheduleCallback` sets that attribute on every module of the loss that has it, before
every optimizer step. The value is a pure function of ``global_step / max_steps``, both of which the
Trainer restores from ``trainer_state.json``, so a resumed run continues the schedule exactly where
the interrupted one stopped: there is no callback state to save.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal

from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

ScheduleShape = Literal["linear", "cosine", "constant"]
SCHEDULE_SHAPES: tuple[str, ...] = ("linear", "cosine", "constant")


@dataclass(frozen=True)
class Schedule:
    """A value that moves from ``start`` to ``end`` over training."""

    start: float = field(metadata={"help": "Value at the first step."})
    end: float = field(metadata={"help": "Value reached at the last step."})
    shape: ScheduleShape = field(
        default="linear", metadata={"help": "How the value moves: linear, cosine (half wave) or constant (= start)."}
    )

    def __post_init__(self) -> None:
        if self.shape not in SCHEDULE_SHAPES:
            raise ValueError(f"schedule shape {self.shape!r} is not one of {', '.join(SCHEDULE_SHAPES)}")

    def value(self, step: int, total_steps: int) -> float:
        """The value before optimizer step ``step`` (0-based) of ``total_steps``."""
        if self.shape == "constant" or total_steps <= 0:
            return float(self.start)
        progress = min(max(step / total_steps, 0.0), 1.0)
        if self.shape == "cosine":
            progress = 0.5 * (1.0 - math.cos(math.pi * progress))
        return float(self.start + (self.end - self.start) * progress)


RETENTION_SCHEDULE = Schedule(start=40.0, end=0.0, shape="linear")
"""The paper's retention weight: 40 at the start, falling linearly to 0 at the end of training."""


def modules_with_attribute(loss: nn.Module, attribute: str) -> list[nn.Module]:
    """Every module of ``loss`` (itself included) whose ``attribute`` is a plain number."""
    found = []
    for module in loss.modules():
        value = module.__dict__.get(attribute)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append(module)
    return found


class TermScheduleCallback(TrainerCallback):
    """Set scheduled loss weights (e.g. ``retention_weight``) on the loss before every optimizer step.

    Args:
        loss: the training loss; every submodule with a float attribute named like a schedule is updated.
        schedules: attribute name -> :class:`Schedule`, e.g. ``{"retention_weight": RETENTION_SCHEDULE}``.

    Raises:
        ValueError: at the start of training when no module of the loss has a scheduled attribute, so a
            typo in a recipe cannot silently leave a weight at its initial value.

    Example::

        callback = TermScheduleCallback(loss, {"retention_weight": Schedule(40.0, 0.0)})
        trainer = XPRTTrainer(model=model, loss=loss, train_dataset=data, callbacks=[callback])
    """

    def __init__(self, loss: nn.Module, schedules: dict[str, Schedule]) -> None:
        super().__init__()
        self.loss = loss
        self.schedules = dict(schedules)
        self.current: dict[str, float] = {}

    def apply(self, step: int, total_steps: int) -> dict[str, float]:
        """Set every scheduled attribute for ``step`` and return the values set."""
        for attribute, schedule in self.schedules.items():
            value = schedule.value(step, total_steps)
            for module in modules_with_attribute(self.loss, attribute):
                setattr(module, attribute, value)
            self.current[attribute] = value
        return dict(self.current)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        missing = [name for name in self.schedules if not modules_with_attribute(self.loss, name)]
        if missing:
            raise ValueError(
                f"{type(self.loss).__name__} has no float attribute {', '.join(map(repr, missing))} to schedule; "
                "remove the schedule from the recipe or use a loss that exposes the weight"
            )
        self.apply(state.global_step, state.max_steps)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        self.apply(state.global_step, state.max_steps)
