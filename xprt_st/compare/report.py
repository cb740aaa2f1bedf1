"""The comparison's report: ``compare.md``, ``compare.csv``, ``compare.png`` and the table the command prints."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from xprt_st.compare.results import START_LABEL, CompareResult

if TYPE_CHECKING:
    from rich.table import Table

    from xprt_st.compare.config import CompareConfig
    from xprt_st.evaluation.bootstrap import Interval

MEAN_TASK = "mean over tasks"
"""The ``task`` of compare.csv's rows that hold the mean over tasks and its pooled interval."""


def _spread(values: list[float]) -> float:
    return max(values) - min(values) if len(values) > 1 else float("nan")


READING = (
    "Intervals: paired bootstrap 95% percentile intervals (scipy.stats.bootstrap, {n} resamples, seed {seed}) "
    "over the evaluation items, both models scored on the same resample: queries for retrieval (mean of "
    "per-query nDCG@10 differences), sentence pairs for STS (Spearman of each model recomputed on the "
    "resampled pairs). The mean over tasks resamples each task's items within that task, jointly. "
    "Verdict: *gain* only when the interval lies above 0 (in every seed), *loss* only when it lies below 0 "
    "(in every seed); *no clear difference* when it includes 0; *seeds disagree* when seeds give different "
    "verdicts; *n/a* when per-item scores are missing (scores evaluated before they were kept)."
)
"""How to read the intervals and verdicts; printed under the report's tables."""


def _cell(interval: Interval | None, value: float) -> str:
    """``+0.75 [-0.20, +1.60]`` (×100), or the bare difference when there is no interval."""
    return f"{100 * value:+.2f} " + (interval.format_bounds() if interval is not None else "(no interval)")


def markdown_report(result: CompareResult, config: CompareConfig) -> str:
    """Per-seed tables (scores ×100) with each gain's 95% interval, then the gains across seeds and their verdicts."""
    from xprt_st.evaluation.bootstrap import N_RESAMPLES, SEED

    lines = []
    head = ["model", *[f"{t} ({result.metrics[t]})" for t in result.tasks], "mean", "gain vs start [95% CI]"]
    for seed in result.seeds:
        lines += [f"### Seed {seed}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        models = [m for m in result.models if m in result.scores[seed]]
        for model in models:
            row = result.scores[seed][model]
            gain = "" if model == START_LABEL else _cell(result.interval(seed, model), result.gain(seed, model))
            cells = [
                model,
                *[f"{100 * row[t]:.2f}" for t in result.tasks],
                f"{100 * result.mean(seed, model):.2f}",
                gain,
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Seed {seed}: gain over the start per task (×100) [95% CI], verdict:",
            "",
            "| model | " + " | ".join(result.tasks) + " |",
            "|" + "---|" * (len(result.tasks) + 1),
        ]
        for model in models[1:]:
            cells = []
            for task in result.tasks:
                interval = result.interval(seed, model, task)
                delta = result.scores[seed][model][task] - result.scores[seed][START_LABEL][task]
                cells.append(_cell(interval, delta) + (f" {interval.verdict}" if interval is not None else ""))
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "### Average gain over the start (mean over tasks, ×100), across seeds",
        "",
        "| model | "
        + " | ".join(f"seed {s} [95% CI]" for s in result.seeds)
        + " | mean | spread (max-min) | verdict | per task (mean over seeds) |",
        "|" + "---|" * (len(result.seeds) + 5),
    ]
    for model in result.models[1:]:
        seed_cells = [
            _cell(result.interval(s, model), result.gain(s, model)) if model in result.scores[s] else ""
            for s in result.seeds
        ]
        present = result.seed_gains(model)
        per_task = [f"{t} {100 * result.task_gain(model, t):+.2f}" for t in result.tasks]
        spread = _spread(present)
        lines.append(
            f"| {model} | "
            + " | ".join(seed_cells)
            + f" | {100 * statistics.fmean(present):+.2f} | "
            + ("n/a" if spread != spread else f"{100 * spread:.2f}")
            + f" | {result.verdict(model)} | "
            + ", ".join(per_task)
            + " |"
        )
    lines += _reference_lines(result)
    lines += _hybrid_lines(result)
    lines += _head_to_head(result)
    lines += [
        "",
        "### Verdict per task across seeds",
        "",
        "| model | " + " | ".join(result.tasks) + " |",
        "|" + "---|" * (len(result.tasks) + 1),
    ]
    for model in result.models[1:]:
        lines.append(f"| {model} | " + " | ".join(result.verdict(model, t) for t in result.tasks) + " |")
    lines += ["", READING.format(n=N_RESAMPLES, seed=SEED), ""]
    return "\n".join(lines)


def _reference_lines(result: CompareResult) -> list[str]:
    """BM25's line on each retrieval task (×100) with the start's difference from it: the lexical reference, outside
    every mean and gain above."""
    scores = result.reference.get("scores", {})
    tasks = [task for task in result.tasks if task in scores]
    if not tasks or not result.seeds:
        return []
    start = result.scores[result.seeds[0]][START_LABEL]
    lines = [
        "",
        "### Lexical reference: BM25 on the retrieval tasks (×100; not trained, outside the means)",
        "",
        "| task | BM25 | start | start minus BM25 [95% CI] |",
        "|---|---|---|---|",
    ]
    for task in tasks:
        interval = result.start_minus_reference(task)
        difference = _cell(interval, start[task] - scores[task]) + (f" {interval.verdict}" if interval else "")
        lines.append(f"| {task} | {100 * scores[task]:.2f} | {100 * start[task]:.2f} | {difference} |")
    return lines


def _hybrid_lines(result: CompareResult) -> list[str]:
    """Each recipe's hybrid (BM25 fused with its model) beside the start's on each retrieval task (×100), with the
    difference per seed and its paired interval: does pre-training still add to a hybrid? Then the hybrid to serve,
    where one is ahead of every single model (:func:`xprt_st.compare.hybrids.serve_hybrid`)."""
    from xprt_st.compare.hybrids import serve_hybrid
    from xprt_st.evaluation.bootstrap import seeds_verdict

    seeds = [seed for seed in result.seeds if seed in result.hybrids]
    if not seeds:
        return []
    start = result.hybrids[seeds[0]][START_LABEL]["scores"]
    tasks = [task for task in result.tasks if task in start]
    lines = [
        "",
        "### Hybrid lines: BM25 fused with each model by reciprocal ranks (×100; outside the means)",
        "",
        "| model | task | hybrid of the start | hybrid of the model (mean over seeds) | "
        + " | ".join(f"seed {seed}: minus the start's [95% CI]" for seed in seeds)
        + " | verdict |",
        "|" + "---|" * (len(seeds) + 5),
    ]
    for model in result.models[1:]:
        for task in tasks:
            present = [seed for seed in seeds if task in result.hybrids[seed].get(model, {}).get("scores", {})]
            if not present:
                continue
            values = [result.hybrids[seed][model]["scores"][task] for seed in present]
            cells, intervals = [], []
            for seed in seeds:
                if seed not in present:
                    cells.append("")
                    continue
                interval = result.hybrid_interval(seed, model, task)
                cells.append(_cell(interval, result.hybrids[seed][model]["scores"][task] - start[task]))
                intervals.append(interval)
            lines.append(
                f"| {model} | {task} | {100 * start[task]:.2f} | {100 * statistics.fmean(values):.2f} | "
                + " | ".join(cells)
                + f" | {seeds_verdict(intervals)} |"
            )
    served = [(task, serve_hybrid(result, task)) for task in tasks]
    lines += [""] + [
        f"{task}: serve the hybrid of {'the start' if best == START_LABEL else best} (BM25 fused with it): it is ahead "
        "of every single model, BM25 included, beyond its 95% interval in every seed."
        for task, best in served
        if best is not None
    ]
    return lines


def _head_to_head(result: CompareResult) -> list[str]:
    """The first recipe minus each other recipe (mean over tasks), per seed with its paired interval, and a verdict.

    Every model of a seed is scored on the same items, so the difference of two recipes has its own paired
    interval: a gap between two gains is stated only when that interval excludes 0 in every seed.
    """
    from xprt_st.evaluation.bootstrap import seeds_verdict

    recipes = result.models[1:]
    if len(recipes) < 2:
        return []
    first = recipes[0]
    lines = [
        "",
        f"### Head to head: {first} minus each other recipe (mean over tasks, ×100)",
        "",
        "| versus | " + " | ".join(f"seed {s} [95% CI]" for s in result.seeds) + f" | mean | verdict for {first} |",
        "|" + "---|" * (len(result.seeds) + 3),
    ]
    for other in recipes[1:]:
        cells, differences, intervals = [], [], []
        for seed in result.seeds:
            if first not in result.scores[seed] or other not in result.scores[seed]:
                cells.append("")
                continue
            difference = result.mean(seed, first) - result.mean(seed, other)
            interval = result.interval(seed, first, reference=other)
            cells.append(_cell(interval, difference))
            differences.append(difference)
            intervals.append(interval)
        mean = f"{100 * statistics.fmean(differences):+.2f}" if differences else ""
        lines.append(f"| {other} | " + " | ".join(cells) + f" | {mean} | {seeds_verdict(intervals)} |")
    return lines


def gain_table(result: CompareResult) -> Table:
    """The table ``xprt-st compare`` prints: each model's mean gain per seed with its 95% interval and verdict.

    One row per (model, seed), then an ``all seeds`` row with the mean gain and the verdict over seeds;
    five narrow columns, so it stays readable at 80 columns.
    """
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    # Column rules only between sections: the longest recipe name and verdict then fit 80 columns uncut.
    table = Table(
        title="Gain over the starting model (×100, mean over tasks), paired bootstrap 95% CI",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("model", style="bold", no_wrap=True)
    table.add_column("seed", justify="right", no_wrap=True)
    table.add_column("gain", justify="right", no_wrap=True)
    table.add_column("95% CI", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for model in result.models[1:]:
        seeds = [s for s in result.seeds if model in result.scores[s]]
        for index, seed in enumerate(seeds):
            interval = result.interval(seed, model)
            table.add_row(
                escape(model) if index == 0 else "",
                str(seed),
                f"{100 * result.gain(seed, model):+.2f}",
                interval.format_bounds() if interval is not None else "n/a",
                interval.verdict if interval is not None else "n/a",
                end_section=len(seeds) == 1,
            )
        if len(seeds) > 1:
            mean = statistics.fmean(result.seed_gains(model))
            table.add_row("", "all", f"{100 * mean:+.2f}", "", result.verdict(model), end_section=True)
    return table


def write_report(result: CompareResult, run: Path, config: CompareConfig) -> dict[str, Path]:
    """Write ``compare.md``, ``compare.csv`` and ``compare.png``.

    The CSV is long format: one row per (seed, model, task) with the score, the difference to the
    start and its 95% interval and verdict (``ci_low``, ``ci_high``, ``verdict``; empty for the start
    and where per-item scores are missing), plus one row per (seed, model) whose task is
    ``mean over tasks`` (metric ``mean``): the mean score, the mean gain and its pooled interval.
    """
    from xprt_st.evaluation.bootstrap import interval_fields

    paths = {"md": run / "compare.md", "csv": run / "compare.csv", "png": run / "compare.png"}
    header = [
        f"# Objective comparison ({', '.join(result.models[1:])})",
        "",
        f"Starting model: {config.model or 'all-MiniLM-L6-v2 (offline default)'}; "
        f"mining model: {config.mining_model or 'the starting model'}; setting: {config.setting or 'continued'}; "
        f"seeds: {result.seeds}; training overrides: {config.training}; tasks: {', '.join(result.tasks)}.",
        "",
    ]
    paths["md"].write_text("\n".join(header) + markdown_report(result, config), encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["seed", "model", "task", "metric", "score", "delta_vs_start", "ci_low", "ci_high", "verdict"])
        for seed in result.seeds:
            for model, row in result.scores[seed].items():
                for task in result.tasks:
                    delta = row[task] - result.scores[seed][START_LABEL][task]
                    interval = interval_fields(result.interval(seed, model, task))
                    writer.writerow(
                        [
                            seed,
                            model,
                            task,
                            result.metrics[task],
                            f"{row[task]:.6f}",
                            f"{delta:.6f}",
                            *interval.values(),
                        ]
                    )
                gain = result.gain(seed, model) if model != START_LABEL else 0.0
                interval = interval_fields(result.interval(seed, model))
                writer.writerow(
                    [
                        seed,
                        model,
                        MEAN_TASK,
                        "mean",
                        f"{result.mean(seed, model):.6f}",
                        f"{gain:.6f}",
                        *interval.values(),
                    ]
                )
    _plot(result, paths["png"])
    return paths


def _plot(result: CompareResult, path: Path) -> None:
    # A bare Figure draws without pyplot's global state, so a notebook's backend is left alone.
    from matplotlib.figure import Figure

    models = result.models[1:]
    fig = Figure(figsize=(12, 4))
    axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
    means, lows, highs = [], [], []
    for model in models:
        gains = [100 * gain for gain in result.seed_gains(model)]
        means.append(statistics.fmean(gains))
        lows.append(means[-1] - min(gains))
        highs.append(max(gains) - means[-1])
    axes[0].barh(models, means, xerr=[lows, highs], color=["C3" if m == "xprt" else "C0" for m in models])
    axes[0].axvline(0, color="black", linewidth=0.8)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("mean gain over start (×100), bars: seed min-max")
    width = 0.8 / max(1, len(models))
    for index, model in enumerate(models):
        deltas = [100 * result.task_gain(model, task) for task in result.tasks]
        xs = [t + (index - (len(models) - 1) / 2) * width for t in range(len(result.tasks))]
        axes[1].bar(xs, deltas, width=width, label=model)
    axes[1].axhline(0, color="black", linewidth=0.8)
    axes[1].set_xticks(range(len(result.tasks)))
    axes[1].set_xticklabels(result.tasks, fontsize=8)
    axes[1].set_ylabel("score - start (×100), mean over seeds")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
