"""The label-free check during training: a sentence-transformers evaluator on the held-out documents.

When the mined folder has a held-out part (``xprt-st mine --holdout``), ``xprt-st train`` scores the
label-free task (:mod:`xprt_st.evaluation.label_free`) on the starting model before the first step,
every ``training.eval_steps`` steps through the Trainer's evaluation loop (logged as
``eval_label-free_ndcg@10`` with the drift ``eval_label-free_knn_overlap@10``), and on the final
model; it writes the start's and the final score with the paired bootstrap interval of their
difference and the drift to ``OUTPUT/label_free.json`` (:data:`RESULT_FILE`) and to the model card.
With ``training.keep_best`` the checkpoint with the best label-free score becomes the final model
(the Trainer's ``load_best_model_at_end``; its loss-owned modules come back with it).

sentence-transformers' ``InformationRetrievalEvaluator`` judges relevance as a set and cannot leave
a query's own passage out of its candidates, so :class:`LabelFreeEvaluator` is an evaluator
(``BaseEvaluator``, formerly ``SentenceEvaluator``) of its own over the same pure functions that
``xprt-st evaluate --tasks mined:DIR`` agrees with.

Example:
    >>> from xprt_st.evaluation.label_free import load_heldout_task  # doctest: +SKIP
    >>> evaluator = LabelFreeEvaluator(load_heldout_task("mined/"))  # doctest: +SKIP
    >>> evaluator.score_start(model)  # doctest: +SKIP
    >>> trainer = SentenceTransformerTrainer(model=model, evaluator=evaluator, ...)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentence_transformers.sentence_transformer.evaluation import BaseEvaluator

from xprt_st.evaluation.label_free import (
    HeldOut,
    HeldOutError,
    K,
    LabelFreeScore,
    TooFewAnchorsError,
    comparison,
    heldout_of,
    knn_overlap,
    score_model,
)
from xprt_st.precision import applied_precision, resolve_precision
from xprt_st.stage_timing import stage

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xprt_st.recipe import TrainingSpec

logger = logging.getLogger(__name__)

RESULT_FILE = "label_free.json"
"""Written into the output folder of a run whose data has a held-out part."""
EVALUATOR_NAME = "label-free"
PRIMARY_METRIC = f"ndcg@{K}"
BEST_METRIC = f"eval_{EVALUATOR_NAME}_{PRIMARY_METRIC}"
"""The Trainer's ``metric_for_best_model`` when ``training.keep_best`` is on."""
CARD_SECTION_TITLE = "## Label-free check (held-out documents)"


class LabelFreeEvaluator(BaseEvaluator):
    """nDCG@10 on the held-out documents, and the 10-NN overlap with the start once it is scored.

    Args:
        heldout: the task (:func:`xprt_st.evaluation.label_free.load_heldout_task`).
        name: prefix of the metrics (``label-free_ndcg@10``).
        batch_size: encoding batch size.
        max_seq_length: token limit while scoring (the serving limit, when training cuts passages shorter), so
            the start, every step and the final model read the held-out passages alike; None: the model's.
        precision: fp32 or bf16, the training's (:mod:`xprt_st.precision`): the start and every step are encoded
            so, and a start that mined the folder in it reads mining's stored vectors instead of encoding.

    Call :meth:`score_start` on the starting model before training: it is the reference of the drift
    and of the final interval. Every call keeps its step and metrics in :attr:`history`.
    """

    def __init__(
        self,
        heldout: HeldOut,
        *,
        name: str = EVALUATOR_NAME,
        batch_size: int = 32,
        max_seq_length: int | None = None,
        precision: str = "fp32",
    ) -> None:
        super().__init__()
        self.precision = precision
        self.heldout = heldout
        self.name = name
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.primary_metric = PRIMARY_METRIC
        self.greater_is_better = True
        self.start: LabelFreeScore | None = None
        self.last: LabelFreeScore | None = None
        self.last_step: int | None = None
        self.history: list[dict[str, Any]] = []

    def score_start(self, model: SentenceTransformer) -> LabelFreeScore:
        """Score the starting model (the reference of every later call) and return its score."""
        self.start = self._score(model, "label-free: start")
        self.history.append({"step": 0, f"{self.name}_{PRIMARY_METRIC}": self.start.score, "model": "start"})
        logger.info("label-free nDCG@10 of the starting model: %.4f", self.start.score)
        return self.start

    def __call__(
        self, model: SentenceTransformer, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        """Score ``model`` on the held-out part; the metrics the trainer logs (and keeps the best by)."""
        result = self._score(model)
        self.last, self.last_step = result, steps
        metrics = {PRIMARY_METRIC: result.score}
        if self.start is not None:
            metrics[f"knn_overlap@{K}"] = float(knn_overlap(result.embeddings, self.start.embeddings).mean())
        logger.info(
            "step %d: label-free nDCG@10 %.4f%s",
            steps,
            result.score,
            f" (start {self.start.score:.4f}; 10-NN overlap {metrics[f'knn_overlap@{K}']:.3f})" if self.start else "",
        )
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        self.history.append({"step": steps, "epoch": epoch, **metrics})
        return metrics

    def _score(self, model: SentenceTransformer, stage_name: str = "label-free: trained") -> LabelFreeScore:
        limit = model.max_seq_length
        if self.max_seq_length is not None:
            model.max_seq_length = self.max_seq_length
        try:
            with stage(stage_name), applied_precision(model, self.precision):
                return score_model(model, self.heldout, self.batch_size)
        finally:
            model.max_seq_length = limit

    def get_config_dict(self) -> dict[str, Any]:
        """The held-out part's size, for the model card."""
        return {"queries": len(self.heldout.queries), "passages": len(self.heldout.texts)}


def training_heldout(data: str | Path, training: TrainingSpec) -> HeldOut | None:
    """The held-out task of a run on the mined folder ``data``, or None when it holds no held-out documents: what
    :func:`check_heldout` reads for ``xprt-st train`` before any model loads, and :func:`label_free_evaluator` scores.

    Raises:
        TooFewAnchorsError: the held-out part holds fewer than 2 anchors (the run goes on without the check).
        MinedDataError: the held-out part is broken, or ``training.keep_best`` is asked for without a usable one.
    """
    from xprt_st.training.data import MinedDataError

    try:
        heldout = heldout_of(data)
    except TooFewAnchorsError as error:
        if training.keep_best:
            raise MinedDataError(f"training.keep_best needs the label-free task, but {error}") from error
        raise
    except HeldOutError as error:
        raise MinedDataError(str(error)) from error
    if heldout is None and training.keep_best:
        raise MinedDataError(
            f"training.keep_best picks the checkpoint by the label-free task, but {data} has no held-out "
            "documents; mine it with `xprt-st mine ... --holdout 0.1`, or drop keep_best"
        )
    return heldout


@dataclass(frozen=True)
class HeldOutCheck:
    """What a run's checks found in its mined folder's held-out part (:func:`check_heldout`): the trainer setup
    builds the evaluator from it (:func:`label_free_evaluator`) instead of reading the part again."""

    task: HeldOut | None = None
    """The label-free task; None when the folder holds out no documents, or too few anchors (:attr:`problem`)."""
    problem: str | None = None
    """Why a folder that holds out documents gets no label-free check (fewer than 2 anchors); None otherwise."""


def check_heldout(data: str | Path, training: TrainingSpec) -> HeldOutCheck:
    """Read and check the held-out part of the mined folder ``data`` before any model loads (:func:`training_heldout`);
    too few anchors is no error (a small corpus's seeded draw), it is kept as the check's :attr:`~HeldOutCheck.problem`,
    and ``training.eval_steps`` without a held-out part is a warning.

    Raises:
        MinedDataError: the held-out part is broken, or ``training.keep_best`` is asked for without a usable one.
    """
    try:
        task = training_heldout(data, training)
    except TooFewAnchorsError as error:
        return HeldOutCheck(problem=str(error))
    if task is None and training.eval_steps is not None:
        logger.warning(
            "--eval-steps %d is ignored: %s has no held-out documents to score; mine it with "
            "`xprt-st mine ... --holdout 0.1` for the label-free check during training",
            training.eval_steps,
            data,
        )
    return HeldOutCheck(task)


def label_free_evaluator(
    found: HeldOutCheck, training: TrainingSpec, max_seq_length: int | None = None
) -> LabelFreeEvaluator | None:
    """The evaluator of a run from what :func:`check_heldout` found: None when the folder holds out no documents.

    Also None, with a logged warning, when the held-out part holds fewer than 2 anchors (too few for the
    interval): a small corpus's seeded draw of documents should not stop a training run. Nothing is read here.
    """
    if found.problem is not None:  # a seeded draw of documents from a small corpus: the check is optional
        logger.warning("no label-free check during this run: %s", found.problem)
        return None
    if found.task is None:  # no held-out part (a given --eval-steps was named by the check)
        return None
    logger.info(
        "%s holds %d passages of held-out documents (%d anchors): scoring the label-free task every %d steps",
        found.task.path,
        len(found.task.texts),
        len(found.task.queries),
        training.eval_steps or training.save_steps,
    )
    precision = "fp32" if training.precision == "fp16" else resolve_precision(training.precision).precision
    return LabelFreeEvaluator(found.task, max_seq_length=max_seq_length, precision=precision)


def evaluation_arguments(evaluator: LabelFreeEvaluator | None, training: TrainingSpec) -> dict[str, Any]:
    """The Trainer arguments that run ``evaluator`` every ``training.eval_steps`` (and keep the best, if asked)."""
    if evaluator is None:
        return {}
    arguments: dict[str, Any] = {"eval_strategy": "steps", "eval_steps": training.eval_steps or training.save_steps}
    if training.keep_best:
        arguments |= {"load_best_model_at_end": True, "metric_for_best_model": BEST_METRIC, "greater_is_better": True}
    return arguments


def run_history(evaluator: LabelFreeEvaluator, log_history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every label-free score of the run by step: the Trainer's ``log_history`` (restored from the checkpoint on
    resume, so the scores before an interruption are kept) with this process's own calls, one row per step.

    Rows read ``{"step", "epoch", "label-free_ndcg@10", "label-free_knn_overlap@10"}`` as the evaluator logs them.
    """
    prefix = f"eval_{evaluator.name}_"
    rows: dict[int, dict[str, Any]] = {}
    for entry in log_history or []:
        scores = {key[len("eval_") :]: value for key, value in entry.items() if key.startswith(prefix)}
        if scores and isinstance(entry.get("step"), int):
            rows[entry["step"]] = {"step": entry["step"], "epoch": entry.get("epoch"), **scores}
    for row in evaluator.history:
        if row.get("model") != "start":
            rows[int(row["step"])] = row
    return [rows[step] for step in sorted(rows)]


def finish(
    evaluator: LabelFreeEvaluator,
    model: SentenceTransformer,
    output: str | Path,
    best_checkpoint: str | None = None,
    step: int | None = None,
    log_history: list[dict[str, Any]] | None = None,
) -> dict:
    """Score the final ``model``, write ``output/label_free.json`` and the model-card section; return the record.

    When the evaluator's last call was at ``step`` (the run's last step) and no best checkpoint was loaded,
    that call scored these very weights, and its score is reused instead of encoding the passages again. The
    history is :func:`run_history` of ``log_history`` (the Trainer's), so a resumed run keeps the scores of the
    steps trained before it was interrupted, the best checkpoint's among them.
    """
    if evaluator.start is None:
        raise RuntimeError("LabelFreeEvaluator.score_start(starting model) must run before training")
    reuse = best_checkpoint is None and step is not None and evaluator.last is not None and evaluator.last_step == step
    final = evaluator.last if reuse else evaluator._score(model)
    record = {
        **comparison(final, evaluator.start),
        "data": str(evaluator.heldout.path),
        "best_checkpoint": best_checkpoint,
        "history": run_history(evaluator, log_history),
    }
    output = Path(output)
    (output / RESULT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    add_card_section(output / "README.md", record)
    logger.info(
        "label-free nDCG@10: start %.4f, trained %.4f, difference %+.4f [%+.4f, %+.4f] (%s); written to %s",
        record["start"],
        record["model"],
        record["difference"],
        record["ci_low"],
        record["ci_high"],
        record["verdict"] + (f"; caveat: {record['caveat']}" if record.get("caveat") else ""),
        output / RESULT_FILE,
    )
    return record


def card_section(record: dict[str, Any]) -> str:
    """Markdown of the label-free record: the two scores, the interval, the drift, and how to read them."""
    low, high = record["knn_overlap_ci"]
    lines = [
        CARD_SECTION_TITLE,
        "",
        f"Retrieval among the {record['passages']} passages of the mined folder's held-out documents, "
        f"each of its {record['queries']} anchors a query and its related passages the graded relevant ones "
        "(no labels; never trained on).",
        "",
        "| | nDCG@10 |",
        "|---|---|",
        f"| starting model | {record['start']:.4f} |",
        f"| this model | {record['model']:.4f} |",
        f"| difference, 95% CI | {record['difference']:+.4f} [{record['ci_low']:+.4f}, {record['ci_high']:+.4f}] |",
        f"| 10-NN overlap with the start | {record['knn_overlap_at_10']:.3f} [{low:.3f}, {high:.3f}] |",
        "",
        "A drift and sanity signal, not a verdict on labelled retrieval: the relevant passages were chosen "
        "by the mining model.",
    ]
    if record.get("caveat"):
        lines += ["", f"Caveat: {record['caveat']}."]
    if record.get("best_checkpoint"):
        lines += ["", f"Kept the checkpoint with the best label-free score: `{record['best_checkpoint']}`."]
    return "\n".join(lines) + "\n"


def add_card_section(readme: Path, record: dict[str, Any]) -> None:
    """Append (or replace) the label-free section at the end of the model card."""
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if CARD_SECTION_TITLE in text:
        text = text.split(CARD_SECTION_TITLE)[0]
    readme.write_text(text.rstrip() + ("\n\n" if text.strip() else "") + card_section(record), encoding="utf-8")
