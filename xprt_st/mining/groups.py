"""Anchors and their related passages for one document: pure functions of the scores.

A *group* is one anchor passage (centrality >= threshold) with the ``top_k`` other passages of the
same document ranked highest by reciprocal-rank fusion of the embedding cosine rank (weight 2) and
the TF-IDF cosine rank (weight 1), ``k = 10``; the first related passage is the positive.

Short documents: a document needs at least :data:`MIN_PASSAGES` (2) passages, so that a group has
at least one related passage. When it has fewer than ``top_k`` other passages, the missing
``related_k`` columns repeat the last (lowest-ranked) related passage, so no column is ever empty;
``num_related`` in the side file tells the real count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from xprt_st.mining.scoring import (
    RRF_K,
    RRF_WEIGHTS,
    centrality,
    cosine_matrix,
    descending_ranks,
    reciprocal_rank_fusion,
)

RankBy = Literal["fused", "embedding", "tfidf", "bm25"]
RANK_BY: tuple[str, ...] = ("fused", "embedding", "tfidf", "bm25")
"""``fused`` (the paper), ``embedding`` and ``tfidf`` (its single-signal ablations), ``bm25`` (the anchor's BM25
against each passage of its document, :mod:`xprt_st.mining.bm25`: a lexical positive, issue 52)."""
PAPER_THRESHOLD = 0.825
"""The paper's centrality threshold, set with E5 on FineWeb. Other models put centralities on other
scales (all-MiniLM-L6-v2: median 0.77 on BBC News, 0.59 on Debian pages), so a corpus-wide run
defaults to a quantile instead (:data:`DEFAULT_THRESHOLD_QUANTILE`); this value is the default of the
one-document functions below, where no corpus quantile exists."""
DEFAULT_THRESHOLD_QUANTILE = 0.5
"""Default anchor threshold of a mining run: this quantile of the corpus's centralities (the median).
Chosen from measurements with all-MiniLM-L6-v2 on BBC News and Debian HTML pages (docs/mining.md):
it gives the paper-like statistics that 0.825 gives with E5, whichever model mines."""
DEFAULT_TOP_K = 4
"""Related passages per anchor in the paper; the first one is the positive."""
MIN_PASSAGES = 2
"""A document needs an anchor and at least one other passage to yield a group."""


@dataclass(slots=True)
class RelatedRanking:
    """The ``top_k`` related passages of one anchor, best first, with both similarities and the fused score."""

    anchor: int
    related: list[int]
    embedding_scores: list[float]
    tfidf_scores: list[float]
    fused_scores: list[float]
    nearest: int = -1
    """The passage the embedding cosine ranks first for this anchor (the start's own nearest passage); the
    positive ``related[0]`` differs from it only under a ranking other than the embedding's."""

    def padded(self, top_k: int) -> list[int]:
        """``related`` repeated at its last entry up to ``top_k`` entries (columns are never empty)."""
        if not self.related:
            raise ValueError(f"anchor {self.anchor} has no related passage; a document needs >= {MIN_PASSAGES}")
        return self.related + [self.related[-1]] * (top_k - len(self.related))


@dataclass(slots=True)
class DocumentGroups:
    """Centralities of all passages of a document, and one :class:`RelatedRanking` per anchor."""

    centrality: np.ndarray
    groups: list[RelatedRanking] = field(default_factory=list)

    @property
    def anchors(self) -> list[int]:
        return [group.anchor for group in self.groups]

    def covered(self) -> set[int]:
        """Passage indices that appear in at least one group, as anchor or related."""
        seen: set[int] = set()
        for group in self.groups:
            seen.add(group.anchor)
            seen.update(group.related)
        return seen


def select_anchors(centralities: np.ndarray, threshold: float = PAPER_THRESHOLD) -> np.ndarray:
    """Indices of passages whose centrality is >= ``threshold`` (the anchors), in passage order."""
    return np.flatnonzero(np.asarray(centralities) >= threshold)


def rank_related(
    anchor: int,
    embedding_cosine: np.ndarray,
    tfidf_cosine: np.ndarray,
    top_k: int = DEFAULT_TOP_K,
    rank_by: RankBy = "fused",
    rrf_k: int = RRF_K,
    weights: tuple[float, float] = RRF_WEIGHTS,
    lexical: np.ndarray | None = None,
) -> RelatedRanking:
    """Rank the other passages of the document for ``anchor`` and keep the best ``top_k``.

    Ranks are 1-based among the candidates (every passage but the anchor), highest similarity first.
    ``rank_by="fused"`` orders by ``2/(k + r_emb) + 1/(k + r_tfidf)`` (the paper); ``"embedding"`` and
    ``"tfidf"`` are the paper's single-signal ablations; ``"bm25"`` orders by ``lexical[anchor]``, the anchor's
    BM25 against each passage (:func:`xprt_st.mining.bm25.bm25_matrix`). Ties fall back to the embedding cosine,
    then to passage order, so the result is deterministic.
    """
    _check_rank_by(rank_by, lexical)
    n = embedding_cosine.shape[0]
    candidates = np.array([j for j in range(n) if j != anchor], dtype=np.int64)
    emb = np.asarray(embedding_cosine[anchor, candidates], dtype=np.float64)
    tfidf = np.asarray(tfidf_cosine[anchor, candidates], dtype=np.float64)
    fused = reciprocal_rank_fusion([descending_ranks(emb), descending_ranks(tfidf)], weights, rrf_k)
    primary = {"fused": fused, "embedding": emb, "tfidf": tfidf}.get(rank_by)
    if primary is None:
        primary = np.asarray(lexical[anchor, candidates], dtype=np.float64)
    # np.lexsort sorts by the last key first; negate for descending order, then index for stability.
    order = np.lexsort((candidates, -emb, -primary))[:top_k]
    return RelatedRanking(
        anchor=anchor,
        related=[int(j) for j in candidates[order]],
        embedding_scores=[float(x) for x in emb[order]],
        tfidf_scores=[float(x) for x in tfidf[order]],
        fused_scores=[float(x) for x in fused[order]],
        nearest=int(candidates[np.lexsort((candidates, -emb))[0]]),
    )


def _check_rank_by(rank_by: str, lexical: np.ndarray | None) -> None:
    if rank_by not in RANK_BY:
        raise ValueError(f"rank_by must be one of {RANK_BY}, got {rank_by!r}")
    if rank_by == "bm25" and lexical is None:
        raise ValueError("rank_by='bm25' needs lexical, the document's BM25 matrix (xprt_st.mining.bm25.bm25_matrix)")


def rank_all_passages(
    embeddings: np.ndarray,
    tfidf_cosine: np.ndarray,
    top_k: int = DEFAULT_TOP_K,
    rank_by: RankBy = "fused",
    lexical: np.ndarray | None = None,
) -> tuple[np.ndarray, list[RelatedRanking]]:
    """Centrality of every passage and its related ranking as if it were an anchor.

    The builder stores this for every passage, so the threshold (or a quantile of the corpus's
    centralities) can be applied, swept and changed later without encoding again.
    """
    scores = centrality(embeddings)
    if len(scores) < MIN_PASSAGES:
        return scores, []
    return scores, rank_every_anchor(cosine_matrix(embeddings), tfidf_cosine, top_k, rank_by, lexical=lexical)


def rank_every_anchor(
    embedding_cosine: np.ndarray,
    tfidf_cosine: np.ndarray,
    top_k: int = DEFAULT_TOP_K,
    rank_by: RankBy = "fused",
    rrf_k: int = RRF_K,
    weights: tuple[float, float] = RRF_WEIGHTS,
    lexical: np.ndarray | None = None,
) -> list[RelatedRanking]:
    """:func:`rank_related` for every passage of the document at once, as one array operation per step.

    Row ``i`` holds passage ``i``'s candidates (every other passage, in order); ranks, fusion and the
    final order are :func:`rank_related`'s formulas applied row-wise (stable sorts, the same
    floating-point operations in the same order), so each ranking equals ``rank_related(i, ...)``.
    """
    _check_rank_by(rank_by, lexical)
    n = embedding_cosine.shape[0]
    candidates = np.broadcast_to(np.arange(n), (n, n))[~np.eye(n, dtype=bool)].reshape(n, n - 1)
    emb = np.take_along_axis(np.asarray(embedding_cosine, dtype=np.float64), candidates, axis=1)
    tfidf = np.take_along_axis(np.asarray(tfidf_cosine, dtype=np.float64), candidates, axis=1)

    def ranks(values: np.ndarray) -> np.ndarray:
        order = np.argsort(-values, axis=1, kind="stable")
        out = np.empty_like(order)
        np.put_along_axis(out, order, np.broadcast_to(np.arange(1, n), order.shape), axis=1)
        return out

    fused = np.zeros(emb.shape, dtype=np.float64)
    for rank, weight in zip((ranks(emb), ranks(tfidf)), weights, strict=True):
        fused += weight / (rrf_k + rank.astype(np.float64))
    primary = {"fused": fused, "embedding": emb, "tfidf": tfidf}.get(rank_by)
    if primary is None:
        primary = np.take_along_axis(np.asarray(lexical, dtype=np.float64), candidates, axis=1)
    order = np.lexsort((candidates, -emb, -primary), axis=1)[:, :top_k]
    nearest = np.take_along_axis(candidates, np.lexsort((candidates, -emb), axis=1)[:, :1], axis=1)[:, 0].tolist()
    related = np.take_along_axis(candidates, order, axis=1).tolist()
    emb_top = np.take_along_axis(emb, order, axis=1).tolist()
    tfidf_top = np.take_along_axis(tfidf, order, axis=1).tolist()
    fused_top = np.take_along_axis(fused, order, axis=1).tolist()
    return [
        RelatedRanking(
            anchor=i,
            related=related[i],
            embedding_scores=emb_top[i],
            tfidf_scores=tfidf_top[i],
            fused_scores=fused_top[i],
            nearest=nearest[i],
        )
        for i in range(n)
    ]


def document_groups(
    embeddings: np.ndarray,
    tfidf_cosine: np.ndarray,
    threshold: float = PAPER_THRESHOLD,
    top_k: int = DEFAULT_TOP_K,
    rank_by: RankBy = "fused",
    lexical: np.ndarray | None = None,
) -> DocumentGroups:
    """The groups of one document: every anchor (centrality >= threshold) with its ``top_k`` related passages.

    Args:
        embeddings: ``(n, dim)`` passage vectors of the document.
        tfidf_cosine: ``(n, n)`` TF-IDF cosines computed with corpus-level IDF.
        threshold: minimum centrality of an anchor (paper: 0.825).
        top_k: related passages per anchor (paper: 4); fewer when the document is short.
        rank_by: ``"fused"`` (paper), ``"embedding"`` or ``"tfidf"`` (ablations), ``"bm25"`` (lexical).
        lexical: ``(n, n)`` BM25 of the passages (:func:`xprt_st.mining.bm25.bm25_matrix`); needed by ``"bm25"``.
    """
    scores, rankings = rank_all_passages(embeddings, tfidf_cosine, top_k, rank_by, lexical)
    anchors = set(select_anchors(scores, threshold).tolist())
    return DocumentGroups(centrality=scores, groups=[r for r in rankings if r.anchor in anchors])
