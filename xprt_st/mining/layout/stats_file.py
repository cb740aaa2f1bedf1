"""A mined folder's ``stats.json``, read with a message that names the file when it is not what mining wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xprt_st.mining.config import MiningConfigError
from xprt_st.mining.layout.folder import STATS_FILE
from xprt_st.mining.layout.unfinished import unfinished_problem

STATS_OBJECTS = ("settings", "holdout", "structure")
"""Entries of ``stats.json`` that mining writes as JSON objects, and that its readers take settings from."""


def stats_shape_problem(stats: Any, objects: tuple[str, ...] = STATS_OBJECTS) -> str | None:
    """What in a parsed ``stats.json`` is not what mining writes (the file, or one of ``objects``, no JSON object),
    for a message that names the file; None when its shape is mining's."""
    if not isinstance(stats, dict):
        return f"it must hold a JSON object, found {type(stats).__name__}"
    for key in objects:
        value = stats.get(key)
        if value is not None and not isinstance(value, dict):
            return f"{key!r} must be a JSON object, found {type(value).__name__} (edited since the mining wrote it)"
    return None


def read_stats(folder: str | Path, *, unfinished_ok: bool = False) -> dict[str, Any] | None:
    """The ``stats.json`` of a merged mining folder, or None when it has none.

    ``unfinished_ok``: for the mining command itself, which is about to merge the folder again; every other reader
    is refused a folder whose last merge was stopped midway.

    Raises:
        MiningConfigError: (a ``ValueError``) the file is not valid JSON, or it or its ``settings`` is no JSON
            object (:func:`stats_shape_problem`: edited by hand, or cut short), naming the file. The other entries
            are left to their readers: a re-merge writes the file again. Also the folder's last merge was stopped
            before it finished (:data:`~xprt_st.mining.layout.folder.MERGE_UNFINISHED`), naming the merge to run
            again.
    """
    if not unfinished_ok:
        unfinished_problem(Path(folder))
    path = Path(folder) / STATS_FILE
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise MiningConfigError(f"{path} is not valid JSON ({error}); mine the folder again") from error
    problem = stats_shape_problem(stats, ("settings",))
    if problem is not None:
        raise MiningConfigError(f"{path}: {problem}; mine the folder again")
    return stats
