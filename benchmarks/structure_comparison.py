"""Issue 40's in-domain comparison in two halves: the data on any machine, the training runs in parallel on a GPU.

``xprt-st compare`` does one thing after another in one process; this script splits the same stages
(:mod:`xprt_st.compare.run`) so that a run folder's corpus, mining and data variants are made once (``prepare``,
on the CPU machine: mining there is the tested path), and its (recipe, seed) models are trained and scored by
several processes at once (``train``, on one GPU: each process claims a recipe and seed by the compare lock, so
nothing is trained twice), then the report is written as ``xprt-st compare --report-only`` writes it.

    python benchmarks/structure_comparison.py prepare CONFIG:RUN [CONFIG:RUN ...]
    python benchmarks/structure_comparison.py train CONFIG:RUN [CONFIG:RUN ...] --workers 8
    python benchmarks/structure_comparison.py pack CONFIG:RUN [...] --output results.tar.gz

``pack`` keeps what a report reads (scores, timings, each model's training record and loss log, the mined folder's
stats) and leaves out the weights. The figures of docs/results/14-structure-positives.md come from these files.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

logger = logging.getLogger("structure_comparison")


def _pair(spec: str) -> tuple[Path, Path]:
    config, _, run = spec.partition(":")
    if not run:
        raise SystemExit(f"{spec}: give CONFIG:RUN")
    return Path(config), Path(run)


def _load(config_path: Path, run: Path, report_only: bool):
    from xprt_st.compare.config import load_compare_config
    from xprt_st.compare.run import check_compare_inputs

    config = load_compare_config(config_path)
    tasks = check_compare_inputs(config, run, report_only=report_only)
    return config, tasks


def prepare(specs: list[tuple[Path, Path]]) -> None:
    """Corpus, mining and every recipe's data variant of each run folder (the stages before training)."""
    import yaml

    from xprt_st.compare.config import CONFIG_FILE
    from xprt_st.compare.reuse import record_stage, scores_fingerprint, scores_stage
    from xprt_st.compare.run import prepare_data

    for config_path, run in specs:
        config, tasks = _load(config_path, run, report_only=False)
        run.mkdir(parents=True, exist_ok=True)
        (run / CONFIG_FILE).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
        # the scores' fingerprint now, so that processes scoring models at once never race to write it
        record_stage(run, scores_stage(config), scores_fingerprint(tasks))
        started = time.perf_counter()
        prepare_data(config, run, progress=False)
        logger.info("%s: prepared in %.0f s", run, time.perf_counter() - started)


def _job(config_path: str, run: str, recipe: str | None, seed: int | None, threads: int) -> tuple[str, float, str]:
    """One worker's job: the start's scores (``recipe`` None) or one (recipe, seed) model, trained and scored."""
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{os.getpid()}] %(name)s: %(message)s")
    from xprt_st.compare.run import data_folders, evaluate_start, evaluate_start_hybrid, train_one

    started = time.perf_counter()
    config, tasks = _load(Path(config_path), Path(run), report_only=True)
    if recipe is None:
        evaluate_start(config, Path(run), tasks)
        evaluate_start_hybrid(config, Path(run), tasks)  # the hybrid each model's is compared with, as compare does
        return f"{run} start", time.perf_counter() - started, "scored"
    data = data_folders(config, Path(run))[recipe]
    done = train_one(config, Path(run), recipe, seed, data, tasks, progress=False)
    return f"{run} seed {seed} {recipe}", time.perf_counter() - started, "done" if done else "held by another process"


def train(specs: list[tuple[Path, Path]], workers: int, threads: int) -> int:
    """Every (recipe, seed) of every run folder, ``workers`` at once; then each folder's report. Returns failures."""
    from xprt_st.compare.config import load_compare_config
    from xprt_st.compare.report import write_report
    from xprt_st.compare.results import collect_results
    from xprt_st.evaluation.tasks import task_label

    jobs: list[tuple[str, str, str | None, int | None, int]] = []
    for config_path, run in specs:
        config = load_compare_config(config_path)
        jobs.append((str(config_path), str(run), None, None, threads))
        jobs += [(str(config_path), str(run), name, seed, threads) for seed in config.seeds for name in config.recipes]
    failures = 0
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_job, *job): job for job in jobs}
        for future in as_completed(futures):
            try:
                what, seconds, state = future.result()
                logger.info("%s: %s in %.0f s", what, state, seconds)
            except Exception as error:  # one failed model must not lose the others' scores
                failures += 1
                logger.error("%s failed: %r", futures[future][1:4], error)
    for config_path, run in specs:
        config, tasks = _load(config_path, run, report_only=True)
        try:
            result = collect_results(run, config, [task_label(task) for task in tasks])
        except FileNotFoundError as error:  # the start was not scored: no report, the models' scores are kept
            failures += 1
            logger.error("%s: no report: %s", run, error)
            continue
        write_report(result, run, config)
        logger.info("%s: report written (%s)", run, run / "compare.md")
    return failures


KEEP = ("compare.md", "compare.csv", "compare.png", "compare_config.yaml", "timings.json", "xprt-st.log")
"""A run folder's top-level files that ``pack`` keeps, beside ``scores/`` and each model's records."""


def _kept(run: Path) -> list[Path]:
    files = [run / name for name in KEEP if (run / name).is_file()]
    files += sorted(p for p in (run / "scores").rglob("*.json"))
    files += [p for p in (run / "mined" / "stats.json", run / "mined" / "structure" / "stats.json") if p.is_file()]
    files += sorted(p for p in (run / "data").glob("*/stats.json"))
    for seed in sorted(run.glob("seed-*")):
        for model in sorted(p for p in seed.iterdir() if p.is_dir()):
            # the model's records (COMPLETE, trainer_state.json, its training config and logs), not its weights
            # or tokenizer
            files += [
                p
                for p in model.rglob("*")
                if p.is_file()
                and p.stat().st_size < 200_000
                and p.suffix in ("", ".json", ".jsonl", ".log", ".yaml", ".csv", ".md")
                and not p.name.startswith(("tokenizer", "special_tokens", "vocab"))
            ]
    return sorted(set(files))


def pack(specs: list[tuple[Path, Path]], output: Path) -> None:
    """One archive of every run folder's scores and records (no weights), for a machine that returns few files."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(output, "w:gz") as archive:
        for _, run in specs:
            for path in _kept(run):
                archive.add(path, arcname=str(path))
    logger.info("packed %s", output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=("prepare", "train", "pack"))
    parser.add_argument("specs", nargs="+", help="CONFIG:RUN pairs")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--threads", type=int, default=2, help="torch threads per worker")
    parser.add_argument("--output", type=Path, default=Path("structure-results.tar.gz"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    specs = [_pair(spec) for spec in args.specs]
    from xprt_st.compare.config import CompareConfigError

    try:
        if args.stage == "prepare":
            prepare(specs)
            return 0
        if args.stage == "train":
            return 1 if train(specs, args.workers, args.threads) else 0
    except CompareConfigError as error:  # as `xprt-st compare` says it: one message, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
    pack(specs, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
