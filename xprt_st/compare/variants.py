"""The data a recipe requires: the mined folder, or an ablation re-merged from its stored passages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


def data_variant(requires: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The folder name and merge options of the data a recipe requires (``mined``, ``positive-random`` ...)."""
    options = {"positive": requires.get("positive", "mined"), "pairs": requires.get("pairs", "mined")}
    negatives = int(requires.get("hard_negatives", 0) or 0)
    if options["pairs"] == "structure":  # mined with the run (mining.structure): RUN/mined/structure
        return "structure", options
    if options["pairs"] == "structure-mixed":  # RUN/mined/structure mixed with the mined groups (same negatives)
        ratio = str(requires.get("structure_mix", "0.5"))
        return f"structure-mixed-{ratio}-{negatives}", {"structure_mix": ratio, "hard_negatives": str(negatives)}
    lexical = int(requires.get("lexical_candidates", 0) or 0)
    if negatives > 0 or lexical > 0:  # the groups plus the columns; the mined pairs keep the name they always had
        prefix = "" if options["pairs"] == "mined" else f"pairs-{options['pairs']}-"
        name = f"{prefix}hard-negatives-{negatives}" + (f"-lexical-{lexical}" if lexical else "")
        added = {"hard_negatives": str(negatives)} | ({"lexical_candidates": str(lexical)} if lexical else {})
        return name, {**options, **added}
    if options["pairs"] == "random-span":
        return "pairs-random-span", {"positive": "mined", "pairs": "random-span"}
    if options["positive"] == "random":
        return "positive-random", options
    return "mined", options


def prepare_variant(
    mined: Path, folder: Path, options: dict[str, str], seed: int, progress: bool, model: str | None = None
) -> dict[str, Any]:
    """Re-merge the stored passages of ``mined`` into ``folder`` with other merge options (no encoding).

    With ``hard_negatives`` (``lexical_candidates``) in ``options``, the re-merged groups then get their hard-negative
    (lexical-candidate) columns (the chain every entry point runs, :func:`~xprt_st.mining.after_merge.finish_mining`,
    which embeds the passages with ``model``).
    """
    from xprt_st.mining import MiningConfig, merge
    from xprt_st.mining.after_merge import AfterMerge, finish_mining
    from xprt_st.mining.layout import link_stored_run, read_stats

    options = dict(options)
    negatives = int(options.pop("hard_negatives", 0) or 0)
    lexical = int(options.pop("lexical_candidates", 0) or 0)

    mined_stats = read_stats(mined)
    if mined_stats is None:
        raise FileNotFoundError(f"{mined} is not a merged mining folder (no stats): mine it first")
    mined_settings = mined_stats["settings"]
    threshold = {k: mined_settings.get(k) for k in ("threshold", "threshold_quantile")}
    if mined_settings.get("holdout"):  # the same documents held out as in ``mined``: the same training documents
        threshold["holdout"] = mined_settings["holdout"]
        # the held-out draw hashes the seed with each id, so the variant takes the mined folder's seed; the
        # comparison's corpus_seed would hold out other documents, some of which the mined recipes train on
        seed = int(mined_settings.get("seed", seed))
    stats = read_stats(folder)
    if stats is not None:
        settings = stats.get("settings", {})
        wanted = {**options, "seed": seed, **threshold} | ({"hard_negatives": negatives} if negatives else {})
        wanted |= {"lexical_candidates": lexical} if lexical else {}
        if all(settings.get(k) == v for k, v in wanted.items()):
            return stats
    stored = link_stored_run(mined, folder)
    fields = {f.name for f in dataclasses.fields(MiningConfig)}
    base = {k: v for k, v in stored.items() if k in fields}
    base |= threshold
    stats = merge(folder, MiningConfig(**{**base, **options, "seed": seed}), progress=progress)
    steps = AfterMerge(hard_negatives=negatives, lexical_candidates=lexical, seed=seed)
    return finish_mining(folder, steps, model=model, stats=stats)


def prepare_mixed(
    run: Path, mined: Path, folder: Path, options: dict[str, str], seed: int, progress: bool, model: str | None
) -> dict[str, Any]:
    """``folder``: ``mined/structure`` mixed with the mined groups (with their hard negatives, re-merged into
    ``run/data/hard-negatives-K`` when ``K > 0``) at ``options["structure_mix"]``, for recipe ``structure-mixed``."""
    from xprt_st.mining.structure import write_mixed_groups

    negatives = int(options.get("hard_negatives", 0) or 0)
    source = mined
    if negatives:
        source, hard = run / "data" / f"hard-negatives-{negatives}", {"positive": "mined", "pairs": "mined"}
        prepare_variant(mined, source, {**hard, "hard_negatives": str(negatives)}, seed, progress, model=model)
    return write_mixed_groups(mined / "structure", source, folder, float(options["structure_mix"]), seed=seed)
