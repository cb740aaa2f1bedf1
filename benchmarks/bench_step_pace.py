"""A training step against the forward of its texts: where the step's time goes, and ``step/forward R``.

Run:  python benchmarks/bench_step_pace.py [--mined DIR] [--recipe hybrid-teacher-hard] [--steps 8] [--warmup 2]
      [--batch-size 16] [--precision auto] [--fp32] [--json out.json]

In one process, on one mined folder (default: the shipped Python pages mined as the quickstart mines them, into a
temporary folder), for each precision measured (``auto``'s choice, and fp32 beside it with ``--fp32``):

- the step: ``xprt-st train``'s own trainer (:func:`xprt_st.training.recipe_setup.trainer_setup`) runs
  ``--warmup`` + ``--steps`` optimizer steps; a step is the wall time between two ``on_step_end`` calls, so data,
  collation, loss, backward, optimizer and logging are all in it. Its parts are timed by wrapping, in this
  process only, the functions that run them: the collator (tokenising, ``data``), the student's forward
  (``embed_columns`` in the loss modules), the frozen start's pass (``teacher_embeddings``, or the stored vectors
  it reads instead), the loss's own arithmetic (the rest of ``compute_loss``), the backward
  (``accelerator.backward``) and the optimizer (``on_pre_optimizer_step`` to ``on_optimizer_step``);
- the forward: the same steps' texts encoded with ``model.encode`` (no gradient, the trainer's precision, the
  recipe's token limit), one call per step.

R = seconds per text of the step / seconds per text of the forward. The CPU's model name and its bf16 flags
(AMX, AVX512-BF16) are printed and recorded with the figures; compare R only within one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

import xprt_st.losses.cross_passage as cross_passage_module
import xprt_st.losses.hybrid_teacher as hybrid_module
import xprt_st.losses.retention as retention_module
from xprt_st.columns import LABEL
from xprt_st.precision import resolve_precision, use_precision
from xprt_st.recipe import load_recipe
from xprt_st.training.recipe_setup import trainer_setup

PARTS = ("data", "student forward", "frozen pass", "loss", "backward", "optimizer")


class Clock:
    """Seconds per part of the step, summed over the timed steps (warmup steps are dropped on ``reset``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth: dict[str, int] = defaultdict(int)

    def reset(self) -> None:
        self.seconds.clear()

    def wrap(self, part: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            self.depth[part] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.depth[part] -= 1
                if not self.depth[part]:  # a nested call of the same part counts once
                    self.seconds[part] += time.perf_counter() - start

        return timed


class StepTimes(TrainerCallback):
    """Wall time between step ends, the optimizer's share, and the collated batches of the timed steps."""

    def __init__(self, clock: Clock, warmup: int) -> None:
        self.clock = clock
        self.warmup = warmup
        self.ends: list[float] = []
        self.optimizer_start = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.ends = [time.perf_counter()]

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.optimizer_start = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.clock.seconds["optimizer"] += time.perf_counter() - self.optimizer_start

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())
        if state.global_step == self.warmup:
            self.clock.reset()

    def timed_steps(self) -> list[float]:
        return [b - a for a, b in zip(self.ends[self.warmup : -1], self.ends[self.warmup + 1 :], strict=True)]


class KeptBatches:
    """The trainer's collator, timed as ``data``, keeping each batch's rows (the forward encodes the same texts)."""

    def __init__(self, collator: Any, clock: Clock, batches: list[list[dict[str, Any]]]) -> None:
        self.collator = collator
        self.batches = batches
        self.collate = clock.wrap("data", collator.__call__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collator, name)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        self.batches.append([dict(row) for row in features])
        return self.collate(features)


def cpu_description() -> dict[str, Any]:
    """The CPU's model name and the bf16 flags it reports (Linux's /proc/cpuinfo; the platform elsewhere)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine(), platform.processor()):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    bf16 = sorted(flag for flag in flags if flag.startswith("amx") or flag == "avx512_bf16")
    return {"cpu": name, "bf16_flags": bf16, "threads": torch.get_num_threads()}


def mine_shipped(folder: Path) -> Path:
    """The shipped pages mined as the quickstart mines them (a tenth held out, two hard negatives)."""
    from xprt_st.mining import mine
    from xprt_st.quickstart.config import QUICKSTART_CORPUS

    mine(QUICKSTART_CORPUS, folder, html=True, id_field="id", holdout=0.1, hard_negatives=2, progress=False)
    return folder


def measure(mined: Path, recipe_name: str, precision: str, steps: int, warmup: int, batch_size: int) -> dict:
    """One precision's step, its parts and the forward of the same texts."""
    overrides = {
        "training.max_steps": warmup + steps,
        "training.batch_size": batch_size,
        "training.precision": precision,
        "training.save_steps": 10**6,
        "training.logging_steps": 10**6,
    }
    recipe = load_recipe(recipe_name, overrides=overrides)
    clock = Clock()
    with tempfile.TemporaryDirectory() as output:
        setup = trainer_setup(recipe, mined, output)
        times = StepTimes(clock, warmup)
        trainer = setup.trainer()
        trainer.add_callback(times)
        batches: list[list[dict[str, Any]]] = []
        trainer.data_collator = KeptBatches(trainer.data_collator, clock, batches)
        loss = setup.loss
        for module in (cross_passage_module, hybrid_module, retention_module):
            if hasattr(module, "embed_columns"):
                module.embed_columns = clock.wrap("student forward", module.embed_columns)
            if hasattr(module, "teacher_embeddings"):
                module.teacher_embeddings = clock.wrap("frozen pass", module.teacher_embeddings)
        trainer.compute_loss = clock.wrap("compute_loss", trainer.compute_loss)
        trainer.accelerator.backward = clock.wrap("backward", trainer.accelerator.backward)
        trainer.train()
        step_seconds = times.timed_steps()
        parts = dict(clock.seconds)
        model = setup.model
    parts["loss"] = parts.pop("compute_loss", 0.0) - parts.get("student forward", 0.0) - parts.get("frozen pass", 0.0)
    total = sum(step_seconds)
    parts["other (trainer loop, logging)"] = total - sum(parts.get(part, 0.0) for part in PARTS)

    columns = [column for column in batches[0][0] if column != LABEL]
    texts = [[row[column] for column in columns for row in batch] for batch in batches[warmup:]]
    resolved = resolve_precision(precision).precision
    model.eval()
    use_precision(model, resolved)
    forward_seconds = []
    with torch.inference_mode():
        model.encode(texts[0], batch_size=len(texts[0]), show_progress_bar=False)  # warmup
        for step_texts in texts:
            start = time.perf_counter()
            model.encode(step_texts, batch_size=len(step_texts), show_progress_bar=False)
            forward_seconds.append(time.perf_counter() - start)
    use_precision(model, "fp32")
    texts_per_step = len(texts[0])
    step_per_text = statistics.median(step_seconds) / texts_per_step
    forward_per_text = statistics.median(forward_seconds) / texts_per_step
    del loss
    return {
        "precision": resolved,
        "recipe": recipe_name,
        "steps": steps,
        "texts_per_step": texts_per_step,
        "step_s_median": statistics.median(step_seconds),
        "step_s": step_seconds,
        "forward_s_median": statistics.median(forward_seconds),
        "train_texts_per_s": 1 / step_per_text,
        "forward_texts_per_s": 1 / forward_per_text,
        "parts_s_per_step": {part: seconds / len(step_seconds) for part, seconds in parts.items()},
        "step_over_forward": step_per_text / forward_per_text,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mined", type=Path, help="a mined folder (default: the shipped pages, mined here)")
    parser.add_argument("--recipe", default="hybrid-teacher-hard")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    parser.add_argument("--fp32", action="store_true", help="also measure fp32 (when auto is not fp32 already)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    machine = cpu_description()
    print(f"cpu: {machine['cpu']}; bf16 flags: {', '.join(machine['bf16_flags']) or 'none'}; "
          f"threads {machine['threads']}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        mined = args.mined or mine_shipped(Path(scratch) / "mined")
        precisions = [args.precision]
        if args.fp32 and resolve_precision(args.precision).precision != "fp32":
            precisions.append("fp32")
        runs = [measure(mined, args.recipe, p, args.steps, args.warmup, args.batch_size) for p in precisions]
    for run in runs:
        print(f"\n{run['recipe']}, {run['precision']}: {run['texts_per_step']} texts a step; "
              f"step {run['step_s_median']:.2f} s ({run['train_texts_per_s']:.1f} texts/s), "
              f"forward {run['forward_s_median']:.2f} s ({run['forward_texts_per_s']:.1f} texts/s)")  # fmt: skip
        for part, seconds in run["parts_s_per_step"].items():
            print(f"  {part:32} {seconds:7.3f} s  {seconds / run['step_s_median']:6.1%}")
    if args.json:
        args.json.write_text(json.dumps({**machine, "runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"step/forward {runs[0]['step_over_forward']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
