"""The one place where a mining engine is chosen by name, for Python and the CLI alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xprt_st.mining.config import MiningConfig, MiningConfigError
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


def mine(corpus: Any, output_dir: str | Path, **settings: Any) -> dict[str, Any]:
    """Mine ``corpus`` into ``output_dir`` (all shards, then the merge); returns the stats.

    ``settings`` are :class:`MiningConfig` fields plus ``model`` as a loaded SentenceTransformer or a
    name, ``progress`` and ``overwrite`` (see :class:`~xprt_st.mining.engines.local.GroupBuilder`).
    The defaults are the CLI's: anchors above the median centrality of the corpus unless
    ``threshold`` or ``threshold_quantile`` is given (``threshold=0.825`` is the paper's).
    ``engine="ray"`` (with ``num_workers`` and ``ray_address``) runs on a Ray cluster instead, with
    the same output.
    """
    if isinstance(corpus, str | Path):
        corpus = [corpus]
    options = {name: settings.pop(name) for name in ("progress", "overwrite", "engine") if name in settings}
    options["num_workers"] = settings.pop("num_workers", None)
    options["ray_address"] = settings.pop("ray_address", None)
    model = settings.pop("model", None)
    if model is not None and not isinstance(model, str | Path):
        config = MiningConfig(**settings)
    else:
        config, model = MiningConfig(model=None if model is None else str(model), **settings), None
    result = run_mining(list(corpus), output_dir, config, model=model, **options)
    assert isinstance(result, dict)
    return result
