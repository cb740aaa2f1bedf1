"""A mined folder's write that the disk refused (full, over a quota, a file-size limit): one line naming the folder,
its disk and what is left of the folder, in place of the library's traceback from deep inside a save.

A merge stages every part before it moves any into place, and a pass after the merge (the hard negatives, the
lexical candidates) stages its groups the same way, so a write that fails while staging leaves the folder as it was;
one that fails after the merge began moving parts leaves its unfinished-merge record, which every reader refuses
naming the merge to run again (:data:`xprt_st.mining.layout.MERGE_UNFINISHED`).
"""

from __future__ import annotations

import errno
from pathlib import Path

from xprt_st.disk import describe_disk
from xprt_st.mining.config import MiningError

__all__ = ["FULL_DISK", "MiningWriteError", "raise_write_failure"]

FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""The errors of a write the disk refused: no space left, a quota reached, a file larger than allowed."""


class MiningWriteError(MiningError, OSError):
    """A write into a mined folder failed for lack of space; the message names the folder, its disk and the fix."""

    exit_code = 1  # stopped after work that is kept


def raise_write_failure(folder: str | Path, error: OSError, step: str = "the merge", unfinished: bool = False) -> None:
    """Raise a :class:`MiningWriteError` for ``error`` when the disk refused the write (:data:`FULL_DISK`); return
    otherwise (the caller re-raises ``error`` as it is). ``unfinished``: the folder holds its unfinished-merge record
    (the merge had begun moving parts into place)."""
    if error.errno not in FULL_DISK:
        return
    folder = Path(folder)
    kept = (
        f"{folder} holds a merge stopped midway, which every reader refuses until the merge runs again"
        if unfinished
        else f"{folder} is as it was before {step}"
    )
    raise MiningWriteError(
        f"could not write {step} into {folder} on {describe_disk(folder)}: {error.strerror or error}. {kept}; the "
        "scored passages are kept. Free space on that disk, then run the same command again: it reuses them."
    ) from error
