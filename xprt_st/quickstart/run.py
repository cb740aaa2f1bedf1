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

from dataclasses import asdict
from pathlib import Path
from typing import Any

from xprt_st.fingerprint import FingerprintError
from xprt_st.output_folder import OutputFolder, command_folder
from xprt_st.pipeline import plan as stage_actions
from xprt_st.pipeline import run_pipeline
from xprt_st.pipeline.evaluate import EvaluateStage
from xprt_st.pipeline.heldout import HeldoutChecksStage
from xprt_st.pipeline.stage import Stage
from xprt_st.quickstart.config import (
    MINED,
    MODEL,
    PACKAGED_DATA,
    QUICKSTART_CORPUS,
    QuickstartConfig,
    QuickstartInputError,
    QuickstartPlan,
)
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
from xprt_st.quickstart.stages import (
    HardNegativesSettings,
    MinedSettings,
    ModelSettings,
    ScoresSettings,
    after_merge,
    hard_negatives_stage,
    heldout_stage,
    mined_stage,
    model_stage,
    scores_stage,
)
from xprt_st.quickstart.summary import write_summary
from xprt_st.recipe import load_recipe
from xprt_st.stage_timing import StageTimer, timing

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
    "plan_quickstart",
    "quickstart_stages",
    "run_quickstart",
]


def plan_quickstart(config: QuickstartConfig) -> QuickstartPlan:
    """The run's plan (:meth:`QuickstartConfig.plan`), once its inputs are checked (:func:`check_inputs`).

    Raises:
        QuickstartInputError: naming the option, the file and the problem.
    """
    plan = config.plan()
    check_inputs(plan)
    return plan


def quickstart_stages(plan: QuickstartPlan, folder: OutputFolder, progress: bool = True) -> list[Stage[Any]]:
    """The quickstart as stages (:mod:`xprt_st.quickstart.stages`), each given its settings from ``plan``'s config,
    writing into the held ``folder``: mine, hard negatives, train, the labelled scores (with a task), the held-out
    checks."""
    config = plan.config
    mining = MinedSettings(
        sources=tuple(plan.sources),
        fields=plan.mining_fields,
        holdout=config.holdout,
        seed=config.seed,
        model=config.model,
        threshold_quantile=config.threshold_quantile,
        max_tokens=config.max_seq_length,
        encode_backend=config.encode_backend,
        precision=config.encoding_precision,
        max_documents=None if config.corpus else config.max_documents,
    )
    negatives = HardNegativesSettings(
        after=after_merge(load_recipe(config.recipe), config.seed, config.encode_backend, config.encoding_precision),
        model=config.model,
        batch_size=config.batch_size,
        given="--corpus" if config.corpus else "the shipped pages",
    )
    training = ModelSettings(
        recipe=config.recipe,
        max_steps=config.max_steps,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        max_seq_length=config.max_seq_length,
        seed=config.seed,
        precision=config.precision,
        model=config.model,
    )
    scores = ScoresSettings(
        tasks=tuple(config.tasks),
        model=config.model,
        recipe=config.recipe,
        seed=config.seed,
        encode_backend=config.encode_backend,
        precision=config.encoding_precision,
    )
    mined = mined_stage(mining, plan.fingerprints[MINED], folder, progress)
    labelled = scores_stage(scores, folder)
    return [
        mined,
        hard_negatives_stage(negatives, mined, folder),
        model_stage(training, plan.fingerprints[MODEL], folder, progress),
        *([labelled] if labelled is not None else []),
        heldout_stage(scores, folder),
    ]


def check_folder(plan: QuickstartPlan, folder: OutputFolder) -> None:
    """Refuse, before any work, a rerun into the held ``folder`` that would reuse a stage made with other settings
    (the pipeline's one reuse policy, :func:`xprt_st.pipeline.plan`), or one the quickstart did not write (its
    manifest does not list it).

    Raises:
        QuickstartInputError: one line naming ``--output``, the stage and the ways on (``--overwrite`` or a new
            ``-o``).
    """
    output = Path(plan.config.output)
    own = folder.own()
    try:
        for stage in (MINED, MODEL):
            if stage not in own and ((output / stage).exists() or (output / stage).is_symlink()):
                raise FingerprintError(
                    f"{output / stage} was not written by xprt-st quickstart (its manifest does not list it), so it "
                    f"is not taken as its result; move it out of {output}, or give a new -o folder."
                )
        stage_actions(quickstart_stages(plan, folder), folder.path, option="-o")
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
    (:func:`check_folder`: the pipeline's reuse policy), and stops before any work otherwise. ``plan``: the run's
    checked plan (:func:`plan_quickstart`, then :func:`check_folder` on ``folder``), as the CLI makes it before its
    first line; without it both checks run here.

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


def _run(plan: QuickstartPlan, progress: bool, folder: OutputFolder, timer: StageTimer) -> dict[str, Any]:
    """:func:`run_quickstart` once the output folder is held and the plan checked: the stages through the pipeline,
    then ``summary.json`` from what they found."""
    from xprt_st.mining.config import MiningConfigError

    config = plan.config
    stages = quickstart_stages(plan, folder, progress)
    try:
        run_pipeline(stages, folder.path, option="-o")
    except MiningConfigError as error:  # OUTPUT/mined is another run's: its groups are kept, not mixed with these
        raise QuickstartInputError(
            f"--output {config.output}: {error.reason} Give a new --output folder, or delete {folder.path / MINED} "
            "to mine again."
        ) from error
    labelled = next((stage for stage in stages if isinstance(stage, EvaluateStage)), None)
    heldout = next(stage for stage in stages if isinstance(stage, HeldoutChecksStage))
    folder.record("summary.json")
    return write_summary(
        folder.path,
        labelled.report if labelled is not None else None,
        heldout.results,
        steps_given=config.max_steps,
        batch_size=config.batch_size,
        corpus=tuple(config.corpus),
        task=config.task,
        mining_fields=plan.mining_fields,
        config_record={key: str(v) if isinstance(v, Path) else v for key, v in asdict(config).items()},
        stages=timer.rows(),
    )
