"""Tabulate the in-domain learning-rate x steps sweep (issue 25) from its run folders, one point per folder.

Each folder is an ``xprt-st compare`` run of one recipe at one learning rate and step count (see
``benchmarks/compare-in-domain-nfcorpus-sweep.yaml``); this reads their own ``compare_config.yaml``, scores
and ``timings.json`` and writes one Markdown table (score, gain over the start with its paired bootstrap 95%
interval, training and evaluation seconds) and a JSON record.

    python benchmarks/in_domain_sweep.py runs/in-domain-nfcorpus runs/in-domain-nfcorpus-sweep-* \
        --recipe change-only-positive-hard --results benchmarks/results/in-domain-nfcorpus-sweep.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)


def sweep_point(folder: Path, recipe: str) -> dict[str, Any] | None:
    """One folder's point: learning rate, steps, the recipe's score and gain per seed, its cost; None if unscored."""
    from xprt_st.compare.config import CompareConfig
    from xprt_st.compare.results import START_LABEL, collect_results

    raw = yaml.safe_load((folder / "compare_config.yaml").read_text(encoding="utf-8"))
    # the folder's record names the last command's --recipes/--seeds: read every seed folder for this recipe
    raw["recipes"] = [recipe]
    raw["seeds"] = sorted(int(p.name.split("-")[1]) for p in folder.glob("seed-*") if p.is_dir()) or raw["seeds"]
    config = CompareConfig.from_dict(raw, source=str(folder))
    tasks = [Path(t.name).name for t in config.tasks]
    result = collect_results(folder, config, tasks)
    if recipe not in result.models:
        return None
    timings_path = folder / "timings.json"
    timings = json.loads(timings_path.read_text(encoding="utf-8")) if timings_path.is_file() else {}
    seeds = []
    for seed in result.seeds:
        if recipe not in result.scores[seed]:
            continue
        interval = result.interval(seed, recipe)
        seeds.append(
            {
                "seed": seed,
                "score": result.mean(seed, recipe),
                "start": result.mean(seed, START_LABEL),
                "gain": result.gain(seed, recipe),
                "interval": None if interval is None else [interval.low, interval.high],
                "train_seconds": timings.get(f"seed {seed} train {recipe}"),
                "evaluate_seconds": timings.get(f"seed {seed} evaluate {recipe}"),
            }
        )
    return {
        "folder": str(folder),
        "recipe": recipe,
        "learning_rate": float(config.training["learning_rate"]),
        "max_steps": int(config.training["max_steps"]),
        "batch_size": int(config.training["batch_size"]),
        "verdict": result.verdict(recipe),
        "seeds": seeds,
    }


def markdown(points: list[dict[str, Any]]) -> str:
    """The sweep table, ordered by learning rate, steps and batch (scores and gains x100)."""
    lines = [
        "| learning rate | steps | batch | groups seen | seed | score | gain vs start [95% CI] | train s | eval s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for point in sorted(points, key=lambda p: (p["learning_rate"], p["max_steps"], p["batch_size"])):
        for row in point["seeds"]:
            low, high = row["interval"] or (float("nan"), float("nan"))
            lines.append(
                f"| {point['learning_rate']:g} | {point['max_steps']} | {point['batch_size']} | "
                f"{point['max_steps'] * point['batch_size']:,} | {row['seed']} | {100 * row['score']:.2f} | "
                f"{100 * row['gain']:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}] | {row['train_seconds']} | "
                f"{row['evaluate_seconds']} |"
            )
    return "\n".join(lines)


def main() -> None:
    """Read the folders, print the table, write the JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--results", type=Path, help="JSON record to write")
    args = parser.parse_args()
    missing = [str(f) for f in args.folders if not (f / "compare_config.yaml").is_file()]
    if missing:
        parser.error(f"not a compare run folder (no compare_config.yaml): {', '.join(missing)}")
    points = [p for p in (sweep_point(f, args.recipe) for f in args.folders) if p is not None]
    print(markdown(points))
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(points, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
