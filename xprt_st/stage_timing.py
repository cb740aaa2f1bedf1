"""Wall and CPU seconds of a run's stages, whether each reused an encoding, and what each is doing now.

A command opens a :class:`StageTimer` and makes it the active one (:func:`timing`); the code of a stage,
however deep, marks itself with :func:`stage` (a no-op while no timer is active, so a stage used alone
from Python pays nothing), says that it reused stored vectors with :func:`mark_reused`, and reports how
far it is with :func:`advance`. Stages nest: time spent in an inner stage counts for the inner one only
(the outer one is paused), so the rows add up to the run's time. Entering a stage name again adds to its
row (every chunk's encoding is one "encode for mining" row).

Example:
    >>> ticks = iter(range(100))
    >>> timer = StageTimer(wall=lambda: next(ticks), cpu=lambda: 0.0)
    >>> with timing(timer):
    ...     with stage("train"):
    ...         with stage("label-free: start"):
    ...             mark_reused()
    >>> [(row["stage"], row["wall_s"], row["reused"]) for row in timer.rows()]
    [('train', 2.0, False), ('label-free: start', 1.0, True)]

This module imports nothing of the package, so a benchmark can load it beside another version's code.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "STARTUP",
    "StageTime",
    "StageTimer",
    "advance",
    "count_texts",
    "format_rows",
    "mark_reused",
    "stage",
    "startup_row",
    "timing",
]


@dataclass
class StageTime:
    """One row of the table: the seconds a stage ran (its inner stages' excluded)."""

    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    reused: bool = False
    """True when the stage reused vectors instead of encoding (all or some of its texts)."""
    texts: int = 0
    """Texts the stage encoded or trained (:func:`count_texts`), for its texts a second."""
    done: int | None = None
    total: int | None = None
    """How far the stage is (:func:`advance`), for progress lines."""
    started: float | None = None
    """Wall clock when the stage was first entered (a stage entered again, chunk by chunk, runs since then)."""


@dataclass
class _Open:
    row: StageTime
    wall: float
    cpu: float
    """The clocks when the stage last became the innermost one."""


class StageTimer:
    """The stages of one run, in the order they first ran.

    Args:
        wall: the wall clock (:func:`time.perf_counter`); tests give a fake one.
        cpu: the CPU clock of the process, all threads (:func:`time.process_time`).
    """

    def __init__(
        self, wall: Callable[[], float] = time.perf_counter, cpu: Callable[[], float] = time.process_time
    ) -> None:
        self.wall = wall
        self.cpu = cpu
        self._rows: dict[str, StageTime] = {}
        self._stack: list[_Open] = []
        self._lock = threading.Lock()

    @contextmanager
    def stage(self, name: str) -> Iterator[StageTime]:
        """Time the block as stage ``name``; the stage open around it is paused meanwhile."""
        with self._lock:
            wall, cpu = self.wall(), self.cpu()
            if self._stack:
                self._charge(self._stack[-1], wall, cpu)
            row = self._rows.setdefault(name, StageTime(name, started=wall))
            row.done = row.total = None
            self._stack.append(_Open(row, wall, cpu))
        try:
            yield row
        finally:
            with self._lock:
                wall, cpu = self.wall(), self.cpu()
                self._charge(self._stack.pop(), wall, cpu)
                if self._stack:
                    self._stack[-1].wall, self._stack[-1].cpu = wall, cpu

    @staticmethod
    def _charge(entry: _Open, wall: float, cpu: float) -> None:
        entry.row.wall_s += wall - entry.wall
        entry.row.cpu_s += cpu - entry.cpu
        entry.wall, entry.cpu = wall, cpu

    def mark_reused(self) -> None:
        """The innermost open stage reused stored vectors."""
        with self._lock:
            if self._stack:
                self._stack[-1].row.reused = True

    def count_texts(self, texts: int) -> None:
        """The innermost open stage encoded or trained ``texts`` more texts."""
        with self._lock:
            if self._stack:
                self._stack[-1].row.texts += texts

    def advance(self, done: int, total: int | None) -> None:
        """The innermost open stage has done ``done`` of ``total`` units (documents, steps)."""
        with self._lock:
            if self._stack:
                self._stack[-1].row.done, self._stack[-1].row.total = done, total

    def now(self) -> tuple[str, float, int | None, int | None] | None:
        """The innermost open stage: its name, wall seconds since it was first entered (a stage entered chunk by
        chunk counts from its first chunk), and how far it is (``done``, ``total``; the nearest outer stage's
        count when it reports none); None between stages."""
        with self._lock:
            if not self._stack:
                return None
            entry = self._stack[-1]
            counted = next((e.row for e in reversed(self._stack) if e.row.done is not None), entry.row)
            return entry.row.name, self.wall() - (entry.row.started or 0.0), counted.done, counted.total

    def rows(self) -> list[dict[str, Any]]:
        """The table, one dict per stage: ``stage``, ``wall_s``, ``cpu_s`` (rounded to ms), ``reused``, ``texts``;
        the innermost open stage counts up to now."""
        with self._lock:
            if self._stack:
                self._charge(self._stack[-1], self.wall(), self.cpu())
            return [
                {
                    "stage": r.name,
                    "wall_s": round(float(r.wall_s), 3),
                    "cpu_s": round(float(r.cpu_s), 3),
                    "reused": r.reused,
                    "texts": r.texts,
                }
                for r in self._rows.values()
            ]


_ACTIVE: ContextVar[StageTimer | None] = ContextVar("xprt_st_stage_timer", default=None)


@contextmanager
def timing(timer: StageTimer) -> Iterator[StageTimer]:
    """Make ``timer`` the one :func:`stage`, :func:`mark_reused` and :func:`advance` report to."""
    token = _ACTIVE.set(timer)
    try:
        yield timer
    finally:
        _ACTIVE.reset(token)


@contextmanager
def stage(name: str) -> Iterator[StageTime | None]:
    """Time the block as stage ``name`` of the active timer (None, and no timing, without one)."""
    timer = _ACTIVE.get()
    if timer is None:
        yield None
        return
    with timer.stage(name) as row:
        yield row


def mark_reused() -> None:
    """Record that the current stage reused stored vectors (nothing without an active timer)."""
    timer = _ACTIVE.get()
    if timer is not None:
        timer.mark_reused()


def count_texts(texts: int) -> None:
    """Record that the current stage encoded or trained ``texts`` more texts (nothing without an active timer)."""
    timer = _ACTIVE.get()
    if timer is not None:
        timer.count_texts(texts)


def advance(done: int, total: int | None = None) -> None:
    """Record how far the current stage is (nothing without an active timer)."""
    timer = _ACTIVE.get()
    if timer is not None:
        timer.advance(done, total)


STARTUP = "start-up (imports, checks)"
"""The row of the time a command spent before its first stage: loading torch and the libraries, checking inputs."""


def startup_row() -> dict[str, Any] | None:
    """The process's seconds so far as a table row (:data:`STARTUP`): wall since it started (Linux's ``/proc``),
    CPU of all its threads; None where the start time cannot be read. Called where the first stage begins, it is
    the time a small run spends before any stage (most of it, on a CPU)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        wall = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
    except (OSError, ValueError, IndexError):
        return None
    return {
        "stage": STARTUP,
        "wall_s": round(max(wall, 0.0), 3),
        "cpu_s": round(time.process_time(), 3),
        "reused": False,
    }


def format_rows(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """Each row as text cells (stage, wall s, CPU s, texts a second, reused), and a last row with the totals. A
    stage's texts a second are its counted texts over its own wall seconds (empty where it counted none).

    Example:
        >>> rows = [{"stage": "train", "wall_s": 64.0, "cpu_s": 60.0, "reused": False, "texts": 1024}]
        >>> format_rows(rows)
        [('train', '64.0', '60.0', '16.0', ''), ('total', '64.0', '60.0', '', '')]
    """
    cells = [
        (
            r["stage"],
            f"{r['wall_s']:.1f}",
            f"{r['cpu_s']:.1f}",
            f"{r['texts'] / r['wall_s']:.1f}" if r.get("texts") and r["wall_s"] > 0 else "",
            "yes" if r["reused"] else "",
        )
        for r in rows
    ]
    wall, cpu = sum(r["wall_s"] for r in rows), sum(r["cpu_s"] for r in rows)
    return [*cells, ("total", f"{wall:.1f}", f"{cpu:.1f}", "", "")]
