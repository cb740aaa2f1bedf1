"""Lexical candidates: each anchor's BM25 top passages of other documents across the corpus, for the hybrid teacher.

The hybrid teacher (:class:`xprt_st.losses.HybridTeacherLoss`) ranks each anchor's candidates by BM25 fused with
the frozen start, but a batch's candidates are its positives and the start's nearest passages of other documents:
the teacher can only re-order what the start already found, while BM25's advantage is the passage the start does
not find. This pass, run once after the merge, gives each training group the ``count`` passages of other documents
that BM25 ranks highest for its anchor (the anchor's own text: a passage, or the query-shaped sentence of
``--pairs inverse-cloze``), as the columns ``lexical_1 .. lexical_L``; the teacher scores them with the rest.

BM25 is the evaluation reference's (:data:`xprt_st.evaluation.lexical.BM25_SETTINGS`: bm25s's tokenizer, its
English stopwords, the Snowball stemmer, Lucene's BM25 with ``k1 = 1.2``, ``b = 0.75``), indexed over the training
passages only (held-out documents are never candidates). A candidate of the anchor's own document is skipped (the
same-document mask of the loss: such a passage is a positive, not a candidate of another document), and so is one
that shares no term with the anchor; a group left with fewer than ``count`` gets random passages of other documents
in the rest (seeded per group, as the hard negatives' stand-ins), and the statistics say how many.

How it scales: the index holds one entry per (passage, distinct term); bm25s keeps it as a sparse matrix in memory,
about 10 bytes per character of text (measured for the ``bm25`` reference, :data:`BM25_BYTES_PER_CHARACTER`), so
1M passages of 1,000 characters need about 10 GiB, checked before indexing. Retrieval is one sparse product per
chunk of anchors. Beyond one machine the index is the corpus statistics (document frequencies) plus a sparse row per
passage, so it shards the way mining does: each Ray Data block retrieves against the whole index broadcast to its
workers (an object in Ray's store), and only the top ``count + largest document`` per anchor leave a block.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.columns import ANCHOR, LABEL, LEXICAL_PREFIX, lexical_columns
from xprt_st.mining.config import MiningError

logger = logging.getLogger(__name__)

__all__ = ["LexicalCandidatesError", "add_lexical_candidates", "other_document_candidates"]


class LexicalCandidatesError(MiningError, ValueError):
    """A folder that cannot give the lexical candidates asked for (too few training documents)."""


def other_document_candidates(
    found: np.ndarray, scores: np.ndarray, pool_labels: np.ndarray, query_labels: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` retrieved passages of each query that belong to another document and score above 0.

    Args:
        found: ``(q, depth)`` pool indices, best first (BM25's retrieval).
        scores: ``(q, depth)`` their BM25 scores.
        pool_labels: ``(n,)`` the document of each pool passage.
        query_labels: ``(q,)`` the document of each query.
        count: candidates wanted per query.

    Returns:
        ``(chosen, kept)``: ``(q, count)`` pool indices (``-1`` where fewer were found) and ``(q,)`` how many.

    Example:
        >>> found = np.array([[0, 1, 2, 3], [3, 2, 1, 0]]); scores = np.array([[5.0, 4.0, 3.0, 0.0]] * 2)
        >>> chosen, kept = other_document_candidates(found, scores, np.array([0, 0, 1, 2]), np.array([0, 2]), 2)
        >>> chosen.tolist(), kept.tolist()  # query 0 skips its own document's 0 and 1; 3 scores 0 for query 0
        ([[2, -1], [2, 1]], [1, 2])
    """
    keep = (scores > 0) & (pool_labels[found] != query_labels[:, None])
    chosen = np.full((found.shape[0], count), -1, dtype=np.int64)
    kept = np.zeros(found.shape[0], dtype=np.int64)
    for row in range(found.shape[0]):
        survivors = found[row][keep[row]][:count]
        kept[row] = len(survivors)
        chosen[row, : len(survivors)] = survivors
    return chosen, kept


def _bm25_index(texts: list[str]) -> tuple[Any, Any]:
    """bm25s's retriever over ``texts`` with the ``bm25`` reference's settings (None when no text has a term BM25
    indexes: bm25s cannot index such a corpus), and its stemmer."""
    import bm25s
    import Stemmer

    from xprt_st.evaluation.lexical import BM25_SETTINGS, check_bm25_memory
    from xprt_st.system_memory import available_ram_bytes

    check_bm25_memory(len(texts), sum(map(len, texts)), available_ram_bytes())
    stemmer = Stemmer.Stemmer(BM25_SETTINGS["stemmer_language"])
    tokens = bm25s.tokenize(texts, stopwords=BM25_SETTINGS["stopwords"], stemmer=stemmer, show_progress=False)
    if not tokens.vocab:
        return None, stemmer
    retriever = bm25s.BM25(**{key: BM25_SETTINGS[key] for key in ("k1", "b", "method")})
    retriever.index(tokens, show_progress=False)
    return retriever, stemmer


def _retrieve(retriever: Any, stemmer: Any, queries: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``depth`` best pool indices and scores (``-1`` and 0 for a query of no indexed term)."""
    import bm25s

    from xprt_st.evaluation.lexical import BM25_SETTINGS

    if retriever is None:  # no passage has a term: BM25 finds nothing for any anchor
        return np.full((len(queries), depth), -1, dtype=np.int64), np.zeros((len(queries), depth))
    tokens = bm25s.tokenize(
        queries, stopwords=BM25_SETTINGS["stopwords"], stemmer=stemmer, return_ids=False, show_progress=False
    )
    vocabulary = retriever.vocab_dict
    known = [[token for token in query if token in vocabulary] for query in tokens]
    found = np.full((len(queries), depth), -1, dtype=np.int64)
    scores = np.zeros((len(queries), depth))
    rows = [row for row, query in enumerate(known) if query]
    if rows:
        indices, values = retriever.retrieve([known[row] for row in rows], k=depth, show_progress=False)
        found[rows], scores[rows] = indices, values
    return found, scores


def add_lexical_candidates(folder: str | Path, count: int, *, seed: int = 0, query_chunk: int = 4096) -> dict:
    """Add ``lexical_1 .. lexical_{count}`` to the training groups of the merged mining folder ``folder``.

    Args:
        folder: a merged mining folder (``stats.json``, ``passages.parquet``, the groups).
        count: lexical candidates per group.
        seed: with the group's row, draws the random stand-in of a group BM25 finds too few candidates for.
        query_chunk: anchors retrieved at once.

    Returns:
        The statistics also written under ``lexical_candidates`` in ``stats.json`` (whose ``settings`` then record
        ``lexical_candidates: count``, what a recipe's ``data.requires`` checks).

    Raises:
        LexicalCandidatesError: fewer than 2 training documents (no other document to take candidates from).
        xprt_st.evaluation.lexical.BM25MemoryError: the index cannot fit in the memory left (before indexing).
    """
    import datasets
    import pyarrow.parquet as pq

    from xprt_st.mining.hard_negatives import check_other_documents
    from xprt_st.mining.layout import DATASET_STATE, PASSAGES_FILE, STATS_FILE, atomic_write_json, read_stats
    from xprt_st.mining.layout.merged import replace_columns

    folder = Path(folder)
    if count < 1:
        raise ValueError(f"lexical_candidates must be >= 1, got {count}")
    stats = read_stats(folder)
    if stats is None or not (folder / DATASET_STATE).is_file():
        raise FileNotFoundError(f"{folder} is not a merged mining folder (no {STATS_FILE}): mine it first")
    table = pq.read_table(folder / PASSAGES_FILE, columns=["label", "text", "held_out"])
    held_out = np.asarray(table.column("held_out").to_numpy(zero_copy_only=False), dtype=bool)
    pool_rows = np.flatnonzero(~held_out)
    pool_labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)[pool_rows]
    what = "lexical candidates"
    sizes = check_other_documents(folder, "--lexical-candidates", count, what, pool_labels, LexicalCandidatesError)
    every_text = table.column("text").to_pylist()
    texts = [every_text[int(row)] for row in pool_rows]
    dataset = datasets.load_from_disk(str(folder))
    anchors, labels = dataset[ANCHOR], np.asarray(dataset[LABEL], dtype=np.int64)
    # deep enough that the anchor's own document cannot take every place
    depth = int(min(len(texts), count + sizes.max()))
    retriever, stemmer = _bm25_index(texts)
    chosen = np.empty((len(anchors), count), dtype=np.int64)
    kept = np.empty(len(anchors), dtype=np.int64)
    for start in range(0, len(anchors), query_chunk):
        found, scores = _retrieve(retriever, stemmer, anchors[start : start + query_chunk], depth)
        rows, survived = other_document_candidates(
            found, scores, pool_labels, labels[start : start + query_chunk], count
        )
        for row in np.flatnonzero(survived < count):  # too few found: random passages of other documents
            others = np.setdiff1d(np.flatnonzero(pool_labels != labels[start + row]), rows[row, : survived[row]])
            draw = np.random.default_rng([seed % 2**63, start + int(row)])
            missing = count - int(survived[row])
            rows[row, survived[row] :] = draw.choice(others, size=missing, replace=len(others) < missing)
        chosen[start : start + len(rows)] = rows
        kept[start : start + len(rows)] = survived
    columns = {name: [texts[int(i)] for i in chosen[:, k]] for k, name in enumerate(lexical_columns(count))}
    replace_columns(folder, dataset, LEXICAL_PREFIX, columns)
    del dataset
    summary = {
        "count": count,
        "depth": depth,
        "groups": len(anchors),
        "candidate_passages": len(texts),
        "groups_padded": int((kept < count).sum()),
        "groups_none_found": int((kept == 0).sum()),
        "bm25": "the bm25 reference's settings (xprt_st.evaluation.lexical.BM25_SETTINGS)",
    }
    if summary["groups_padded"]:
        summary["note"] = (
            f"{summary['groups_padded']} of {summary['groups']} groups had fewer than {count} passages of other "
            "documents sharing a term with their anchor: the rest are random passages of other documents"
        )
    stats.setdefault("settings", {})["lexical_candidates"] = count
    stats["lexical_candidates"] = summary
    atomic_write_json(folder / STATS_FILE, stats)
    logger.info(
        "lexical candidates: %d per group for %d groups (%d padded with random passages)",
        count,
        summary["groups"],
        summary["groups_padded"],
    )
    return summary
