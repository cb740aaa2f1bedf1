"""The comparison's steps: corpus, mining, every recipe per seed, evaluation; locks so processes share a folder,
resume. :func:`xprt_st.compare.command.run_compare` runs them as stages."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xprt_st.compare.config import (
    CONFIG_FILE,
    MODEL_SHAPING_KEYS,
    CompareConfig,
    CompareConfigError,
    resolve_compare_tasks,
)
from xprt_st.compare.corpus import CORPUS_FILE, build_corpus, corpus_problems, mining_settings
from xprt_st.compare.hybrids import evaluate_hybrid, hybrid_file, labelled_retrieval
from xprt_st.compare.results import REFERENCE_LABEL, START_LABEL, per_item_record
from xprt_st.compare.reuse import (
    CORPUS,
    check_inputs_unchanged,
    corpus_fingerprint,
    record_stage,
    scores_fingerprint,
    scores_stage,
)
from xprt_st.compare.variants import data_variant, prepare_mixed, prepare_variant
from xprt_st.fingerprint import dataset_identity

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

    from xprt_st.recipe import Recipe

logger = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
TIMINGS_FILE = "timings.json"


def _record_timing(run: Path, key: str, seconds: float) -> None:
    path = run / TIMINGS_FILE
    timings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    timings[key] = round(seconds, 1)
    path.write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")


def check_unchanged(config: CompareConfig, run: Path) -> None:
    """Refuse ``config`` when ``run`` was made with other :data:`MODEL_SHAPING_KEYS` values, before any work.

    Raises:
        CompareConfigError: naming every changed key with its old and new value, and what to do.
    """
    path = run / CONFIG_FILE
    if not path.is_file():
        return
    try:
        previous = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise CompareConfigError(f"{path} is not valid YAML ({error}); restore it or use another --output") from error
    current = json.loads(json.dumps(config.to_dict()))
    changed = [
        f"{key}: {previous[key]!r} -> {current[key]!r}"
        for key in MODEL_SHAPING_KEYS
        if key in previous and json.loads(json.dumps(previous[key])) != current[key]
    ]
    if changed:
        raise CompareConfigError(
            f"{run} was made with other settings ({path}):\n"
            + "\n".join(f"  - {line}" for line in changed)
            + f"\nIts mined data, trained models and scores belong to the old values and would be reported as the "
            f"new ones'. Use another --output, or delete {run} to start over."
        )


def _resolved_recipe(recipe_name: str, config: CompareConfig, seed: int) -> Recipe:
    from xprt_st.recipe import load_recipe

    return load_recipe(
        recipe_name,
        overrides=config.recipe_overrides(seed),
        setting=config.setting,
        override_labels=config.override_labels(),
    )


def _check_complete(
    folder: Path, resolved: dict[str, Any], trained_on: str | None = None, data: Path | None = None
) -> None:
    """Refuse a finished model trained with another resolved recipe (e.g. its YAML file was edited since), or on
    other data than ``data`` holds now (``trained_on``: :func:`~xprt_st.fingerprint.dataset_identity`; a marker
    written before markers recorded the data is not compared)."""
    marker = json.loads((folder / COMPLETE).read_text(encoding="utf-8") or "{}")
    if trained_on is not None and marker.get("data") not in (None, trained_on):
        raise CompareConfigError(
            f"{folder} was trained on other data than {data} holds now (it was written again since, e.g. by "
            "another version's mining rules); its scores would be reported as a model of this data. Delete "
            f"{folder} and its scores under scores/, or use another --output."
        )
    recorded = marker.get("resolved")
    if recorded is None:  # written before markers recorded the recipe
        return
    now = json.loads(json.dumps(resolved))
    # Where the YAML lives and its prose do not shape the model.
    keys = sorted({*recorded, *now} - {"source", "description"})
    changed = [key for key in keys if recorded.get(key) != now.get(key)]
    if changed:
        raise CompareConfigError(
            f"{folder} was trained with another recipe (differs in: {', '.join(changed)}); its scores would be "
            f"reported as this recipe's. Delete {folder} and its scores under scores/, or use another --output."
        )


def unfinished_run_problem(folder: Path) -> str | None:
    """Why ``folder`` (a model's ``seed-N/RECIPE``) may not be deleted as an unfinished run, or None when it may.

    compare deletes a model folder that is neither finished (its ``COMPLETE`` marker) nor resumable (a complete
    checkpoint) and trains again; it may only delete what ``xprt-st train`` provably wrote there: its manifest's
    names, its checkpoints, its lock and log. A user's own folder at that name (a model copy, notes) is not a run.
    """
    from xprt_st.output_folder import command_folder

    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return (
            f"{folder} is not a folder xprt-st compare made (a file or a link), where compare trains a model; "
            "move it away or use another --output"
        )
    if not folder.is_dir() or (folder / COMPLETE).is_file():
        return None
    foreign = command_folder(folder, "train").foreign()
    if not foreign:
        return None
    from xprt_st.training.checkpoints import last_complete_checkpoint

    if last_complete_checkpoint(folder) is not None:
        return None  # a run train resumes, keeping the files a user added beside it
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    return (
        f"{folder} holds files xprt-st did not write ({shown}) and no finished or resumable model; "
        "compare would delete it to train this recipe there. Move the folder away or use another --output"
    )


def _train(
    recipe_name: str, config: CompareConfig, seed: int, data: Path, output: Path, progress: bool, mined: Path
) -> None:
    from xprt_st.pipeline.stages import RecipeRun, train_into
    from xprt_st.training.checkpoints import continuation

    recipe = _resolved_recipe(recipe_name, config, seed)
    how = continuation(output)
    if how == "resume":
        logger.info("%s: resuming from its last complete checkpoint", output)
    elif how == "restart":
        # Neither finished (no COMPLETE marker) nor resumable: left by a run killed before its first checkpoint, and
        # removed only when it holds nothing but what train wrote (checked before any work; again here, as a user
        # may have put files there since).
        problem = unfinished_run_problem(output)
        if problem is not None:
            raise CompareConfigError(problem)
        logger.info("%s: removing an unfinished run without a complete checkpoint", output)
        shutil.rmtree(output)
        how = "train"
    # every recipe's retention term reads the mined (anchor, positive): the same text, as in the paper; the structure
    # recipes' rows are other groups (titles and headings), so theirs reads their own pairs
    retention_data = None if data.name.startswith("structure") else mined
    run = RecipeRun(recipe=lambda: recipe, data=data, retention_data=retention_data)
    train_into(output, run, how, progress=progress, recipe=recipe)


def _evaluate(
    model_spec: str | Path | None,
    label: str,
    tasks: Sequence[Any],
    config: CompareConfig,
    cache_dir: Path,
    scores_file: Path,
) -> dict[str, Any]:
    from xprt_st.evaluation.run import evaluate_models
    from xprt_st.models import load_model

    if scores_file.is_file():
        return json.loads(scores_file.read_text(encoding="utf-8"))
    model = load_model(None if model_spec is None else str(model_spec), device=config.device)
    # Same token limit for every model: training saves its own max_seq_length into the folder.
    model.max_seq_length = config.eval_max_seq_length
    report = evaluate_models(
        [model],
        list(tasks),
        labels=[label],
        batch_size=config.eval_batch_size,
        cache_dir=cache_dir,
        precision=config.evaluation_precision().precision,
    )
    payload = {
        "model": str(model_spec) if model_spec is not None else "default",
        "scores": {task: report.score(label, task) for task in report.tasks},
        "metrics": {task: report.metric(task) for task in report.tasks},
        "per_item": per_item_record(report, label),
        **report.precision,
    }
    scores_file.parent.mkdir(parents=True, exist_ok=True)
    scores_file.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return payload


def _held_elsewhere(lock: Path) -> bool:
    """Whether another live process holds the recipe lock ``lock`` (:func:`_claim`'s)."""
    try:
        owner = int(lock.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return False
    if owner in (0, os.getpid()):
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(lock: Path) -> Path | None:
    """Take ``lock`` (holding this process id) unless a live process holds it; None when it is held.

    Several ``xprt-st compare`` processes may then share one run folder (e.g. one per seed, or the same
    recipe list in another order) without training the same recipe twice.
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = int(lock.read_text(encoding="utf-8").strip() or 0)
                os.kill(owner, 0)
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)  # left by a killed process
                continue
            except PermissionError:
                return None
            return None
        os.write(handle, str(os.getpid()).encode())
        os.close(handle)
        return lock
    return None


def _train_and_evaluate(
    name: str,
    label: str,
    seed: int,
    folder: Path,
    data: Path,
    tasks: Sequence[Any],
    config: CompareConfig,
    run: Path,
    cache_dir: Path,
    progress: bool,
) -> None:
    resolved = _resolved_recipe(name, config, seed).to_dict()
    trained_on = dataset_identity(data)
    if (folder / COMPLETE).is_file():
        _check_complete(folder, resolved, trained_on, data)
    else:
        started = time.perf_counter()
        logger.info("seed %d: training %s", seed, label)
        _train(name, config, seed, data, folder, progress, mined=run / "mined")
        marker = {"recipe": name, "seed": seed, "resolved": resolved, "data": trained_on}
        (folder / COMPLETE).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        _record_timing(run, f"seed {seed} train {label}", time.perf_counter() - started)
    scores_file = run / "scores" / config.evaluation_key() / f"seed-{seed}" / f"{label}.json"
    if not scores_file.is_file():
        started = time.perf_counter()
        _evaluate(folder, label, tasks, config, cache_dir, scores_file)
        _record_timing(run, f"seed {seed} evaluate {label}", time.perf_counter() - started)
    started = time.perf_counter()
    if evaluate_hybrid(config, str(folder), label, hybrid_file(run, config, label, seed), tasks, cache_dir):
        _record_timing(run, f"seed {seed} evaluate hybrid {label}", time.perf_counter() - started)


def data_folders(config: CompareConfig, run: Path) -> dict[str, Path]:
    """Each recipe's training data folder in ``run`` (by recipe name, and by data variant), without making any."""
    from xprt_st.recipe import load_recipe

    mined = run / "mined"
    folders: dict[str, Path] = {}
    for name in config.recipes:
        recipe = load_recipe(name, setting=config.setting, override_labels=config.override_labels())
        variant, _ = data_variant(recipe.data.requires)
        folders[name] = {"mined": mined, "structure": mined / "structure"}.get(variant, run / "data" / variant)
    return folders


def prepare_data(config: CompareConfig, run: Path, *, progress: bool = True) -> dict[str, Path]:
    """Build ``run``'s corpus, mine it and make every recipe's data variant (each stage skipped when done).

    Returns:
        :func:`data_folders`: each recipe's training data folder, all made.
    """
    from xprt_st.mining import mine
    from xprt_st.mining.layout import read_stats
    from xprt_st.recipe import load_recipe

    started = time.perf_counter()
    fresh_corpus = not (run / "corpus" / CORPUS_FILE).is_file()
    corpus_stats = build_corpus(config, run / "corpus")
    if fresh_corpus:
        record_stage(run, CORPUS, corpus_fingerprint(config))
    mined = run / "mined"
    fresh = read_stats(mined) is None
    # On complete shards this only re-merges (seconds), so a changed threshold applies without re-encoding.
    mining_stats = mine(
        [run / "corpus" / CORPUS_FILE],
        mined,
        model=config.mining_model or config.model,
        progress=progress,
        **mining_settings(config),
    )
    if fresh:
        _record_timing(run, "corpus+mining", time.perf_counter() - started)
    logger.info(
        "mining: %d groups from %d of %d documents (threshold %s)",
        mining_stats["groups"],
        mining_stats["documents_with_groups"],
        mining_stats["documents"],
        mining_stats["threshold"],
    )
    logger.info("corpus: %d documents", corpus_stats["documents"])

    folders = data_folders(config, run)
    _check_structure_pairs(folders, mined, mining_stats)
    made: set[Path] = {mined, mined / "structure"}
    for name in config.recipes:
        folder = folders[name]
        if folder in made:
            continue
        recipe = load_recipe(name, setting=config.setting, override_labels=config.override_labels())
        variant, options = data_variant(recipe.data.requires)
        model = config.mining_model or config.model
        if variant.startswith("structure-mixed"):
            prepare_mixed(run, mined, folder, options, config.corpus_seed, progress, model)
        else:
            prepare_variant(mined, folder, options, config.corpus_seed, progress, model=model)
        made.add(folder)
    return folders


def _check_structure_pairs(folders: dict[str, Path], mined: Path, mining_stats: dict[str, Any]) -> None:
    """Refuse recipes that train on structure pairs when mining found none (kept: a rerun without them reuses it)."""
    needing = [
        name
        for name, folder in folders.items()
        if folder == mined / "structure" or folder.name.startswith("structure-mixed")
    ]
    if not needing or (mined / "structure").is_dir():
        return
    structure = mining_stats.get("structure") or {}
    dropped = {kind: sum(reasons.values()) for kind, reasons in (structure.get("dropped") or {}).items()}
    found = f" ({', '.join(f'{count} {kind}s dropped' for kind, count in dropped.items())})" if dropped else ""
    raise CompareConfigError(
        f"{', '.join(needing)} train on structure pairs, and the corpus has none: "
        f"{structure.get('note', 'no titles, headings or links were found')}{found}; see {mined / 'stats.json'}. "
        "The mining is kept: remove these recipes and run again to train the others on it."
    )


def evaluate_start(config: CompareConfig, run: Path, tasks: Sequence[Any]) -> None:
    """Score the starting model on ``tasks`` into ``run/scores`` (once: a scored start is kept)."""
    start_file = run / "scores" / config.evaluation_key() / f"{START_LABEL}.json"
    if not start_file.parent.exists():
        record_stage(run, scores_stage(config), scores_fingerprint(tasks))
    if not start_file.is_file():
        started = time.perf_counter()
        _evaluate(config.model, START_LABEL, tasks, config, _cache_dir(config, run), start_file)
        _record_timing(run, "evaluate start", time.perf_counter() - started)


def evaluate_reference(config: CompareConfig, run: Path, tasks: Sequence[Any]) -> None:
    """Score BM25 (:mod:`xprt_st.evaluation.lexical`) on the retrieval tasks with labels into ``run/scores`` (once):
    the lexical reference line of the report, kept out of every mean (it has no score on an STS task)."""
    from xprt_st.evaluation.run import evaluate_models

    retrieval = labelled_retrieval(tasks)
    reference_file = run / "scores" / config.evaluation_key() / f"{REFERENCE_LABEL}.json"
    if not retrieval or reference_file.is_file():
        return
    started = time.perf_counter()
    report = evaluate_models([REFERENCE_LABEL], retrieval, labels=[REFERENCE_LABEL], cache_dir=_cache_dir(config, run))
    payload = {
        "model": REFERENCE_LABEL,
        "scores": {task: report.score(REFERENCE_LABEL, task) for task in report.tasks},
        "metrics": {task: report.metric(task) for task in report.tasks},
        "per_item": per_item_record(report, REFERENCE_LABEL),
    }
    reference_file.parent.mkdir(parents=True, exist_ok=True)
    reference_file.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    _record_timing(run, "evaluate bm25", time.perf_counter() - started)


def evaluate_start_hybrid(config: CompareConfig, run: Path, tasks: Sequence[Any]) -> None:
    """Score the start fused with BM25 on the retrieval tasks (once): the hybrid each recipe's hybrid is compared
    with (:mod:`xprt_st.compare.hybrids`)."""
    started = time.perf_counter()
    target = hybrid_file(run, config, START_LABEL)
    if evaluate_hybrid(config, config.model or "default", START_LABEL, target, tasks, _cache_dir(config, run)):
        _record_timing(run, "evaluate hybrid start", time.perf_counter() - started)


def _cache_dir(config: CompareConfig, run: Path) -> Path:
    return run / "eval-cache" / config.evaluation_key()


def train_one(
    config: CompareConfig,
    run: Path,
    name: str,
    seed: int,
    data: Path,
    tasks: Sequence[Any],
    *,
    progress: bool = True,
) -> bool:
    """Train recipe ``name`` with ``seed`` on ``data`` and score it, unless done; False when another process holds it.

    Several processes may call this on one run folder at once (one per recipe and seed, say): a lock per recipe and
    seed keeps each model trained once.
    """
    label = Path(name).stem
    folder = run / f"seed-{seed}" / label
    lock = _claim(run / f"seed-{seed}" / f".{label}.lock")
    if lock is None:
        return False
    try:
        _train_and_evaluate(name, label, seed, folder, data, tasks, config, run, _cache_dir(config, run), progress)
    finally:
        lock.unlink(missing_ok=True)
    return True


def check_compare_inputs(config: CompareConfig, output: str | Path, report_only: bool = False) -> list[AbsTask]:
    """Everything a comparison reads, checked before any work; returns the resolved evaluation tasks.

    Raises:
        CompareConfigError: ``output`` made with other settings (:func:`check_unchanged`) or inputs
            (:func:`~xprt_st.compare.reuse.check_inputs_unchanged`), a task that cannot be loaded, or (unless
            ``report_only``) a corpus source that cannot be read, each in one line.
    """
    from xprt_st.evaluation.readers import TaskLoadError

    run = Path(output)
    check_unchanged(config, run)
    try:
        tasks = resolve_compare_tasks(config)
    except TaskLoadError as error:
        raise CompareConfigError(f"tasks: {error}") from error
    check_inputs_unchanged(config, run, tasks)
    problems = [] if report_only else corpus_problems(config, run / "corpus")
    if not report_only:
        for seed in config.seeds:
            for name in config.recipes:
                label = Path(name).stem
                if _held_elsewhere(run / f"seed-{seed}" / f".{label}.lock"):
                    continue  # being trained by another compare process, whose files appear as it goes
                problem = unfinished_run_problem(run / f"seed-{seed}" / label)
                if problem is not None:
                    raise CompareConfigError(problem)
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise CompareConfigError(f"{len(problems)} problem(s) in the corpus:\n{lines}")
    return tasks
