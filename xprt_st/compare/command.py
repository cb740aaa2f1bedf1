"""The comparison command: its steps as stages through the pipeline, then the report."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xprt_st.compare.config import CONFIG_FILE, CompareConfig
from xprt_st.compare.report import write_report
from xprt_st.compare.results import CompareResult, collect_results
from xprt_st.compare.run import (
    check_compare_inputs,
    data_folders,
    evaluate_reference,
    evaluate_start,
    evaluate_start_hybrid,
    prepare_data,
    train_one,
)
from xprt_st.pipeline.step import StepStage

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

logger = logging.getLogger(__name__)


def compare_stages(config: CompareConfig, tasks: Sequence[AbsTask], *, progress: bool = True) -> list[StepStage]:
    """The comparison's stages in the order data flows: the data (corpus, mining, each recipe's data variant), the
    reference lines (the start, BM25, the start's hybrid), then one stage per seed and recipe, each training and
    scoring one model. None has a fingerprint (:mod:`xprt_st.pipeline.step`): compare's markers and locks decide."""
    tasks = list(tasks)

    def data(run: Path) -> dict[str, Any]:
        return {name: str(path) for name, path in prepare_data(config, run, progress=progress).items()}

    def references(run: Path) -> None:
        evaluate_start(config, run, tasks)
        evaluate_reference(config, run, tasks)
        evaluate_start_hybrid(config, run, tasks)

    def model(name: str, seed: int) -> StepStage:
        def train(run: Path) -> dict[str, Any]:
            here = train_one(config, run, name, seed, data_folders(config, run)[name], tasks, progress=progress)
            if not here:
                logger.info("seed %d: %s is being trained by another compare process; skipped here", seed, name)
            return {"here": here}

        return StepStage(f"seed {seed}: {Path(name).stem}", train)

    models = [model(name, seed) for seed in config.seeds for name in config.recipes]
    return [StepStage("data", data), StepStage("references", references), *models]


def run_compare(
    config: CompareConfig,
    output: str | Path,
    *,
    progress: bool = True,
    report_only: bool = False,
    tasks: list[AbsTask] | None = None,
) -> CompareResult:
    """Run (or continue) the whole comparison into ``output`` and write the report; see :mod:`xprt_st.compare`.

    Args:
        config: the comparison; its recipes, seeds and overrides are validated before anything runs.
        output: run folder; reusing it continues a killed run (finished steps are skipped).
        progress: draw the mining and training progress displays.
        report_only: write the report from the scores present now, training and evaluating nothing.
        tasks: what :func:`~xprt_st.compare.run.check_compare_inputs` returned for this config and output, when the
            caller checked them already (the CLI, before it takes the folder); None checks them here.

    Returns:
        The scores of every finished model, also in ``output/compare.{md,csv,png}``.

    Raises:
        CompareConfigError: before any work, when ``output`` was made with other
            :data:`~xprt_st.compare.config.MODEL_SHAPING_KEYS` values, or holds a finished model of a recipe that
            resolves differently now, or when a task or a corpus source cannot be loaded.
    """
    from xprt_st.evaluation.tasks import task_label
    from xprt_st.pipeline.run import run_pipeline

    run = Path(output)
    if tasks is None:
        tasks = check_compare_inputs(config, run, report_only)
    run.mkdir(parents=True, exist_ok=True)
    (run / CONFIG_FILE).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
    if not report_only:
        run_pipeline(compare_stages(config, tasks, progress=progress), run)
    result = collect_results(run, config, [task_label(task) for task in tasks])
    write_report(result, run, config)
    return result
