"""Folders derived from a mined folder (``DIR/structure``, ``DIR/structure-mixed``, a comparison's structure mix):
where they come from, and whether they still follow its held-out draw.

A derived folder's groups carry its source's document labels, and were drawn from its source's training documents
under the held-out draw (``--holdout``, ``--seed``) the source had when they were written. Its ``stats.json``
records the source (:data:`DERIVED_FROM`) and, in ``settings``, that draw. A re-merge of the source with another draw
leaves them behind: :func:`stale_draw_problem` names such a folder, and ``train`` refuses it (``mine`` says so when
the re-merge ends); the held-out contract reads the source's document ids (:func:`source_folder`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xprt_st.mining.layout import STRUCTURE_DIR, STRUCTURE_MIXED_DIR, read_stats

DERIVED_FROM = "derived_from"
"""Key of a derived folder's ``stats.json`` (``DIR/structure``, a structure mix): the mined folder whose passages
and held-out draw its groups come from, relative to it."""
DRAW_KEYS = ("holdout", "seed")
"""The merge settings that decide which documents a mined folder holds out."""


def source_folder(folder: str | Path, stats: dict[str, Any] | None = None) -> Path | None:
    """The mined folder a derived folder (``DIR/structure``, ``DIR/structure-mixed``, a comparison's mix) was
    written from: its labels are that folder's documents, and its groups follow that folder's held-out draw. None
    for a mined folder itself (or anything else). A derived folder written before it recorded its source is
    ``DIR/structure`` or ``DIR/structure-mixed``: its parent. ``stats``: the folder's ``stats.json`` when the caller
    has read it (read here otherwise)."""
    folder = Path(folder)
    if stats is None:
        try:
            stats = read_stats(folder) or {}
        except ValueError:
            return None
    if not isinstance(stats, dict):  # not mining's stats (edited by hand): no derived folder to name
        return None
    source = stats.get(DERIVED_FROM)
    if isinstance(source, str):
        return Path(os.path.normpath(folder / source))
    pairs = _settings(stats).get("pairs")
    if folder.name in (STRUCTURE_DIR, STRUCTURE_MIXED_DIR) and pairs in (STRUCTURE_DIR, STRUCTURE_MIXED_DIR):
        return folder.parent
    return None


def stale_draw_problem(folder: str | Path, stats: dict[str, Any] | None = None) -> str | None:
    """Why the derived folder ``folder`` may not be trained on: it was written under another held-out draw than its
    source (:func:`source_folder`) holds now, after a re-merge with another ``--holdout`` or ``--seed``, so it may
    hold groups of documents the source now holds out. None when the draws agree, or ``folder`` is no derived one.
    ``stats``: the folder's ``stats.json`` when the caller has read it."""
    folder = Path(folder)
    try:
        stats = (read_stats(folder) or {}) if stats is None else stats
        source = source_folder(folder, stats)
        if source is None:
            return None
        own, now = _settings(stats), _settings(read_stats(source))
    except ValueError:
        return None
    if not now or not (own.get("holdout") or now.get("holdout")):
        return None  # nothing held out before or now: the seed draws no documents
    changed = [
        f"--{key} {own.get(key) or 0} -> {now.get(key) or 0}"
        for key in DRAW_KEYS
        if (own.get(key) or 0) != (now.get(key) or 0)
    ]
    if not changed:
        return None
    command = f"xprt-st mine --merge {source} --structure {own.get('structure') or 'titles,headings,links'}"
    if int(own.get("hard_negatives") or 0):
        command += f" --hard-negatives {int(own['hard_negatives'])}"
    if own.get("pairs") == STRUCTURE_MIXED_DIR:
        command += f" --structure-mix {own.get('structure_mix', 0.5)}"
    return (
        f"{folder} was written under another held-out draw than {source} holds now ({', '.join(changed)}): it may "
        f"train on documents {source} now holds out. Write it again with `{command}`"
    )


def derived_folder_problem(folder: str | Path, task: str) -> str | None:
    """The one line for a command given a derived folder where it needs the mined folder itself (``titles:DIR``,
    ``mined:DIR``, ``inspect DIR``: they read the held-out part and the passages, which only the source holds);
    ``task`` spells the fix with the source in place of ``{}``. None for any other folder."""
    source = source_folder(folder)
    if source is None:
        return None
    return (
        f"{folder} holds groups derived from the mined folder {source} (structure pairs or a mix of them), not a "
        f"mining run of its own: its passages and held-out part are {source}'s. Give {task.format(source)}"
    )


def _settings(stats: Any) -> dict[str, Any]:
    """The ``settings`` object of a mined folder's stats, or {} where there is none (or it is no object)."""
    settings = stats.get("settings") if isinstance(stats, dict) else None
    return settings if isinstance(settings, dict) else {}
