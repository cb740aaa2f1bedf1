"""One shape for a check of a mined folder's held-out part, and the one runner of such checks.

A check, in mteb's manner, declares what it reads and how it scores; the runner does the rest once for all of
them: it reads each check's task once, gives every model one encoding of the held-out passages (stored vectors
where they fit, :func:`~xprt_st.evaluation.heldout_vectors.heldout_passage_vectors`), lets each check score the
model from them, and compares each model with the reference model, with the check's paired interval.

The label-free check (:data:`xprt_st.evaluation.label_free.LABEL_FREE_CHECK`) and the titles check
(:data:`xprt_st.evaluation.titles.TITLES_CHECK`) are declarations of this shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.errors import XPRTError
from xprt_st.stage_timing import stage

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["CheckSkipped", "HeldoutCheck", "run_heldout_checks"]


class CheckSkipped(XPRTError):
    """Raised by a check's ``load`` when the folder has a held-out part too small for it: ``record`` says why, and
    stands in the results for the comparison."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__(record.get("skipped", ""))
        self.record = record


def _nothing_stored(task: object, model: Path | str | None) -> None:
    del task, model


@dataclass(frozen=True)
class HeldoutCheck:
    """What a held-out check reads and how it scores.

    Attributes:
        name: its key in the results (``label_free``, ``titles``).
        label: its name in the stage table (``label-free``, ``titles``).
        load: the task of a mined folder, or None when the folder has nothing for it (no held-out part, no titles);
            raises :class:`CheckSkipped` when the part is there but too small. The task has the held-out passages
            as ``texts``, their ``ids`` and the folder as ``path``.
        score: a model's score on the task given its vectors of the task's passages.
        compare: the record of one score against the reference's.
        stored: the record a run already wrote for a model (the training run's label-free check), else None.
    """

    name: str
    label: str
    load: Callable[[Path], Any]
    score: Callable[[Any, SentenceTransformer, Any], Any]
    compare: Callable[[Any, Any, Any], dict[str, Any]]
    stored: Callable[[Any, Path | str | None], dict[str, Any] | None] = _nothing_stored


def run_heldout_checks(
    folder: Path,
    checks: Sequence[HeldoutCheck],
    models: Mapping[str, Path | str | None],
    load_model: Callable[[Path | str | None], SentenceTransformer],
    batch_size: int = 32,
) -> dict[str, dict[str, Any] | None]:
    """Each check of ``folder``'s held-out part: each model of ``models`` after the first against the first.

    ``models`` maps a role (``start``, ``trained``) to a model; ``load_model`` loads one, at most once, and only
    when a check needs its vectors. A check's scoring of a model is timed as ``LABEL: ROLE``. Returns each check's
    record by name: None when the folder has nothing for it, the skip record of :class:`CheckSkipped`, or with two
    models the comparison itself (with more, one comparison per role after the first, by role).
    """
    from xprt_st.evaluation.heldout_vectors import heldout_passage_vectors

    loaded: dict[str, SentenceTransformer] = {}
    roles = list(models)
    reference, others = roles[0], roles[1:]
    results: dict[str, dict[str, Any] | None] = {}
    for check in checks:
        try:
            task = check.load(folder)
        except CheckSkipped as skipped:
            results[check.name] = skipped.record
            continue
        if task is None:
            results[check.name] = None
            continue
        stored = {role: check.stored(task, models[role]) for role in others}
        if all(record is not None for record in stored.values()):
            compared = stored
        else:
            scores = {}
            for role in roles:
                with stage(f"{check.label}: {role}"):
                    if role not in loaded:
                        loaded[role] = load_model(models[role])
                    vectors = heldout_passage_vectors(loaded[role], task.path, task.texts, task.ids, batch_size)
                    scores[role] = check.score(task, loaded[role], vectors)
            compared = {role: check.compare(task, scores[role], scores[reference]) for role in others}
        results[check.name] = compared[others[0]] if len(others) == 1 else compared
    return results
