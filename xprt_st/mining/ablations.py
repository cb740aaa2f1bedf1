"""The paper's selection ablations, producing the SAME columns as mined groups.

- ``positive="random"`` (paper Table 3, "random positive"): the anchors are the mined anchors, but
  the positive and the other related passages are random other passages of the same document.
- ``pairs="random-span"``: Contriever-style random cropping. Each group is ``1 + top_k`` independent
  random word spans of one document, with span lengths drawn from that document's own passage
  lengths, so baselines train on the same documents with the same text length. A document with
  ``n`` passages (``n >= 2``) yields ``n`` groups; no encoder is needed.

Both are deterministic: the random generator is seeded with ``(seed, label)``, so a resumed or
sharded run draws the same groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

POSITIVES: tuple[str, ...] = ("mined", "random")
PAIRS: tuple[str, ...] = ("mined", "random-span")


def document_rng(seed: int, label: int) -> np.random.Generator:
    """A generator that depends only on the run's seed and the document's label."""
    return np.random.default_rng([seed, label])


def random_related(anchor: int, num_passages: int, top_k: int, rng: np.random.Generator) -> list[int]:
    """``min(top_k, num_passages - 1)`` distinct random passage indices of the document, never the anchor."""
    others = np.array([j for j in range(num_passages) if j != anchor], dtype=np.int64)
    count = min(top_k, len(others))
    return [int(j) for j in rng.choice(others, size=count, replace=False)]


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
