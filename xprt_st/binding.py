"""Bind a parsed YAML mapping to a dataclass, checking every key and type, and collecting every problem.

One binder for every configuration file: recipes (:mod:`xprt_st.recipe`) and comparison configs
(:mod:`xprt_st.compare.config`). Nothing is built and nothing raises: each problem is appended to a list
as one line naming the dotted key, what was found and what is accepted, so a caller reports them all at
once. Unknown keys get a "did you mean" hint; nested dataclasses, ``list[...]``, ``dict[str, ...]``,
``Literal``, optional values and the scalar types are checked (YAML reads ``1e-6`` without a dot as a
string: a ``float`` field accepts it; it refuses NaN and infinities, YAML's ``.nan`` and ``.inf``).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Source:
    ...     path: str
    ...     max_documents: int | None = None
    >>> problems: list[str] = []
    >>> bind(Source, {"path": "a.zip", "max_documnets": 3}, problems, where="corpus[0].")
    Source(path='a.zip', max_documents=None)
    >>> print(problems[0])
    corpus[0].max_documnets: unknown key (did you mean 'max_documents'?); valid keys of corpus[0]: path, max_documents
    >>> problems = []
    >>> bind(Source, {"path": "a.zip", "max_documents": "3"}, problems, where="corpus[0].") is None
    True
    >>> print(problems[0])
    corpus[0].max_documents: must be an integer, found '3'
    >>> bind(Source, {"path": "a.zip"}, [])
    Source(path='a.zip', max_documents=None)
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

INTERNAL = "internal"
"""Field metadata key: a field set by the loader, never read from the file (e.g. a recipe's ``source``)."""

_INVALID = object()


def bind(cls: type[T], raw: object, problems: list[str], where: str = "", root: str = "recipe") -> T | None:
    """Build dataclass ``cls`` from ``raw``, appending every problem (unknown key, missing key, type) to ``problems``.

    Args:
        cls: the dataclass to build; fields with ``metadata={"internal": True}`` are not read from ``raw``.
        raw: the parsed mapping.
        problems: where each problem goes, one line each.
        where: the dotted prefix of ``raw``'s keys in the file (``""`` at the top, ``"training."`` below).
        root: what the top level is called in messages (``recipe``, ``config``).

    Returns:
        The instance, or None when a problem kept it from being built.
    """
    label = where.rstrip(".") or root
    if not isinstance(raw, dict):
        problems.append(f"{label}: must be a mapping of keys, found {type(raw).__name__} {raw!r}")
        return None
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.init and not f.metadata.get(INTERNAL)}
    ok = True
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{where}{key}: unknown key{hint}; valid keys of {label}: {', '.join(known)}")
    values: dict[str, Any] = {}
    for name, spec in known.items():
        if name not in raw:
            if spec.default is MISSING and spec.default_factory is MISSING:
                help_text = spec.metadata.get("help", "")
                problems.append(f"{where}{name}: missing" + (f"; {help_text}" if help_text else ""))
                ok = False
            continue
        value = convert(hints[name], raw[name], f"{where}{name}", problems, root)
        if value is _INVALID:
            ok = False
        else:
            values[name] = value
    return cls(**values) if ok else None


def convert(hint: object, value: object, key: str, problems: list[str], root: str = "recipe") -> object:
    """Check (and lightly coerce) ``value`` against the type ``hint``; nested dataclasses are bound.

    Returns the checked value, or a private sentinel after appending a problem naming ``key``.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if is_dataclass(hint):
        bound = bind(hint, value, problems, f"{key}.", root)
        return _INVALID if bound is None else bound
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [arg for arg in args if arg is not type(None)]
        return convert(inner[0], value, key, problems, root)
    if origin is Literal:
        if value not in args:
            problems.append(f"{key}: {value!r} is not valid; choose one of {', '.join(map(str, args))}")
            return _INVALID
        return value
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{key}: must be a mapping, found {type(value).__name__} {value!r}")
            return _INVALID
        value_type = args[1] if len(args) == 2 else Any
        if value_type is Any:
            return dict(value)
        converted = {name: convert(value_type, item, f"{key}.{name}", problems, root) for name, item in value.items()}
        return _INVALID if _INVALID in converted.values() else converted
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{key}: must be a list, found {type(value).__name__} {value!r}")
            return _INVALID
        item_type = args[0] if args else Any
        if item_type is Any:
            return list(value)
        converted_items = [convert(item_type, item, f"{key}[{i}]", problems, root) for i, item in enumerate(value)]
        return _INVALID if any(item is _INVALID for item in converted_items) else converted_items
    if hint is bool:
        if not isinstance(value, bool):
            problems.append(f"{key}: must be true or false, found {value!r}")
            return _INVALID
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key}: must be an integer, found {value!r}")
            return _INVALID
        return value
    if hint is float:
        if isinstance(value, str):
            try:
                value = float(value)  # YAML reads 1e-6 (no dot) as a string
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{key}: must be a number, found {value!r}")
            return _INVALID
        if not math.isfinite(value):
            # YAML's .nan and .inf are floats, and NaN slips past every `>= 0` check that follows
            problems.append(f"{key}: must be a finite number, found {value!r}")
            return _INVALID
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            problems.append(f"{key}: must be a string, found {value!r}")
            return _INVALID
        return value
    return value


def is_invalid(value: object) -> bool:
    """Whether :func:`convert` refused ``value`` (its problem is already in the list)."""
    return value is _INVALID
