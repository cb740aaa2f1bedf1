"""Hard negatives from other documents: each anchor's nearest passages elsewhere in the corpus, false ones filtered.

Mining ranks passages within one document; a hard negative needs the whole corpus. This second pass reads a
merged mining folder, takes its training passages' vectors from mining's stored ones (encoding only those mining
did not: :mod:`xprt_st.mining.passage_vectors`) into a memory-mapped file, and for every training group keeps the
``depth`` nearest passages of *other* documents to its anchor, scanning the passages chunk by chunk with a running
top-``depth`` per anchor: memory is bounded by one (anchors x passages) chunk of scores, never by the corpus.
NV-Retriever's positive-aware filter then drops every candidate whose cosine to the anchor exceeds ``max_ratio`` x
the positive's (likely an unlabelled positive), and the first ``count`` left become the columns
``negative_1 .. negative_K`` of the training dataset.

Held-out documents (``holdout``) are never candidates. The math is in the pure functions
:func:`nearest_other_documents` and :func:`positive_aware_filter`; :func:`add_hard_negatives` does the I/O.
sentence-transformers' ``mine_hard_negatives`` does the same for (query, positive) pairs with a faiss or exact
index; here the documents' own passages are both the queries and the corpus.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.columns import ANCHOR, NEGATIVE_PREFIX, negative_columns
from xprt_st.mining.config import MiningError
from xprt_st.mining.passage_vectors import fill_passage_vectors

logger = logging.getLogger(__name__)

ALL_FILTERED_WARNING = 0.1
"""Share of groups whose every candidate was filtered above which the run warns (they get random negatives)."""


class HardNegativesError(MiningError, ValueError):
    """A folder that cannot give the hard negatives asked for (too few training documents or passages)."""


DEFAULT_MAX_RATIO = 0.95
"""NV-Retriever's TopK-PercPos: a candidate above 95% of the positive's score is dropped as a false negative."""


def nearest_other_documents(
    queries: np.ndarray,
    query_labels: np.ndarray,
    pool: np.ndarray,
    pool_labels: np.ndarray,
    depth: int,
    pool_chunk: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` pool rows nearest to each query (dot product) whose label differs from the query's.

    The pool is read ``pool_chunk`` rows at a time (it may be a memory map); a running top-``depth`` is kept
    per query, so memory is ``queries x (depth + pool_chunk)`` scores.

    Args:
        queries: ``(q, dim)`` L2-normalised vectors.
        query_labels: ``(q,)`` document label of each query.
        pool: ``(n, dim)`` L2-normalised candidate vectors.
        pool_labels: ``(n,)`` document label of each candidate.
        depth: candidates kept per query.
        pool_chunk: candidates scored at once.

    Returns:
        ``(scores, indices)``, each ``(q, depth)``, best first; a query with fewer than ``depth`` candidates of
        other documents gets ``-inf`` scores and index ``-1`` in the rest.

    Example:
        >>> q = np.array([[1.0, 0.0]]); pool = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
        >>> scores, indices = nearest_other_documents(q, np.array([0]), pool, np.array([0, 1, 2]), depth=2)
        >>> scores.round(3).tolist(), indices.tolist()
        ([[0.6, 0.0]], [[1, 2]])
    """
    n_queries = queries.shape[0]
    best_scores = np.full((n_queries, depth), -np.inf)
    best_indices = np.full((n_queries, depth), -1, dtype=np.int64)
    for start in range(0, pool.shape[0], pool_chunk):
        block = np.asarray(pool[start : start + pool_chunk], dtype=np.float32)
        scores = (queries.astype(np.float32) @ block.T).astype(np.float64)
        scores[query_labels[:, None] == pool_labels[None, start : start + block.shape[0]]] = -np.inf
        indices = np.broadcast_to(np.arange(start, start + block.shape[0]), scores.shape)
        all_scores = np.concatenate([best_scores, scores], axis=1)
        all_indices = np.concatenate([best_indices, indices], axis=1)
        # stable order: score descending, then lower index first (ties broken the same way in every chunking)
        order = np.lexsort((all_indices, -all_scores), axis=1)[:, :depth]
        best_scores = np.take_along_axis(all_scores, order, axis=1)
        best_indices = np.take_along_axis(all_indices, order, axis=1)
    best_indices[~np.isfinite(best_scores)] = -1
    return best_scores, best_indices


def positive_aware_filter(
    scores: np.ndarray, indices: np.ndarray, positive_scores: np.ndarray, count: int, max_ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` candidates of each row that score at most ``max_ratio`` x the row's positive.

    NV-Retriever's positive-aware mining (TopK-PercPos): a candidate nearly as close to the anchor as its
    positive is more likely an unlabelled positive than a negative, so it is dropped.

    Args:
        scores: ``(q, depth)`` candidate scores, best first (``-inf`` where there is none).
        indices: ``(q, depth)`` candidate indices (``-1`` where there is none).
        positive_scores: ``(q,)`` each anchor's score with its positive.
        count: negatives wanted per row.
        max_ratio: the filter's threshold as a fraction of the positive's score.

    Returns:
        ``(chosen, found)``: ``(q, count)`` indices, a row with fewer than ``count`` survivors padded with its
        last survivor (``-1`` throughout when none survived), and ``(q,)`` how many survived (at most ``count``).

    Example:
        >>> scores = np.array([[0.9, 0.7, 0.5], [0.99, 0.98, 0.97]])
        >>> indices = np.array([[4, 5, 6], [7, 8, 9]])
        >>> chosen, found = positive_aware_filter(scores, indices, np.array([0.8, 0.9]), 2, 0.95)
        >>> chosen.tolist(), found.tolist()
        ([[5, 6], [-1, -1]], [2, 0])
    """
    keep = (indices >= 0) & (scores <= max_ratio * positive_scores[:, None])
    chosen = np.full((scores.shape[0], count), -1, dtype=np.int64)
    found = np.zeros(scores.shape[0], dtype=np.int64)
    for row in range(scores.shape[0]):
        survivors = indices[row][keep[row]][:count]
        found[row] = len(survivors)
        if len(survivors):
            chosen[row, : len(survivors)] = survivors
            chosen[row, len(survivors) :] = survivors[-1]
    return chosen, found


def check_other_documents(
    folder: Path, option: str, count: int, what: str, pool_labels: np.ndarray, error: type[MiningError]
) -> np.ndarray:
    """The training passages of each training document (``pool_labels``: each passage's document); ``error`` naming
    ``option`` when there are fewer than 2 documents, since ``what`` are passages of other documents."""
    documents, sizes = np.unique(pool_labels, return_counts=True)
    if len(documents) < 2:
        raise error(
            f"{option} {count}: {folder} has {len(documents)} training document(s) and {what} are passages of OTHER "
            f"documents; mine a corpus of 2 or more documents (the mined groups are kept and train without {option})"
        )
    return sizes


def check_candidates(folder: Path, count: int, pool_labels: np.ndarray) -> None:
    """Refuse ``count`` hard negatives that the training passages of ``folder`` cannot give without repeats.

    A group's negatives come from the training passages of *other* documents; the anchors of the largest
    training document have the fewest, so ``count`` may not exceed them (more would fill the columns with
    repeats), and a folder with one training document has none at all.

    Example:
        >>> check_candidates(Path("mined"), 2, np.array([0, 0, 1, 2]))
        >>> check_candidates(Path("mined"), 3, np.array([0, 0, 1, 2]))
        Traceback (most recent call last):
        ...
        xprt_st.mining.hard_negatives.HardNegativesError: --hard-negatives 3: mined has 4 training passages, ...
    """
    sizes = check_other_documents(folder, "--hard-negatives", count, "hard negatives", pool_labels, HardNegativesError)
    limit = int(len(pool_labels) - sizes.max())
    if count > limit:
        raise HardNegativesError(
            f"--hard-negatives {count}: {folder} has {len(pool_labels)} training passages, {limit} outside its "
            f"largest training document, so at most {limit} distinct negatives per group; give "
            f"--hard-negatives {limit} or fewer (the mined groups are kept)"
        )


def _passage_table(folder: Path) -> Any:
    import pyarrow.parquet as pq

    from xprt_st.mining.layout import PASSAGES_FILE

    return pq.read_table(folder / PASSAGES_FILE, columns=["label", "passage_index", "text", "held_out"])


def _group_rows(folder: Path, first_row: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Passage rows of each training group's anchor and positive, from ``groups_meta.jsonl`` (dataset order)."""
    from xprt_st.mining.layout import META_FILE

    anchors, positives = [], []
    with (folder / META_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            meta = json.loads(line)
            if "anchor_index" not in meta:
                raise ValueError(f"{folder}: hard negatives need mined groups, not {meta.get('kind', 'ablation')} rows")
            base = first_row[int(meta["label"])]
            anchors.append(base + int(meta["anchor_index"]))
            positives.append(base + int(meta["related_indices"][0]))
    return np.asarray(anchors, dtype=np.int64), np.asarray(positives, dtype=np.int64)


def add_hard_negatives(
    folder: str | Path,
    count: int,
    *,
    model: Any = None,
    max_ratio: float = DEFAULT_MAX_RATIO,
    depth: int | None = None,
    batch_size: int = 64,
    query_chunk: int = 1024,
    pool_chunk: int = 8192,
    seed: int = 0,
    reuse_embeddings: bool = True,
    encode_backend: str = "torch",
    precision: str | None = None,
) -> dict[str, Any]:
    """Add ``negative_1 .. negative_{count}`` to the training groups of the merged mining folder ``folder``.

    Args:
        folder: a merged mining folder (``stats.json``, ``passages.parquet``, ``groups_meta.jsonl``).
        count: hard negatives per group.
        model: the mining model (a SentenceTransformer, a name or path; None: the offline default).
        max_ratio: the positive-aware filter (see :func:`positive_aware_filter`).
        depth: candidates kept per anchor before the filter (default ``max(4 * count, count + 16)``).
        batch_size: encoder batch.
        query_chunk, pool_chunk: anchors and passages scored at once (the memory bound).
        seed: with the group's row, draws the stand-in of a group whose every candidate was filtered: a random
            passage of another training document (drawn per group, so a group whose candidates change by a
            near-tie, as between a stored and a fresh encoding, changes no other group's stand-in).
        reuse_embeddings: copy the vectors mining stored where they fit (:mod:`xprt_st.mining.passage_vectors`);
            false encodes every passage again.
        encode_backend: what runs the model's transformer (:mod:`xprt_st.encode_backend`); its export is kept
            in ``folder/.onnx-cache``. Stored vectors of another backend are not reused.
        precision: auto, fp32 or bf16 (:mod:`xprt_st.precision`); None: the precision of mining's stored vectors
            (:func:`~xprt_st.mining.layout.embeddings.stored_precision`), so they are reused and the negatives are
            ranked as mining ranked; vectors of another precision are never reused.

    Returns:
        The statistics also written under ``hard_negatives`` in ``stats.json`` (whose ``settings`` then record
        ``hard_negatives: count``, what a recipe's ``data.requires`` checks).
    """
    import datasets

    from xprt_st.encode_backend import load_encoder
    from xprt_st.mining.layout import DATASET_STATE, STATS_FILE, atomic_write_json, read_stats
    from xprt_st.mining.layout.embeddings import stored_precision
    from xprt_st.mining.layout.merged import replace_columns

    folder = Path(folder)
    if count < 1:
        raise ValueError(f"hard_negatives must be >= 1, got {count}")
    if not 0 < max_ratio <= 1:
        raise ValueError(f"hard-negative max_ratio must be in (0, 1], got {max_ratio}")
    stats = read_stats(folder)
    if stats is None or not (folder / DATASET_STATE).is_file():
        raise FileNotFoundError(f"{folder} is not a merged mining folder (no {STATS_FILE}): mine it first")
    depth = depth or max(4 * count, count + 16)
    table = _passage_table(folder)
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    held_out = np.asarray(table.column("held_out").to_numpy(zero_copy_only=False), dtype=bool)
    first_row: dict[int, int] = {}
    for row, label in enumerate(labels.tolist()):
        first_row.setdefault(label, row)
    anchor_rows, positive_rows = _group_rows(folder, first_row)
    dataset = datasets.load_from_disk(str(folder))
    if len(dataset) != len(anchor_rows):
        raise ValueError(f"{folder}: {len(dataset)} groups but {len(anchor_rows)} lines of groups_meta.jsonl")
    texts = table.column("text")
    # a query-shaped anchor (pairs inverse-cloze) is a piece of its passage, a run of words joined by single spaces:
    # its negatives are the passage's
    words = " ".join
    if len(dataset) and words(dataset[0][ANCHOR].split()) not in words(texts[int(anchor_rows[0])].as_py().split()):
        raise ValueError(f"{folder}: groups_meta.jsonl does not match the dataset's anchors; merge the folder again")

    pool_rows = np.flatnonzero(~held_out)
    check_candidates(folder, count, labels[pool_rows])
    if precision is None:  # mining's, where torch ran it (another backend's vectors are never reused anyway)
        precision = stored_precision(stats) if encode_backend == "torch" else "auto"
    sentence_model = load_encoder(model, encode_backend, folder, precision=precision)
    with tempfile.TemporaryDirectory(prefix="xprt-hard-negatives-") as scratch:
        dim = (
            getattr(sentence_model, "get_embedding_dimension", None) or sentence_model.get_sentence_embedding_dimension
        )()
        pool = np.lib.format.open_memmap(
            Path(scratch) / "pool.npy", mode="w+", dtype=np.float32, shape=(len(pool_rows), dim)
        )
        reused = fill_passage_vectors(
            folder, texts.to_pylist(), pool_rows, sentence_model, pool, batch_size, reuse=reuse_embeddings
        )
        pool.flush()
        position = np.full(len(labels), -1, dtype=np.int64)
        position[pool_rows] = np.arange(len(pool_rows))
        pool_labels = labels[pool_rows]
        chosen_rows = np.empty((len(anchor_rows), count), dtype=np.int64)
        survived = np.empty(len(anchor_rows), dtype=np.int64)
        scores_kept: list[float] = []
        positives_seen: list[float] = []
        for start in range(0, len(anchor_rows), query_chunk):
            a = position[anchor_rows[start : start + query_chunk]]
            p = position[positive_rows[start : start + query_chunk]]
            queries = np.asarray(pool[a])
            positive_scores = np.einsum("qd,qd->q", queries, np.asarray(pool[p])).astype(np.float64)
            scores, indices = nearest_other_documents(queries, pool_labels[a], pool, pool_labels, depth, pool_chunk)
            chosen, found = positive_aware_filter(scores, indices, positive_scores, count, max_ratio)
            for row in np.flatnonzero(found == 0):  # every candidate filtered: a random other document's passage
                others = np.flatnonzero(pool_labels != pool_labels[a[row]])  # not empty: check_candidates
                draw = np.random.default_rng([seed % 2**63, start + int(row)])
                chosen[row] = others[draw.integers(len(others))]
            for row in np.flatnonzero(found > 0):
                scores_kept += [float(np.dot(queries[row], pool[i])) for i in chosen[row, : found[row]]]
            positives_seen += positive_scores.tolist()
            chosen_rows[start : start + len(a)] = pool_rows[chosen]
            survived[start : start + len(a)] = found
        del pool

    columns = {
        name: [texts[int(r)].as_py() for r in chosen_rows[:, k]] for k, name in enumerate(negative_columns(count))
    }
    replace_columns(folder, dataset, NEGATIVE_PREFIX, columns)
    del dataset
    summary = {
        "count": count,
        "max_ratio": max_ratio,
        "depth": depth,
        "groups": len(anchor_rows),
        "candidate_passages": len(pool_rows),
        "groups_all_filtered": int((survived == 0).sum()),
        "groups_padded": int(((survived > 0) & (survived < count)).sum()),
        "mean_negative_cosine": float(np.mean(scores_kept)) if scores_kept else None,
        "mean_positive_cosine": float(np.mean(positives_seen)) if positives_seen else None,
        "reused_vectors": reused,
        "model": str(model) if isinstance(model, str | Path) or model is None else "given",
    }
    filtered = summary["groups_all_filtered"]
    if filtered:
        summary["note"] = (
            f"{filtered} of {summary['groups']} groups had every candidate filtered (the positive-aware filter, "
            f"--hard-negative-max-ratio {max_ratio:g}): their negatives are random passages of other documents, not "
            "hard ones; a stronger mining model, or a higher ratio, keeps more"
        )
    stats.setdefault("settings", {})["hard_negatives"] = count
    stats["settings"]["hard_negative_max_ratio"] = max_ratio
    stats["hard_negatives"] = summary
    atomic_write_json(folder / STATS_FILE, stats)
    logger.info(
        "hard negatives: %d per group for %d groups (%d groups had every candidate filtered; mean cosine %.3f)",
        count,
        summary["groups"],
        filtered,
        summary["mean_negative_cosine"] or float("nan"),
    )
    if filtered > ALL_FILTERED_WARNING * summary["groups"]:
        logger.warning("hard negatives: %s", summary["note"])
    return summary


def structure_negatives(
    folder: Path, rows: dict[str, list[Any]], count: int, model: Any, max_ratio: float, precision: str | None = None
) -> tuple[list[list[str]], dict[str, Any]]:
    """``count`` hard negatives per structure group: the anchor's nearest training passages of other documents.

    The anchors (titles, headings) and the training passages of ``folder/passages.parquet`` are embedded with
    the mining model (``model``: a SentenceTransformer, a name or None for the offline default) in ``precision``;
    the passages' vectors are mining's stored ones where model, length, precision and texts are the same
    (:func:`~xprt_st.mining.passage_vectors.fill_passage_vectors`). NV-Retriever's positive-aware filter
    (``max_ratio``) drops likely false negatives, as for the mined groups
    (:func:`positive_aware_filter`). A group whose every candidate is filtered keeps its nearest one.
    """
    import numpy as np
    import pyarrow.parquet as pq

    from xprt_st.columns import ANCHOR, LABEL, POSITIVE
    from xprt_st.encode_backend import load_encoder
    from xprt_st.mining.layout import PASSAGES_FILE, read_stats
    from xprt_st.mining.layout.embeddings import stored_precision
    from xprt_st.mining.passage_vectors import fill_passage_vectors

    table = pq.read_table(folder / PASSAGES_FILE, columns=["label", "text", "held_out"])
    keep = ~np.asarray(table.column("held_out").to_numpy(zero_copy_only=False), dtype=bool)
    every_text = table.column("text").to_pylist()
    pool_rows = np.flatnonzero(keep)
    texts = [every_text[int(row)] for row in pool_rows]
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)[keep]
    precision = precision or stored_precision(read_stats(folder) or {})
    encoder = load_encoder(model, "torch", folder, precision=precision)

    def encode(values: list[str]) -> np.ndarray:
        return encoder.encode(values, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    dim = (getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension)()
    pool = np.empty((len(pool_rows), dim), dtype=np.float32)
    fill_passage_vectors(folder, every_text, pool_rows, encoder, pool, batch_size=32)  # mining's, where they fit
    queries, positives = encode(rows[ANCHOR]), encode(rows[POSITIVE])
    query_labels = np.asarray(rows[LABEL], dtype=np.int64)
    depth = max(4 * count, count + 16)
    scores, indices = nearest_other_documents(queries, query_labels, pool, labels, depth)
    positive_scores = np.einsum("qd,qd->q", queries, positives).astype(np.float64)
    chosen, found = positive_aware_filter(scores, indices, positive_scores, count, max_ratio)
    filtered = found == 0
    chosen[filtered] = indices[filtered, :1]
    summary = {
        "count": count,
        "max_ratio": max_ratio,
        "groups": len(query_labels),
        "candidate_passages": len(texts),
        "groups_all_filtered": int(filtered.sum()),
        "mean_positive_cosine": float(positive_scores.mean()) if len(positive_scores) else None,
    }
    return [[texts[int(i)] for i in row] for row in chosen], summary
