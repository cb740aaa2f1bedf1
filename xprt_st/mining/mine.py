"""The one place where a mining engine is chosen by name, for Python and the CLI alike."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

from xprt_st.mining.config import MiningConfig, MiningConfigError, MiningOutputError
from xprt_st.mining.engines.base import ShardResult
from xprt_st.mining.engines.local import GroupBuilder

__all__ = ["ENGINES", "GroupBuilder", "ShardResult", "mine", "run_mining"]

ENGINES = ("local", "ray")


def run_mining(
    corpus: list[str | Path],
    output_dir: str | Path,
    config: MiningConfig,
    *,
    engine: str = "local",
    shard_index: int | None = None,
    model: Any = None,
    progress: bool = True,
    overwrite: bool = False,
    num_workers: int | None = None,
    ray_address: str | None = None,
) -> dict[str, Any] | ShardResult:
    """Mine ``corpus`` into ``output_dir`` with the named engine.

    Returns ``stats.json``'s content, or the :class:`ShardResult` of a local shard job
    (``shard_index``) when other shards are not complete yet.
    """
    if engine not in ENGINES:
        raise MiningConfigError(f"engine={engine!r} is not one of {list(ENGINES)}")
    try:
        return _run(
            corpus, output_dir, config, engine, shard_index, model, progress, overwrite, num_workers, ray_address
        )
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        raise MiningOutputError(disk_error_message(Path(output_dir), error)) from error


DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
"""Write errors whose cause is the disk (full, over quota, read-only, file too large), not the input."""


def disk_error_message(output_dir: Path, error: OSError) -> str:
    """A write error in words: the file, the disk's free space, and that a rerun keeps the finished work."""
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        usage = shutil.disk_usage(existing)
        space = f"{usage.free / 2**30:.2f} GiB free of {usage.total / 2**30:.1f} GiB on the disk holding {existing}"
    except OSError:
        space = f"the free space of the disk holding {existing} could not be read"
    return (
        f"writing {error.filename or output_dir} failed: {error.strerror or error} ({space}). Free some space "
        "(or give an --output on another disk) and rerun the same command: the finished chunks are kept."
    )


def _run(
    corpus: list[str | Path],
    output_dir: str | Path,
    config: MiningConfig,
    engine: str,
    shard_index: int | None,
    model: Any,
    progress: bool,
    overwrite: bool,
    num_workers: int | None,
    ray_address: str | None,
) -> dict[str, Any] | ShardResult:
    if engine == "ray":
        if shard_index is not None:
            raise MiningConfigError("--shard-index is for --engine local; the Ray engine runs every shard")
        from xprt_st.mining.engines.ray import RayEngine

        ray_engine = RayEngine(
            corpus,
            output_dir,
            config,
            model=model,
            num_workers=num_workers,
            address=ray_address,
            progress=progress,
            overwrite=overwrite,
        )
        return ray_engine.run()
    builder = GroupBuilder(corpus, output_dir, config, model=model, progress=progress, overwrite=overwrite)
    return builder.run(shard_index=shard_index)


CHAIN_SETTINGS = (
    "hard_negatives",
    "hard_negative_max_ratio",
    "lexical_candidates",
    "structure",
    "structure_hard_negatives",
    "structure_mix",
)
"""The settings of :func:`mine` for the chain after the merge (:class:`~xprt_st.mining.after_merge.AfterMerge`)."""


def mine(corpus: Any, output_dir: str | Path, **settings: Any) -> dict[str, Any]:
    """Mine ``corpus`` into ``output_dir`` (all shards, then the merge); returns the stats.

    ``settings`` are :class:`MiningConfig` fields plus ``model`` as a loaded SentenceTransformer or a
    name, ``progress`` and ``overwrite`` (see :class:`~xprt_st.mining.engines.local.GroupBuilder`).
    ``hard_negatives=K`` (and ``hard_negative_max_ratio``) then adds K hard-negative columns to the groups
    (:func:`~xprt_st.mining.hard_negatives.add_hard_negatives`), and ``lexical_candidates=L`` L columns of BM25's
    top passages of other documents (:func:`~xprt_st.mining.lexical_candidates.add_lexical_candidates`).
    The defaults are the CLI's: anchors above the median centrality of the corpus unless
    ``threshold`` or ``threshold_quantile`` is given (``threshold=0.825`` is the paper's).
    ``engine="ray"`` (with ``num_workers`` and ``ray_address``) runs on a Ray cluster instead, with
    the same output. ``structure=["titles", "headings", "links"]`` (or ``"titles,headings,links"``) then writes
    the structure groups to ``DIR/structure`` (:func:`~xprt_st.mining.structure.write_structure_groups`), with
    ``structure_hard_negatives`` (default ``hard_negatives``) hard negatives each, and ``structure_mix=share`` the
    mix of both in ``DIR/structure-mixed``; a stored run mined before links were kept is refused before any work
    when links are asked for. The steps after the merge are :func:`~xprt_st.mining.after_merge.finish_mining`,
    the one chain every entry point runs.
    """
    if isinstance(corpus, str | Path):
        corpus = [corpus]
    options = {name: settings.pop(name) for name in ("progress", "overwrite", "engine") if name in settings}
    options["num_workers"] = settings.pop("num_workers", None)
    options["ray_address"] = settings.pop("ray_address", None)
    model = settings.pop("model", None)
    from xprt_st.mining.after_merge import AfterMerge, finish_mining
    from xprt_st.mining.hard_negatives import DEFAULT_MAX_RATIO
    from xprt_st.mining.structure import links_problem, parse_kinds

    chain = {name: settings.pop(name) for name in CHAIN_SETTINGS if name in settings}
    structure = parse_kinds(chain.get("structure"))
    problem = None if options.get("overwrite") else links_problem(output_dir, structure)
    if problem is not None:
        raise ValueError(problem)
    if model is not None and not isinstance(model, str | Path):
        config = MiningConfig(**settings)
    else:
        config, model = MiningConfig(model=None if model is None else str(model), **settings), None
    after = AfterMerge(
        hard_negatives=int(chain.get("hard_negatives", 0) or 0),
        max_ratio=float(chain.get("hard_negative_max_ratio", DEFAULT_MAX_RATIO)),
        lexical_candidates=int(chain.get("lexical_candidates", 0) or 0),
        structure=structure,
        structure_hard_negatives=chain.get("structure_hard_negatives"),
        structure_mix=chain.get("structure_mix"),
        seed=config.seed,
        batch_size=config.batch_size,
        encode_backend=config.encode_backend,
        precision=config.precision,
    )
    result = run_mining(list(corpus), output_dir, config, model=model, **options)
    assert isinstance(result, dict)
    return finish_mining(output_dir, after, model=model if model is not None else config.model, stats=result)
