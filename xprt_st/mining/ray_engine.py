"""The Ray Data engine: the local engine's stages mapped over a Ray cluster, writing the same output folder.

``xprt-st mine CORPUS... --output DIR --engine ray [--num-workers N] [--ray-address HOST:PORT]``

The engine decides only who runs each stage; what a document goes through is the local engine's
code (:class:`~xprt_st.mining.builder.GroupBuilder`), so both engines give the same groups:

1. **Split** (Ray tasks, one per input unit: a file, a zip or a saved dataset, e.g. one FineWeb
   Parquet file): read the unit with :func:`~xprt_st.mining.reader.iter_corpus`, extract HTML, cut
   passages, and write ``DIR/shards/ray-units/unit-UUUUU/{split.parquet, split_stats.json,
   document_frequencies.npz}``. A unit already written is not read again.
2. **Corpus TF-IDF** (the driver): sum the units' hashed document frequencies (integers, so the IDF
   does not depend on how the corpus was split) and give each unit its first document ordinal
   (the documents counted before it), so labels are the local engine's ordinals.
3. **Encode and score** (a pool of actors, one per GPU, or ``--num-workers`` CPU workers when the
   cluster has no GPU; each loads the model once): chunk ``c`` is the ``c``-th run of ``chunk_size``
   documents with passages, exactly the local engine's chunk, read from the units' split files; the
   worker encodes and ranks it with the local engine's ``_mine_chunk`` (same batches, so the same
   vectors) and renames ``DIR/shards/shard-00000-of-00001/chunk-CCCCC/`` into place. A rerun skips
   every chunk folder already there.
4. **Merge** (the driver): :func:`~xprt_st.mining.builder.merge`, as for the local engine.

Workers write into ``DIR`` directly, so on a multi-node cluster ``DIR`` must be on a filesystem
every node mounts at the same path (NFS, Lustre, a FUSE mount of a bucket); see ``docs/mining.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xprt_st.mining.builder import (
    COMPLETE,
    DF_FILE,
    STATS_FILE,
    GroupBuilder,
    MiningConfig,
    MiningConfigError,
    MiningError,
    _atomic_write_text,
    _NullProgress,
    _progress,
    _ShardDocument,
    merge,
)
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.reader import expand_sources
from xprt_st.mining.tfidf import TfidfScorer

logger = logging.getLogger(__name__)

RAY_INSTALL = 'pip install "xprt-st[ray]"'
UNITS_DIR = Path("shards", "ray-units")
"""Under the output folder, beside the shard folders, so whatever clears the shards clears the units too."""
WORKER_RESTARTS = 2
"""By default a worker process that dies is restarted (and its chunk retried) this many times before the run fails.

Ray Data's default is to restart forever, which turns a chunk that always kills its worker (out of
memory, a crashing CUDA kernel) into a run that never ends."""
CONNECT_TIMEOUT_S = 5.0


class RayEngineError(MiningError):
    """The Ray cluster cannot be reached, or a worker failed; the message says what is kept and how to go on."""


def import_ray() -> Any:
    """The ``ray`` module with Ray Data, or :class:`RayEngineError` with the install line."""
    try:
        import ray
        import ray.data  # Ray Data is a separate extra of Ray
    except ImportError as error:
        raise RayEngineError(f"--engine ray needs Ray Data, which is not installed: {RAY_INSTALL}") from error
    return ray


def check_address(address: str) -> None:
    """Fail fast when ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) cannot be reached.

    ``ray.init`` retries an unreachable address for minutes without saying why, so the engine opens
    one TCP connection first. ``auto`` and ``local`` are Ray's own keywords and are passed through.
    """
    if address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise RayEngineError(
            f"--ray-address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379, or ray://10.0.0.5:10001 for Ray "
            "Client); unset it (and RAY_ADDRESS) to start a local cluster for this command"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise RayEngineError(
            f"cannot reach the Ray cluster at {address!r} ({type(error).__name__}: {error}). Check that the head "
            "node runs (`ray status` on it), that the address is the head's IP and GCS port (6379 by default; "
            "10001 for ray://), and that no firewall blocks it; or unset --ray-address and RAY_ADDRESS to start "
            "a local cluster. Nothing was computed."
        ) from error


@contextmanager
def ray_cluster(address: str | None = None) -> Iterator[bool]:
    """Attach to ``address`` (else ``RAY_ADDRESS``), or start a local cluster that stops on exit.

    Yields True when this call started a local cluster (its size is then fixed). A process already
    connected to Ray (a notebook, a test fixture) keeps its connection and is not shut down.
    """
    ray = import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_address(address)
    if ray.is_initialized():
        yield False
        return
    try:
        if address:
            ray.init(address=address, log_to_driver=True)
        else:
            ray.init(include_dashboard=False)
    except ConnectionError as error:
        raise RayEngineError(f"cannot attach to the Ray cluster at {address!r}: {error}") from error
    try:
        yield not address
    finally:
        ray.shutdown()


class RayEngine:
    """Mine ``corpus`` into ``output_dir`` on a Ray cluster; the output folder is the local engine's.

    Args:
        corpus: files, folders, zips or dataset names (see :mod:`xprt_st.mining.reader`).
        output_dir: the output folder (reused to resume). Every node must see it at the same path.
        config: the settings; ``num_shards`` must stay 1 (the engine splits the work itself).
        model: an already loaded SentenceTransformer, shipped to every worker (else each worker
            loads ``config.model``).
        num_workers: encoder workers; default one per GPU of the cluster, or one per CPU without GPUs.
        address: a running cluster (``HOST:PORT``, ``ray://HOST:PORT``, ``auto``); default
            ``RAY_ADDRESS``, else a local cluster for the duration of :meth:`run`.
        worker_restarts: times a dead worker is restarted and its chunk retried before the run fails.
        progress: show a rich progress bar of the encoded documents.
        overwrite: delete a run stored in ``output_dir`` first (see :class:`GroupBuilder`).
    """

    def __init__(
        self,
        corpus: Sequence[str | Path],
        output_dir: str | Path,
        config: MiningConfig | None = None,
        model: Any = None,
        num_workers: int | None = None,
        address: str | None = None,
        worker_restarts: int = WORKER_RESTARTS,
        progress: bool = True,
        overwrite: bool = False,
    ) -> None:
        self.corpus = list(corpus)
        self.output_dir = Path(output_dir)
        self.config = config or MiningConfig()
        self.config.validate()
        if self.config.num_shards != 1:
            raise MiningConfigError(
                f"num_shards={self.config.num_shards} is the local engine's one-job-per-shard mode; the Ray engine "
                "splits the work over its workers itself: drop --num-shards (or use --engine local)"
            )
        if num_workers is not None and num_workers < 1:
            raise MiningConfigError(f"num_workers={num_workers} must be >= 1 (or left out: one per GPU or CPU)")
        self.model = model
        self.num_workers = num_workers
        self.address = address
        self.worker_restarts = worker_restarts
        self.progress = progress
        # The driver only needs the tokenizer and the model's length limit: keep it off the workers' GPUs.
        driver_config = dataclasses.replace(self.config, device="cpu") if model is None else self.config
        self._driver = GroupBuilder(
            self.corpus, self.output_dir, driver_config, model=model, progress=False, overwrite=overwrite
        )
        self.chunks_computed: list[int] = []
        """Chunks encoded by the last :meth:`run` (the others were already on disk)."""

    @property
    def shard_dir(self) -> Path:
        return self._driver.shard_dir(0)

    def run(self) -> dict[str, Any]:
        """Split, encode and merge; returns ``stats.json``'s content. Resumes a killed run."""
        # Everything that can be checked fails here, before a cluster starts or a file is written.
        sources = expand_sources(self.corpus)
        import_ray()
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address:
            check_address(address)
        self._driver._prepare()  # the output folder, every input, and a stored run's settings and input
        with ray_cluster(address) as started_here:
            if not (self.shard_dir / COMPLETE).is_file():
                self._mine(sources, started_here)
        return merge(self.output_dir, self.config, progress=self.progress)

    # ---------------------------------------------------------------- stages
    def _mine(self, sources: list[str | Path], fixed_cluster: bool) -> None:
        ray = import_ray()
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the driver shows one progress bar of its own
        workers, gpus = self._workers(ray, fixed_cluster)
        units_root = self.output_dir / UNITS_DIR
        self._split_units(ray, sources, units_root)
        unit_counts = [
            json.loads((_unit_dir(units_root, u) / "split_stats.json").read_text()) for u in range(len(sources))
        ]
        counts = _sum_counts(unit_counts)
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.shard_dir.glob("*.tmp*"):  # left by killed workers; no worker runs now
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        scorer = TfidfScorer()
        if self.config.encodes:
            for u in range(len(sources)):
                scorer.update(TfidfScorer.load(_unit_dir(units_root, u) / DF_FILE))
            scorer.save(self.shard_dir / DF_FILE)
        plan = _chunk_plan(unit_counts, self.config.chunk_size)
        todo = [c for c in range(len(plan)) if not (self.shard_dir / f"chunk-{c:05d}").is_dir()]
        if todo:
            self._encode(ray, plan, todo, unit_counts, units_root, scorer, workers, gpus)
        chunk_counts: Counter[str] = Counter()
        for c in range(len(plan)):
            chunk_counts.update(json.loads((self.shard_dir / f"chunk-{c:05d}" / STATS_FILE).read_text()))
        counts["encode_seconds"] = round(float(chunk_counts.pop("encode_seconds", 0.0)), 3)
        _atomic_write_text(self.shard_dir / COMPLETE, json.dumps(counts, indent=2, sort_keys=True))

    def _workers(self, ray: Any, fixed_cluster: bool) -> tuple[int, bool]:
        """How many encoder workers, and whether each takes a GPU."""
        resources = ray.cluster_resources()
        wants_gpu = self.config.encodes and (self.config.device is None or self.config.device.startswith("cuda"))
        gpus = int(resources.get("GPU", 0)) if wants_gpu else 0
        capacity = gpus or int(resources.get("CPU", 1))
        workers = self.num_workers or capacity
        if workers > capacity:
            kind = "GPU" if gpus else "CPU"
            message = f"{workers} encoder workers asked for, but the Ray cluster has {capacity} {kind}s"
            if fixed_cluster:
                raise MiningConfigError(f"{message}: lower --num-workers to at most {capacity}")
            logger.warning("%s; they wait until the cluster (autoscaler) provides them", message)
        return workers, bool(gpus)

    def _split_units(self, ray: Any, sources: list[str | Path], units_root: Path) -> None:
        todo = [u for u in range(len(sources)) if not _unit_done(_unit_dir(units_root, u), self.config)]
        if not todo:
            return
        items = [{"unit": u, "source": str(sources[u]), "is_path": isinstance(sources[u], Path)} for u in todo]
        splitter = self._driver.splitter()
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map(
            _split_unit,
            fn_kwargs={"config": self.config, "splitter": splitter, "units_root": str(units_root)},
            num_cpus=1,
            max_retries=self.worker_restarts,
        )
        try:
            dataset.materialize()
        except Exception as error:
            raise _stage_error("split", error, self.worker_restarts, len(todo)) from error

    def _encode(
        self,
        ray: Any,
        plan: list[list[tuple[int, int, int]]],
        todo: list[int],
        unit_counts: list[dict[str, Any]],
        units_root: Path,
        scorer: TfidfScorer,
        workers: int,
        gpus: bool,
    ) -> None:
        offsets = np.cumsum([0] + [int(c.get("documents", 0)) for c in unit_counts]).tolist()
        items = [{"chunk": c, "spans": json.dumps(plan[c])} for c in todo]
        workers = min(workers, len(items))  # no idle actor holding a GPU on a short resume
        constructor = {
            "output_dir": str(self.output_dir),
            "config": self.config,
            "model_ref": [ray.put(self.model)] if self.model is not None else [],
            "scorer_ref": [ray.put(scorer)],
            "units_root": str(units_root),
            "offsets": offsets,
        }
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _ChunkWorker,
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_gpus=1 if gpus else 0,
            num_cpus=1,
            fn_constructor_kwargs=constructor,
            max_restarts=self.worker_restarts,
            max_task_retries=self.worker_restarts,
        )
        documents = sum(stop - start for c in todo for _, start, stop in plan[c])
        done = 0
        try:
            with _progress(self.progress) as progress:
                task = progress.add_task(f"ray: encoding ({workers} workers)", total=documents)
                for row in dataset.iter_rows():
                    self.chunks_computed.append(int(row["chunk"]))
                    progress.advance(task, int(row["documents"]))
                    done += 1
        except Exception as error:
            raise _stage_error("encode", error, self.worker_restarts, len(todo), done) from error


def _stage_error(stage: str, error: Exception, restarts: int, todo: int, done: int | None = None) -> RayEngineError:
    """One message for a failed stage: what failed, what is kept, how to go on."""
    ray = import_ray()
    cause = error
    while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
        cause = cause.cause  # the worker's own exception, not Ray's wrapper
    kept = f" ({done} of {todo} chunks finished in this run are kept)" if done is not None else ""
    died = isinstance(cause, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError)
    reason = (
        f"a Ray worker process died ({type(cause).__name__}; restarted {restarts} times): out of "
        "memory, a crash in native code or a lost node; see `ray logs` or the dashboard, and lower --batch-size "
        "or --chunk-size if it ran out of memory"
        if died
        else f"{type(cause).__name__}: {cause}"
    )
    return RayEngineError(
        f"the Ray {stage} stage failed: {reason}. Finished units and chunks are kept{kept}: rerun the same "
        "command to resume where it stopped."
    )


# -------------------------------------------------------------------- plan
def _unit_dir(units_root: Path, unit: int) -> Path:
    return units_root / f"unit-{unit:05d}"


def _unit_done(directory: Path, config: MiningConfig) -> bool:
    needed = ["split.parquet", "split_stats.json"] + ([DF_FILE] if config.encodes else [])
    return all((directory / name).is_file() for name in needed)


def _sum_counts(unit_counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The units' split counts added up: what the local engine counts over the whole corpus in one pass.

    Numbers are summed, and so are dictionaries of numbers (``skipped`` and ``repairs`` by reason).
    """
    total: Counter[str] = Counter()
    by_key: dict[str, Counter[str]] = {}
    for counts in unit_counts:
        for key, value in counts.items():
            if isinstance(value, dict):
                by_key.setdefault(key, Counter()).update(value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                total[key] += value
    return {**total, **{key: dict(value) for key, value in by_key.items()}}


def _chunk_plan(unit_counts: list[dict[str, Any]], chunk_size: int) -> list[list[tuple[int, int, int]]]:
    """Per chunk, the ``(unit, first row, end row)`` spans of its documents in the units' split files.

    Chunk ``c`` holds documents ``c * chunk_size`` to ``(c + 1) * chunk_size`` of all documents with
    passages in input order, as the local engine's single shard does; a chunk may span units.
    """
    sizes = [int(c.get("documents_with_passages", 0)) for c in unit_counts]
    total = sum(sizes)
    plan: list[list[tuple[int, int, int]]] = [[] for _ in range(max(1, -(-total // chunk_size)))]
    position = 0
    for unit, size in enumerate(sizes):
        row = 0
        while row < size:
            chunk = (position + row) // chunk_size
            take = min(size - row, (chunk + 1) * chunk_size - (position + row))
            plan[chunk].append((unit, row, row + take))
            row += take
        position += size
    return plan


def _read_rows(path: Path, start: int, stop: int) -> pa.Table:
    """Rows ``start:stop`` of a split file, reading only the row groups that hold them."""
    parquet = pq.ParquetFile(path)
    groups, first, row = [], None, 0
    for group in range(parquet.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if row < stop and row + size > start:
            groups.append(group)
            first = row if first is None else first
        row += size
    if not groups:
        return parquet.schema_arrow.empty_table()
    table = parquet.read_row_groups(groups)
    return table.slice(start - first, stop - start)


# -------------------------------------------------------------------- workers
class _UnitBuilder(GroupBuilder):
    """The local engine's split stage for one input unit, with the driver's splitter (no model load)."""

    def __init__(self, source: str | Path, directory: Path, config: MiningConfig, splitter: PassageSplitter) -> None:
        super().__init__([source], directory, config, progress=False)
        self._splitter = splitter

    def splitter(self) -> PassageSplitter:
        return self._splitter


def _split_unit(row: dict[str, Any], config: MiningConfig, splitter: PassageSplitter, units_root: str) -> dict:
    """Ray task: split one input unit into its folder (labels are ordinals within the unit)."""
    unit = int(row["unit"])
    source: str | Path = Path(row["source"]) if row["is_path"] else row["source"]
    directory = _unit_dir(Path(units_root), unit)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.tmp*"):
        stale.unlink()
    documents, _ = _UnitBuilder(source, directory, config, splitter)._split_stage(0, directory)
    if config.encodes:
        TfidfScorer().partial_fit([p for doc in documents for p in doc.passages]).save(directory / DF_FILE)
    return {"unit": unit, "documents": len(documents)}


class _ChunkWorker:
    """Ray actor: loads the model once, then encodes, scores and writes one chunk per call."""

    def __init__(
        self,
        output_dir: str,
        config: MiningConfig,
        model_ref: list[Any],
        scorer_ref: list[Any],
        units_root: str,
        offsets: list[int],
    ) -> None:
        import ray

        model = ray.get(model_ref[0]) if model_ref else None
        self.builder = GroupBuilder([], output_dir, config, model=model, progress=False)
        if model is None and config.encodes:
            _ = self.builder.model  # load now, once per worker, not inside the first chunk's timing
        self.scorer: TfidfScorer = ray.get(scorer_ref[0])
        self.units_root = Path(units_root)
        self.offsets = offsets

    def documents(self, spans: list[list[int]]) -> list[_ShardDocument]:
        """The chunk's documents, labelled with their ordinal in the whole input."""
        documents = []
        for unit, start, stop in spans:
            table = _read_rows(_unit_dir(self.units_root, unit) / "split.parquet", start, stop).to_pydict()
            offset = self.offsets[unit]
            for label, doc_id, origin, passages, counts in zip(
                table["label"], table["doc_id"], table["origin"], table["passages"], table["token_counts"], strict=True
            ):
                documents.append(_ShardDocument(offset + label, doc_id, origin, passages, counts))
        return documents

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        chunks, counts, seconds = [], [], []
        for chunk, spans in zip(batch["chunk"], batch["spans"], strict=True):
            tick = time.perf_counter()
            documents = self.documents(json.loads(spans))
            directory = self.builder.shard_dir(0)
            self.builder._mine_chunk(int(chunk), documents, self.scorer, directory, _NullProgress(), 0)
            chunks.append(int(chunk))
            counts.append(len(documents))
            seconds.append(time.perf_counter() - tick)
        return {"chunk": chunks, "documents": counts, "seconds": seconds}
