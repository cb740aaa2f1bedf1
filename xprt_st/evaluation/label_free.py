"""The label-free check: retrieval on the held-out documents of a mined folder, and the drift beside it.

``xprt-st mine --holdout FRACTION`` keeps the groups of a seeded fraction of whole documents out of
training, in ``DIR/heldout/`` (:data:`HELDOUT_DIR`):

- ``groups``: one row per held-out anchor, with ``label`` (the document), ``anchor_index`` and
  ``related_index`` (the passage indices, within the document, of its related passages, best first);
- ``passages``: every passage of every held-out document (``label``, ``passage``, ``text``), anchor
  or not.

**The task.** Each held-out anchor is a query; every held-out passage except the anchor itself is a
candidate (passages of the anchor's own document and of every other held-out document); the anchor's
related passages are the relevant ones. The score is nDCG@10 per query, averaged over queries.

**Grades.** The related passage at rank ``r`` (1 = the positive) of a group with ``k`` related
columns has relevance ``k - r + 1`` (with the default ``k = 4``: 4, 3, 2, 1); every other candidate
has 0. The miner ranks the related passages by reciprocal-rank fusion, and the positive is the one the
objectives pull closest, so the order carries information that binary relevance would discard; the
fused scores themselves are not comparable across documents, the rank is. A related index repeated
by the miner's padding of short documents counts once, at its best rank. The gain is linear
(``grade / log2(rank + 1)``), trec_eval's and therefore mteb's, so ``xprt-st evaluate --tasks
mined:DIR`` (through mteb, :func:`label_free_task`) and the training-time evaluator
(:class:`LabelFreeEvaluator`, the pure functions below) compute the same number.
sentence-transformers' ``InformationRetrievalEvaluator`` judges relevance as a set (binary) and has no
way to leave a query's own passage out of its candidates, hence an evaluator of our own.

**What it can and cannot say.** The relevant passages were chosen by the mining model (with TF-IDF),
so the task is of the objective's own kind: the starting model that mined it has an edge on it, and
an objective can raise it by learning the miner's notion of related without retrieving better for
real queries. It is a drift and sanity signal (did training break retrieval among the user's own
passages? did it move at all?), not a verdict on labelled retrieval, unless measured evidence shows
that it tracks labelled scores (``docs/results.md``, "Can I tell without labels?").

**Drift.** Beside it, :func:`knn_overlap` measures how far a model moved from its start on the same
passages: for each held-out passage, the share of its 10 nearest held-out neighbours (cosine, itself
excluded) under the model that are also among its 10 nearest under the start; 1 means the same
neighbourhoods, 0 none in common.

**Intervals.** The difference of two models (model minus start) has the paired bootstrap interval
over queries that every retrieval task has (:mod:`xprt_st.evaluation.bootstrap`); the mean overlap has
a bootstrap interval over passages.

Example:
    >>> import numpy as np
    >>> from xprt_st.evaluation.label_free import graded_relevance, ndcg_at_k
    >>> graded_relevance([7, 3, 3], top_k=3)
    {7: 3, 3: 2}
    >>> scores = np.array([[0.0, 0.9, 0.5, 0.1]])  # one query (candidate 0 is itself)
    >>> [round(float(v), 4) for v in ndcg_at_k(scores, np.array([0]), [{1: 2, 2: 1}])]
    [1.0]
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from datasets import Dataset, load_from_disk

from xprt_st.columns import LABEL
from xprt_st.evaluation.bootstrap import Interval, PairedItems, paired_interval, retrieval_items
from xprt_st.evaluation.heldout_checks import CheckSkipped, HeldoutCheck
from xprt_st.evaluation.readers import BEIRData, TaskLoadError
from xprt_st.mining.layout import HELDOUT_DIR, HELDOUT_GROUPS, HELDOUT_PASSAGES, unfinished_problem

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation.tasks import LocalRetrievalTask

logger = logging.getLogger(__name__)

ANCHOR_INDEX = "anchor_index"
RELATED_INDEX = "related_index"
PASSAGE = "passage"
TEXT = "text"
TASK_PREFIX = "mined:"
"""Task spec prefix: ``mined:DIR`` is the label-free task of the mined folder ``DIR``."""
K = 10
"""Cut-off of nDCG and size of the neighbourhoods the drift compares."""
_CHUNK = 1024
"""Query rows scored at once: bounds memory to ``_CHUNK * passages`` similarities."""


class HeldOutError(TaskLoadError):
    """A mined folder has no usable held-out part for the label-free task."""


class TooFewAnchorsError(HeldOutError):
    """The held-out part is whole but holds fewer than 2 anchors: too few for the task's interval.

    A small corpus meets it with a small ``--holdout`` (the held-out documents are a seeded draw); the
    training run and the quickstart then go on without the check and say why, while ``evaluate`` refuses.
    """

    def __init__(self, message: str, anchors: int = 0) -> None:
        super().__init__(message)
        self.anchors = anchors


# --------------------------------------------------------------------------------------------------
# Reading the held-out part
# --------------------------------------------------------------------------------------------------


def not_a_folder(path: Path) -> str:
    """Why ``path`` is not a folder, in words: missing, a file, a symlink loop, a dangling link, a pipe.

    Example:
        >>> not_a_folder(Path("/no/such/place"))
        'does not exist'
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if stat.S_ISLNK(mode):
        try:
            os.stat(path)
        except OSError as error:
            if error.errno == errno.ELOOP:
                return "is a symbolic link loop (it resolves to itself)"
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        mode = os.stat(path).st_mode
    if stat.S_ISFIFO(mode):
        return "is a pipe, not a folder (a shell's <(...) gives one)"
    if stat.S_ISREG(mode):
        return "is a file, not a folder"
    return "is not a folder"


def read_heldout(folder: str | Path) -> tuple[Dataset, Dataset] | None:
    """The held-out ``(groups, passages)`` datasets of a mined folder, or None when it has none.

    Raises:
        HeldOutError: only one of the two datasets is present, or one does not load.
        MiningConfigError: the folder's last merge was stopped midway (its held-out part may be another merge's
            draw), naming the merge to run again.
    """
    unfinished_problem(Path(folder))
    base = Path(folder) / HELDOUT_DIR
    paths = (Path(folder) / HELDOUT_GROUPS, Path(folder) / HELDOUT_PASSAGES)
    present = [path.is_dir() for path in paths]
    if not any(present):
        return None
    if not all(present):
        missing = next(path for path, here in zip(paths, present, strict=True) if not here)
        raise HeldOutError(f"{base} is incomplete: {missing} is missing; mine the folder again with --holdout")
    loaded = []
    for path in paths:
        try:
            loaded.append(load_from_disk(str(path)))
        except (FileNotFoundError, ValueError, OSError) as error:
            raise HeldOutError(f"{path} is not a dataset saved with datasets.save_to_disk ({error})") from error
    return loaded[0], loaded[1]


@dataclass(frozen=True)
class HeldOut:
    """The label-free task of one mined folder, ready to score.

    Attributes:
        texts: every held-out passage, ordered by (document label, passage index).
        ids: ``"<label>-<passage>"`` of each passage, in the order of ``texts``.
        queries: for each query (held-out anchor), its row in ``texts``.
        relevance: for each query, candidate row -> grade (see the module doc).
        path: the mined folder.
        fingerprint: a hash of the held-out content (the mteb revision of the task).
    """

    texts: list[str]
    ids: list[str]
    queries: np.ndarray
    relevance: list[dict[int, int]]
    path: Path
    fingerprint: str = ""

    @property
    def query_ids(self) -> list[str]:
        """The id of each query: the id of its anchor passage."""
        return [self.ids[row] for row in self.queries]

    def qrels(self) -> dict[str, dict[str, int]]:
        """BEIR-style judgements: query id -> passage id -> grade."""
        return {
            self.ids[row]: {self.ids[col]: grade for col, grade in rel.items()}
            for row, rel in zip(self.queries, self.relevance, strict=True)
        }


def graded_relevance(related_index: Sequence[int], top_k: int | None = None) -> dict[int, int]:
    """Grades of one anchor's related passages, best first: rank ``r`` of ``k`` gets ``k - r + 1``.

    ``top_k`` (k) defaults to ``len(related_index)``, the number of related columns. A passage that
    appears twice (the miner pads short documents by repeating the last one) keeps its best grade.
    """
    k = len(related_index) if top_k is None else top_k
    grades: dict[int, int] = {}
    for rank, index in enumerate(related_index, start=1):
        grades.setdefault(int(index), k - rank + 1)
    return {index: grade for index, grade in grades.items() if grade > 0}


def _require(dataset: Dataset, columns: Sequence[str], where: Path) -> None:
    missing = [column for column in columns if column not in dataset.column_names]
    if missing:
        raise HeldOutError(
            f"{where} lacks column(s) {', '.join(missing)} (has {', '.join(dataset.column_names)}); "
            "mine the folder again with --holdout"
        )


def load_heldout_task(folder: str | Path) -> HeldOut:
    """Build the label-free task of the mined folder ``folder`` (see the module doc).

    Raises:
        HeldOutError: the folder has no held-out part, a column is missing, or a group names a passage
            that ``passages`` does not hold.
        TooFewAnchorsError: fewer than 2 anchors remain (a bootstrap needs 2).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HeldOutError(f"mined folder {folder} {not_a_folder(folder)}; give the --output folder of xprt-st mine")
    from xprt_st.mining.derived import derived_folder_problem

    derived = derived_folder_problem(folder, "mined:{}")
    if derived is not None:
        raise HeldOutError(derived)
    loaded = read_heldout(folder)
    if loaded is None:
        raise HeldOutError(
            f"{folder} has no held-out part ({HELDOUT_GROUPS} and {HELDOUT_PASSAGES}); "
            "mine it with `xprt-st mine ... --holdout 0.1` to keep a tenth of the documents for this check"
        )
    groups, passages = loaded
    groups_path, passages_path = folder / HELDOUT_GROUPS, folder / HELDOUT_PASSAGES
    _require(groups, [LABEL, ANCHOR_INDEX, RELATED_INDEX], groups_path)
    _require(passages, [LABEL, PASSAGE, TEXT], passages_path)

    table = passages.select_columns([LABEL, PASSAGE, TEXT]).to_dict()
    keyed = sorted(zip(table[LABEL], table[PASSAGE], table[TEXT], strict=True), key=lambda row: (row[0], row[1]))
    row_of: dict[tuple[int, int], int] = {}
    for row, (label, passage, _) in enumerate(keyed):
        key = (int(label), int(passage))
        if key in row_of:
            raise HeldOutError(f"{passages_path}: passage {passage} of document {label} appears twice")
        row_of[key] = row
    texts = [str(text) for _, _, text in keyed]
    ids = [f"{label}-{passage}" for label, passage, _ in keyed]

    rows = groups.select_columns([LABEL, ANCHOR_INDEX, RELATED_INDEX]).to_dict()
    queries: list[int] = []
    relevance: list[dict[int, int]] = []
    seen: set[int] = set()
    for number, (label, anchor, related) in enumerate(
        zip(rows[LABEL], rows[ANCHOR_INDEX], rows[RELATED_INDEX], strict=True)
    ):
        label = int(label)
        unknown = [index for index in [anchor, *related] if (label, int(index)) not in row_of]
        if unknown:
            raise HeldOutError(
                f"{groups_path}, row {number}: document {label} has no passage {unknown[0]} in "
                f"{passages_path}; the held-out part is inconsistent, mine the folder again"
            )
        query = row_of[(label, int(anchor))]
        if query in seen:
            raise HeldOutError(f"{groups_path}, row {number}: anchor {anchor} of document {label} appears twice")
        grades = {
            row_of[(label, index)]: grade
            for index, grade in graded_relevance([int(i) for i in related]).items()
            if index != int(anchor)
        }
        if not grades:
            raise HeldOutError(
                f"{groups_path}, row {number}: anchor {anchor} of document {label} has no related passage"
            )
        seen.add(query)
        queries.append(query)
        relevance.append(grades)
    if len(queries) < 2:
        raise TooFewAnchorsError(
            f"{folder / HELDOUT_DIR} holds {len(queries)} anchor(s); the label-free task needs at least 2 for "
            "its interval (mine with a larger --holdout)",
            len(queries),
        )
    digest = hashlib.sha1(json.dumps([ids, texts, queries, [sorted(r.items()) for r in relevance]]).encode())
    return HeldOut(texts, ids, np.asarray(queries, dtype=np.int64), relevance, folder, digest.hexdigest()[:12])


def heldout_of(folder: str | Path) -> HeldOut | None:
    """The label-free task of the mined folder ``folder``, or None when it has no held-out part."""
    if read_heldout(folder) is None:
        return None
    return load_heldout_task(folder)


# --------------------------------------------------------------------------------------------------
# The math: pure functions of score matrices and embeddings
# --------------------------------------------------------------------------------------------------


def cosine_scores(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """``(Q, N)`` cosine similarities of ``(Q, d)`` query and ``(N, d)`` candidate embeddings."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    c = candidates / np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
    return q @ c.T


def _ranking(scores: np.ndarray, exclude: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best columns of each row, best first, never the row's ``exclude`` column.

    Ties are broken by column order (a stable sort), so the ranking is reproducible.
    """
    masked = np.array(scores, dtype=np.float64, copy=True)
    masked[np.arange(len(masked)), exclude] = -np.inf
    return np.argsort(-masked, axis=1, kind="stable")[:, :k]


def ndcg_at_k(
    scores: np.ndarray, queries: np.ndarray, relevance: Sequence[Mapping[int, int]], k: int = K
) -> np.ndarray:
    """Per-query nDCG@k with linear gains, leaving each query's own candidate out.

    Args:
        scores: ``(Q, N)`` similarity of each query to each candidate.
        queries: ``(Q,)`` the candidate column that is the query itself (never ranked).
        relevance: per query, candidate column -> grade (> 0); others are 0.
        k: the cut-off.

    Returns:
        ``(Q,)`` values ``DCG@k / IDCG@k`` with ``DCG@k = sum_{i<=k} grade_i / log2(i + 1)`` over the
        ranking and ``IDCG@k`` the same sum over the grades sorted best first (trec_eval's ``ndcg_cut``).
    """
    if len(scores) != len(queries) or len(scores) != len(relevance):
        raise ValueError(f"{len(scores)} score rows, {len(queries)} queries and {len(relevance)} judgements differ")
    ranked = _ranking(scores, np.asarray(queries), k)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    values = np.zeros(len(ranked))
    for row, (columns, grades) in enumerate(zip(ranked, relevance, strict=True)):
        gains = np.array([grades.get(int(column), 0) for column in columns], dtype=float)
        ideal = np.sort(np.fromiter(grades.values(), dtype=float))[::-1][:k]
        values[row] = float(gains @ discounts[: len(gains)]) / float(ideal @ discounts[: len(ideal)])
    return values


def nearest_neighbours(embeddings: np.ndarray, k: int = K) -> np.ndarray:
    """``(N, min(k, N - 1))`` the nearest passages of each passage by cosine, itself excluded, best first."""
    n = len(embeddings)
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, _CHUNK):
        rows = np.arange(start, min(n, start + _CHUNK))
        out[rows] = _ranking(cosine_scores(embeddings[rows], embeddings), rows, k)
    return out


def knn_overlap(model: np.ndarray, start: np.ndarray, k: int = K) -> np.ndarray:
    """Per passage: the share of its ``k`` nearest neighbours under ``model`` also nearest under ``start``.

    Both are ``(N, d)`` embeddings of the same passages in the same order (dimensions may differ).
    """
    if len(model) != len(start):
        raise ValueError(f"the two embeddings cover {len(model)} and {len(start)} passages; they must be the same")
    if len(model) < 2:
        raise ValueError("the drift needs at least 2 passages")
    a, b = nearest_neighbours(model, k), nearest_neighbours(start, k)
    return np.array([len(set(x) & set(y)) / a.shape[1] for x, y in zip(a.tolist(), b.tolist(), strict=True)])


def score_embeddings(heldout: HeldOut, embeddings: np.ndarray, k: int = K) -> dict[str, float]:
    """Per-query nDCG@k of the task given the embedding of every held-out passage (rows of ``texts``)."""
    if len(embeddings) != len(heldout.texts):
        raise ValueError(f"{len(embeddings)} embeddings for {len(heldout.texts)} held-out passages")
    values = np.empty(len(heldout.queries))
    for start in range(0, len(heldout.queries), _CHUNK):
        rows = heldout.queries[start : start + _CHUNK]
        scores = cosine_scores(embeddings[rows], embeddings)
        values[start : start + len(rows)] = ndcg_at_k(scores, rows, heldout.relevance[start : start + len(rows)], k)
    return dict(zip(heldout.query_ids, (float(v) for v in values), strict=True))


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


@dataclass
class LabelFreeScore:
    """One model on the label-free task: per-query nDCG@10 and the passages' embeddings."""

    per_query: dict[str, float]
    embeddings: np.ndarray = field(repr=False)

    @property
    def score(self) -> float:
        """Mean nDCG@10 over queries."""
        return float(np.mean(list(self.per_query.values())))


@dataclass(frozen=True)
class Drift:
    """How far a model moved from its start: mean 10-NN overlap with its interval over passages."""

    overlap: float
    low: float
    high: float
    n_passages: int

    def format(self) -> str:
        """``overlap [low, high]`` with three decimals."""
        return f"{self.overlap:.3f} [{self.low:.3f}, {self.high:.3f}]"


def encode_passages(model: SentenceTransformer, heldout: HeldOut, batch_size: int = 32) -> np.ndarray:
    """The model's embedding of every held-out passage (as passages: anchors are passages too), encoded once per
    model and shared with ``titles:DIR`` (:func:`~xprt_st.evaluation.heldout_vectors.heldout_passage_vectors`)."""
    from xprt_st.evaluation.heldout_vectors import heldout_passage_vectors

    return heldout_passage_vectors(model, heldout.path, heldout.texts, heldout.ids, batch_size)


def score_model(model: SentenceTransformer, heldout: HeldOut, batch_size: int = 32) -> LabelFreeScore:
    """Score a SentenceTransformer on the label-free task (one encoding of the held-out passages)."""
    embeddings = encode_passages(model, heldout, batch_size)
    return LabelFreeScore(score_embeddings(heldout, embeddings), embeddings)


def drift(model: LabelFreeScore | np.ndarray, start: LabelFreeScore | np.ndarray, k: int = K) -> Drift:
    """The mean k-NN overlap of ``model`` with ``start`` on the held-out passages, with its interval."""
    a = model.embeddings if isinstance(model, LabelFreeScore) else model
    b = start.embeddings if isinstance(start, LabelFreeScore) else start
    overlaps = knn_overlap(a, b, k)
    # the interval of a mean: the paired bootstrap of (overlap - 0), i.e. of the overlaps themselves
    interval = paired_interval(PairedItems("mean", overlaps, np.zeros_like(overlaps)))
    return Drift(float(overlaps.mean()), interval.low, interval.high, len(overlaps))


def difference(model: LabelFreeScore, start: LabelFreeScore) -> Interval:
    """Model minus start in nDCG@10, with the paired bootstrap interval over queries."""
    return paired_interval(retrieval_items(model.per_query, start.per_query))


def format_comparison(record: Mapping[str, Any], names: tuple[str, str] = ("start", "trained")) -> str:
    """One line of a :func:`comparison` record: both scores, the difference with its interval, the drift."""
    reference, model = names
    return (
        f"{reference} {record['start']:.4f}, {model} {record['model']:.4f}, "
        f"difference {record['difference']:+.4f} [{record['ci_low']:+.4f}, {record['ci_high']:+.4f}]; "
        f"10-NN overlap with the {reference} {record['knn_overlap_at_10']:.3f}"
        + (f" (caveat: {record['caveat']})" if record.get("caveat") else "")
    )


def compare_to_reference(
    heldout: HeldOut,
    models: Sequence[tuple[str, Any]],
    reference: tuple[str, Any],
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Each ``(label, model)`` against ``reference`` (a ``(label, model)``): one :func:`comparison` record each."""
    reference_label, reference_model = reference
    start = score_model(reference_model, heldout, batch_size)
    return [
        {
            "model_label": label,
            "reference_label": reference_label,
            **comparison(score_model(model, heldout, batch_size), start),
        }
        for label, model in models
    ]


def comparison(model: LabelFreeScore, start: LabelFreeScore) -> dict[str, Any]:
    """The JSON record of a model against its start: both scores, the difference, its interval, the drift."""
    gain = difference(model, start)
    moved = drift(model, start)
    record = {
        "task": "label-free nDCG@10 on the held-out documents",
        "queries": len(model.per_query),
        "passages": len(model.embeddings),
        "start": start.score,
        "model": model.score,
        "difference": gain.estimate,
        "ci_low": gain.low,
        "ci_high": gain.high,
        "confidence": gain.confidence,
        "verdict": gain.verdict,
        "knn_overlap_at_10": moved.overlap,
        "knn_overlap_ci": [moved.low, moved.high],
    }
    caveat = small_sample_caveat(len(model.per_query))
    if caveat is not None:
        record["caveat"] = caveat
    return record


SMALL_SAMPLE = 30
"""Held-out anchors below which a label-free result carries a small-sample caveat."""


def small_sample_caveat(queries: int) -> str | None:
    """The caveat of a label-free result on fewer than :data:`SMALL_SAMPLE` anchors, else None.

    A bootstrap over a handful of queries gives an interval that is itself unreliable, so its verdict should
    not be read as a finding.

    Example:
        >>> small_sample_caveat(2)
        'only 2 held-out anchors (under 30): the interval and its verdict are unreliable; mine with a larger --holdout'
        >>> small_sample_caveat(30) is None
        True
    """
    if queries >= SMALL_SAMPLE:
        return None
    return (
        f"only {queries} held-out anchors (under {SMALL_SAMPLE}): the interval and its verdict are unreliable; "
        "mine with a larger --holdout"
    )


def label_free_task(folder: str | Path, max_queries: int | None = None, seed: int = 0) -> LocalRetrievalTask:
    """The label-free task as an mteb retrieval task (for ``xprt-st evaluate --tasks mined:DIR``).

    Query ids are the anchor's passage id, so mteb's ``ignore_identical_ids`` leaves each anchor out
    of its own candidates; the judgements carry the grades; mteb scores them with pytrec_eval.
    ``max_queries`` keeps a seeded sample of the anchors (``--max-queries``); every held-out passage stays a
    candidate.
    """
    from xprt_st.evaluation.readers import subsample_beir
    from xprt_st.evaluation.tasks import make_retrieval_task

    heldout = load_heldout_task(folder)
    data = BEIRData(
        corpus={pid: {"title": "", "text": text} for pid, text in zip(heldout.ids, heldout.texts, strict=True)},
        queries={heldout.ids[row]: heldout.texts[row] for row in heldout.queries},
        qrels=heldout.qrels(),
    )
    revision = heldout.fingerprint
    if max_queries is not None and max_queries < len(data.queries):
        data = subsample_beir(data, max_queries=max_queries, seed=seed)
        revision = f"{revision}-q{max_queries}-s{seed}"
    label = f"{TASK_PREFIX}{Path(folder).resolve().name}"
    return make_retrieval_task(
        data,
        label,
        ignore_identical_ids=True,
        revision=revision,
        description=f"Label-free retrieval on the held-out documents of {folder}",
    )


# --------------------------------------------------------------------------------------------------
# The check's declaration
# --------------------------------------------------------------------------------------------------


def _check_task(folder: Path) -> HeldOut | None:
    """The task of ``folder``, None without a held-out part; a part of fewer than 2 anchors is skipped, saying why."""
    if read_heldout(folder) is None:
        return None
    try:
        return load_heldout_task(folder)
    except TooFewAnchorsError as error:
        raise CheckSkipped({"queries": error.anchors, "skipped": str(error)}) from error


def _check_score(heldout: HeldOut, model: SentenceTransformer, passages: np.ndarray) -> LabelFreeScore:
    del model  # the queries are passages: their vectors are all it needs
    return LabelFreeScore(score_embeddings(heldout, passages), passages)


def _check_compare(heldout: HeldOut, model: LabelFreeScore, start: LabelFreeScore) -> dict[str, Any]:
    del heldout
    return comparison(model, start)


LABEL_FREE_CHECK = HeldoutCheck("label_free", "label-free", _check_task, _check_score, _check_compare)
"""The label-free check as a :class:`~xprt_st.evaluation.heldout_checks.HeldoutCheck`: its task, a model's score
from its passage vectors, and the :func:`comparison` record."""
