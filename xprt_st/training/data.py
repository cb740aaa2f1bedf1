"""Load a mined dataset folder for training and check it before any model is loaded.

A mined folder is what ``xprt-st mine --output DIR`` writes: a ``datasets.save_to_disk`` folder with
the group columns (``anchor``, ``positive``, ``related_2`` .. ``related_4``: text; ``label``: int64
document id) and ``DIR/stats.json`` with the mining statistics. Every problem is reported with the
folder, what was expected, and the command that produces a valid folder.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset, DatasetDict, load_from_disk

from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.errors import XPRTError
from xprt_st.mining.layout import (
    CONFIG_FILE,
    STATS_FILE,
    STRUCTURE_DIR,
    STRUCTURE_MIXED_DIR,
    stats_shape_problem,
    unfinished_problem,
)

if TYPE_CHECKING:
    from xprt_st.recipe import Recipe

logger = logging.getLogger(__name__)

MINE_HINT = "create one with `xprt-st mine CORPUS... --output DIR` and pass that DIR as --mined"


class MinedDataError(XPRTError, ValueError):
    """A data folder is not a usable mined dataset for the chosen recipe."""


@dataclass
class MinedData:
    """A validated mined dataset: the groups, the mining statistics and where they came from."""

    dataset: Dataset
    stats: dict[str, Any]
    path: Path


def read_stats(path: str | Path) -> dict[str, Any]:
    """The mining statistics of a mined folder (``DIR/stats.json``)."""
    folder = Path(path)
    stats_path = folder / STATS_FILE
    if not folder.is_dir():
        none = _parent_has_no_structure_pairs(folder) if folder.name in (STRUCTURE_DIR, STRUCTURE_MIXED_DIR) else None
        if none is not None:  # the mining ran with --structure and found nothing to pair
            raise MinedDataError(f"data folder {folder} was not written: {none}")
        raise MinedDataError(f"data folder {folder} does not exist or is not a folder; {MINE_HINT}")
    unfinished_problem(folder)  # a killed merge: its groups and stats.json may come from two merges
    if not stats_path.is_file():
        if (folder / CONFIG_FILE).is_file():
            raise MinedDataError(
                f"{folder} holds a mining run that did not finish (it has {CONFIG_FILE} but no {STATS_FILE}): "
                "rerun the same `xprt-st mine` command to resume it (finished chunks are kept), then train on it"
            )
        raise MinedDataError(f"{folder} is not a mined dataset: it has no {STATS_FILE}; {MINE_HINT}")
    try:
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise MinedDataError(
            f"{stats_path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
            "mine the folder again"
        ) from error
    problem = stats_shape_problem(stats)
    if problem is not None:
        raise MinedDataError(f"{stats_path}: {problem}; mine the folder again")
    return stats


PASS_COUNTS = ("hard_negatives", "lexical_candidates")
"""The settings a pass after the merge records in ``stats.json`` when it runs (none: it has not run)."""


def stats_value(stats: Mapping[str, Any], key: str) -> Any:
    """Look up a mining option in ``stats``: under ``settings`` (what ``xprt-st mine`` writes) or at the top."""
    for scope in (stats.get("settings"), stats):
        if isinstance(scope, Mapping) and key in scope:
            return scope[key]
    return None


def load_mined(
    path: str | Path,
    columns: Sequence[str] = GROUP_COLUMNS,
    requires: Mapping[str, Any] | None = None,
    min_rows: int = 1,
) -> MinedData:
    """Load and validate a mined folder.

    Args:
        path: the folder written by ``xprt-st mine``.
        columns: the text columns the objective reads; all must be present as strings. The int64
            ``label`` (document id) column is always required.
        requires: mining options the recipe depends on, e.g. ``{"positive": "random"}``; each is compared
            with the same key in ``stats.json`` (under ``settings``, or at the top level). A key the stats
            do not record is logged and accepted.
        min_rows: fewest groups the dataset must hold (one batch when ``dataloader_drop_last`` is on).

    Raises:
        MinedDataError: naming the folder and every problem found.
    """
    from xprt_st.mining.derived import source_folder, stale_draw_problem

    folder = Path(path)
    stats = read_stats(folder)
    stale = stale_draw_problem(folder, stats)  # the stats read once, not again by each check
    if stale is not None:
        raise MinedDataError(stale)
    try:
        loaded = load_from_disk(str(folder))
    except (FileNotFoundError, ValueError, OSError) as error:
        raise MinedDataError(
            f"{folder} has a {STATS_FILE} but no dataset saved with datasets.save_to_disk ({error}); {MINE_HINT}"
        ) from error
    if isinstance(loaded, DatasetDict):
        if "train" not in loaded:
            raise MinedDataError(f"{folder} holds splits {sorted(loaded)} but no 'train' split; {MINE_HINT}")
        loaded = loaded["train"]

    problems: list[str] = []
    features = loaded.features
    for column in columns:
        if column not in features:
            problems.append(f"missing text column {column!r}")
        elif getattr(features[column], "dtype", None) not in ("string", "large_string"):
            problems.append(f"column {column!r} must hold strings, found {features[column]}")
    if LABEL not in features:
        problems.append(f"missing int64 column {LABEL!r} (the document id of each group)")
    elif getattr(features[LABEL], "dtype", None) != "int64":
        problems.append(f"column {LABEL!r} must be int64 document ids, found {features[LABEL]}")
    if len(loaded) < min_rows:
        problems.append(f"it holds {len(loaded)} groups, fewer than the {min_rows} one batch needs")
    for key, expected in (requires or {}).items():
        found = stats_value(stats, key)
        if found is None and key in PASS_COUNTS and stats is not None:
            found = 0  # a merged folder that records no such pass has had none
        if found is None:
            logger.warning("%s/%s does not record %r; assuming it was mined with %r", folder, STATS_FILE, key, expected)
        elif str(found) != str(expected):
            option = f"--{key.replace('_', '-')} {expected}"
            source = source_folder(folder, stats) if key == "hard_negatives" else None
            if source is not None:  # DIR/structure: written by a pass over DIR
                kinds = (stats or {}).get("settings", {}).get("structure") or "titles,headings,links"
                fix = f"write it again with them: `xprt-st mine --merge {source} --structure {kinds} {option}`"
            elif key in PASS_COUNTS:  # the settings a pass adds to a mined folder
                fix = f"add them to this folder with `xprt-st mine --merge {folder} {option}`"
            elif key == "pairs" and str(expected) in (STRUCTURE_DIR, STRUCTURE_MIXED_DIR):
                fix = _structure_fix(folder, str(expected), stats)
            elif key in ("pairs", "positive") and (folder / CONFIG_FILE).is_file():  # a merge setting: no re-mine
                fix = f"merge this folder again for it with `xprt-st mine --merge {folder} {option}`"
            else:
                fix = f"mine again with `xprt-st mine ... {option}`"
            problems.append(
                f"the recipe needs data mined with {key}={expected!r} but {STATS_FILE} says {key}={found!r} "
                f"({fix}, or pick the recipe made for this data)"
            )
    if problems:
        raise MinedDataError(
            f"{folder} cannot be used by this recipe: "
            + "; ".join(problems)
            + f". Columns found: {_shown_columns(loaded.column_names)}."
        )
    return MinedData(dataset=loaded.select_columns([*dict.fromkeys([*columns, LABEL])]), stats=stats, path=folder)


def load_recipe_data(recipe: Recipe, data: str | Path, world: int | None = None) -> MinedData:
    """The mined folder ``data`` with the columns ``recipe`` trains on, checked to fill a batch on every process
    (``world``: the processes; default ``WORLD_SIZE``)."""
    from xprt_st.objectives import get_objective

    objective = get_objective(recipe.objective.name).with_args(recipe.objective.args)  # + hard-negative columns
    world = int(os.environ.get("WORLD_SIZE", "1")) if world is None else world
    return load_mined(
        data,
        columns=objective.mined_columns(recipe.retention.enabled),
        requires=recipe.data.requires,
        min_rows=recipe.training.batch_size * world,
    )


def _no_structure_pairs(stats: Mapping[str, Any] | None, stats_path: Path) -> str | None:
    """What a mined folder's ``stats`` (read from ``stats_path``) say when its mining looked for structure pairs and
    kept none; else None."""
    structure = (stats or {}).get("structure")
    if not isinstance(structure, dict) or structure.get("groups"):
        return None
    return f"{stats_path} says {structure.get('note', 'the corpus has no structure pairs')}"


def _parent_has_no_structure_pairs(folder: Path) -> str | None:
    """:func:`_no_structure_pairs` of the mined folder that would hold ``folder`` (``DIR/structure``), if readable."""
    from xprt_st.mining.layout import read_stats as read_mined_stats

    try:
        stats = read_mined_stats(folder.parent)
    except ValueError:  # not valid JSON: the plain "does not exist" message stands
        return None
    return _no_structure_pairs(stats, folder.parent / STATS_FILE)


def _structure_fix(folder: Path, pairs: str, stats: Mapping[str, Any]) -> str:
    """How to reach the structure pairs a recipe needs from ``folder``, a mined folder whose stats are ``stats``."""
    from xprt_st.mining.derived import stale_draw_problem

    target = folder / pairs
    stale = stale_draw_problem(target) if target.is_dir() else None
    if stale is not None:
        return stale
    if target.is_dir():
        return f"train on {target}, which this folder's mining wrote"
    none = _no_structure_pairs(stats, folder / STATS_FILE)
    if none is not None:
        return f"{none}, so there is no {target} to train on"
    mix = " --structure-mix 0.5" if pairs == STRUCTURE_MIXED_DIR else ""
    return (
        f"mine with `xprt-st mine ... --structure titles,headings,links --hard-negatives 2{mix}` and train on "
        f"DIR/{pairs}"
    )


SHOWN_COLUMNS = 8
"""Column names listed in a refusal before "and N more" (data mined with 1,000 hard negatives has 1,006)."""


def _shown_columns(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_COLUMNS])
    return shown + (f" and {len(names) - SHOWN_COLUMNS} more" if len(names) > SHOWN_COLUMNS else "")
