"""What a stage is: a typed config, a fingerprint of all that decides its output, a check, and a run.

A stage never knows who runs it or what ran before it: :func:`xprt_st.pipeline.run.run_pipeline` checks every stage
before the first runs, decides from the fingerprints which stages to reuse, and times the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

ConfigT_co = TypeVar("ConfigT_co", covariant=True)


@runtime_checkable
class Stage(Protocol[ConfigT_co]):
    """One step of a command, usable alone from Python.

    Attributes:
        name: the stage's name in the stage table and the state file (``mine``, ``hard negatives``, ``train``).
        folder: where it writes, relative to the pipeline's output folder (``""``: the output folder itself).
        config: the stage's settings, a dataclass (typed, validated when made).

    A stage whose fingerprint holds a key the user sets through another option (the quickstart's mining ``pairs``,
    which ``--recipe`` decides) may also have ``set_by``, ``{key: SetBy(option, default)}``
    (:class:`xprt_st.fingerprint.SetBy`): a refusal then names that option, not the key.
    """

    name: str
    folder: str

    @property
    def config(self) -> ConfigT_co:
        """The stage's settings."""
        ...

    def fingerprint(self) -> Mapping[str, Any] | None:
        """Everything that decides the stage's output (settings and the identity of its inputs), JSON-able.

        A stage that is reused only when this is equal to the stored one; None for a stage that keeps its own
        resume rule (mining's manifest of chunks), which the pipeline then always runs.
        """
        ...

    def check(self) -> None:
        """Validate the inputs without loading a model or writing anything; raise an
        :class:`xprt_st.errors.XPRTError` naming the option to blame."""
        ...

    def run(self, folder: Path) -> dict[str, Any]:
        """Do the work into ``folder``; return the stage's record (counts, paths), kept in the stage table."""
        ...
