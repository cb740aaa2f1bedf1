"""The comparison command: its stages (:mod:`xprt_st.pipeline.compare`) through the pipeline, then the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from xprt_st.compare.config import CONFIG_FILE, CompareConfig
from xprt_st.compare.report import write_report
from xprt_st.compare.results import CompareResult, collect_results
from xprt_st.compare.run import check_compare_inputs

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask


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
        output: run folder; reusing it continues a killed run (finished stages are skipped).
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
    from xprt_st.pipeline.compare import compare_stages
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
