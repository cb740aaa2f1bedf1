"""The held-out checks as a stage: the label-free check and the titles of a mined folder's held-out part, each
model against the start (:func:`xprt_st.evaluation.heldout_checks.run_heldout_checks`).

The stage has no fingerprint: it scores models a stage before it may have just trained, and reads stored vectors
and records where they fit (mining's vectors of the start, the training run's label-free record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation.heldout_checks import HeldoutCheck


@dataclass(frozen=True)
class HeldoutSettings:
    """What the held-out checks score and how: the mined folder (within the pipeline's output folder), the models by
    role (the first is the reference), the checks, and the encoding."""

    mined: str
    models: dict[str, Path | str | None]
    checks: tuple[HeldoutCheck, ...]
    encode_backend: str = "torch"
    precision: str = "fp32"


@dataclass
class HeldoutChecksStage:
    """Run every check of :attr:`config` on its mined folder; afterwards :attr:`results` holds each check's record
    by name (None where the folder has nothing for it)."""

    config: HeldoutSettings
    results: dict[str, dict[str, Any] | None] = field(default_factory=dict, init=False)
    name: ClassVar[str] = "held-out checks"
    folder: ClassVar[str] = ""

    def fingerprint(self) -> None:
        """None: each run scores the models as they are now (stored vectors and records are reused inside)."""
        return None

    def check(self) -> None:
        """Nothing to check before the stages that make the mined folder and the trained model have run."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Score each check of the mined folder ``folder / mined``."""
        from xprt_st.encode_backend import load_encoder
        from xprt_st.evaluation.heldout_checks import run_heldout_checks

        settings = self.config
        mined = folder / settings.mined

        def load(model: Path | str | None) -> SentenceTransformer:
            return load_encoder(model, settings.encode_backend, mined, precision=settings.precision)

        self.results = run_heldout_checks(mined, settings.checks, settings.models, load)
        return {name: record is not None for name, record in self.results.items()}
