"""A training step against the forward of its texts: where the step's time goes, and ``step/forward R``.

Run:  python benchmarks/bench_step_pace.py [--mined DIR] [--recipe hybrid-teacher-hard] [--steps 8] [--warmup 2]
      [--batch-size 16] [--precision auto] [--fp32] [--variants both neither ...] [--json out.json]

In one process, on one mined folder (default: the shipped Python pages mined as the quickstart mines them, into a
temporary folder), for each precision measured (``auto``'s choice, and fp32 beside it with ``--fp32``):

- the step: ``xprt-st train``'s own trainer (:func:`xprt_st.training.recipe_setup.trainer_setup`) runs
  ``--warmup`` + ``--steps`` optimizer steps; a step is the wall time between two ``on_step_end`` calls, so data,
  collation, loss, backward, optimizer and logging are all in it. Its parts are timed by wrapping, in this
  process only, the functions that run them: the collator (tokenising, ``data``), the student's forward (the
  trained model's ``forward``), the frozen start's pass (the loss's teacher's ``forward``, which may read stored
  vectors instead), the loss's own arithmetic (the rest of ``compute_loss``), the backward
  (``accelerator.backward``) and the optimizer (``on_pre_optimizer_step`` to ``on_optimizer_step``);
- the forward: the same steps' texts encoded with ``model.encode`` (no gradient, the trainer's precision, the
  recipe's token limit), one call per step, at the fastest of a few encode batch sizes (one batch of the step's
  texts, 16, 32: encode sorts by length, so smaller batches pad less).

R = seconds per text of the step / seconds per text of the forward. The CPU's model name and its bf16 flags
(AMX, AVX512-BF16) are printed and recorded with the figures; compare R only within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from xprt_st.columns import LABEL
from xprt_st.precision import resolve_precision, use_precision
from xprt_st.recipe import load_recipe
from xprt_st.training.recipe_setup import trainer_setup

REFERENCE_BATCH_SIZES = (16, 32)
"""``encode`` batch sizes tried for the forward besides one batch of the step's texts: the fastest is the reference
(encode sorts texts by length, so smaller batches pad less)."""

VARIANTS = ("both", "stored vectors", "length buckets", "neither")
"""``--variants``: the step with both of issue 59's changes, each alone, and without either (the path before)."""

PARTS = ("data", "student forward", "frozen pass", "loss", "backward", "optimizer")


class Clock:
    """Seconds per part of the step, summed over the timed steps (warmup steps are dropped on ``reset``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth: dict[str, int] = defaultdict(int)
        self.running = True

    def reset(self) -> None:
        self.seconds.clear()

    def stop(self) -> None:
        """Count nothing more: what runs after the last step (the label-free check's encoding) is not a step's."""
        self.running = False

    def wrap(self, part: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            self.depth[part] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.depth[part] -= 1
                if not self.depth[part] and self.running:  # a nested call of the same part counts once
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
        if self.clock.running:
            self.clock.seconds["optimizer"] += time.perf_counter() - self.optimizer_start

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())
        if state.global_step == self.warmup:
            self.clock.reset()
        if state.global_step == state.max_steps:
            self.clock.stop()

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


def machine_line(machine: dict[str, Any]) -> str:
    """The line a benchmark prints first: :func:`cpu_description`'s CPU, bf16 flags and threads."""
    return (
        f"cpu: {machine['cpu']}; bf16 flags: {', '.join(machine['bf16_flags']) or 'none'}; threads {machine['threads']}"
    )


def mine_shipped(folder: Path) -> Path:
    """The shipped pages mined as the quickstart mines them (a tenth held out, two hard negatives)."""
    from xprt_st.mining import mine
    from xprt_st.quickstart.config import QUICKSTART_CORPUS

    mine(QUICKSTART_CORPUS, folder, html=True, id_field="id", holdout=0.1, hard_negatives=2, progress=False)
    return folder


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The step as ``name`` runs it: without the stored vectors the frozen start encodes every text, without the
    length buckets each pass is one merged forward padded to its longest row (in this process only)."""
    from xprt_st.losses import _length_buckets
    from xprt_st.training import stored_teacher

    saved = stored_teacher.stored_vector_teacher, _length_buckets.ROWS_PER_CHUNK
    if name in ("length buckets", "neither"):
        stored_teacher.stored_vector_teacher = lambda teacher, folder, texts: (teacher, "off for the benchmark")
    if name in ("stored vectors", "neither"):
        _length_buckets.ROWS_PER_CHUNK = sys.maxsize
    try:
        yield
    finally:
        stored_teacher.stored_vector_teacher, _length_buckets.ROWS_PER_CHUNK = saved


def measure(
    mined: Path, recipe_name: str, precision: str, steps: int, warmup: int, batch_size: int, name: str = "both"
) -> dict:
    """One precision's and variant's step, its parts and the forward of the same texts."""
    overrides = {
        "training.max_steps": warmup + steps,
        "training.batch_size": batch_size,
        "training.precision": precision,
        "training.save_steps": 10**6,
        "training.logging_steps": 10**6,
    }
    recipe = load_recipe(recipe_name, overrides=overrides)
    clock = Clock()
    with tempfile.TemporaryDirectory() as output, variant(name):
        setup = trainer_setup(recipe, mined, output)
        times = StepTimes(clock, warmup)
        trainer = setup.trainer()
        trainer.add_callback(times)
        batches: list[list[dict[str, Any]]] = []
        trainer.data_collator = KeptBatches(trainer.data_collator, clock, batches)
        loss = setup.loss
        # nn.Module.__call__ looks ``forward`` up on the instance: the student's and the frozen start's passes
        setup.model.forward = clock.wrap("student forward", setup.model.forward)
        teacher = getattr(loss, "teacher", None)
        if teacher is not None:
            teacher.forward = clock.wrap("frozen pass", teacher.forward)
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
    texts_per_step = len(texts[0])
    forward_by_batch: dict[int, list[float]] = {}
    with torch.inference_mode():
        for encode_batch in sorted({texts_per_step, *REFERENCE_BATCH_SIZES}):
            model.encode(texts[0], batch_size=encode_batch, show_progress_bar=False)  # warmup
            forward_by_batch[encode_batch] = []
            for step_texts in texts:
                start = time.perf_counter()
                model.encode(step_texts, batch_size=encode_batch, show_progress_bar=False)
                forward_by_batch[encode_batch].append(time.perf_counter() - start)
    use_precision(model, "fp32")
    reference = min(forward_by_batch, key=lambda size: statistics.median(forward_by_batch[size]))
    forward_seconds = forward_by_batch[reference]
    step_per_text = statistics.median(step_seconds) / texts_per_step
    forward_per_text = statistics.median(forward_seconds) / texts_per_step
    del loss
    return {
        "precision": resolved,
        "variant": name,
        "recipe": recipe_name,
        "steps": steps,
        "texts_per_step": texts_per_step,
        "step_s_median": statistics.median(step_seconds),
        "step_s": step_seconds,
        "forward_s_median": statistics.median(forward_seconds),
        "forward_batch_size": reference,
        "forward_s_median_by_batch_size": {size: statistics.median(times) for size, times in forward_by_batch.items()},
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
    parser.add_argument(
        "--variants", nargs="+", default=["both"], choices=VARIANTS, help="issue 59's changes, alone or together"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    machine = cpu_description()
    print(machine_line(machine))
    with tempfile.TemporaryDirectory() as scratch:
        mined = args.mined or mine_shipped(Path(scratch) / "mined")
        precisions = [args.precision]
        if args.fp32 and resolve_precision(args.precision).precision != "fp32":
            precisions.append("fp32")
        runs = [
            measure(mined, args.recipe, p, args.steps, args.warmup, args.batch_size, name)
            for p in precisions
            for name in args.variants
        ]
    for run in runs:
        print(f"\n{run['recipe']}, {run['precision']}, {run['variant']}: {run['texts_per_step']} texts a step; "
              f"step {run['step_s_median']:.2f} s ({run['train_texts_per_s']:.1f} texts/s), "
              f"forward {run['forward_s_median']:.2f} s ({run['forward_texts_per_s']:.1f} texts/s)")  # fmt: skip
        mean_step = statistics.mean(run["step_s"])  # the parts are means over the timed steps
        for part, seconds in run["parts_s_per_step"].items():
            print(f"  {part:32} {seconds:7.3f} s  {seconds / mean_step:6.1%}")
        print(f"  step/forward {run['step_over_forward']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({**machine, "runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"step/forward {runs[0]['step_over_forward']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
