"""Run a list of stages: check every stage first, reuse or refuse each by its fingerprint (one policy), time the rest.

The one reuse policy, decided for every stage before the first runs:

- no stored fingerprint: the stage runs; but when its folder is there already (a folder of its own, not the output
  folder itself), it was made by a run that recorded nothing, which cannot be checked: **refused**, or with
  ``overwrite`` **redone**;
- the stored fingerprint equals the stage's and the stage completed: it is **reused** (not run), unless a stage
  before it runs, whose output it reads, or its own folder is gone (deleted since: it runs again);
- the stored fingerprint equals but the stage never completed (an interrupted run), or completion is not recorded (a
  folder of an earlier release): it runs again, resuming whatever the stage itself keeps;
- the stored fingerprint differs: the pipeline is **refused** before any stage runs, naming each difference,
  or with ``overwrite`` the stage is **redone**; a changed fingerprint never reuses. A stage of its own folder that
  never wrote it (a run that stopped before, e.g. on a model that did not load) simply runs with the new settings.

The fingerprints live in ``OUTPUT/.xprt-st-fingerprint.json`` (:data:`xprt_st.fingerprint.FINGERPRINT_FILE`, the
file every command's stages record in), stored before a stage writes anything; whether each stage completed, its
record and the last run's stage table in ``OUTPUT/.xprt-st-stages.json`` (:data:`STATE_FILE`), written only when a
stage has a fingerprint.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from xprt_st.fingerprint import (
    OLDER_KEYS,
    STATE_FILE,
    FingerprintError,
    difference_line,
    differences,
    read_fingerprints,
    write_fingerprint,
)
from xprt_st.pipeline.stage import Stage

__all__ = ["STATE_FILE", "Action", "StageRow", "plan", "read_state", "run_pipeline"]


class Action(str, Enum):
    """What the pipeline does with a stage (the stage table's ``action`` column)."""

    RUN = "ran"
    REUSE = "reused"
    REDO = "redone"


@dataclass(frozen=True)
class StageRow:
    """One line of the stage table."""

    stage: str
    action: Action
    seconds: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON holds it."""
        return {**asdict(self), "action": self.action.value}


def read_state(output: str | Path) -> dict[str, Any]:
    """The stored stage records of ``output`` (``{"stages": {name: {"complete", "record"}}, "table": [...]}``);
    empty without a (readable) state file."""
    try:
        state = json.loads((Path(output) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(output: Path, state: dict[str, Any]) -> None:
    output.mkdir(parents=True, exist_ok=True)
    tmp = output / f"{STATE_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, output / STATE_FILE)


def plan(
    stages: Sequence[Stage[Any]], output: str | Path, *, overwrite: bool = False, option: str = "--output"
) -> list[Action]:
    """The action of each stage under the one reuse policy (see the module), decided before any stage runs.

    Raises:
        FingerprintError: a stage's stored fingerprint differs from its own, or a stage's folder records none, and
            ``overwrite`` is not given; the one line names the stage's folder and each difference. Also when the
            fingerprint file is there but cannot be read (:func:`xprt_st.fingerprint.read_fingerprints`).
    """
    output = Path(output)
    stored = read_fingerprints(output)
    completed = read_state(output).get("stages", {})
    prints = [stage.fingerprint() for stage in stages]
    pairs = zip(stages, prints, strict=True)
    records = [stored.get(stage.name) if print_ is not None else None for stage, print_ in pairs]
    compared = [
        [item for item in differences(record, print_) if item[0] not in OLDER_KEYS] if isinstance(record, dict) else []
        for print_, record in zip(prints, records, strict=True)
    ]
    # every stage's top-level differences, so a key one stage derives (SetBy) is named by the option a user changed
    changed = {key: (old, new) for found in compared for key, old, new in found if "." not in key}
    actions: list[Action] = []
    upstream_runs = False
    for stage, fingerprint, record, found in zip(stages, prints, records, compared, strict=True):
        where = output / stage.folder
        # a stage of its own folder that is not there never wrote anything a rerun could mislabel
        written = not stage.folder or where.exists() or where.is_symlink()
        if fingerprint is None:
            action = Action.RUN
        elif not isinstance(record, dict):
            unchecked = bool(stage.folder) and written
            if unchecked and not overwrite:
                raise FingerprintError(
                    f"{where} records no settings (written by an older xprt-st), so it cannot be checked against "
                    f"this run. Pass --overwrite to delete that run and start again, or give a new {option} folder."
                )
            action = Action.REDO if unchecked else Action.RUN
        else:
            if found and written and not overwrite:
                set_by = getattr(stage, "set_by", None)
                raise FingerprintError(difference_line(str(where), found, option, set_by=set_by, changed=changed))
            done = (completed.get(stage.name) or {}).get("complete")
            if found:
                action = Action.REDO if written else Action.RUN
            elif done and written and not upstream_runs:
                action = Action.REUSE
            else:
                action = Action.RUN
        upstream_runs = upstream_runs or action is not Action.REUSE
        actions.append(action)
    return actions


def run_pipeline(
    stages: Sequence[Stage[Any]],
    output: str | Path,
    *,
    overwrite: bool = False,
    option: str = "--output",
    clock: Callable[[], float] = time.perf_counter,
) -> list[StageRow]:
    """Check every stage, then reuse or run each in order; return the stage table (also stored in the state file
    when a stage has a fingerprint).

    Args:
        stages: the command's stages, in the order data flows.
        output: the output folder; each stage writes into ``output / stage.folder``.
        overwrite: redo a stage whose stored fingerprint differs instead of refusing.
        option: the option that names ``output``, for the refusal's line.
        clock: seconds, for the table's timings.

    Raises:
        xprt_st.errors.XPRTError: a stage's check failed (no stage has run), a stored fingerprint differs
            (:func:`plan`), or a stage failed (the stages before it are recorded complete).
    """
    output = Path(output)
    for stage in stages:
        stage.check()
    actions = plan(stages, output, overwrite=overwrite, option=option)
    state = read_state(output)
    records = state.setdefault("stages", {})
    fingerprinted = False
    table: list[StageRow] = []
    for stage, action in zip(stages, actions, strict=True):
        fingerprint = stage.fingerprint()
        fingerprinted = fingerprinted or fingerprint is not None
        if action is Action.REUSE:
            table.append(StageRow(stage.name, action, 0.0, dict(records[stage.name].get("record", {}))))
            continue
        if fingerprint is not None:  # recorded before the stage writes anything: an interrupted run is known
            records[stage.name] = {"complete": False}
            _write_state(output, state)
            write_fingerprint(output, stage.name, fingerprint)
        started = clock()
        record = stage.run(output / stage.folder)
        row = StageRow(stage.name, action, round(clock() - started, 3), dict(record or {}))
        table.append(row)
        if fingerprint is not None:
            records[stage.name] = {"complete": True, "record": row.record}
            _write_state(output, state)
    if fingerprinted:
        state["table"] = [row.to_dict() for row in table]
        _write_state(output, state)
    return table
