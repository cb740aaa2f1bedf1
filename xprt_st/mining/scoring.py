"""The paper's scoring formulas as pure array functions: centrality, TF-IDF cosine, reciprocal-rank fusion.

The corpus-wide TF-IDF (:class:`TfidfScorer`, fitted by summing hashed document frequencies over any
split of the corpus) lives in :mod:`xprt_st.mining.tfidf` and is re-exported here.

Nothing here loads a model or touches a file; the builder hands in arrays and gets arrays back, so
each formula is tested against hand-computed values (``tests/mining/test_mining_scoring.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

from xprt_st.mining.tfidf import TfidfScorer

__all__ = [
    "RRF_K",
    "RRF_WEIGHTS",
    "TfidfScorer",
    "centrality",
    "cosine_matrix",
    "descending_ranks",
    "l2_normalize",
    "reciprocal_rank_fusion",
    "tfidf_cosine",
    "tfidf_cosines",
]

RRF_K = 10
"""The paper's reciprocal-rank-fusion constant ``k``."""
RRF_WEIGHTS = (2.0, 1.0)
"""Weights of the (embedding cosine rank, TF-IDF cosine rank): the embedding rank counts twice."""


def l2_normalize(vectors: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``vectors`` scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, eps)


def centrality(embeddings: np.ndarray) -> np.ndarray:
    """Cosine between each passage vector and the mean vector of all passages of its document.

    ``centrality_i = cos(e_i, m)`` with ``m = (1/n) sum_j e_j`` over the ``n`` passages of the document
    (passage ``i`` itself included) and ``e_j`` the L2-normalised passage vectors, as the paper uses
    them. Passages with centrality >= the threshold (paper: 0.825 with E5 on FineWeb) are anchors.

    Args:
        embeddings: ``(n, dim)`` passage vectors of one document; normalised here.

    Returns:
        ``(n,)`` float64 centralities in [-1, 1].
    """
    unit = l2_normalize(embeddings)  # (n, dim)
    mean = unit.mean(axis=0)  # (dim,)
    return unit @ l2_normalize(mean[None, :])[0]  # (n,)


def cosine_matrix(embeddings: np.ndarray) -> np.ndarray:
    """``(n, n)`` pairwise cosines of the passage vectors of one document."""
    unit = l2_normalize(embeddings)
    return unit @ unit.T


def tfidf_cosine(vectors: sparse.spmatrix | np.ndarray) -> np.ndarray:
    """``(n, n)`` cosine between the L2-normalised TF-IDF rows of one document's passages.

    Sparse rows are first moved onto the document's own columns (the hash columns it uses, in their
    order): the product then costs the document's words, not the 2^20 hash columns that scipy's
    transpose would walk, and sums the same terms in the same order, so the values are bit for bit
    those of the product over all columns.
    """
    if sparse.issparse(vectors):
        rows = sparse.csr_matrix(vectors)
        columns, local = np.unique(rows.indices, return_inverse=True)
        compact = sparse.csr_matrix((rows.data, local.reshape(-1), rows.indptr), shape=(rows.shape[0], len(columns)))
        return np.asarray((compact @ compact.T).toarray(), dtype=np.float64)
    unit = l2_normalize(vectors)
    return unit @ unit.T


def tfidf_cosines(vectors: sparse.spmatrix, sizes: Sequence[int]) -> list[np.ndarray]:
    """:func:`tfidf_cosine` of each document of a run of documents (``sizes[d]`` rows each), in one product.

    Each document's words get columns of their own (its hash columns in their order, shifted past the
    previous documents'), so one sparse product is block diagonal: no cross-document term is computed,
    and each block sums the same terms in the same order as :func:`tfidf_cosine`, bit for bit.
    """
    rows = sparse.csr_matrix(vectors)
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    if bounds[-1] != rows.shape[0]:
        raise ValueError(f"sizes add up to {bounds[-1]} rows, the matrix has {rows.shape[0]}")
    row_of_entry = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
    document = np.searchsorted(bounds, row_of_entry, side="right") - 1
    # (document, hash column) pairs, numbered in sorted order: a document's columns are contiguous
    keys = document.astype(np.int64) * np.int64(rows.shape[1]) + rows.indices
    _, columns = np.unique(keys, return_inverse=True)
    width = int(columns.max()) + 1 if len(columns) else 0
    compact = sparse.csr_matrix((rows.data, columns.reshape(-1), rows.indptr), shape=(rows.shape[0], width))
    product = (compact @ compact.T).tocsr()
    out = []
    for d in range(len(sizes)):
        start, stop = int(bounds[d]), int(bounds[d + 1])
        block = np.zeros((stop - start, stop - start), dtype=np.float64)
        first, last = product.indptr[start], product.indptr[stop]
        local_rows = np.repeat(np.arange(stop - start), np.diff(product.indptr[start : stop + 1]))
        block[local_rows, product.indices[first:last] - start] = product.data[first:last]
        out.append(block)
    return out


def descending_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of ``scores`` from highest to lowest; ties keep passage order (stable)."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.int64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


def reciprocal_rank_fusion(
    rank_lists: Sequence[np.ndarray],
    weights: Sequence[float] = RRF_WEIGHTS,
    k: int = RRF_K,
) -> np.ndarray:
    """Weighted reciprocal-rank fusion: ``score_j = sum_m w_m / (k + r_m(j))`` with 1-based ranks.

    The paper fuses the embedding cosine rank (weight 2) and the TF-IDF cosine rank (weight 1) with
    ``k = 10``: first by cosine and sixth by TF-IDF scores ``2/11 + 1/16 = 0.2443``, second on both
    scores ``2/12 + 1/12 = 0.25``.
    """
    if len(rank_lists) != len(weights):
        raise ValueError(f"got {len(rank_lists)} rank lists but {len(weights)} weights")
    fused = np.zeros(len(rank_lists[0]), dtype=np.float64)
    for ranks, weight in zip(rank_lists, weights, strict=True):
        fused += weight / (k + np.asarray(ranks, dtype=np.float64))
    return fused
