"""One TF-IDF for the whole corpus: hashed term counts and document frequencies summed over any split.

``tfidf(t, p) = tf(t, p) * idf(t)`` with ``idf(t) = ln((1 + N) / (1 + df(t))) + 1``, where ``N`` is the
number of passages of the corpus and ``df(t)`` the number of those passages that contain term ``t``;
rows are L2-normalised so ``cos(p, q) = tfidf(p) . tfidf(q)``. Words are lower-cased unicode word
tokens of 2+ characters (scikit-learn's default analyser), as with ``TfidfVectorizer``.

Why hashing: terms are mapped to :data:`N_FEATURES` columns by a fixed hash, so there is no
vocabulary to agree on. Each shard, file or Ray block counts its passages' document frequencies
alone (:meth:`TfidfScorer.partial_fit`); the counts are integers, so summing them
(:meth:`TfidfScorer.update`) gives exactly the same IDF whatever the number of shards or workers and
whatever the order, and the groups no longer depend on how the corpus was split. Two terms that
share a column (about one pair in a million with 2**20 columns) count as one word.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.preprocessing import normalize

N_FEATURES = 2**20
"""Hash columns: 8 MB of document-frequency counts, collisions rare for any natural-language vocabulary."""


class TfidfScorer:
    """TF-IDF vectors whose IDF comes from a whole corpus, fitted in one streaming pass, never from one document.

    Fitting on the corpus matters: a word shared by every passage of one document (the page's topic
    word) is rare in the corpus, so it still counts; a per-document IDF would zero it out.

    Example::

        scorer = TfidfScorer()
        for block in blocks:                      # any split of the corpus, in any order
            scorer.partial_fit(block)
        tfidf_cosine(scorer.transform(passages_of_one_document))
    """

    def __init__(self, n_features: int = N_FEATURES) -> None:
        self._hasher = HashingVectorizer(
            n_features=n_features, alternate_sign=False, norm=None, lowercase=True, dtype=np.float64
        )
        self.n_features = n_features
        self.document_frequencies = np.zeros(n_features, dtype=np.int64)
        """``df(t)`` per hash column."""
        self.passages = 0
        """``N``: passages counted so far."""

    def counts(self, passages: Iterable[str]) -> sparse.csr_matrix:
        """``(n, n_features)`` raw term counts of ``passages`` in the hash columns (what BM25 weighs)."""
        return self._counts(passages)

    def _counts(self, passages: Iterable[str]) -> sparse.csr_matrix:
        counts = self._hasher.transform(passages).tocsr()
        counts.sum_duplicates()
        return counts

    def partial_fit(self, passages: Sequence[str]) -> TfidfScorer:
        """Add the document frequencies of ``passages`` (one block of the corpus) to the counts."""
        if len(passages):
            counts = self._counts(passages)
            self.document_frequencies += np.bincount(counts.indices, minlength=self.n_features)
            self.passages += len(passages)
        return self

    def fit(self, passages: Sequence[str]) -> TfidfScorer:
        """Count document frequencies over ``passages`` alone (all passages of a corpus), forgetting earlier counts."""
        if not passages:
            raise ValueError("TfidfScorer.fit needs at least one passage; the corpus is empty")
        self.document_frequencies[:] = 0
        self.passages = 0
        return self.partial_fit(passages)

    def update(self, other: TfidfScorer) -> TfidfScorer:
        """Add the counts of ``other`` (fitted on another block of the same corpus) to these."""
        if other.n_features != self.n_features:
            raise ValueError(f"cannot add counts over {other.n_features} hash columns to {self.n_features}")
        self.document_frequencies += other.document_frequencies
        self.passages += other.passages
        return self

    @property
    def fitted(self) -> bool:
        """True once some passage with a word has been counted."""
        return bool(self.passages) and bool(self.document_frequencies.any())

    def idf_vector(self) -> np.ndarray:
        """``(n_features,)`` smoothed IDF per hash column."""
        return np.log((1.0 + self.passages) / (1.0 + self.document_frequencies)) + 1.0

    def transform(self, passages: Sequence[str]) -> sparse.csr_matrix:
        """``(n, n_features)`` L2-normalised TF-IDF rows; all-zero rows for passages without a word.

        Each row depends only on its passage and the corpus counts, so any batching of the corpus
        gives bit-identical rows.
        """
        counts = self._counts(passages)
        weighted = counts.multiply(self.idf_vector()[None, :]).tocsr()
        return normalize(weighted, norm="l2", copy=False)

    @property
    def idf(self) -> IdfLookup:
        """The IDF of any term (for inspection and tests): ``scorer.idf["river"]``."""
        return IdfLookup(self)

    def save(self, path: str | Path) -> None:
        """Write the counts (non-zero columns only) to ``path`` (``.npz``) atomically."""
        path = Path(path)
        columns = np.flatnonzero(self.document_frequencies)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}.npz")
        np.savez(
            tmp,
            columns=columns,
            counts=self.document_frequencies[columns],
            passages=np.int64(self.passages),
            n_features=np.int64(self.n_features),
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> TfidfScorer:
        """The scorer whose counts :meth:`save` wrote to ``path``."""
        with np.load(path) as stored:
            scorer = cls(int(stored["n_features"]))
            scorer.document_frequencies[stored["columns"]] = stored["counts"]
            scorer.passages = int(stored["passages"])
        return scorer


class IdfLookup:
    """``lookup[term]``: the IDF of the hash column of ``term`` (terms are hashed, so there is no vocabulary list)."""

    def __init__(self, scorer: TfidfScorer) -> None:
        self._scorer = scorer

    def __getitem__(self, term: str) -> float:
        columns = self._scorer._counts([term]).indices
        if len(columns) != 1:
            raise KeyError(f"{term!r} is not one word of 2+ word characters")
        return float(self._scorer.idf_vector()[columns[0]])
