"""``xprt-st compare`` as stages: the run's data (corpus, mining, each recipe's data variant), the reference lines
(the start, BM25, the start's hybrid), then one stage per seed and recipe, each training and scoring one model.

None of them has a fingerprint, the pipeline's declared option for a stage that keeps its own resume rule: several
compare processes may share one run folder (one per seed, say), and a state file of one process's stages would be
overwritten by the next. What a rerun reuses is therefore decided inside each stage, as before, by what a finished
step leaves where every process sees it: ``compare_config.yaml`` and the fingerprints of the corpus and the scores
(:mod:`xprt_st.compare.reuse`), mining's manifest, a model's ``COMPLETE`` marker and lock, each score file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

    from xprt_st.compare.config import CompareConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompareSettings:
    """What every compare stage reads: the comparison, its evaluation tasks (checked and resolved before the run:
    :func:`xprt_st.compare.run.check_compare_inputs`) and whether progress displays are drawn."""

    compare: CompareConfig
    tasks: tuple[AbsTask, ...]
    progress: bool = True


@dataclass(frozen=True)
class CompareDataStage:
    """The run's corpus, its mining and every recipe's data variant, each kept where it is made already."""

    config: CompareSettings
    name: ClassVar[str] = "data"
    folder: ClassVar[str] = ""

    def fingerprint(self) -> None:
        """None: the corpus's fingerprint and mining's manifest decide what is reused (see the module)."""
        return None

    def check(self) -> None:
        """Nothing beyond the comparison's checks, made before the run (they read no model)."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Make what is missing in the run folder ``folder``; the record is each recipe's data folder."""
        from xprt_st.compare.run import prepare_data

        folders = prepare_data(self.config.compare, folder, progress=self.config.progress)
        return {name: str(path) for name, path in folders.items()}


@dataclass(frozen=True)
class CompareReferencesStage:
    """The lines every recipe is read against: the start, BM25 and the start fused with BM25, each scored once."""

    config: CompareSettings
    name: ClassVar[str] = "references"
    folder: ClassVar[str] = ""

    def fingerprint(self) -> None:
        """None: a score file, under the scores' fingerprinted folder, is kept once written (see the module)."""
        return None

    def check(self) -> None:
        """Nothing to check: the tasks were resolved before the run."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Score what is not scored yet into ``folder / "scores"``."""
        from xprt_st.compare.run import evaluate_reference, evaluate_start, evaluate_start_hybrid

        tasks = list(self.config.tasks)
        evaluate_start(self.config.compare, folder, tasks)
        evaluate_reference(self.config.compare, folder, tasks)
        evaluate_start_hybrid(self.config.compare, folder, tasks)
        return {}


@dataclass(frozen=True)
class CompareModelStage:
    """One recipe trained with one seed into ``seed-N/RECIPE`` and scored, unless finished; skipped while another
    compare process holds its lock."""

    config: CompareSettings
    recipe: str
    seed: int
    folder: ClassVar[str] = ""

    @property
    def name(self) -> str:
        """``seed N: RECIPE``."""
        return f"seed {self.seed}: {Path(self.recipe).stem}"

    def fingerprint(self) -> None:
        """None: the model's ``COMPLETE`` marker records its resolved recipe and data, checked on reuse."""
        return None

    def check(self) -> None:
        """Nothing beyond the comparison's checks (unfinished folders were checked there)."""

    def run(self, folder: Path) -> dict[str, Any]:
        """Train and score the model in the run folder ``folder``; the record says whether this process did."""
        from xprt_st.compare.run import data_folders, train_one

        settings = self.config
        data = data_folders(settings.compare, folder)[self.recipe]
        done = train_one(
            settings.compare, folder, self.recipe, self.seed, data, settings.tasks, progress=settings.progress
        )
        if not done:
            logger.info("seed %d: %s is being trained by another compare process; skipped here", self.seed, self.recipe)
        return {"here": done}


def compare_stages(
    config: CompareConfig, tasks: Sequence[AbsTask], *, progress: bool = True
) -> list[CompareDataStage | CompareReferencesStage | CompareModelStage]:
    """The comparison's stages in the order data flows: the data, the reference lines, then each seed's recipes."""
    settings = CompareSettings(config, tuple(tasks), progress)
    models = [CompareModelStage(settings, name, seed) for seed in config.seeds for name in config.recipes]
    return [CompareDataStage(settings), CompareReferencesStage(settings), *models]
