"""What a comparison rerun takes from its run folder, checked against the inputs that made it.

``compare_config.yaml`` keeps the settings fixed (:func:`xprt_st.compare.run.check_unchanged`), and a finished
model records its resolved recipe and a hash of the data it trained on. Two stages are found by path alone and
reused as they are: the corpus built from the sources (``RUN/corpus``) and the scores under
``RUN/scores/<evaluation key>``, a hash of the task specs. A source
file edited since, or a task folder whose files changed, would therefore leave the old corpus, or the old scores, in
a report of the new ones. So each stage gets a fingerprint (:mod:`xprt_st.fingerprint`) when a run first makes it:
the sources' paths and sizes, and each task's mteb name, which carries a hash of its data files and subsample. A
rerun stops before any work with one line naming each difference. A source no longer found proves nothing and is
not compared: a built corpus is the run's copy. Folders made before fingerprints are not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.compare.config import CompareConfig, CompareConfigError
from xprt_st.compare.corpus import task_corpus_file
from xprt_st.fingerprint import corpus_identity, difference_line, differences, read_fingerprints, write_fingerprint

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

CORPUS = "corpus"
MISSING = "(not found)"
"""A source's identity when it cannot be found now: never a difference."""


def scores_stage(config: CompareConfig) -> str:
    """The stage name of the scores folder of ``config``'s tasks: ``scores/<evaluation key>``."""
    return f"scores/{config.evaluation_key()}"


def corpus_fingerprint(config: CompareConfig) -> dict[str, Any]:
    """Each corpus source's file, ``"PATH (N bytes)"``, by its index in the config (a task source: its corpus file)."""
    sources = {}
    for index, source in enumerate(config.corpus):
        try:
            path = task_corpus_file(config, source.task) if source.task is not None else config.resolve(source.path)
        except FileNotFoundError:
            path = None
        sources[str(index)] = corpus_identity([path])[0] if path is not None and path.exists() else MISSING
    return {"corpus": sources}


def scores_fingerprint(tasks: Sequence[AbsTask]) -> dict[str, Any]:
    """Each task's mteb name by its label: the name carries the hash of its data (:mod:`xprt_st.evaluation.tasks`)."""
    from xprt_st.evaluation.tasks import task_label

    return {"tasks": {task_label(task): task.metadata.name for task in tasks}}


def check_inputs_unchanged(config: CompareConfig, run: Path, tasks: Sequence[AbsTask]) -> None:
    """Refuse, before any work, a rerun whose corpus sources or task data differ from those that made the run's
    corpus or scores (see the module doc).

    Raises:
        CompareConfigError: one line naming the stage, each difference (old -> new) and the ways on.
    """
    stored = read_fingerprints(run)
    for stage, current in ((CORPUS, corpus_fingerprint(config)), (scores_stage(config), scores_fingerprint(tasks))):
        recorded = stored.get(stage)
        if not isinstance(recorded, dict):
            continue
        found = [(key, old, new) for key, old, new in differences(recorded, current) if new not in (None, MISSING)]
        if found:
            raise CompareConfigError(
                difference_line(
                    str(run / stage), found, "--output", ways=f"Use another --output, or delete {run} to start over."
                )
            )


def record_stage(run: Path, stage: str, fingerprint: dict[str, Any]) -> None:
    """Store ``stage``'s fingerprint unless one is stored: called as the run first makes the stage."""
    if stage not in read_fingerprints(run):
        write_fingerprint(run, stage, fingerprint)
