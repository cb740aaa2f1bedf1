"""The paper's selection ablations, producing the SAME columns as mined groups.

- ``positive="random"`` (paper Table 3, "random positive"): the anchors are the mined anchors, but
  the positive and the other related passages are random other passages of the same document.
- ``pairs="random-span"``: Contriever-style random cropping. Each group is ``1 + top_k`` independent
  random word spans of one document, with span lengths drawn from that document's own passage
  lengths, so baselines train on the same documents with the same text length. When the passages
  were scored (re-merged from a mining run, as ``xprt-st compare`` does), a document yields as many
  groups as it has mined anchors (:func:`span_group_count`): the same documents, the same group count
  and the same row order as the mined groups, so the two differ only in where the pair comes from.
  Without scores (``xprt-st mine --pairs random-span``, nothing encoded) there are no anchors to
  match, and a document with ``n`` passages (``n >= 2``) yields ``n`` groups.

Both are deterministic: the random generator is seeded with ``(seed, label)``, so a resumed or
sharded run draws the same groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

POSITIVES: tuple[str, ...] = ("mined", "random")
PAIRS: tuple[str, ...] = ("mined", "random-span", "inverse-cloze")
"""``inverse-cloze``: query-shaped anchors (:mod:`xprt_st.mining.inverse_cloze`), the same anchors as ``mined``."""


def document_rng(seed: int, label: int) -> np.random.Generator:
    """A generator that depends only on the run's seed and the document's label."""
    return np.random.default_rng([seed, label])


def random_related(anchor: int, num_passages: int, top_k: int, rng: np.random.Generator) -> list[int]:
    """``min(top_k, num_passages - 1)`` distinct random passage indices of the document, never the anchor."""
    others = np.array([j for j in range(num_passages) if j != anchor], dtype=np.int64)
    count = min(top_k, len(others))
    return [int(j) for j in rng.choice(others, size=count, replace=False)]


def span_group_count(centralities: np.ndarray, threshold: float | None) -> int | None:
    """How many random-span groups a document gets: its mined anchor count, or None without scores.

    ``centralities``: the document's passages' centralities; ``threshold``: the run's effective anchor
    threshold (None when no passage was scored). An anchor is a passage with centrality >= threshold, as in
    the mined groups, so a document without anchors gets no random-span group either.
    """
    if threshold is None:
        return None
    return int(np.sum(np.asarray(centralities, dtype=np.float64) >= threshold))


def random_spans(
    passages: Sequence[str], top_k: int, rng: np.random.Generator, num_groups: int | None = None
) -> list[list[str]]:
    """Groups of ``1 + top_k`` random word spans of the document made of ``passages``.

    Span ``i`` is a contiguous run of words of the whole document (passages joined), its length drawn
    from the word counts of the document's passages, its start uniform over the valid positions.
    Spans are cropped independently, so they may overlap, as in Contriever.
    """
    words = " ".join(passages).split()
    lengths = [max(1, len(p.split())) for p in passages]
    groups: list[list[str]] = []
    for _ in range(len(passages) if num_groups is None else num_groups):
        group = []
        for _ in range(1 + top_k):
            length = min(int(rng.choice(lengths)), len(words))
            start = int(rng.integers(0, len(words) - length + 1))
            group.append(" ".join(words[start : start + length]))
        groups.append(group)
    return groups
