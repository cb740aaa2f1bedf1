"""The data a recipe requires: the mined folder, or an ablation re-merged from its stored passages."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any


def data_variant(requires: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The folder name and merge options of the data a recipe requires (``mined``, ``positive-random`` ...)."""
    options = {"positive": requires.get("positive", "mined"), "pairs": requires.get("pairs", "mined")}
    if options["pairs"] == "random-span":
        return "pairs-random-span", {"positive": "mined", "pairs": "random-span"}
    if options["positive"] == "random":
        return "positive-random", options
    return "mined", options


def prepare_variant(mined: Path, folder: Path, options: dict[str, str], seed: int, progress: bool) -> dict[str, Any]:
    """Re-merge the stored passages of ``mined`` into ``folder`` with other merge options (no encoding)."""
    from xprt_st.mining import MiningConfig, merge

    mined_settings = json.loads((mined / "stats.json").read_text(encoding="utf-8"))["settings"]
    threshold = {k: mined_settings.get(k) for k in ("threshold", "threshold_quantile")}
    stats_path = folder / "stats.json"
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text(encoding="utf-8"))
        settings = stats.get("settings", {})
        wanted = {**options, "seed": seed, **threshold}
        if all(settings.get(k) == v for k, v in wanted.items()):
            return stats
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "shards"
    if not link.exists():
        link.symlink_to((mined / "shards").resolve(), target_is_directory=True)
    shutil.copyfile(mined / "mining_config.json", folder / "mining_config.json")
    stored = json.loads((mined / "mining_config.json").read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(MiningConfig)}
    base = {k: v for k, v in stored.items() if k in fields}
    base |= threshold
    return merge(folder, MiningConfig(**{**base, **options, "seed": seed}), progress=progress)
