"""The mined dataset's column names: the contract between mining, losses and training."""

from __future__ import annotations

ANCHOR = "anchor"
POSITIVE = "positive"
RELATED = ("positive", "related_2", "related_3", "related_4")
"""The top-k related passages in rank order; the first one is the positive."""
GROUP_COLUMNS = (ANCHOR, *RELATED)
LABEL = "label"
"""int64 document id. It travels as the label because the collator tokenizes every other column."""
NEGATIVE_PREFIX = "negative_"
"""Hard-negative columns: ``negative_1 .. negative_K``, the nearest passages of OTHER documents to each anchor,
written by :func:`xprt_st.mining.hard_negatives.add_hard_negatives` (mining's ``hard_negatives`` option)."""


def negative_columns(count: int) -> tuple[str, ...]:
    """``("negative_1", ..., "negative_{count}")``; empty for 0."""
    return tuple(f"{NEGATIVE_PREFIX}{i}" for i in range(1, count + 1))


LEXICAL_PREFIX = "lexical_"
"""Lexical-candidate columns: ``lexical_1 .. lexical_L``, each anchor's BM25 top passages of OTHER documents across
the corpus, written by :func:`xprt_st.mining.lexical_candidates.add_lexical_candidates` (``--lexical-candidates``):
candidates the hybrid teacher ranks beside the batch's own, passages the start may not find."""


def lexical_columns(count: int) -> tuple[str, ...]:
    """``("lexical_1", ..., "lexical_{count}")``; empty for 0."""
    return tuple(f"{LEXICAL_PREFIX}{i}" for i in range(1, count + 1))
