"""BM25 between the passages of one document, with the corpus's document frequencies: pure array functions.

``--rank-by bm25`` ranks an anchor's related passages by the anchor's BM25 score against each other passage of its
document, the lexical score alone (issue 52: a positive the start's cosine does not choose). Robertson's BM25 in
Lucene's form, as :mod:`xprt_st.evaluation.lexical` evaluates with::

    bm25(a, p) = sum over the distinct terms t of a of  idf(t) * tf(t, p) * (k1 + 1) / (tf(t, p) + k1 * L(p))
    L(p) = 1 - b + b * |p| / avgdl,     idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``k1 = 1.2`` and ``b = 0.75`` (Elasticsearch's defaults). Where this differs from a search engine's BM25:
terms are the hashed words of the corpus TF-IDF (:class:`xprt_st.mining.tfidf.TfidfScorer`: lower-cased words of
2+ characters, no stopword list and no stemmer), so ``N`` and ``df`` are its corpus-wide counts and the IDF does
the stopwords' work; each distinct term of the anchor counts once (an anchor is a query of its words, not of their
repeats); and ``avgdl`` is the mean length of the document's own passages, not the corpus's (the passages are
token windows of one bounded size, and the ranking is within one document).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

BM25_K1 = 1.2
"""Term-frequency saturation (Elasticsearch's default)."""
BM25_B = 0.75
"""Length normalisation (Elasticsearch's default)."""


def bm25_idf(document_frequencies: np.ndarray, passages: int) -> np.ndarray:
    """Lucene's BM25 IDF per term (hash column), ``ln(1 + (N - df + 0.5) / (df + 0.5))``: always above 0.

    Example:
        >>> [round(float(v), 4) for v in bm25_idf(np.array([1, 5, 10]), 10)]
        [1.9924, 0.6931, 0.0465]
    """
    df = np.asarray(document_frequencies, dtype=np.float64)
    return np.log1p((passages - df + 0.5) / (df + 0.5))


def bm25_matrix(
    counts: sparse.spmatrix | np.ndarray, idf: np.ndarray, k1: float = BM25_K1, b: float = BM25_B
) -> np.ndarray:
    """``(n, n)`` BM25 of one document's passages: row ``i`` scores every passage with passage ``i``'s terms.

    Args:
        counts: ``(n, terms)`` term counts of the document's passages (hashed columns; sparse or dense).
        idf: ``(terms,)`` IDF per column (:func:`bm25_idf` of the corpus counts).
        k1: term-frequency saturation.
        b: length normalisation.

    Example:
        >>> counts = np.array([[1, 1, 0], [2, 0, 0], [0, 0, 3]])  # passages 0 and 1 share term 0
        >>> np.round(bm25_matrix(counts, np.ones(3)), 4).tolist()
        [[2.1241, 1.4326, 0.0], [1.0621, 1.4326, 0.0], [0.0, 0.0, 1.4808]]
    """
    rows = sparse.csr_matrix(counts)
    columns, local = np.unique(rows.indices, return_inverse=True)  # the document's own columns: its words only
    tf = sparse.csr_matrix(
        (rows.data.astype(np.float64), local.reshape(-1), rows.indptr), shape=(rows.shape[0], len(columns))
    ).toarray()  # (n, m)
    lengths = tf.sum(axis=1)  # (n,)
    average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
    saturation = k1 * (1.0 - b + b * lengths / average)  # (n,)
    weights = np.asarray(idf, dtype=np.float64)[columns][None, :] * tf * (k1 + 1.0) / (tf + saturation[:, None])
    query = (tf > 0).astype(np.float64)  # (n, m): each distinct term of the querying passage once
    return query @ weights.T  # (n, n)


def bm25_matrices(
    counts: sparse.spmatrix, sizes: Sequence[int], idf: np.ndarray, k1: float = BM25_K1, b: float = BM25_B
) -> list[np.ndarray]:
    """:func:`bm25_matrix` of each document of a run of documents (``sizes[d]`` consecutive rows each)."""
    rows = sparse.csr_matrix(counts)
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    if bounds[-1] != rows.shape[0]:
        raise ValueError(f"sizes add up to {bounds[-1]} rows, the matrix has {rows.shape[0]}")
    return [bm25_matrix(rows[bounds[d] : bounds[d + 1]], idf, k1, b) for d in range(len(sizes))]
