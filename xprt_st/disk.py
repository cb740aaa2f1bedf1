"""The disk that holds a path, in words: its mount point, free and total bytes (for messages on a failed write).

No imports of the package, so any layer (mining, training) names a full disk the same way.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["describe_disk", "format_bytes", "mount_point"]


def mount_point(path: str | Path) -> Path:
    """The mount point of the disk that holds ``path`` (or would hold it: missing parts are walked up)."""
    current = Path(path).resolve()
    while not current.exists():
        current = current.parent
    while not os.path.ismount(current):
        current = current.parent
    return current


def describe_disk(path: str | Path) -> str:
    """``"the disk mounted at /mnt/x (12.0 MB free of 20.0 MB)"`` for the disk that holds ``path``."""
    mount = mount_point(path)
    usage = shutil.disk_usage(mount)
    return f"the disk mounted at {mount} ({format_bytes(usage.free)} free of {format_bytes(usage.total)})"


def format_bytes(count: int) -> str:
    """``count`` bytes in KB, MB or GB (powers of 1000), one decimal."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
