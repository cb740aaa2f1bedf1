"""One writer per mining folder (or per shard of it): a lock file naming its holder, stale locks detected.

The lock is a file created with ``O_CREAT | O_EXCL`` (atomic on local filesystems and NFSv3+)
holding the holder's pid, host and start time. A lock whose holder ran on this host and no longer
exists is stale (a kill -9, a crash) and is taken over with a warning; a lock held by another host
cannot be checked from here, so the message says how to remove it when that process is gone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from xprt_st.mining.config import MiningOutputError

logger = logging.getLogger(__name__)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


class FolderLock:
    """Hold ``path`` (a lock file) for the duration of a ``with`` block; :class:`MiningOutputError` when taken."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._held = False

    def acquire(self) -> None:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == record["host"]:
                    return  # this process holds it already (a shard job that goes on to merge)
                if holder is None or self._stale(holder):
                    logger.warning("removing the stale lock %s (%s)", self.path, _describe(holder))
                    self.path.unlink(missing_ok=True)
                    continue
                raise MiningOutputError(
                    f"{self.what} is being written by another run ({_describe(holder)}); wait for it to finish "
                    f"(mining the same folder twice at once would mix their files). If that process is gone "
                    f"(it ran on another machine, or it crashed there), delete {self.path} and rerun."
                ) from None
            with os.fdopen(descriptor, "w") as handle:
                json.dump(record, handle)
            self._held = True
            return
        raise MiningOutputError(f"cannot take the lock {self.path}: it keeps coming back; is another run starting?")

    def _holder(self) -> dict | None:
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # half-written by a killed run, or removed meanwhile
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _stale(holder: dict) -> bool:
        pid = holder.get("pid")
        return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.release()


def _describe(holder: dict | None) -> str:
    if holder is None:
        return "an unreadable lock file"
    return f"pid {holder.get('pid')} on host {holder.get('host')}, since {holder.get('started')}"
