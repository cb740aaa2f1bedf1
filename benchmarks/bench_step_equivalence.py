"""The faster step trains the same model: per-step loss and final scores of the step with and without its speedups.

Run:  python benchmarks/bench_step_equivalence.py [--mined DIR] [--recipe hybrid-teacher-hard] [--steps 50]
      [--seed 42] [--batch-size 16] [--json out.json]

On one mined folder (default: the shipped Python pages mined as the quickstart mines them), the recipe is trained
twice from the same start with the same seed for ``--steps`` optimizer steps, logging the loss at every step:

- ``neither``: the path before the speedups of ``bench_step_pace.py`` (the frozen start encodes every text; each
  pass is one forward padded to its batch's longest row);
- ``both``: the default path (the frozen start's stored vectors read from the mined folder; length buckets).

Both runs see the same batches in the same order and the same loss. What may differ is dropout's random draws: a
bucketed pass draws its masks chunk by chunk, so the two runs' per-step losses are two draws of one noisy curve,
not one curve. The benchmark prints the largest and the mean absolute per-step difference beside the loss's own
step-to-step spread, and scores both final models and the start on ``--task`` (default ``python-faq``, shipped):
each against the start and ``both`` head to head against ``neither``, with paired 95% bootstrap intervals over the
task's queries. The speedups change nothing the loss sees when the head-to-head interval holds 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_step_pace import cpu_description, machine_line, mine_shipped, variant

from xprt_st.evaluation.bootstrap import paired_interval, retrieval_items
from xprt_st.evaluation.run import evaluate_models
from xprt_st.recipe import load_recipe
from xprt_st.training.recipe_setup import trainer_setup

RUNS = ("neither", "both")


def train(
    mined: Path, recipe_name: str, steps: int, seed: int, batch_size: int, name: str, output: Path
) -> tuple[list[float], Any]:
    """The recipe trained ``steps`` steps as the variant ``name`` runs it: its per-step losses and its model."""
    overrides = {  # the quickstart's batch and token limit (the recipe's own batch is 64 groups)
        "training.max_steps": steps,
        "training.batch_size": batch_size,
        "training.max_seq_length": 128,
        "training.seed": seed,
        "training.logging_steps": 1,
        "training.save_steps": 10**6,
    }
    recipe = load_recipe(recipe_name, overrides=overrides)
    with variant(name):
        setup = trainer_setup(recipe, mined, output)
        trainer = setup.trainer()
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    setup.model.eval()
    return losses, setup.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mined", type=Path, help="a mined folder (default: the shipped pages, mined here)")
    parser.add_argument("--recipe", default="hybrid-teacher-hard")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--task", default="python-faq")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    machine = cpu_description()
    print(machine_line(machine))
    with tempfile.TemporaryDirectory() as scratch:
        mined = args.mined or mine_shipped(Path(scratch) / "mined")
        losses: dict[str, list[float]] = {}
        models: dict[str, Any] = {}
        for name in RUNS:
            losses[name], models[name] = train(
                mined, args.recipe, args.steps, args.seed, args.batch_size, name, Path(scratch) / name
            )
        report = evaluate_models([None, models["neither"], models["both"]], [args.task], labels=["start", *RUNS])

    gaps = [abs(a - b) for a, b in zip(losses["neither"], losses["both"], strict=True)]
    spread = statistics.mean(abs(b - a) for a, b in zip(losses["both"], losses["both"][1:], strict=False))
    queries = report.per_query[args.task]
    head_to_head = paired_interval(retrieval_items(queries["both"], queries["neither"]))
    against_start = {name: paired_interval(retrieval_items(queries[name], queries["start"])) for name in RUNS}
    record = {
        **machine,
        "recipe": args.recipe,
        "steps": args.steps,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "task": args.task,
        "losses": losses,
        "loss_gap_max": max(gaps),
        "loss_gap_mean": statistics.mean(gaps),
        "loss_step_to_step_mean": spread,
        "scores": {label: report.score(label, args.task) for label in ("start", *RUNS)},
        "against_start": {name: asdict(interval) for name, interval in against_start.items()},
        "both_minus_neither": asdict(head_to_head),
    }
    print(f"\n{args.recipe}, {args.steps} steps, seed {args.seed}: per-step loss |both - neither| max "
          f"{record['loss_gap_max']:.4f}, mean {record['loss_gap_mean']:.4f}; the loss's own step-to-step change "
          f"(both) {spread:.4f}")  # fmt: skip
    for label, score in record["scores"].items():
        line = f"  {args.task} {label:8} {score:.4f}"
        if label in against_start:
            line += f"  vs start {against_start[label].format(digits=2)}"
        print(line)
    print(f"  both - neither {head_to_head.format(digits=2)} ({head_to_head.verdict})")
    if args.json:
        args.json.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
