"""The model names ``evaluate`` takes that are not a dense model: a registry of kinds, as
:func:`xprt_st.objectives.register_objective` is for objectives.

A kind is an exact name (``bm25``) or a prefix before a dense model's name (``hybrid:MODEL``), and makes the search
model mteb runs (its ``index`` and ``search`` hooks). :mod:`xprt_st.evaluation.lexical` registers the two the
package ships; a team adds its own (a SPLADE index, a search service's ranking) with :func:`register_model_kind`,
and every command that takes a model name (``evaluate``, compare's tasks, the quickstart's lines) reads it, scores
it with per-query nDCG@10 and pairs it with the dense models' intervals. A kind scores retrieval tasks with labels.

Example:
    >>> kind = ModelKind("first-hit", "every query's first document", search=lambda: None)
    >>> _ = register_model_kind(kind)
    >>> find_model_kind("first-hit") == (kind, None), find_model_kind("./runs/model")
    (True, None)
    >>> del MODEL_KINDS["first-hit"]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xprt_st.errors import XPRTError


class ModelKindError(XPRTError, ValueError):
    """A kind that cannot be registered: its name or prefix is taken by another kind."""


@dataclass(frozen=True)
class ModelKind:
    """One kind of model name.

    Attributes:
        name: the kind's name (``bm25``, ``hybrid``); without a ``prefix`` also the model name itself.
        summary: one line for help and errors.
        search: makes mteb's search model: ``search()`` for a kind without a prefix; with one,
            ``search(dense, key_name=..., dense_revision=...)``, ``dense`` the loaded model the rest of the name
            names, ``key_name`` and ``dense_revision`` its mteb result key.
        prefix: ``hybrid:``: the name is this prefix and a dense model's name (``default``, a folder).
        check: run before any work (its packages import); raises an :class:`~xprt_st.errors.XPRTError` with the fix.
    """

    name: str
    summary: str
    search: Callable[..., Any]
    prefix: str | None = None
    check: Callable[[], None] | None = None

    @property
    def spelling(self) -> str:
        """How a user writes it: ``bm25`` or ``hybrid:MODEL``."""
        return self.name if self.prefix is None else f"{self.prefix}MODEL"


MODEL_KINDS: dict[str, ModelKind] = {}
"""Every registered kind by name."""


def register_model_kind(kind: ModelKind) -> ModelKind:
    """Add (or replace, by name) a kind so every model name list can name it.

    Raises:
        ModelKindError: another kind already answers to its name or prefix.
    """
    for other in MODEL_KINDS.values():
        if other.name == kind.name:
            continue
        spellings = {other.name if other.prefix is None else other.prefix}
        if (kind.name if kind.prefix is None else kind.prefix) in spellings:
            raise ModelKindError(f"model kind {kind.name!r}: {kind.spelling!r} is {other.name!r}'s already")
    MODEL_KINDS[kind.name] = kind
    return kind


def find_model_kind(spec: object) -> tuple[ModelKind, str | None] | None:
    """The kind ``spec`` names and the dense model's name after its prefix (None without one); None for a dense
    model's name (or anything not a string)."""
    if not isinstance(spec, str):
        return None
    for kind in MODEL_KINDS.values():
        if kind.prefix is None and spec == kind.name:
            return kind, None
        if kind.prefix is not None and spec.startswith(kind.prefix):
            return kind, spec[len(kind.prefix) :]
    return None
