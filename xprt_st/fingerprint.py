"""What made each stage of a run folder: its fingerprint, stored beside the manifest, compared before a rerun reuses it.

A command that writes a stage into its folder (the quickstart's ``mined/`` and ``model/``; the stage layer,
:func:`xprt_st.pipeline.plan`, compares them) records, before the stage starts, the settings and inputs that decide
its result: corpus files and sizes, recipe and its resolved values, steps, seed, holdout, start model. A rerun into
the same folder reuses a stage only when the fingerprint it would record now is equal to the stored one; otherwise it
stops before any work with one line (:func:`difference_line`) naming each difference (old value -> new value) and the
two ways on: ``--overwrite``, or a new output folder.

Mining keeps its own record of the same kind (``.xprt-mine-config.json`` and ``stats.json`` "settings", refused with
``MiningConfigError``); this module is the one place for the commands that chain stages, and :func:`differences` and
:func:`difference_line` are pure so each command words the same comparison the same way.

Example:
    >>> differences({"seed": 42, "recipe": {"steps": 300}}, {"seed": 7, "recipe": {"steps": 300}})
    [('seed', 42, 7)]
    >>> difference_line("out/model", [("seed", 42, 7)], "-o").split(";")[0]
    'out/model was made with other settings (--seed 42 -> 7)'
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xprt_st.errors import XPRTError


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time: what identifies an input file wherever it lies and
    whenever it was written (a copy, a fresh clone, another install are the same input)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


FINGERPRINT_FILE = ".xprt-st-fingerprint.json"
"""Per folder: ``{stage: fingerprint}``, written by the command that owns the folder (see the module)."""
STATE_FILE = ".xprt-st-stages.json"
"""Per folder, beside :data:`FINGERPRINT_FILE`: which of a pipeline's stages completed, their records and the last
run's stage table (:mod:`xprt_st.pipeline.run`)."""


NOT_SHAPING = ("source", "description")
"""Recipe keys that do not shape a model (where its YAML lives, its prose): left out of a fingerprint, so a rerun
from another checkout or install of the same recipe is the same run."""


OLDER_KEYS = tuple(f"recipe_values.{key}" for key in NOT_SHAPING)
"""What the first release of the quickstart's fingerprints stored and a comparison skips: where the recipe's YAML
lived and its prose, so a folder made from another checkout or install is still the same run."""


def recipe_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """A recipe's resolved values (``Recipe.to_dict()``) as a fingerprint holds them: :data:`NOT_SHAPING` left out."""
    return {key: value for key, value in values.items() if key not in NOT_SHAPING}


class FingerprintError(XPRTError, ValueError):
    """A stage of the folder was made with other settings than the rerun's; the message is one line."""


def normalised(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as JSON reads it back (tuples become lists, paths strings), so a stored and a new one compare."""
    return json.loads(json.dumps(record, default=str))


def corpus_identity(sources: Iterable[str | Path]) -> list[str]:
    """``"ABSOLUTE_PATH (N bytes)"`` per source, a folder's size the sum of its files' (the corpus part of a
    fingerprint; mining itself also hashes the files it reads)."""
    identity = []
    for source in sources:
        path = Path(source).resolve()
        if path.is_dir():
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        else:
            size = path.stat().st_size if path.exists() else -1
        identity.append(f"{path} ({size} bytes)")
    return identity


def _flat(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def flattened(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as JSON reads it back, nested records as dotted keys (``{"training.seed": 42, ...}``)."""
    return _flat(normalised(record))


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, stored value, current value)`` for every setting that differs, nested records compared key by key
    (``recipe.training.seed``); a key one side lacks reads as None there."""
    old, new = _flat(normalised(stored)), _flat(normalised(current))
    keys = sorted(old.keys() | new.keys())
    return [(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)]


def _shown(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "(none)"
    return "(none)" if value is None else str(value)


def _option(key: str) -> str:
    return key if "." in key else "--" + key.replace("_", "-")


@dataclass(frozen=True)
class SetBy:
    """How a user sets a fingerprint key that is no option of its own: the ``option`` that decides it (the
    quickstart's ``pairs`` of mining follows ``--recipe``) and the value it has where a fingerprint leaves it out
    (``mined``), so a refusal names what the user changed, not a setting they never gave."""

    option: str
    default: Any = None


def describe_differences(
    found: Sequence[tuple[str, Any, Any]],
    set_by: Mapping[str, SetBy] | None = None,
    changed: Mapping[str, tuple[Any, Any]] | None = None,
) -> str:
    """``"--holdout 0.1 -> 0.3; --seed 42 -> 7"``: each difference, a top-level key as its option, a nested one by
    its dotted name (``recipe_values.training.seed``).

    A key of ``set_by`` is named by the option that sets it, with that option's own change where ``changed`` (the
    other differences of the run, ``{key: (stored, new)}``) holds it, and the key's difference after it:
    ``"--recipe hybrid-teacher-hard -> inverse-cloze-hard (which decides pairs mined -> inverse-cloze)"``."""
    set_by, changed = set_by or {}, changed or {}
    items: list[str] = []
    derived: dict[str, list[str]] = {}
    for key, old, new in found:
        how = set_by.get(key)
        if how is None:
            items.append(f"{_option(key)} {_shown(old)} -> {_shown(new)}")
            continue
        old, new = (how.default if old is None else old), (how.default if new is None else new)
        if how.option not in derived:
            derived[how.option] = []
            items.append(how.option)  # a place held for the option, filled below
        derived[how.option].append(f"{key} {_shown(old)} -> {_shown(new)}")
    for option, parts in derived.items():
        own = changed.get(option.lstrip("-").replace("-", "_"))
        said = option if own is None else f"{option} {_shown(own[0])} -> {_shown(own[1])}"
        items[items.index(option)] = f"{said} (which decides {', '.join(parts)})"
    return "; ".join(items)


def difference_line(
    what: str,
    found: Sequence[tuple[str, Any, Any]],
    option: str,
    ways: str | None = None,
    set_by: Mapping[str, SetBy] | None = None,
    changed: Mapping[str, tuple[Any, Any]] | None = None,
) -> str:
    """The one line a rerun stops with: ``what`` (the stage's folder) was made with other settings, each named
    (:func:`describe_differences`, with ``set_by`` and ``changed``), and the ways on: ``ways``, by default
    ``--overwrite`` or a new ``option`` folder (a command without ``--overwrite`` names its own)."""
    named = describe_differences(found, set_by, changed)
    ways = ways or f"Pass --overwrite to delete that run and start again, or give a new {option} folder."
    return f"{what} was made with other settings ({named}); reusing it would report another run as this one. {ways}"


def dataset_identity(folder: str | Path) -> str:
    """A hash of the Arrow files of the saved dataset ``folder`` (their names and bytes, sorted by name): the same
    rows in the same order written again give the same value, other rows another. What a finished model records of
    the data it was trained on, so a rerun that rewrote that data (another version's mining rules, a re-merge)
    does not report the old model as one of the new data."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.arrow")):
        digest.update(path.name.encode("utf-8") + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def read_fingerprints(folder: str | Path) -> dict[str, Any]:
    """The stored ``{stage: fingerprint}`` of ``folder``; empty without the file.

    Raises:
        FingerprintError: the file is there but is no JSON object (edited by hand, or cut short): the stages it
            records cannot be checked, and taking it as empty would reuse them unchecked or drop their records.
    """
    path = Path(folder) / FINGERPRINT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no record: no file, or ``folder`` is none (its check says)
        return {}
    except OSError as error:
        raise FingerprintError(f"{path} cannot be read ({error}); {_RECORD_LOST}") from error
    try:
        record = json.loads(text)
    except ValueError as error:
        raise FingerprintError(f"{path} is not valid JSON ({error}); {_RECORD_LOST}") from error
    if not isinstance(record, dict):
        raise FingerprintError(f"{path} holds a JSON {type(record).__name__}, not an object; {_RECORD_LOST}")
    return record


_RECORD_LOST = (
    "it records the settings each stage of that folder was made with, so none can be checked against this run. "
    "Restore the file, or start again in a new output folder (or with --overwrite, where the command has it)"
)


def write_fingerprint(folder: str | Path, stage: str, fingerprint: Mapping[str, Any]) -> None:
    """Store ``fingerprint`` as ``stage``'s (atomically, the other stages kept), before the stage writes anything."""
    folder = Path(folder)
    record = {**read_fingerprints(folder), stage: normalised(fingerprint)}
    tmp = folder / f"{FINGERPRINT_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / FINGERPRINT_FILE)
