"""A step that keeps its own reuse rule, as a stage: its name and the function that does it into the output folder.

Its fingerprint is None, the pipeline's declared option for such a step: the pipeline always runs it, writes no
state file for it, and the step decides inside what it reuses. ``xprt-st compare``'s steps are of this kind
(:func:`xprt_st.compare.command.compare_stages`): several compare processes may share one run folder (one per seed,
say), and a state file of one process's stages would be overwritten by the next; a finished step leaves what every
process sees instead (``compare_config.yaml``, the fingerprints of the corpus and the scores, mining's manifest, a
model's ``COMPLETE`` marker and lock, each score file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepStage:
    """Run ``step(output folder)`` as the stage ``name``; its record is what the step returns (``{}`` for None)."""

    name: str
    step: Callable[[Path], dict[str, Any] | None]
    folder: str = ""

    @property
    def config(self) -> Callable[[Path], dict[str, Any] | None]:
        """The step itself: all its settings are bound into it."""
        return self.step

    def fingerprint(self) -> None:
        """None: the step keeps its own reuse rule (see the module)."""
        return None

    def check(self) -> None:
        """Nothing: a step of this kind is checked by its command before the run."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Do the step into ``folder``."""
        return dict(self.step(folder) or {})
