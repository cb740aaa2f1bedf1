"""What a finetune-compare run was given and produced: settings, folds, scores, gain rows; its files and table."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xprt_st.finetune.folds import FinetuneInputError, FoldPlan
from xprt_st.finetune.gains import ROLES, GainRow

if TYPE_CHECKING:
    from rich.console import Group


@dataclass
class FinetuneSettings:
    """Fine-tuning settings shared by both models (identical runs but for the starting weights).

    Attributes:
        epochs: passes over the training pairs.
        batch_size: pairs per batch; the other positives of the batch are the negatives of MNRL.
        learning_rate: peak learning rate (linear decay after warm-up).
        warmup_ratio: fraction of steps of linear warm-up.
        scale: MNRL's inverse temperature (20 = temperature 0.05, the sentence-transformers default).
        seed: seed of weight init of new layers, data order and dropout.
        precision: fp32 or bf16 (resolved: :func:`xprt_st.precision.resolve_precision`), for fine-tuning and
            scoring all four models alike.
    """

    epochs: float = 1.0
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    scale: float = 20.0
    seed: int = 0
    precision: str = "fp32"

    def __post_init__(self) -> None:
        """Refuse a setting that would fine-tune nothing or fail inside the trainer (naming the flag)."""
        problems = []
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            problems.append(f"--epochs {self.epochs}: must be above 0 (0 would report the models before as after)")
        if self.batch_size < 2:
            problems.append(f"--batch-size {self.batch_size}: MNRL's in-batch negatives need at least 2 pairs")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            problems.append(f"--learning-rate {self.learning_rate}: must be a positive number")
        if not (math.isfinite(self.warmup_ratio) and 0 <= self.warmup_ratio < 1):
            problems.append(f"warmup_ratio {self.warmup_ratio}: must be in [0, 1)")
        if not (math.isfinite(self.scale) and self.scale > 0):
            problems.append(f"scale {self.scale}: must be a positive number")
        if not 0 <= self.seed < 2**32:
            problems.append(f"--seed {self.seed}: must be in [0, 2**32)")
        if self.precision not in ("fp32", "bf16"):
            problems.append(f"precision {self.precision!r}: resolve it to fp32 or bf16 first")
        if problems:
            raise FinetuneInputError("; ".join(problems))

    def steps(self, pairs: int) -> int:
        """Optimizer steps of fine-tuning on ``pairs`` pairs: the trainer's ``ceil(epochs * batches per epoch)``.

        Example:
            >>> FinetuneSettings(batch_size=32).steps(100), FinetuneSettings(batch_size=32, epochs=2).steps(20)
            (4, 2)
        """
        return max(1, math.ceil(self.epochs * math.ceil(pairs / self.batch_size)))

    def check_pairs(self, pairs: int, source: str) -> None:
        """Refuse, before any model loads, training pairs too few to fine-tune: fewer than one batch, or one step.

        The linear warm-up starts at learning rate 0, so a run of one step (all pairs in one batch, one epoch)
        changes no weight, and the comparison would report both models as fine-tuned when neither moved.

        Raises:
            FinetuneInputError: one line naming the count, ``source`` (where the pairs came from), the batch size
                and the fix.
        """
        smaller = max(2, pairs // 2)
        if pairs < 2:
            raise FinetuneInputError(
                f"{pairs} training pair(s) ({source}): MNRL's in-batch negatives need at least 2; give more labelled "
                "pairs (--train-pairs FILE, or a task with more judged queries)"
            )
        if pairs < self.batch_size:
            raise FinetuneInputError(
                f"{pairs} training pairs ({source}), fewer than one batch of --batch-size {self.batch_size}: the "
                "fine-tuning would be one step, taken at learning rate 0 by the warm-up, and report models that did "
                f"not change; give --batch-size {smaller} (or more pairs: --train-pairs FILE, a smaller "
                "--test-fraction)"
            )
        if self.warmup_ratio > 0 and self.steps(pairs) < 2:
            raise FinetuneInputError(
                f"{pairs} training pairs at --batch-size {self.batch_size} and --epochs {self.epochs:g} make 1 "
                "fine-tuning step, taken at learning rate 0 by the warm-up, so the models would not change; give "
                f"--epochs 2 or --batch-size {smaller}"
            )


@dataclass
class FinetuneResult:
    """Everything a finetune-compare run produced: the fold plan, settings, scores and gain rows."""

    task: str
    plan: FoldPlan
    settings: FinetuneSettings
    models: dict[str, str]
    rows: list[GainRow]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self, path: str | Path) -> Path:
        """Write the whole result (plan, settings, rows, per-query scores) as JSON; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "task": self.task,
            "models": self.models,
            "plan": asdict(self.plan),
            "settings": asdict(self.settings),
            "rows": [asdict(row) for row in self.rows],
            "per_query_ndcg_at_10": self.per_query,
        }
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        return path

    def to_csv(self, path: str | Path) -> Path:
        """Write the gain rows as CSV (one row per sub-domain, overall first); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(GainRow.__dataclass_fields__))
            writer.writeheader()
            for row in self.rows:
                writer.writerow(asdict(row))
        return path

    def rich_table(self) -> Group:
        """The printed result, readable at 80 columns: scores, gains with their 95% intervals, then flags.

        Two narrow tables (one row per sub-domain each) instead of one wide one, so no domain name or
        flag is cut; verdicts and flags are spelled out in full below them.
        """
        from rich import box
        from rich.console import Group
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        def table(title: str) -> Table:
            grid = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            grid.add_column("domain", no_wrap=True)
            grid.add_column("n", justify="right", no_wrap=True)
            return grid

        n_test = len(self.plan.test_query_ids)
        scores = table(f"finetune-compare on {escape(self.task)}: nDCG@10 ×100, {n_test} test queries")
        for role in ROLES:
            scores.add_column(role, justify="right", no_wrap=True)
        gains = table(escape("gain of pre-training ×100 [paired bootstrap 95% CI]"))
        gains.add_column("before fine-tuning", justify="right", no_wrap=True)
        gains.add_column("after fine-tuning", justify="right", no_wrap=True)
        for row in self.rows:
            values = (row.base, row.pretrained, row.base_ft, row.pretrained_ft)
            scores.add_row(escape(row.domain), str(row.n_queries), *(f"{100 * value:.2f}" for value in values))
            gains.add_row(
                escape(row.domain),
                str(row.n_queries),
                _gain_cell(row.gain_before, row.before_low, row.before_high),
                _gain_cell(row.gain_after, row.after_low, row.after_high),
            )
        notes = [Text("")]
        for stage, attribute in (("before", "verdict_before"), ("after", "verdict_after")):
            by_verdict: dict[str, list[str]] = {}
            for row in self.rows:
                by_verdict.setdefault(getattr(row, attribute) or "no interval", []).append(row.domain)
            parts = [f"{verdict}: {', '.join(names)}" for verdict, names in sorted(by_verdict.items())]
            notes.append(Text(f"{stage} fine-tuning: " + "; ".join(parts)))
        notes.append(Text("(gain or loss only where the 95% interval excludes 0)", style="dim"))
        for row in self.rows:
            if row.flag:
                notes.append(Text(f"{row.domain}: {row.flag}", style="red"))
        return Group(scores, Text(""), gains, *notes)


def _gain_cell(gain: float, low: float, high: float) -> str:
    """``+1.23 [-0.40, +2.85]`` (×100), or the bare gain without an interval."""
    if math.isnan(low):
        return f"{100 * gain:+.2f}"
    return f"{100 * gain:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"
