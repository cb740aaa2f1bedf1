"""User-facing progress for the engines: a rich bar with documents/s and ETA, or a silent stand-in."""

from __future__ import annotations

from typing import Any


class NullProgress:
    """A stand-in for a rich ``Progress`` that shows nothing (``progress=False``, workers)."""

    def __enter__(self) -> NullProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, task: Any, advance: float = 1) -> None:
        return None

    def __bool__(self) -> bool:
        return False


def progress_bar(enabled: bool) -> Any:
    """A rich progress bar with documents/s and ETA, or a silent stand-in."""
    if not enabled:
        return NullProgress()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class _Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:.1f} docs/s" if speed else "- docs/s", style="progress.data.speed")

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
