"""A mined folder's ``stats.json``, read with a message that names the file when it is not what mining wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xprt_st.mining.config import MiningConfigError
from xprt_st.mining.layout.folder import STATS_FILE


def read_stats(folder: str | Path) -> dict[str, Any] | None:
    """The ``stats.json`` of a merged mining folder, or None when it has none.

    Raises:
        MiningConfigError: (a ``ValueError``) the file is no JSON object, or its ``settings`` is none (edited by
            hand, or cut short), naming the file.
    """
    path = Path(folder) / STATS_FILE
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise MiningConfigError(f"{path} is not valid JSON ({error}); mine the folder again") from error
    if not isinstance(stats, dict) or not isinstance(stats.get("settings", {}), dict):
        found = stats if not isinstance(stats, dict) else stats["settings"]
        where = "the file" if not isinstance(stats, dict) else "its 'settings'"
        raise MiningConfigError(
            f"{path}: {where} must be a JSON object, found {type(found).__name__} (edited since the mining wrote it); "
            "mine the folder again"
        )
    return stats
