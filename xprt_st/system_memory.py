"""How much RAM this process may still take: the kernel's ``MemAvailable``, bounded by the container's limit.

A check before a big allocation (a training step, a BM25 index) compares its estimate with this figure, so that
a job too big for the machine ends in one clear line rather than in the kernel's out-of-memory kill. In a
container ``/proc/meminfo`` reports the host's memory, so the cgroup's own limit (v2 ``memory.max`` less
``memory.current``, or v1's ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``) bounds it where one is set.

This module imports nothing of the package: every floor may import it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["available_ram_bytes"]

_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)
"""(limit, usage) files of cgroup v2 and v1, as a container sees its own group."""


def _meminfo_available(meminfo: Path) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom(limit: Path, usage: Path) -> float | None:
    """The limit less the usage, or None where there is no limit ("max", v1's huge sentinel) or no such files."""
    try:
        text = limit.read_text().strip()
        if text == "max" or int(text) >= 2**62:
            return None
        return float(int(text) - int(usage.read_text().strip()))
    except (OSError, ValueError):
        return None


def available_ram_bytes(meminfo: Path = Path("/proc/meminfo"), cgroups: tuple = _CGROUP_FILES) -> float | None:
    """Bytes of RAM still free to this process: the smaller of ``MemAvailable`` and the cgroup's headroom; None
    where neither can be read (not Linux).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "meminfo").write_text("MemTotal: 8000 kB\\nMemAvailable: 4000 kB\\n")
        >>> _ = (folder / "max").write_text("1024000\\n"), (folder / "current").write_text("24000\\n")
        >>> available_ram_bytes(folder / "meminfo", ((folder / "max", folder / "current"),))
        1000000.0
        >>> _ = (folder / "max").write_text("max\\n")
        >>> available_ram_bytes(folder / "meminfo", ((folder / "max", folder / "current"),))
        4096000.0
    """
    figures = [_meminfo_available(meminfo)]
    figures += [_cgroup_headroom(Path(limit), Path(usage)) for limit, usage in cgroups]
    known = [figure for figure in figures if figure is not None]
    return max(0.0, min(known)) if known else None
