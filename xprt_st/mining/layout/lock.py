"""One writer per mining folder (or per shard of it): the guard's lock (:class:`xprt_st.output_folder.FolderLock`),
raising mining's own :class:`~xprt_st.mining.config.MiningOutputError`.

A lock whose holder ran on this host and no longer exists is stale (a kill -9, a crash) and is taken over with a
warning; a lock held by another host cannot be checked from here, so the message says how to remove it when that
process is gone.
"""

from __future__ import annotations

from pathlib import Path

from xprt_st.mining.config import MiningOutputError
from xprt_st.output_folder import FolderLock as _GuardLock


class FolderLock(_GuardLock):
    """Hold ``path`` (a lock file) for the duration of a ``with`` block; :class:`MiningOutputError` when taken."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(path, what, command="mine", error=MiningOutputError)
