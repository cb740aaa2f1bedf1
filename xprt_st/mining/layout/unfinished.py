"""A merge stopped midway: the marker a merge keeps in the folder until ``stats.json`` is written, and the refusal
every reader of a mined folder gives while the marker is there."""

from __future__ import annotations

import json
from pathlib import Path

from xprt_st.mining.config import MiningConfigError

__all__ = ["MERGE_UNFINISHED", "unfinished_problem"]

MERGE_UNFINISHED = ".xprt-merge-unfinished.json"
"""Written before a merge moves its first part into place and removed once ``stats.json`` is written: while it
exists, the folder's groups, held-out part and statistics may come from two merges (a killed merge)."""


def unfinished_problem(folder: Path) -> None:
    """Raise a :class:`MiningConfigError` naming the merge to run again where ``folder``'s last merge was stopped
    before it wrote ``stats.json`` (its groups may be the new merge's and its statistics and held-out part the old
    one's: a model trained on it would be trained on what no merge made)."""
    marker = folder / MERGE_UNFINISHED
    if not marker.is_file():
        return
    try:
        settings = json.loads(marker.read_text(encoding="utf-8")).get("settings", {})
    except (ValueError, AttributeError):
        settings = {}
    flags = "".join(
        f" --{key.replace('_', '-')} {value}" for key, value in (settings or {}).items() if value is not None
    )
    raise MiningConfigError(
        f"{folder}: its last merge was stopped before it finished (its groups, held-out part and stats.json may "
        f"come from two merges); merge it again, which reuses every scored passage: xprt-st mine --merge {folder}"
        f"{flags}"
    )
