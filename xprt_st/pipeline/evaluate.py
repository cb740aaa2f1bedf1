"""``xprt-st evaluate`` as a stage: every check of its models and tasks before any model loads, then the scoring in
the held output folder.

The stage has no fingerprint: scores are reused through mteb's result cache, keyed by each model's weights and the
task data (:mod:`xprt_st.evaluation.run`), and each run's results replace the last one's in the folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xprt_st.evaluation.run import EvaluateConfig, EvaluationReport
    from xprt_st.output_folder import OutputFolder


def _silent(line: str) -> None:
    del line


def specs_with(tasks: list[str], prefix: str) -> list[str]:
    """The specs among the ``--tasks`` values that start with ``prefix`` (``mined:``), once each, in order."""
    from xprt_st.evaluation.catalog import split_task_specs

    return list(dict.fromkeys(name for name in split_task_specs(tasks) if name.startswith(prefix)))


def check_model_name(spec: str) -> None:
    """A model name of ``evaluate``, checked before work: a dense model, ``bm25``, or ``hybrid:MODEL``."""
    from xprt_st.evaluation.lexical import check_lexical_spec, is_lexical_spec
    from xprt_st.models import check_model

    if not is_lexical_spec(spec):
        check_model(spec, "MODELS")
        return
    parsed = check_lexical_spec(spec)
    if parsed.dense is not None:
        check_model(parsed.dense, f"MODELS ({spec})")


def check_lexical_task_specs(specs: list[str], tasks: list[str]) -> None:
    """Refuse ``bm25`` or ``hybrid:MODEL`` with a label-free task before work (the task kinds that need reading, an
    STS file, are refused by :func:`xprt_st.evaluation.run.check_lexical_tasks` before any model loads)."""
    from xprt_st.evaluation.catalog import split_task_specs
    from xprt_st.evaluation.lexical import is_lexical_spec
    from xprt_st.evaluation.run import is_label_free

    lexical = [spec for spec in specs if is_lexical_spec(spec)]
    free = [name for name in split_task_specs(tasks) if is_label_free(name)]
    if lexical and free:
        raise ValueError(
            f"{lexical[0]} scores retrieval tasks with labels only; {free[0]} is a label-free task: evaluate it "
            "with the dense models alone"
        )


def check_heldout_contract(specs: list[str], tasks: list[str], warn: Callable[[str], None] = _silent) -> None:
    """Refuse a model trained on the held-out documents of a ``mined:DIR`` or ``titles:DIR`` task (both score a
    mined folder's held-out part); ``warn`` of text duplicates (before work)."""
    from xprt_st.evaluation.label_free import TASK_PREFIX
    from xprt_st.evaluation.titles import TASK_PREFIX as TITLES_PREFIX
    from xprt_st.training.heldout_contract import contamination_warning, refuse_overlap

    folders: dict[str, None] = {}
    for prefix in (TASK_PREFIX, TITLES_PREFIX):
        for spec in specs_with(tasks, prefix):
            refuse_overlap(specs, spec[len(prefix) :], f"evaluate --tasks {spec}")
            folders[spec[len(prefix) :]] = None
    for folder in folders:
        warning = contamination_warning(folder)
        if warning is not None:
            warn(warning)


class EvaluateStage:
    """Score ``config.models`` on ``config.tasks`` (:func:`xprt_st.evaluation.run.run_evaluation`) in the held
    output folder; ``present`` shows and writes the report while the folder is still held (the command's tables and
    files). Afterwards :attr:`report` is the report.

    ``xprt-st evaluate`` takes ``config.output_dir`` itself. A command that holds a folder of its own (the
    quickstart's ``evaluation/``) gives it as ``held``, whose manifest records ``config.output_dir``, and names in
    ``made`` the models a stage before this one trains (checked when they exist, not before). The scoring is timed
    as ``evaluate: TASKS``.
    """

    name = "evaluate"
    folder = ""

    def __init__(
        self,
        config: EvaluateConfig,
        present: Callable[[EvaluationReport, OutputFolder], None],
        warn: Callable[[str], None] = _silent,
        *,
        held: OutputFolder | None = None,
        made: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.present = present
        self.warn = warn
        self.held = held
        self.made = made
        self.report: EvaluationReport | None = None

    def fingerprint(self) -> None:
        """None: mteb's result cache reuses each model's scores by its weights and the task data."""
        return None

    def check(self) -> None:
        """The sample sizes, the encoding backend and precision, the output path, every model name and the tasks
        they may score (the held-out contract included); nothing loaded, nothing written.

        Raises:
            ValueError: the first problem, naming its option (project errors are :class:`xprt_st.errors.XPRTError`).
        """
        from xprt_st.encode_backend import check_encode_backend
        from xprt_st.evaluation.catalog import check_sample_sizes
        from xprt_st.output_folder import command_folder
        from xprt_st.precision import resolve_precision

        config = self.config
        specs, tasks = list(config.models), list(config.tasks)
        check_sample_sizes(max_queries=config.max_queries, max_corpus=config.max_corpus)
        check_encode_backend(config.encode_backend, config.device)
        resolve_precision(config.precision, config.device, config.encode_backend)
        if self.held is None:
            command_folder(config.output_dir, "evaluate").check_path()
        for spec in specs:
            if spec not in self.made:
                check_model_name(spec)
        check_lexical_task_specs(specs, tasks)
        check_heldout_contract(specs, tasks, self.warn)

    def run(self, folder: Path) -> dict[str, Any]:
        """Take the output folder (``folder``, the configured one), score, and :attr:`present` the report."""
        from xprt_st.encode_backend import CACHE_DIR
        from xprt_st.evaluation.run import run_evaluation
        from xprt_st.output_folder import command_folder
        from xprt_st.stage_timing import stage

        del folder
        config = self.config
        with contextlib.ExitStack() as stack:
            if self.held is None:
                held = stack.enter_context(command_folder(config.output_dir, "evaluate"))
                if config.encode_backend != "torch":
                    held.record(CACHE_DIR)
            else:
                held = self.held
                held.record(str(Path(config.output_dir).relative_to(held.path)))
            with stage(f"evaluate: {', '.join(config.tasks)}"):
                self.report = run_evaluation(config)
            self.present(self.report, held)
        return {"models": list(self.report.models), "tasks": list(self.report.tasks)}
