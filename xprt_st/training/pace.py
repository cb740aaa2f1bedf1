"""The pace of a training run: texts a second, and the step's seconds per text against a forward's.

A training step embeds each of its texts once forward and once backward (a floor of about 3x a forward alone)
plus the loss and the optimizer. ``step/forward`` says how close a run came to that floor: the run's seconds per
trained text over the seconds per text of mining's encoding of the same folder, a forward of the same kind of
passages by the start, measured on the same machine. The reference is left out (None) where it is not like for
like: mining ran at another precision, or encoded nothing.

Example:
    >>> pace = TrainingPace(texts=1920, seconds=120.0, forward_texts_per_s=55.0)
    >>> pace.line()
    'trained 1,920 texts in 120 s: 16.0 texts/s; step/forward 3.44 (mining encoded 55.0 texts/s)'
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from xprt_st.columns import LABEL
from xprt_st.mining.layout.embeddings import EMBEDDINGS_FILE, EMBEDDINGS_RECORD
from xprt_st.stage_timing import count_texts
from xprt_st.training.data import STATS_FILE

__all__ = ["PaceCallback", "TrainingPace", "mining_forward_pace", "recorded_pace"]


@dataclass(frozen=True)
class TrainingPace:
    """Texts trained, the seconds the trainer's loop took for them, and mining's encoding pace (texts a second)."""

    texts: int
    seconds: float
    forward_texts_per_s: float | None = None

    @property
    def texts_per_s(self) -> float:
        """Texts trained a second of the training loop."""
        return self.texts / self.seconds if self.seconds > 0 else 0.0

    @property
    def step_over_forward(self) -> float | None:
        """Seconds per trained text / seconds per encoded text; None without a like-for-like reference."""
        if not self.forward_texts_per_s or not self.texts_per_s:
            return None
        return self.forward_texts_per_s / self.texts_per_s

    def line(self) -> str:
        """One line for the closing message and the log."""
        line = f"trained {self.texts:,} texts in {self.seconds:.0f} s: {self.texts_per_s:.1f} texts/s"
        ratio = self.step_over_forward
        if ratio is not None:
            line += f"; step/forward {ratio:.2f} (mining encoded {self.forward_texts_per_s:.1f} texts/s)"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The pace as the stage table's record holds it."""
        return {
            "texts": self.texts,
            "seconds": round(self.seconds, 3),
            "texts_per_s": round(self.texts_per_s, 3),
            "forward_texts_per_s": None if self.forward_texts_per_s is None else round(self.forward_texts_per_s, 3),
            "step_over_forward": None if self.step_over_forward is None else round(self.step_over_forward, 3),
        }


def mining_forward_pace(folder: str | Path, precision: str) -> float | None:
    """Texts a second of ``folder``'s encoding for mining (``stats.json``'s ``encode_seconds`` over the vectors it
    stored), where it ran at ``precision``; None where it did not, or the folder does not say."""
    folder = Path(folder)
    try:
        stats = json.loads((folder / STATS_FILE).read_text(encoding="utf-8"))
        record = json.loads((folder / EMBEDDINGS_RECORD).read_text(encoding="utf-8"))
        vectors = np.load(folder / EMBEDDINGS_FILE, mmap_mode="r")
    except (OSError, ValueError):
        return None
    seconds = stats.get("encode_seconds") if isinstance(stats, dict) else None
    if not isinstance(record, dict) or record.get("precision") != precision or not isinstance(seconds, int | float):
        return None
    encoded = int(np.count_nonzero(~np.isnan(vectors[:, 0]))) if vectors.ndim == 2 and len(vectors) else 0
    return encoded / seconds if encoded and seconds > 0 else None


class PaceCallback(TrainerCallback):
    """Counts the texts each optimizer step trains (groups x text columns x processes) and the training loop's
    seconds, and reports each step's texts to the active stage timer (:func:`xprt_st.stage_timing.count_texts`).

    Args:
        mined: the mined folder, whose encoding is the forward reference (:func:`mining_forward_pace`).
    """

    def __init__(self, mined: str | Path | None = None) -> None:
        self.mined = mined
        self.columns = 0
        self.texts = 0
        self.seconds = 0.0
        self.precision = "fp32"
        self._started: float | None = None
        self._last: float | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        train_dataloader: object = None,
        **kwargs: object,
    ) -> None:
        """Start the clock; read the precision and the texts a group holds."""
        self.precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
        names = getattr(getattr(train_dataloader, "dataset", None), "column_names", None) or []
        self.columns = sum(1 for name in names if name != LABEL)
        self._started = time.perf_counter()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        """Count the step's texts."""
        texts = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size * self.columns
        self.texts += texts
        count_texts(texts)
        if self._started is not None:  # up to the last step's end: the closing label-free check is no step's
            self._last = time.perf_counter()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        """Stop the clock at the last step's end (the closing label-free check and the save come after it)."""
        if self._started is not None and self._last is not None:
            self.seconds += self._last - self._started
        self._started = self._last = None

    def pace(self) -> TrainingPace:
        """What the run trained so far, against mining's encoding where that is like for like."""
        forward = None if self.mined is None else mining_forward_pace(self.mined, self.precision)
        return TrainingPace(self.texts, self.seconds, forward)


def recorded_pace(output: str | Path) -> TrainingPace | None:
    """The pace a run folder's last training recorded (``training_state/config.json``'s ``pace``); None where it
    records none (a run that trained nothing, a folder of an older version)."""
    from xprt_st.training.trainer import TrainingStateError, read_training_config

    try:
        record = read_training_config(output)["pace"]
        return TrainingPace(int(record["texts"]), float(record["seconds"]), record.get("forward_texts_per_s"))
    except (TrainingStateError, OSError, ValueError, KeyError, TypeError):  # no training state, or none recorded
        return None
