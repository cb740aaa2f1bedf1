"""How much RAM this process may still take: the kernel's ``MemAvailable``, bounded by the container's limit.

A check before a big allocation (a training step, a BM25 index) compares its estimate with this figure, so that
a job too big for the machine ends in one clear line rather than in the kernel's out-of-memory kill. In a
container ``/proc/meminfo`` reports the host's memory, so the cgroup's own limit (v2 ``memory.max`` less
``memory.current``, or v1's ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``, each less the inactive page
cache the kernel would drop first) bounds it where one is set.

This module imports nothing of the package: every floor may import it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["available_ram_bytes"]

_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"),
    (
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory/memory.stat",
    ),
)
"""(limit, usage, stat) files of cgroup v2 and v1, as a container sees its own group."""

_RECLAIMABLE = ("inactive_file", "total_inactive_file")
"""``memory.stat`` keys (v2, v1) of the page cache the kernel drops before it kills: the usage counts it, so a
container that has just read a large corpus would otherwise look full (what ``docker stats`` leaves out too)."""


def _meminfo_available(meminfo: Path) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reclaimable(stat: Path) -> int:
    """The inactive page cache of ``memory.stat`` (0 where the file or the key is missing)."""
    try:
        for line in stat.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in _RECLAIMABLE:
                return int(value)
    except (OSError, ValueError):
        return 0
    return 0


def _cgroup_headroom(limit: Path, usage: Path, stat: Path) -> float | None:
    """The limit less the usage that is not inactive page cache, or None where there is no limit ("max", v1's
    huge sentinel) or no such files."""
    try:
        text = limit.read_text().strip()
        if text == "max" or int(text) >= 2**62:
            return None
        return float(int(text) - int(usage.read_text().strip()) + _reclaimable(stat))
    except (OSError, ValueError):
        return None


def available_ram_bytes(meminfo: Path = Path("/proc/meminfo"), cgroups: tuple = _CGROUP_FILES) -> float | None:
    """Bytes of RAM still free to this process: the smaller of ``MemAvailable`` and the cgroup's headroom; None
    where neither can be read (not Linux).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "meminfo").write_text("MemTotal: 8000 kB\\nMemAvailable: 4000 kB\\n")
        >>> _ = (folder / "max").write_text("1024000\\n"), (folder / "current").write_text("224000\\n")
        >>> _ = (folder / "stat").write_text("anon 24000\\ninactive_file 200000\\n")  # page cache it can drop
        >>> cgroup = ((folder / "max", folder / "current", folder / "stat"),)
        >>> available_ram_bytes(folder / "meminfo", cgroup)
        1000000.0
        >>> _ = (folder / "max").write_text("max\\n")
        >>> available_ram_bytes(folder / "meminfo", cgroup)
        4096000.0
    """
    figures = [_meminfo_available(meminfo)]
    figures += [_cgroup_headroom(Path(limit), Path(usage), Path(stat)) for limit, usage, stat in cgroups]
    known = [figure for figure in figures if figure is not None]
    return max(0.0, min(known)) if known else None
