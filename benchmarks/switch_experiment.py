"""The switch experiment: one random-span contrastive run, forked halfway into other positives (issue #19).

The paper's first adoption step: "in an existing contrastive pre-training pipeline, replace random spans
with anchor paired with its most related passage". Measured as a team would run it: one run of ``N`` steps
(the ``trunk`` recipe, random spans), and at ``fork_step`` each branch continues it to ``N`` with the same
optimizer state and learning-rate schedule (``train_recipe(..., fork_from=...)``, :mod:`xprt_st.training.fork`),
only the objective's data changing. Equal compute, no re-heating.

Run:      python benchmarks/switch_experiment.py --config benchmarks/switch-experiment.yaml --output runs/switch
Override: python benchmarks/switch_experiment.py --config benchmarks/switch-experiment.yaml --output runs/switch \\
              --seeds 42 --max-steps 40 --fork-step 20

Stages, each skipped when its output is complete (reuse ``--output`` to continue a killed run):

1. **Corpus and mining**, as ``xprt-st compare`` does them: the seeded sample, mined once into ``OUT/mined``;
   every other recipe's data is re-merged from the same stored passages (same documents; random spans one
   group per mined anchor, random positives at the mined anchors).
2. **Per seed**: the trunk into ``OUT/seed-S/<trunk>`` (all ``N`` steps, a checkpoint at ``fork_step`` kept), then
   each branch into ``OUT/seed-S/<label>`` forked from that checkpoint.
3. **Evaluation**: the trunk at the fork (``fork``), the trunk at ``N`` and every branch at ``N``, with the
   comparison's own evaluation (same tasks, token limit, per-item scores) into ``OUT/scores``.
4. **Report**: ``OUT/switch.md`` and ``OUT/switch.json``: per seed, each model's scores and its gain over the
   fork point; the head to head of every branch against the trunk continued (and the branches against each
   other), each with its paired bootstrap 95% interval over queries and STS pairs, and a verdict over seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from xprt_st.compare import (
    CORPUS_FILE,
    START_LABEL,
    CompareConfig,
    CompareConfigError,
    CompareResult,
    build_corpus,
    data_variant,
    prepare_variant,
    resolve_compare_tasks,
)
from xprt_st.compare.run import _evaluate

logger = logging.getLogger("switch_experiment")

FORK_LABEL = "fork"
"""The trunk at the fork point: the reference of the gains (``start`` in :class:`CompareResult`)."""
RECORD = "switch.json"
REPORT = "switch.md"


def load_config(path: Path, overrides: dict[str, Any]) -> tuple[CompareConfig, str, int, dict[str, str]]:
    """The comparison-style config and the experiment's own keys: trunk recipe, fork step, branches."""
    if not path.is_file():
        raise CompareConfigError(f"no config {path}; the shipped one is benchmarks/switch-experiment.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    trunk = raw.pop("trunk", "random-span-contrastive")
    configured_fork = raw.pop("fork_step", 0)
    fork_step = int(overrides.get("fork_step") or configured_fork)
    branches = dict(raw.pop("branches", None) or {})
    if overrides.get("seeds"):
        raw["seeds"] = overrides["seeds"]
    training = dict(raw.get("training") or {})
    if overrides.get("max_steps"):
        training["max_steps"] = overrides["max_steps"]
    training |= {"save_steps": fork_step, "save_total_limit": None}  # the fork's checkpoint must stay
    raw["training"] = training
    raw["recipes"] = [trunk, *branches.values()]
    config = CompareConfig.from_dict(raw, source=str(path))
    max_steps = int(config.training.get("max_steps", -1))
    problems = []
    if not branches:
        problems.append("branches: give at least one label: recipe")
    if not 0 < fork_step < max_steps:
        problems.append(f"fork_step: must be between 0 and training.max_steps ({max_steps}), got {fork_step}")
    labels = [Path(trunk).stem, FORK_LABEL, START_LABEL]
    for label in branches:
        if label in labels:
            problems.append(f"branches.{label}: the label is taken (the trunk's, {FORK_LABEL!r} or {START_LABEL!r})")
        labels.append(label)
    if problems:
        raise CompareConfigError(f"{path}: " + "; ".join(problems))
    return config, trunk, fork_step, branches


def prepare_data(config: CompareConfig, output: Path, recipes: list[str], progress: bool) -> dict[str, Path]:
    """Corpus, mining and every recipe's data variant, as ``xprt-st compare`` builds them."""
    from xprt_st.mining import mine
    from xprt_st.recipe import load_recipe

    build_corpus(config, output / "corpus")
    mined = output / "mined"
    stats = mine(
        [output / "corpus" / CORPUS_FILE],
        mined,
        model=config.mining_model or config.model,
        progress=progress,
        **config.mining,
    )
    logger.info("mining: %d groups from %d documents", stats["groups"], stats["documents_with_groups"])
    data: dict[str, Path] = {}
    for name in recipes:
        variant, options = data_variant(load_recipe(name, setting=config.setting).data.requires)
        folder = mined if variant == "mined" else output / "data" / variant
        if variant != "mined":
            prepare_variant(mined, folder, options, config.corpus_seed, progress)
        data[name] = folder
    return data


def _done(folder: Path) -> bool:
    return (folder / "COMPLETE").is_file()


def train_seed(
    config: CompareConfig,
    seed: int,
    trunk: str,
    fork_step: int,
    branches: dict[str, str],
    data: dict[str, Path],
    output: Path,
    progress: bool,
) -> dict[str, Path]:
    """Train the trunk, then every branch from its fork checkpoint; return each model folder by label."""
    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe
    from xprt_st.training.trainer import last_complete_checkpoint

    overrides = config.recipe_overrides(seed)
    folder = output / f"seed-{seed}"
    trunk_dir = folder / Path(trunk).stem
    timings: dict[str, float] = {}
    if not _done(trunk_dir):
        started = time.perf_counter()
        resume = "last" if last_complete_checkpoint(trunk_dir) is not None else None
        recipe = load_recipe(trunk, overrides=overrides, setting=config.setting)
        train_recipe(recipe, data[trunk], trunk_dir, resume=resume, progress=progress)
        (trunk_dir / "COMPLETE").write_text("{}\n", encoding="utf-8")
        timings[Path(trunk).stem] = round(time.perf_counter() - started, 1)
    fork = trunk_dir / f"checkpoint-{fork_step}"
    models = {FORK_LABEL: fork, Path(trunk).stem: trunk_dir}
    for label, name in branches.items():
        branch_dir = folder / label
        if not _done(branch_dir):
            started = time.perf_counter()
            if branch_dir.exists():  # a branch killed mid-way restarts from the fork (it is a few minutes)
                shutil.rmtree(branch_dir)
            recipe = load_recipe(name, overrides=overrides, setting=config.setting)
            train_recipe(recipe, data[name], branch_dir, fork_from=fork, progress=progress)
            (branch_dir / "COMPLETE").write_text("{}\n", encoding="utf-8")
            timings[label] = round(time.perf_counter() - started, 1)
        models[label] = branch_dir
    if timings:
        path = folder / "timings.json"
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps({**recorded, **timings}, indent=2) + "\n", encoding="utf-8")
    return models


def head_to_head(result: CompareResult, labels: list[str], trunk_label: str) -> list[dict[str, Any]]:
    """Every branch minus the trunk continued, then the branches against each other: per seed and over seeds."""
    from xprt_st.evaluation.bootstrap import seeds_verdict

    pairs = [(label, trunk_label) for label in labels] + list(itertools.combinations(labels, 2))
    rows = []
    for model, reference in pairs:
        per_seed = {}
        for seed in result.seeds:
            interval = result.interval(seed, model, reference=reference)
            difference = result.mean(seed, model) - result.mean(seed, reference)
            per_seed[seed] = {
                "difference": difference,
                "interval": None if interval is None else [interval.low, interval.high],
                "verdict": None if interval is None else interval.verdict,
            }
        intervals = [result.interval(seed, model, reference=reference) for seed in result.seeds]
        rows.append(
            {
                "model": model,
                "reference": reference,
                "per_seed": per_seed,
                "mean": statistics.fmean(row["difference"] for row in per_seed.values()),
                "verdict": seeds_verdict(intervals),
            }
        )
    return rows


def _signed(value: float) -> str:
    return f"{100 * value:+.2f}"


def markdown(result: CompareResult, rows: list[dict[str, Any]], models: list[str], fork_step: int, steps: int) -> str:
    """The report: per-seed scores (x100) with the gain over the fork point, then the head to head."""
    lines = [f"# Switch experiment: random spans to step {fork_step}, then each branch to step {steps}", ""]
    for seed in result.seeds:
        lines += [f"## Seed {seed}", "", "| model | " + " | ".join(result.tasks) + " | mean | gain vs fork [95% CI] |"]
        lines.append("|---" * (len(result.tasks) + 3) + "|")
        for model in [START_LABEL, *models]:
            row = result.scores[seed][model]
            cells = [f"{100 * row[task]:.2f}" for task in result.tasks]
            gain = ""
            if model != START_LABEL:
                interval = result.interval(seed, model)
                gain = _signed(result.gain(seed, model))
                if interval is not None:
                    gain += f" [{_signed(interval.low)}, {_signed(interval.high)}]"
            name = f"{FORK_LABEL} (step {fork_step})" if model == START_LABEL else model
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {100 * result.mean(seed, model):.2f} | {gain} |")
        lines.append("")
    lines += ["## Head to head (mean over tasks, x100)", ""]
    lines.append(
        "| model minus reference | " + " | ".join(f"seed {s} [95% CI]" for s in result.seeds) + " | mean | verdict |"
    )
    lines.append("|---" * (len(result.seeds) + 3) + "|")
    for row in rows:
        cells = []
        for seed in result.seeds:
            cell = row["per_seed"][seed]
            text = _signed(cell["difference"])
            if cell["interval"] is not None:
                text += f" [{_signed(cell['interval'][0])}, {_signed(cell['interval'][1])}]"
            cells.append(text)
        lines.append(
            f"| {row['model']} - {row['reference']} | "
            + " | ".join(cells)
            + f" | {_signed(row['mean'])} | {row['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def run(config: CompareConfig, trunk: str, fork_step: int, branches: dict[str, str], output: Path, progress: bool):
    from xprt_st.evaluation.tasks import task_label

    start = config.resolve(config.model) if config.model else None
    if start is None or not (start / "config.json").is_file():
        raise CompareConfigError(
            f"model: {config.model!r} is not a model folder (no config.json); build the small BERT first: "
            "python benchmarks/pretrain_small_bert.py --output runs/small-bert"
        )
    output.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = prepare_data(config, output, [trunk, *branches.values()], progress)
    preparation = round(time.perf_counter() - started, 1)
    tasks = resolve_compare_tasks(config)
    cache_dir = output / "eval-cache" / config.evaluation_key()
    trunk_label = Path(trunk).stem
    labels = [trunk_label, *branches]
    scores: dict[int, dict[str, dict[str, float]]] = {}
    per_item: dict[int, dict[str, dict[str, Any]]] = {}
    metrics: dict[str, str] = {}
    for seed in config.seeds:
        models = train_seed(config, seed, trunk, fork_step, branches, data, output, progress)
        scores[seed], per_item[seed] = {}, {}
        for label, folder in models.items():
            key = START_LABEL if label == FORK_LABEL else label
            payload = _evaluate(
                folder, key, tasks, config, cache_dir, output / "scores" / f"seed-{seed}" / f"{label}.json"
            )
            scores[seed][key], per_item[seed][key] = payload["scores"], payload["per_item"]
            metrics.update(payload["metrics"])
    task_names = [task_label(task) for task in tasks]
    result = CompareResult(
        tasks=task_names, metrics=metrics, models=labels, seeds=list(config.seeds), scores=scores, per_item=per_item
    )
    rows = head_to_head(result, list(branches), trunk_label)
    steps = int(config.training["max_steps"])
    (output / REPORT).write_text(markdown(result, rows, labels, fork_step, steps), encoding="utf-8")
    timings = {
        f"seed-{seed}": json.loads((output / f"seed-{seed}" / "timings.json").read_text(encoding="utf-8"))
        for seed in config.seeds
        if (output / f"seed-{seed}" / "timings.json").is_file()
    }
    record = {
        "config": config.to_dict(),
        "trunk": trunk,
        "fork_step": fork_step,
        "max_steps": steps,
        "branches": branches,
        "scores": {str(seed): rows_ for seed, rows_ in scores.items()},
        "gains_vs_fork": {str(seed): {label: result.gain(seed, label) for label in labels} for seed in config.seeds},
        "head_to_head": rows,
        "timings": {"corpus+mining+variants (this call)": preparation, **timings},
    }
    (output / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("benchmarks/switch-experiment.yaml"))
    parser.add_argument("--output", type=Path, required=True, help="run folder; reuse it to continue a killed run")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--max-steps", type=int, default=None, help="N (replaces the config's training.max_steps)")
    parser.add_argument("--fork-step", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {"seeds": args.seeds, "max_steps": args.max_steps, "fork_step": args.fork_step}
    try:
        config, trunk, fork_step, branches = load_config(args.config, overrides)
        record = run(config, trunk, fork_step, branches, args.output, progress=not args.no_progress)
    except CompareConfigError as error:
        sys.exit(f"error: {error}")
    logger.info("switch experiment: %s", args.output / REPORT)
    for row in record["head_to_head"]:
        logger.info("%s - %s: %+.4f (%s)", row["model"], row["reference"], row["mean"], row["verdict"])


if __name__ == "__main__":
    main()
