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

from xprt_st.mining.tfidf import TfidfScorer

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
    lengths = np.asarray(rows.sum(axis=1)).reshape(-1)  # (n,): the document's own mean length is its avgdl
    average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
    return bm25_scores(rows, rows, idf, average, k1, b)


def bm25_matrices(
    counts: sparse.spmatrix, sizes: Sequence[int], idf: np.ndarray, k1: float = BM25_K1, b: float = BM25_B
) -> list[np.ndarray]:
    """:func:`bm25_matrix` of each document of a run of documents (``sizes[d]`` consecutive rows each)."""
    rows = sparse.csr_matrix(counts)
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    if bounds[-1] != rows.shape[0]:
        raise ValueError(f"sizes add up to {bounds[-1]} rows, the matrix has {rows.shape[0]}")
    return [bm25_matrix(rows[bounds[d] : bounds[d + 1]], idf, k1, b) for d in range(len(sizes))]


def bm25_scores(
    query_counts: sparse.spmatrix | np.ndarray,
    passage_counts: sparse.spmatrix | np.ndarray,
    idf: np.ndarray,
    average_length: float,
    k1: float = BM25_K1,
    b: float = BM25_B,
) -> np.ndarray:
    """``(q, p)`` BM25 of every passage for every query, with a corpus's IDF and mean passage length.

    The formula of the module doc (each distinct query term once); unlike :func:`bm25_matrix`, queries and passages
    are separate sets and ``avgdl`` is given (the corpus's), so a passage's score does not depend on the others
    scored with it.

    Example:
        >>> counts = np.array([[1, 1, 0], [2, 0, 0], [0, 0, 3]])
        >>> np.round(bm25_scores(counts, counts, np.ones(3), counts.sum(axis=1).mean()), 4).tolist()[0]
        [2.1241, 1.4326, 0.0]
    """
    queries, passages = sparse.csr_matrix(query_counts), sparse.csr_matrix(passage_counts)
    # only the columns either side holds: dense arrays of a few hundred words, not of every hash column
    columns, local = np.unique(np.concatenate([queries.indices, passages.indices]), return_inverse=True)
    local = local.reshape(-1)
    width = len(columns)
    query = sparse.csr_matrix(
        (queries.data, local[: len(queries.indices)], queries.indptr), shape=(queries.shape[0], width)
    ).toarray()
    tf = sparse.csr_matrix(
        (passages.data.astype(np.float64), local[len(queries.indices) :], passages.indptr),
        shape=(passages.shape[0], width),
    ).toarray()  # (p, m)
    saturation = k1 * (1.0 - b + b * tf.sum(axis=1) / max(float(average_length), 1e-12))  # (p,)
    weights = np.asarray(idf, dtype=np.float64)[columns][None, :] * tf * (k1 + 1.0) / (tf + saturation[:, None])
    return (query > 0).astype(np.float64) @ weights.T  # (q, p): each distinct term of the query once


class BM25Lexicon:
    """A corpus's BM25 statistics (document frequencies and mean passage length), to score any texts against.

    What the hybrid teacher (:class:`xprt_st.losses.HybridTeacherLoss`) reads the corpus's words with: fitted once on
    the corpus's passages, it scores a batch's anchors against its candidates (:meth:`scores`) with the terms,
    IDF and ``k1``, ``b`` of ``--rank-by bm25`` (the module doc), the mean length taken over the whole corpus.

    Example:
        >>> lexicon = BM25Lexicon.fit(["the river bank", "a bank loan", "the river flows"])
        >>> scores = lexicon.scores(["river"], ["the river bank", "a bank loan"])
        >>> bool(scores[0, 0] > 0 == scores[0, 1])
        True
    """

    def __init__(self, scorer: TfidfScorer, average_length: float, k1: float = BM25_K1, b: float = BM25_B) -> None:
        if not scorer.fitted:
            raise ValueError("BM25Lexicon needs document frequencies counted over a corpus with words")
        self.scorer = scorer
        self.average_length = float(average_length)
        self.k1 = k1
        self.b = b
        self.idf = bm25_idf(scorer.document_frequencies, scorer.passages)

    @classmethod
    def fit(cls, passages: Sequence[str], k1: float = BM25_K1, b: float = BM25_B) -> BM25Lexicon:
        """The statistics of ``passages`` (every passage of a corpus, each once)."""
        scorer = TfidfScorer().fit(passages)
        lengths = np.asarray(scorer.counts(passages).sum(axis=1)).reshape(-1)
        return cls(scorer, float(lengths.mean()), k1, b)

    def scores(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """``(len(queries), len(passages))`` BM25 of each passage for each query."""
        counts = self.scorer.counts
        return bm25_scores(counts(queries), counts(passages), self.idf, self.average_length, self.k1, self.b)

    def describe(self) -> dict[str, float | int]:
        """What a model card records of the lexicon (its size and parameters, not its counts)."""
        return {
            "passages": self.scorer.passages,
            "average_length": round(self.average_length, 2),
            "k1": self.k1,
            "b": self.b,
        }
