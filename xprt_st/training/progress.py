"""How training reports: a rich progress display of the steps and every loss term, or log lines.

Either one replaces the Trainer's tqdm bar and its printed dictionaries, so ``--quiet`` draws
no bar at all and still leaves a record of the loss terms in the log.
"""

from __future__ import annotations

import logging

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from xprt_st.stage_timing import advance

HIDDEN_LOG_KEYS = {
    "epoch",
    "grad_norm",
    "total_flos",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
}

logger = logging.getLogger(__name__)

NO_SIGNAL_LOSS = 0.05
"""An objective loss below this at the first logged step means the run has almost nothing to learn."""

OBJECTIVE_LOSS_KEYS = ("xp", "base", "loss")
"""Where the objective's own loss is in a log entry: L_xp of XPRTLoss, the wrapped loss under retention, or the
total (no retention)."""


def objective_loss(logs: dict[str, float]) -> tuple[str, float] | None:
    """The objective's own loss in a Trainer log entry (``xp``, else ``base``, else ``loss``), or None.

    Example:
        >>> objective_loss({"loss": 0.07, "base": 0.007, "retention": 0.063})
        ('base', 0.007)
    """
    for key in OBJECTIVE_LOSS_KEYS:
        value = logs.get(key)
        if isinstance(value, (int, float)):
            return key, float(value)
    return None


def low_signal_advice(hard_negatives: int) -> str:
    """What to try when the objective's loss starts near 0, for a run that scores ``hard_negatives`` per anchor:
    hard negatives where it has none; where it has them already, what is left (the quickstart's default recipe is
    the hard one, so advising it there would advise the run that is going on).

    Example:
        >>> low_signal_advice(0)[:40]
        'try hard negatives (recipe change-only-p'
    """
    if hard_negatives > 0:
        return (
            f"this run already scores {hard_negatives} hard negative(s) per anchor: try a larger --batch-size (more "
            "in-batch negatives), or a starting model not yet fine-tuned for retrieval (from BERT the objectives "
            "gain: docs/results/03b-from-bert-shipped.md to 05-fill-in.md)"
        )
    return "try hard negatives (recipe change-only-positive-hard, mined with --hard-negatives) or a larger batch"


def report_start_loss(logs: dict[str, float], step: int, hard_negatives: int = 0) -> bool:
    """Log the objective's loss at the first logged step, and warn when it is already near 0 with the advice of
    :func:`low_signal_advice` for a run that scores ``hard_negatives`` per anchor; True if reported."""
    found = objective_loss(logs)
    if found is None:
        return False
    key, value = found
    logger.info("start of training: objective loss %s=%.4f at step %d", key, value, step)
    if value < NO_SIGNAL_LOSS:
        logger.warning(
            "the objective loss is already %.4f (< %.2f) at step %d: this run has almost no training signal (a "
            "strong start whose mined positives are already its nearest passages, against easy negatives); %s",
            value,
            NO_SIGNAL_LOSS,
            step,
            low_signal_advice(hard_negatives),
        )
    return True


def format_terms(logs: dict[str, float]) -> str:
    """``key=value`` for each loss term, scheduled weight and the learning rate of a Trainer log entry."""
    shown = []
    for key, value in logs.items():
        if key in HIDDEN_LOG_KEYS or not isinstance(value, (int, float)):
            continue
        shown.append(f"{key}={value:.3g}" if key == "learning_rate" else f"{key}={value:.4f}")
    return " ".join(shown)


class RichProgressCallback(TrainerCallback):
    """Replace the Trainer's tqdm bar with a rich bar whose line shows the latest value of each loss term.

    Only the main process draws; the logged values are the ones sentence-transformers averages over the
    logging window (``loss`` and one key per term of a dict-returning loss, e.g. ``xp``, ``cross``,
    ``retention``), plus the scheduled weights (``retention_weight``) and the learning rate.
    """

    def __init__(self, console: Console | None = None, hard_negatives: int = 0) -> None:
        super().__init__()
        self.console = console
        self.hard_negatives = hard_negatives
        self.progress: Progress | None = None
        self.task: int | None = None
        self.start_reported = False

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        if not state.is_world_process_zero:
            return
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[terms]}"),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=state.max_steps, completed=state.global_step, terms="")

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs,
    ) -> None:
        if state.is_world_process_zero and logs and not self.start_reported:
            self.start_reported = report_start_loss(logs, state.global_step, self.hard_negatives)
        if self.progress is None or self.task is None or not logs:
            return
        terms = format_terms(logs)
        if terms:
            self.progress.update(self.task, terms=terms)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class LogLinesCallback(TrainerCallback):
    """Without a progress display: one INFO log line per Trainer log entry (main process only)."""

    def __init__(self, hard_negatives: int = 0) -> None:
        super().__init__()
        self.start_reported = False
        self.hard_negatives = hard_negatives

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs,
    ) -> None:
        terms = format_terms(logs or {})
        if state.is_world_process_zero and terms:
            logger.info("step %d/%d: %s", state.global_step, state.max_steps, terms)
        if state.is_world_process_zero and logs and not self.start_reported:
            self.start_reported = report_start_loss(logs, state.global_step, self.hard_negatives)


class StageStepsCallback(TrainerCallback):
    """Report the step count to the run's stage timer (:func:`xprt_st.stage_timing.advance`), for the progress
    lines a log gets when no display is seen; nothing without an active timer."""

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        advance(state.global_step, state.max_steps)
