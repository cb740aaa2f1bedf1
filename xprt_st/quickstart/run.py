"""The quickstart: mine, pre-train briefly and evaluate before and after, offline, on shipped data or yours.

It walks adoption step 1 of the paper ("change only the positive") on a real corpus that ships with the
package: 100 pages of the Python documentation as raw HTML (navigation, search boxes and footers
included). Evaluation uses ``python-faq``, a retrieval task built from the documentation's FAQ pages,
which are held out of the corpus. A seeded tenth of the pages is also held out of training (``mine
--holdout``) for the label-free check, scored on the starting and the trained model. Everything runs on
the offline default model in a few minutes on two CPU cores.

On a user's corpus (``QuickstartConfig.corpus``, ``xprt-st quickstart --corpus FILE...``) the same loop runs
there: mine it with the label-free holdout, train the recipe with the same defaults (:data:`DEFAULTS`),
and compare the start with the result on the user's labelled BEIR folder when one is given
(``task``) and on the label-free check always. Every input is checked before any model loads
(:func:`plan_quickstart`).
"""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from xprt_st.errors import XPRTError
from xprt_st.evaluation.bootstrap import GAIN, interval_fields, paired_interval, retrieval_items
from xprt_st.evaluation.lexical import BM25
from xprt_st.evaluation.run import EvaluationReport, evaluate_models
from xprt_st.fingerprint import FingerprintError
from xprt_st.mining import mine
from xprt_st.mining.after_merge import AfterMerge, finish_mining, has_hard_negatives
from xprt_st.mining.config import MiningConfigError
from xprt_st.output_folder import OutputFolder, command_folder
from xprt_st.quickstart.config import MINED, MODEL, PACKAGED_DATA, QUICKSTART_CORPUS, QuickstartConfig, QuickstartPlan
from xprt_st.quickstart.defaults import (
    DEFAULTS,
    HOLDOUT,
    LABEL_FREE_NOTE,
    LOSS_NOTE,
    NO_GAIN_NOTE,
    QuickstartDefaults,
    closing_note,
    corpus_steps,
)
from xprt_st.quickstart.notes import passes_note, task_corpus_note, task_corpus_overlap, training_passes
from xprt_st.quickstart.reuse import check_reuse, start_stage
from xprt_st.recipe import Recipe, load_recipe
from xprt_st.stage_timing import StageTimer, stage, timing
from xprt_st.training import train_recipe

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULTS",
    "HOLDOUT",
    "LABEL_FREE_NOTE",
    "LOSS_NOTE",
    "NO_GAIN_NOTE",
    "PACKAGED_DATA",
    "QUICKSTART_CORPUS",
    "QuickstartConfig",
    "QuickstartDefaults",
    "QuickstartInputError",
    "QuickstartPlan",
    "check_folder",
    "check_inputs",
    "closing_note",
    "corpus_steps",
    "label_free_summary",
    "plan_quickstart",
    "run_quickstart",
    "titles_summary",
]


class QuickstartInputError(XPRTError, ValueError):
    """A user corpus or task given to the quickstart cannot be used; the message names the option and the file."""


def plan_quickstart(config: QuickstartConfig) -> QuickstartPlan:
    """The run's plan (:meth:`QuickstartConfig.plan`), once its inputs are checked (:func:`check_inputs`).

    Raises:
        QuickstartInputError: naming the option, the file and the problem.
    """
    plan = config.plan()
    check_inputs(plan)
    return plan


def check_folder(plan: QuickstartPlan, folder: OutputFolder) -> None:
    """Refuse, before any work, a rerun into the held ``folder`` whose stages were made with other settings, or not
    by the quickstart (:func:`xprt_st.quickstart.reuse.check_reuse`).

    Raises:
        QuickstartInputError: one line naming ``--output``, the stage and the ways on (``--overwrite`` or a new
            ``-o``).
    """
    try:
        check_reuse(folder.path, folder, plan.fingerprints)
    except FingerprintError as error:
        raise QuickstartInputError(f"--output {plan.config.output}: {error}") from error


def check_inputs(plan: QuickstartPlan) -> None:
    """Fail in one line, before any model loads, on a user corpus or task of ``plan`` that cannot be used.

    Checks that each corpus source opens and its first record has the text (and id, and title) field
    (:func:`xprt_st.mining.reader.check_sources`), and that the BEIR folder has its three files with ids that match
    (:func:`xprt_st.evaluation.readers.read_beir_folder`).

    Raises:
        QuickstartInputError: naming the option, the file and the problem.
    """
    from xprt_st.evaluation.readers import TaskLoadError, read_beir_folder
    from xprt_st.mining.config import MiningConfig, MiningError
    from xprt_st.mining.reader import CorpusError, check_sources

    config = plan.config
    if not config.corpus:
        given = [name for name in ("task", "text_field", "id_field", "title_field") if getattr(config, name)]
        given += ["html"] if config.html else []
        if given:
            options = ", ".join("--" + name.replace("_", "-") for name in given)
            raise QuickstartInputError(f"{options}: only with --corpus FILE... (your documents)")
        return
    try:
        mining = MiningConfig(**plan.mining_fields)
        check_sources(
            list(config.corpus),
            text_field=mining.resolved_text_field,
            id_field=mining.id_field,
            fallback_text_field=mining.fallback_text_field,
            html=mining.html,
            title_field=mining.title_field,
        )
    except (CorpusError, MiningError) as error:
        raise QuickstartInputError(f"--corpus: {error}") from error
    if config.task is not None:
        try:
            read_beir_folder(config.task, "test")
        except TaskLoadError as error:
            raise QuickstartInputError(f"--task {config.task}: {error}") from error


def after_merge(config: QuickstartConfig, recipe: Recipe) -> AfterMerge:
    """The chain after the merge for ``recipe``: the hard negatives it reads (``change-only-positive-hard``), drawn
    with the quickstart's seed and backend, as ``xprt-st mine --hard-negatives K --seed S`` draws them."""
    count = int(recipe.data.requires.get("hard_negatives", 0) or 0)
    return AfterMerge(
        hard_negatives=count,
        seed=config.seed,
        encode_backend=config.encode_backend,
        precision=config.encoding_precision,
    )


def _add_hard_negatives(mined: Path, recipe: Recipe, config: QuickstartConfig) -> None:
    """Give the mined groups the hard-negative columns the recipe reads, unless the folder has them already."""
    steps = after_merge(config, recipe)
    if steps.hard_negatives and not has_hard_negatives(mined, steps.hard_negatives, steps.max_ratio):
        with stage("hard negatives"):
            finish_mining(mined, steps, model=config.model)


def run_quickstart(
    config: QuickstartConfig,
    progress: bool = True,
    folder: OutputFolder | None = None,
    timer: StageTimer | None = None,
    plan: QuickstartPlan | None = None,
) -> dict[str, Any]:
    """Mine the shipped corpus, train ``config.recipe`` briefly, evaluate before and after.

    ``folder`` is the held output folder (the CLI takes it before any work); without it the folder is taken here. A
    rerun into the same folder reuses ``mined/`` and ``model/`` only when they were made with the same settings
    (:mod:`xprt_st.quickstart.reuse`), and stops before any work otherwise. ``plan``: the run's checked plan
    (:func:`plan_quickstart`, then :func:`check_folder` on ``folder``), as the CLI makes it before its first line;
    without it both checks run here.

    Returns:
        ``{"mining": stats, "scores": {model: {task: score}}, "gain": {task: after - before},
        "interval": {task: {"ci_low", "ci_high", "verdict"}}, "gained": bool}``, also written to
        ``OUTPUT/summary.json``; the report files are in ``OUTPUT/evaluation``. ``interval`` is the gain's
        paired bootstrap 95% interval over the task's queries; ``gained`` is True only when every task's
        interval lies above 0. ``label_free`` is :func:`label_free_summary` on the pages held out of
        training (None with ``holdout`` 0), ``titles`` :func:`titles_summary` on their titles and headings
        (None without). ``stages`` is the table of ``timer`` (:class:`~xprt_st.stage_timing.StageTimer`; a new one
        without it): per stage its wall and CPU seconds and whether it reused an encoding, ``other`` being the
        time between stages (checks, loading the recipe, writing files).
    """
    if plan is None:  # the CLI passes its plan, checked against its held folder before its first line
        plan = plan_quickstart(config)
        if folder is not None:
            check_folder(plan, folder)
    timer = StageTimer() if timer is None else timer
    with timing(timer), timer.stage("other"):
        if folder is None:
            with command_folder(config.output, "quickstart") as held:
                check_folder(plan, held)
                return _run(plan, progress, held, timer)
        return _run(plan, progress, folder, timer)


def mine_documents(
    config: QuickstartConfig, corpus: list[str | Path], mined: Path, progress: bool, mining_fields: dict[str, Any]
) -> dict[str, Any]:
    """Mine ``corpus`` into ``mined`` with the quickstart's settings (what ``xprt-st mine`` writes given the same
    options); the hard negatives a recipe reads follow in :func:`_add_hard_negatives`.

    Raises:
        QuickstartInputError: ``mined`` holds another run's mining (kept, not mixed with this one).
    """
    try:
        with stage("mine"):
            return mine(
                corpus,
                mined,
                **mining_fields,
                holdout=config.holdout,
                model=config.model,
                threshold_quantile=config.threshold_quantile,
                max_tokens=config.max_seq_length,
                seed=config.seed,
                encode_backend=config.encode_backend,
                precision=config.encoding_precision,
                progress=progress,
            )
    except MiningConfigError as error:  # OUTPUT/mined is another run's: its groups are kept, not mixed with these
        raise QuickstartInputError(
            f"--output {config.output}: {error.reason} Give a new --output folder, or delete {mined} to mine again."
        ) from error


def _run(plan: QuickstartPlan, progress: bool, folder: OutputFolder, timer: StageTimer) -> dict[str, Any]:
    """:func:`run_quickstart` once the output folder is held and the plan checked."""
    config = plan.config
    output = Path(config.output)
    mined = output / "mined"
    corpus = plan.sources
    start_stage(folder, MINED, plan.fingerprints[MINED])
    if not config.corpus and config.max_documents is not None:
        folder.record("corpus-subset.jsonl")
        corpus = [_first_documents(QUICKSTART_CORPUS, config.max_documents, output / "corpus-subset.jsonl")]
    stats = mine_documents(config, corpus, mined, progress, plan.mining_fields)
    model_dir = output / "model"
    trained = (model_dir / "modules.json").is_file()
    groups = int(stats.get("groups", 0))
    if not trained and groups < config.batch_size:
        given = "--corpus" if config.corpus else "the shipped pages"
        raise QuickstartInputError(
            f"{given}: {groups} groups were mined ({mined}), fewer than the {config.batch_size} of one step "
            f"(--batch-size); give more documents or --batch-size {max(2, groups)} (the same --output reuses "
            "the mining)"
        )
    if config.max_steps is None:  # a user corpus without --max-steps: the default, at most one pass
        config = replace(config, max_steps=corpus_steps(groups, config.batch_size))
        if config.max_steps < DEFAULTS.corpus_max_steps:
            logger.warning(
                "%d groups were mined: training %d steps of %d, one pass over them, instead of the default %d "
                "(--max-steps sets it)", groups, config.max_steps, config.batch_size, DEFAULTS.corpus_max_steps,
            )  # fmt: skip
    recipe = load_recipe(
        config.recipe,
        overrides={
            "training.max_steps": config.max_steps,
            "training.batch_size": config.batch_size,
            "training.learning_rate": config.learning_rate,
            "training.max_seq_length": config.max_seq_length,
            "training.seed": config.seed,
            "training.save_steps": config.max_steps,
            "training.precision": config.precision,
            **({"training.model": config.model} if config.model else {}),
        },
    )
    _add_hard_negatives(mined, recipe, config)
    notes, overlap = run_notes(config, groups, plan.mining_fields)
    if "passes" in notes:
        logger.warning("%s", notes["passes"])
    if not trained:
        # the fingerprint records the steps as given (None: the default that follows from mined/)
        start_stage(folder, MODEL, plan.fingerprints[MODEL])
        with stage("train"):
            train_recipe(recipe, data=mined, output=model_dir, progress=progress)
    tasks = list(config.tasks)
    report = None
    if tasks:
        folder.record("evaluation")
        with stage(f"evaluate: {', '.join(tasks)}"):
            report = evaluate_models(  # BM25 as the reference line: seconds on a task, and the first question
                [config.model, model_dir, BM25],
                tasks,
                labels=["starting model", f"after {config.recipe}", BM25],
                seed=config.seed,
                cache_dir=output / "evaluation" / "cache",
                show_progress=False,
                encode_backend=config.encode_backend,
                backend_cache=mined,
                precision=config.encoding_precision,
            )
        report.write(output / "evaluation")
    summary = _summary(report, stats, config)
    encoding = {"encode_backend": config.encode_backend, "precision": config.encoding_precision}
    summary["label_free"] = label_free_summary(mined, config.model, model_dir, **encoding)
    summary["titles"] = titles_summary(mined, config.model, model_dir, **encoding)
    summary["training_passes"] = round(training_passes(config.max_steps, config.batch_size, groups), 3)
    summary["notes"] = notes
    summary["task_corpus_overlap"] = overlap
    summary["stages"] = timer.rows()
    folder.record("summary.json")
    (output / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def run_notes(
    config: QuickstartConfig, groups: int, mining_fields: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The notes on what the run's figures mean (``summary.json``'s ``notes``), and the task's corpus overlap.

    ``passes`` when the steps make more than one pass over the ``groups`` mined groups; ``task_corpus`` when
    ``--task`` ranks mostly other documents than the ``--corpus`` trained on. The overlap (``summary.json``'s
    ``task_corpus_overlap``) is None without both. See :mod:`xprt_st.quickstart.notes`.
    """
    notes: dict[str, str] = {}
    passes = passes_note(int(config.max_steps or 0), config.batch_size, groups)
    if passes is not None:
        notes["passes"] = passes
    overlap = None
    if config.corpus and config.task is not None:
        overlap = task_corpus_overlap(config.task, list(config.corpus), mining_fields)
        other = task_corpus_note(str(config.task), overlap)
        if other is not None:
            notes["task_corpus"] = other
    return notes, overlap


def titles_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """``titles:DIR`` of ``trained`` against ``start``: the held-out titles and headings as queries, or None.

    The record of :func:`xprt_st.evaluation.titles.comparison_record` (both nDCG@10 scores, the difference and
    its paired interval over queries), how many of its queries are plain-text ``first_lines``, and the task's
    ``caveat`` when it has one (few queries, or first lines as its titles); None when mining kept fewer than 2
    titles or headings (a corpus without them). People wrote titles and headings, not the mining model, so unlike
    the label-free check of :func:`label_free_summary` the task does not favour the miner (docs/results.md,
    section 12).
    """
    from xprt_st.encode_backend import load_encoder
    from xprt_st.evaluation.label_free import HeldOutError
    from xprt_st.evaluation.titles import comparison_record, load_titles_task, score_model

    try:
        task = load_titles_task(mined)
    except HeldOutError:  # no held-out part, or no titles in it (NoTitlesError)
        return None
    with stage("titles: start"):
        before = score_model(load_encoder(start, encode_backend, mined, precision=precision), task)
    with stage("titles: trained"):
        after = score_model(load_encoder(trained, encode_backend, mined, precision=precision), task)
    record = comparison_record(after.per_query, before.per_query) | {"first_lines": task.first_lines}
    return record | ({"caveat": task.caveat} if task.caveat else {})


def label_free_summary(
    mined: Path, start: str | None, trained: Path, encode_backend: str = "torch", precision: str = "fp32"
) -> dict[str, Any] | None:
    """The label-free check of ``trained`` against ``start`` on the held-out part of ``mined``, or None without one.

    The record of :func:`xprt_st.evaluation.label_free.comparison`: both nDCG@10 scores, the difference with
    its paired bootstrap interval, and the 10-NN overlap with the start. The training run wrote it to
    ``trained/label_free.json`` when it trained on ``mined``; it is read from there rather than encoded again.
    When the held-out part holds fewer than 2 anchors (a small corpus's draw), the record is
    ``{"queries": n, "skipped": why}`` instead.
    """
    from xprt_st.encode_backend import load_encoder
    from xprt_st.evaluation.label_free import (
        TooFewAnchorsError,
        comparison,
        load_heldout_task,
        read_heldout,
        score_model,
    )
    from xprt_st.training.label_free import RESULT_FILE

    if read_heldout(mined) is None:
        return None
    try:
        heldout = load_heldout_task(mined)
    except TooFewAnchorsError as error:
        return {"queries": error.anchors, "skipped": str(error)}
    written = Path(trained) / RESULT_FILE
    if written.is_file():
        record = json.loads(written.read_text(encoding="utf-8"))
        same_data = Path(record.get("data", "")).resolve() == Path(mined).resolve()
        if same_data and record.get("queries") == len(heldout.queries):
            return record
    with stage("label-free: start"):
        before = score_model(load_encoder(start, encode_backend, mined, precision=precision), heldout)
    with stage("label-free: trained"):
        after = score_model(load_encoder(trained, encode_backend, mined, precision=precision), heldout)
    return comparison(after, before)


def _first_documents(source: Path, count: int, target: Path) -> Path:
    """Copy the first ``count`` records of the gzipped JSONL ``source`` into ``target`` (plain JSONL)."""
    if count < 1:
        raise ValueError(f"max_documents must be at least 1, got {count}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as reader, target.open("w", encoding="utf-8") as writer:
        for _, line in zip(range(count), reader, strict=False):
            writer.write(line)
    return target


def _summary(report: EvaluationReport | None, stats: dict[str, Any], config: QuickstartConfig) -> dict[str, Any]:
    config_record = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    if report is None:  # a user corpus without a labelled task: the label-free check is the only comparison
        return {"config": config_record, "mining": stats, "scores": {}, "gain": {}, "interval": {}, "gained": None}
    before, after = report.models[:2]
    scores = {model: {task: report.score(model, task) for task in report.tasks} for model in (before, after)}
    intervals, over_bm25 = {}, {}
    for task in report.tasks:
        per_query = report.per_query.get(task, {})
        interval = reference = None
        if before in per_query and after in per_query:
            interval = paired_interval(retrieval_items(per_query[after], per_query[before]))
        if after in per_query and BM25 in per_query:
            reference = paired_interval(retrieval_items(per_query[after], per_query[BM25]))
        intervals[task] = interval_fields(interval)
        over_bm25[task] = interval_fields(reference) | {"difference": None if reference is None else reference.estimate}
    return {
        "config": config_record,
        "mining": stats,
        "scores": scores,
        "gain": {task: scores[after][task] - scores[before][task] for task in report.tasks},
        "interval": intervals,
        "gained": all(fields["verdict"] == GAIN for fields in intervals.values()),
        # the lexical reference (xprt_st.evaluation.lexical): BM25's score and the trained model's difference from it
        "bm25": {
            "scores": {task: report.score(BM25, task) for task in report.tasks} if BM25 in report.models else {},
            "after_minus_bm25": over_bm25,
        },
    }
