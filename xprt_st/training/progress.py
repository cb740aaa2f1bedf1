"""A rich progress display of the training steps and of every loss term."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

HIDDEN_LOG_KEYS = {
    "epoch",
    "grad_norm",
    "total_flos",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
}


class RichProgressCallback(TrainerCallback):
    """Replace the Trainer's tqdm bar with a rich bar whose line shows the latest value of each loss term.

    Only the main process draws; the logged values are the ones sentence-transformers averages over the
    logging window (``loss`` and one key per term of a dict-returning loss, e.g. ``xp``, ``cross``,
    ``retention``), plus the scheduled weights (``retention_weight``) and the learning rate.
    """

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console
        self.progress: Progress | None = None
        self.task: int | None = None

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
        if self.progress is None or self.task is None or not logs:
            return
        shown = []
        for key, value in logs.items():
            if key in HIDDEN_LOG_KEYS or not isinstance(value, (int, float)):
                continue
            shown.append(f"{key}={value:.3g}" if key == "learning_rate" else f"{key}={value:.4f}")
        if shown:
            self.progress.update(self.task, terms=" ".join(shown))

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
