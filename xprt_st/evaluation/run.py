"""Evaluate one or more models side by side through mteb, into one table of scores.

Each model gets its own mteb result key: the name ``xprt-st/<label>`` and, as revision, a hash of its
weights. Cached results are therefore reused only for the very same weights on the very same task data
(local tasks carry a data fingerprint in their name), and never mix between models.

Example:
    >>> from xprt_st.evaluation import evaluate_models
    >>> report = evaluate_models([None], ["python-faq"], max_queries=20, max_corpus=40)  # doctest: +SKIP
    >>> report.score("all-MiniLM-L6-v2", "python-faq")  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers import SentenceTransformer

from xprt_st.encode_backend import backend_of, use_encode_backend
from xprt_st.errors import XPRTError
from xprt_st.evaluation.catalog import resolve_tasks
from xprt_st.evaluation.lexical import (
    check_lexical_spec,
    is_lexical_spec,
    lexical_label,
    parse_lexical_spec,
)
from xprt_st.evaluation.model_kinds import MODEL_KINDS
from xprt_st.evaluation.tasks import PER_PAIR_KEY, PER_QUERY_KEY, task_label
from xprt_st.models import is_default_model, load_model
from xprt_st.precision import precision_of, resolve_precision, use_precision

if TYPE_CHECKING:
    from rich.table import Table

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "XPRT_CACHE_DIR"
"""Environment variable that overrides the default mteb result cache of xprt-st."""


def default_cache_dir() -> Path:
    """``$XPRT_CACHE_DIR`` when set, else ``~/.cache/xprt-st/mteb``."""
    return Path(os.environ.get(CACHE_DIR_ENV, Path.home() / ".cache" / "xprt-st" / "mteb"))


def model_fingerprint(model: SentenceTransformer) -> str:
    """A short hash of what decides the model's embeddings: its weights, its modules with their settings (the
    pooling mode, ...), its token limit, its prompts, a non-torch encode backend and a bf16 precision. It is the
    revision of its mteb result key, so a folder whose pooling or ``max_seq_length`` was changed in place is scored
    again, not read from the cache."""
    digest = hashlib.sha1()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
    modules = [(type(module).__name__, getattr(module, "get_config_dict", dict)()) for module in model]
    digest.update(repr([modules, model.max_seq_length, sorted(model.prompts.items())]).encode())
    backend = backend_of(model)
    if backend != "torch":  # another runtime's scores are not torch's bits
        digest.update(backend.encode())
    if precision_of(model) != "fp32":  # bf16 scores are not fp32's (fp32 keys stay those of earlier runs)
        digest.update(precision_of(model).encode())
    return digest.hexdigest()[:16]


def model_label(spec: str | Path | SentenceTransformer | None) -> str:
    """The short name of a model in tables: the default's name, a path's last component, ``bm25``, or ``hybrid:``
    and its dense model's name."""
    lexical = parse_lexical_spec(spec)
    if lexical is not None:
        return lexical_label(str(spec), None if lexical.dense is None else model_label(lexical.dense))
    if not isinstance(spec, SentenceTransformer) and is_default_model(spec):
        return "all-MiniLM-L6-v2"
    if isinstance(spec, SentenceTransformer):
        return spec.model_card_data.model_name or "model"
    return Path(str(spec).rstrip("/")).name or str(spec)


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Make labels unique by appending ``-2``, ``-3`` ... to repeats, keeping the order."""
    seen: dict[str, int] = {}
    result = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        result.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return result


@dataclass
class TaskScore:
    """One model's main score on one task."""

    model: str
    task: str
    metric: str
    score: float
    model_key: str
    mteb_task: str


@dataclass
class EvaluationReport:
    """Scores of several models on several tasks.

    Attributes:
        models: model labels in the order given.
        tasks: task labels in the order given.
        scores: one :class:`TaskScore` per model and task.
        per_query: task label -> model label -> query id -> nDCG@10 (local retrieval tasks only).
        per_pair: task label -> model label -> ``{"cosine": [...], "gold": [...]}``, one value per pair in
            the task's order (local STS tasks only): what a paired bootstrap over pairs resamples.
        task_objects: task label -> the mteb task (local tasks keep their data for analyses).
        precision: the precision the models ran in and why (:meth:`xprt_st.precision.ResolvedPrecision.record`).
    """

    models: list[str]
    tasks: list[str]
    scores: list[TaskScore] = field(default_factory=list)
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    per_pair: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    task_objects: dict[str, Any] = field(default_factory=dict)
    precision: dict[str, str] = field(default_factory=dict)

    def score(self, model: str, task: str) -> float:
        """The main score of ``model`` on ``task``."""
        for row in self.scores:
            if row.model == model and row.task == task:
                return row.score
        raise KeyError(f"no score for model {model!r} on task {task!r}; models: {self.models}, tasks: {self.tasks}")

    def metric(self, task: str) -> str:
        """The main metric of ``task`` (e.g. ``ndcg_at_10``, ``cosine_spearman``)."""
        return next(row.metric for row in self.scores if row.task == task)

    @property
    def labelled_tasks(self) -> list[str]:
        """The tasks scored against labels: all but the label-free ones (:data:`LABEL_FREE_PREFIXES`)."""
        return [task for task in self.tasks if not is_label_free(task)]

    def wide_rows(self) -> list[dict[str, Any]]:
        """One dict per model: ``model``, one column per task (main score), and ``mean``.

        ``mean`` averages the labelled tasks only: a label-free score is a drift signal, not a verdict, and
        stays out of it (None when every task is label-free).
        """
        rows = []
        for model in self.models:
            values = {task: self.score(model, task) for task in self.tasks}
            labelled = [values[task] for task in self.labelled_tasks]
            rows.append({"model": model, **values, "mean": sum(labelled) / len(labelled) if labelled else None})
        return rows

    def differences(self, reference: str | None = None, models: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Each model after the first against the first, per task: the difference and its paired 95% interval
        (``reference`` and ``models`` choose other lines, e.g. each hybrid against the start's hybrid).

        The interval is the paired bootstrap over the task's queries (retrieval) or pairs (STS) of
        :mod:`xprt_st.evaluation.bootstrap`, as ``xprt-st compare`` and the quickstart report it. Tasks without
        per-item scores (an MTEB task run online) have no row.
        """
        from xprt_st.evaluation.bootstrap import paired_interval, retrieval_items, sts_items

        rows: list[dict[str, Any]] = []
        if reference is None:
            reference = self.models[0] if self.models else None
        for model in self.models[1:] if models is None else models:
            for task in self.tasks:
                queries, pairs = self.per_query.get(task, {}), self.per_pair.get(task, {})
                if model in queries and reference in queries:
                    items = retrieval_items(queries[model], queries[reference])
                elif model in pairs and reference in pairs:
                    gold = pairs[reference]["gold"]
                    items = sts_items(gold, pairs[model]["cosine"], pairs[reference]["cosine"])
                else:
                    continue
                interval = paired_interval(items)
                rows.append(
                    {
                        "model": model,
                        "reference": reference,
                        "task": task,
                        "difference": interval.estimate,
                        "ci_low": interval.low,
                        "ci_high": interval.high,
                        "items": interval.n_items,
                        "verdict": interval.verdict,
                        "label_free": is_label_free(task),
                    }
                )
        return rows

    def differences_table(self, rows: list[dict[str, Any]] | None = None) -> Table:
        """A rich table of :meth:`differences`: model minus the first model, with the paired 95% interval."""
        from rich.markup import escape
        from rich.table import Table

        rows = self.differences() if rows is None else rows
        reference = rows[0]["reference"] if rows else (self.models[0] if self.models else "")
        table = Table(
            title=f"Difference from {escape(reference)} (paired bootstrap 95% interval over queries or pairs)"
        )
        for column in ("model", "task", "difference", "95% interval", "verdict"):
            table.add_column(column, justify="right" if column in ("difference", "95% interval") else "left")
        for row in rows:
            verdict = row["verdict"] + (" (label-free: drift, not a verdict)" if row["label_free"] else "")
            table.add_row(
                escape(row["model"]),
                escape(row["task"]),
                f"{row['difference']:+.4f}",
                f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
                verdict,
            )
        return table

    def write_csv(self, path: str | Path) -> Path:
        """Long format: model, task, metric, score, model_key, mteb_task."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(TaskScore.__dataclass_fields__))
            writer.writeheader()
            for row in self.scores:
                writer.writerow(asdict(row))
        return path

    def write_json(self, path: str | Path) -> Path:
        """The scores (long format), the wide table, and the task metrics."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "models": self.models,
            "tasks": {task: self.metric(task) for task in self.tasks},
            "scores": [asdict(row) for row in self.scores],
            "table": self.wide_rows(),
            "mean_of": self.labelled_tasks,
            "differences": self.differences() if len(self.models) > 1 else [],
            **self.precision,
        }
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        return path

    def plot(self, path: str | Path) -> Path:
        """A grouped bar plot: one group per task, one bar per model, the main score on the y axis."""
        # A bare Figure draws without pyplot's global state, so a notebook's inline backend is left alone.
        from matplotlib.figure import Figure

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        width = 0.8 / max(1, len(self.models))
        fig = Figure(figsize=(max(4.0, 1.6 * len(self.tasks) + 1), 3.6))
        ax = fig.subplots()
        for index, model in enumerate(self.models):
            xs = [t + (index - (len(self.models) - 1) / 2) * width for t in range(len(self.tasks))]
            ys = [self.score(model, task) for task in self.tasks]
            ax.bar(xs, ys, width=width, label=model)
        ax.set_xticks(range(len(self.tasks)))
        ax.set_xticklabels([f"{task}\n({self.metric(task)})" for task in self.tasks], fontsize=8)
        ax.set_ylabel("main score")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return path

    def rich_table(self, title: str = "xprt-st evaluate") -> Table:
        """A rich table: models as rows, tasks (with their metric) as columns, plus the mean."""
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=title)
        table.add_column("model", style="bold")
        for task in self.tasks:
            table.add_column(f"{escape(task)}\n{self.metric(task)}", justify="right")
        free = [task for task in self.tasks if task not in self.labelled_tasks]
        table.add_column("mean" + ("\n(labelled)" if free else ""), justify="right")
        for row in self.wide_rows():
            mean = "-" if row["mean"] is None else f"{row['mean']:.4f}"
            table.add_row(escape(row["model"]), *[f"{row[task]:.4f}" for task in self.tasks], mean)
        if free:
            table.caption = (
                f"mean: of the labelled tasks; {escape(', '.join(free))} is label-free (a drift signal) and left out"
            )
        return table

    def write(self, output_dir: str | Path) -> dict[str, Path]:
        """Write ``scores.csv``, ``scores.json`` and ``scores.png`` into ``output_dir``."""
        output_dir = Path(output_dir)
        return {
            "csv": self.write_csv(output_dir / "scores.csv"),
            "json": self.write_json(output_dir / "scores.json"),
            "png": self.plot(output_dir / "scores.png"),
        }


LABEL_FREE_PREFIXES = ("mined:", "titles:")
"""Task labels of label-free tasks (no human labels): kept out of the ``mean`` column."""


def is_label_free(task: str) -> bool:
    """Whether the task label names a label-free task (``mined:DIR``, ``titles:DIR``)."""
    return task.startswith(LABEL_FREE_PREFIXES)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def evaluate_model(
    model: SentenceTransformer,
    tasks: Sequence[Any],
    *,
    label: str,
    batch_size: int = 32,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    show_progress: bool = False,
    per_pair: dict[str, dict[str, list[float]]] | None = None,
) -> tuple[list[TaskScore], dict[str, dict[str, float]]]:
    """Run mteb on one loaded model; return its main scores and per-query nDCG@10 per task label.

    ``per_pair``, when given, is filled with each local STS task's per-pair cosine and gold scores.
    """
    from mteb.models import SentenceTransformerEncoderWrapper

    wrapper = SentenceTransformerEncoderWrapper(model)
    key_name = f"xprt-st/{_slug(label)}"
    revision = model_fingerprint(model)
    wrapper.mteb_model_meta = wrapper.mteb_model_meta.model_copy(update={"name": key_name, "revision": revision})
    return run_mteb(
        wrapper,
        tasks,
        label=label,
        batch_size=batch_size,
        cache_dir=cache_dir,
        overwrite=overwrite,
        show_progress=show_progress,
        per_pair=per_pair,
    )


def run_mteb(
    model: Any,  # noqa: ANN401 (an mteb encoder wrapper or search model: mteb's protocols share no base class)
    tasks: Sequence[Any],
    *,
    label: str,
    batch_size: int = 32,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    show_progress: bool = False,
    per_pair: dict[str, dict[str, list[float]]] | None = None,
) -> tuple[list[TaskScore], dict[str, dict[str, float]]]:
    """Run mteb on an mteb model whose ``mteb_model_meta`` carries its result key (name and revision); return its
    main scores and per-query nDCG@10 per task label, read the same way for a dense model and a search model."""
    import mteb

    meta = model.mteb_model_meta
    key = f"{meta.name}@{meta.revision}"
    cache = mteb.ResultCache(str(cache_dir)) if cache_dir is not None else None
    result = mteb.evaluate(
        model,
        list(tasks),
        cache=cache,
        co2_tracker=False,
        overwrite_strategy="always" if overwrite else "only-missing",
        encode_kwargs={"batch_size": batch_size, "show_progress_bar": show_progress},
        show_progress_bar=show_progress,
    )
    by_name = {task_result.task_name: task_result for task_result in result.task_results}
    scores: list[TaskScore] = []
    per_query: dict[str, dict[str, float]] = {}
    for task in tasks:
        name = task.metadata.name
        if name not in by_name:
            raise RuntimeError(f"mteb returned no result for task {name} and model {label}: {result.exceptions}")
        split_scores = by_name[name].scores[task.metadata.eval_splits[0]]
        main = task.metadata.main_score
        value = sum(float(s[main]) for s in split_scores) / len(split_scores)
        scores.append(TaskScore(label, task_label(task), main, value, key, name))
        if PER_QUERY_KEY in split_scores[0]:
            per_query[task_label(task)] = {qid: float(v) for qid, v in split_scores[0][PER_QUERY_KEY].items()}
        if per_pair is not None and PER_PAIR_KEY in split_scores[0]:
            per_pair[task_label(task)] = split_scores[0][PER_PAIR_KEY]
    return scores, per_query


class EvaluationInputError(XPRTError, ValueError):
    """Models and tasks that cannot be scored together (a lexical model on an STS or label-free task, labels that do
    not match the models), refused before any model loads."""


def check_lexical_tasks(specs: Sequence[object], tasks: Sequence[Any]) -> None:
    """Refuse, before any model loads, a ``bm25`` or ``hybrid:MODEL`` (:mod:`xprt_st.evaluation.lexical`) on a task
    that is not a retrieval task with labels (an STS task, ``mined:DIR``, ``titles:DIR``).

    Raises:
        EvaluationInputError: naming the model and the task.
    """
    lexical = [spec for spec in specs if is_lexical_spec(spec)]
    if not lexical:
        return
    for task in tasks:
        label = task_label(task)
        if task.metadata.type != "Retrieval" or is_label_free(label):
            kind = "a label-free task" if is_label_free(label) else f"a {task.metadata.type} task"
            raise EvaluationInputError(
                f"{lexical[0]} scores retrieval tasks with labels only; {label} is {kind}: "
                "evaluate it with the dense models alone"
            )


def evaluate_models(
    models: Sequence[str | Path | SentenceTransformer | None],
    tasks: Sequence[Any],
    *,
    labels: Sequence[str] | None = None,
    data_dir: str | Path | None = None,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    device: str | None = None,
    show_progress: bool = False,
    encode_backend: str = "torch",
    backend_cache: str | Path | None = None,
    precision: str = "auto",
    max_seq_length: int | None = None,
) -> EvaluationReport:
    """Evaluate several models on the same tasks, one after the other, into one report.

    Args:
        models: names or paths (None or ``"default"``: the offline default model), loaded models, or the lexical
            references ``"bm25"`` and ``"hybrid:MODEL"`` (:mod:`xprt_st.evaluation.lexical`; retrieval tasks only).
        tasks: task specs (see :func:`xprt_st.evaluation.catalog.resolve_tasks`) or mteb task objects.
        labels: names in the table; by default the model's name or folder name (made unique).
        data_dir: folder of the named local tasks (task resolution, for task specs).
        max_queries: queries (or STS pairs) kept per task spec (task resolution).
        max_corpus: retrieval documents kept per task spec (task resolution).
        seed: seed of those subsamples (task resolution).
        batch_size: encoding batch size.
        cache_dir: mteb result cache folder; None disables caching.
        overwrite: re-run even when the cache holds results for these weights and this task data.
        device: torch device for models loaded here.
        show_progress: show mteb's and the encoder's progress bars.
        encode_backend: what runs each model's transformer (torch, onnx, openvino: :mod:`xprt_st.encode_backend`);
            a loaded model given in ``models`` is run by it in place.
        backend_cache: the folder that keeps a non-torch backend's exports (``.onnx-cache`` in it); required then.
        precision: auto, fp32 or bf16 (:mod:`xprt_st.precision`; auto: bf16 where the device computes it natively,
            as mining and training do); each model runs so (a loaded model in place), the report records it.
        max_seq_length: the token limit of every model loaded here, a hybrid's dense model included (None: each
            model's own; a trained folder keeps its training's). A loaded model in ``models`` keeps its own.

    Raises:
        xprt_st.evaluation.readers.TaskLoadError: a task spec could not be resolved.
        xprt_st.models.ModelLoadError: a model could not be loaded (raised before any evaluation runs
            for that model; earlier models are already evaluated).
        ValueError: a lexical reference without bm25s, or on a task that is not retrieval with labels (before any
            model loads).
    """
    if isinstance(tasks, str):
        tasks = [tasks]
    if any(isinstance(task, str) for task in tasks):
        specs = [task for task in tasks if isinstance(task, str)]
        resolved = iter(resolve_tasks(specs, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed))
        tasks = [next(resolved) if isinstance(task, str) else task for task in tasks]
    models = list(models) or [None]
    for spec in models:
        if is_lexical_spec(spec):
            check_lexical_spec(str(spec))
    check_lexical_tasks(models, tasks)
    if labels is not None and len(labels) != len(models):
        raise EvaluationInputError(
            f"got {len(labels)} labels for {len(models)} models; give one label per model or none"
        )
    names = unique_labels(list(labels) if labels is not None else [model_label(m) for m in models])
    report = EvaluationReport(models=names, tasks=[task_label(task) for task in tasks])
    report.task_objects = {task_label(task): task for task in tasks}
    for spec, label in zip(models, names, strict=True):
        lexical = parse_lexical_spec(spec)
        logger.info("evaluating %s on %s", label, ", ".join(report.tasks))
        pairs: dict[str, dict[str, list[float]]] = {}
        run = {
            "label": label,
            "batch_size": batch_size,
            "cache_dir": cache_dir,
            "overwrite": overwrite,
            "show_progress": show_progress,
            "per_pair": pairs,
        }
        kind = None if lexical is None else MODEL_KINDS[lexical.kind]
        if kind is not None and kind.prefix is None:
            scores, per_query = run_mteb(kind.search(), tasks, **run)
        else:
            dense = spec if lexical is None else lexical.dense
            on = device if device is not None or encode_backend == "torch" else "cpu"  # other backends run on the CPU
            model = dense if isinstance(dense, SentenceTransformer) else load_model(dense, device=on)
            if max_seq_length is not None and model is not dense:
                model.max_seq_length = max_seq_length
            if encode_backend != "torch":
                if backend_cache is None:
                    raise ValueError(
                        f"encode_backend={encode_backend!r} needs backend_cache, the folder of its exports"
                    )
                model = use_encode_backend(model, encode_backend, Path(backend_cache))
            resolved = resolve_precision(precision, model.device.type, encode_backend)
            model = use_precision(model, resolved.precision)
            report.precision = resolved.record()
            if lexical is None:
                scores, per_query = evaluate_model(model, tasks, **run)
            else:
                search = kind.search(model, key_name=f"xprt-st/{_slug(label)}", dense_revision=model_fingerprint(model))
                scores, per_query = run_mteb(search, tasks, **run)
        report.scores.extend(scores)
        for task, values in per_query.items():
            report.per_query.setdefault(task, {})[label] = values
        for task, values in pairs.items():
            report.per_pair.setdefault(task, {})[label] = values
    return report


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``xprt-st evaluate`` scores: ``models`` side by side on ``tasks``, the results written to ``output_dir``.

    Made from the command's flags of the same names; :func:`run_evaluation` runs it.
    """

    models: tuple[str, ...] = ("default",)
    """Names or folders, ``default``, ``bm25`` or ``hybrid:MODEL``."""
    tasks: tuple[str, ...] = ("python-faq",)
    """Task specs, as :func:`xprt_st.evaluation.catalog.resolve_tasks` reads them."""
    data_dir: Path | None = None
    label: tuple[str, ...] = ()
    """The name of each model in the table (once per model); empty: their names."""
    max_queries: int | None = None
    max_corpus: int | None = None
    seed: int = 0
    output_dir: Path = Path("xprt-eval")
    cache_dir: Path | None = None
    """The mteb result cache; None: :func:`default_cache_dir`."""
    no_cache: bool = False
    overwrite: bool = False
    batch_size: int = 32
    device: str | None = None
    encode_backend: str = "torch"
    precision: str = "auto"
    show_progress: bool = False
    backend_cache: Path | None = None
    """Where a non-torch backend keeps its exports; None: ``output_dir`` (the quickstart's: its mined folder)."""


def run_evaluation(config: EvaluateConfig) -> EvaluationReport:
    """Resolve the tasks and score every model on them (:func:`evaluate_models`); a non-torch backend keeps its
    exports in ``config.output_dir``.

    Raises:
        ValueError: a task that cannot be resolved, or a model or task that cannot be scored (see
            :func:`evaluate_models`).
    """
    tasks = resolve_tasks(
        list(config.tasks),
        config.data_dir,
        max_queries=config.max_queries,
        max_corpus=config.max_corpus,
        seed=config.seed,
    )
    return evaluate_models(
        list(config.models),
        tasks,
        labels=list(config.label) or None,
        batch_size=config.batch_size,
        cache_dir=None if config.no_cache else config.cache_dir or default_cache_dir(),
        overwrite=config.overwrite,
        device=config.device,
        show_progress=config.show_progress,
        encode_backend=config.encode_backend,
        backend_cache=config.backend_cache if config.backend_cache is not None else config.output_dir,
        precision=resolve_precision(config.precision, config.device, config.encode_backend).precision,
    )
