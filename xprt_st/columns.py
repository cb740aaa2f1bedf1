"""The mined dataset's column names: the contract between mining, losses and training."""

from __future__ import annotations

ANCHOR = "anchor"
POSITIVE = "positive"
RELATED = ("positive", "related_2", "related_3", "related_4")
"""The top-k related passages in rank order; the first one is the positive."""
GROUP_COLUMNS = (ANCHOR, *RELATED)
LABEL = "label"
"""int64 document id. It travels as the label because the collator tokenizes every other column."""
