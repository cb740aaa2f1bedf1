"""Progress lines for logs: what the run is doing, at least every 30 seconds, when no progress bar is seen.

A progress bar redraws itself on a terminal; in a log file (stdout redirected, a CI job, ``nohup``) it
prints nothing until it ends, and the log stays silent through a long stage. :class:`Heartbeat` then
writes one line every :data:`INTERVAL` seconds naming the innermost stage of the run's
:class:`~xprt_st.stage_timing.StageTimer`, how long it has run and, where the stage reports it, how far
it is (``step 40/300``, ``documents 500/2000``).

The decision is :meth:`Heartbeat.poll`, a function of the clocks (tests drive it with a fake clock);
the thread only calls it every second.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from xprt_st.stage_timing import StageTimer, timing

if TYPE_CHECKING:
    from rich.console import Console

INTERVAL = 30.0
"""Seconds between two progress lines at most."""
SETTLE = 5.0
"""A stage open for less than this is not named yet: the line waits for it (no "train, 0 s so far")."""


def progress_line(stage: str, seconds: float, done: int | None, total: int | None) -> str:
    """One progress line: the stage, its seconds so far, and how far it is when known.

    Example:
        >>> progress_line("train", 95.4, 40, 300)
        'still working: train, 95 s so far (40/300)'
        >>> progress_line("read corpus", 31.0, 1200, None)
        'still working: read corpus, 31 s so far (1200 done)'
    """
    line = f"still working: {stage}, {seconds:.0f} s so far"
    if done is not None:
        line += f" ({done}/{total})" if total else f" ({done} done)"
    return line


class Heartbeat:
    """Emit :func:`progress_line` of ``timer``'s current stage every ``interval`` seconds of ``clock``.

    Args:
        timer: the run's stages.
        emit: where a line goes (the command's console).
        interval: the longest silence, in seconds.
        clock: the wall clock (tests give a fake one); the first line comes ``interval`` after creation.

    As a context manager it polls from a daemon thread once a second and stops on exit.
    """

    def __init__(
        self,
        timer: StageTimer,
        emit: Callable[[str], object],
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.timer = timer
        self.emit = emit
        self.interval = interval
        self.clock = clock
        self._last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> str | None:
        """Emit and return a line when ``interval`` has passed since the last one and a stage is open."""
        now = self.clock()
        if now - self._last < self.interval:
            return None
        current = self.timer.now()
        if current is None or current[1] < SETTLE:  # between stages, or one just begun: nothing running long
            return None
        line = progress_line(*current)
        self._last = now
        self.emit(line)
        return line

    def __enter__(self) -> Heartbeat:
        self._last = self.clock()
        self._thread = threading.Thread(target=self._run, name="xprt-st-progress-lines", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.interval)):
            self.poll()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def heartbeat_for(timer: StageTimer, console: Console, enabled: bool) -> contextlib.AbstractContextManager:
    """A :class:`Heartbeat` printing to ``console`` when ``enabled`` and the console is not a terminal (a log
    file or a CI job, where progress bars stay silent); otherwise nothing."""
    if enabled and not console.is_terminal:
        return Heartbeat(timer, lambda line: console.print(line, highlight=False, markup=False))
    return contextlib.nullcontext()


@contextlib.contextmanager
def command_progress(name: str, console: Console, enabled: bool) -> Iterator[StageTimer]:
    """Run a command's block as stage ``name`` of a new active timer, with :func:`heartbeat_for` beside it."""
    timer = StageTimer()
    with timing(timer), timer.stage(name), heartbeat_for(timer, console, enabled):
        yield timer
