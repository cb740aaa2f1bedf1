"""The Ray Data engine: the stages mapped over a Ray cluster, writing the same output folder as the local engine.

``xprt-st mine CORPUS... --output DIR --engine ray [--num-workers N] [--ray-address HOST:PORT]``

The engine decides only who runs each stage; what a document goes through is
:mod:`xprt_st.mining.stages`, as in the local engine, so both give the same groups:

1. **Split** (Ray tasks, one per input unit: a file, a zip or a saved dataset, e.g. one FineWeb
   Parquet file): read and split the unit (:func:`~xprt_st.mining.engines.base.split_sources`) into
   ``DIR/shards/ray-units/unit-UUUUU/``. A unit already written is not read again.
2. **Corpus TF-IDF** (the driver): sum the units' hashed document frequencies (integers, so the IDF
   does not depend on how the corpus was split) and give each unit its first document ordinal
   (the documents counted before it), so labels are the local engine's ordinals.
3. **Encode and score** (a pool of actors, one per GPU, or ``--num-workers`` CPU workers when the
   cluster has no GPU; each loads the model once): chunk ``c`` is the ``c``-th run of ``chunk_size``
   documents with passages, exactly the local engine's chunk, read from the units' split files; the
   worker scores it (:func:`~xprt_st.mining.engines.base.score_documents`: same batches, so the same
   vectors) and renames ``DIR/shards/shard-00000-of-00001/chunk-CCCCC/`` into place. A rerun skips
   every chunk folder already there.
4. **Merge** (Ray tasks, one per chunk, from :data:`MERGE_TASKS_FROM` chunks on; the driver below
   that): the driver takes the threshold from the stored
   centralities (:func:`~xprt_st.mining.merge.plan_merge`, bounded memory); each task writes its
   chunk's groups, held-out part and side files (:func:`~xprt_st.mining.merge.merge_part`); the
   driver adds up their counts and moves the files into place. No process holds the corpus.

Workers write into ``DIR`` directly, so on a multi-node cluster ``DIR`` must be on a filesystem
every node mounts at the same path (NFS, Lustre, a FUSE mount of a bucket); see ``docs/mining.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.mining.config import MiningConfig, MiningConfigError, MiningError
from xprt_st.mining.encoder import MiningEncoder
from xprt_st.mining.engines.base import Engine, score_documents, split_sources
from xprt_st.mining.layout import MiningLayout, documents_of, read_split_rows, remove_temporary
from xprt_st.mining.merge import MergePlan, merge, merge_part
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.progress import progress_bar
from xprt_st.mining.reader import expand_sources
from xprt_st.mining.stages import Document
from xprt_st.mining.stats import sum_counts
from xprt_st.mining.tfidf import TfidfScorer

logger = logging.getLogger(__name__)

RAY_INSTALL = 'pip install "xprt-st[ray]"'
WORKER_RESTARTS = 2
"""By default a worker process that dies is restarted (and its chunk retried) this many times before the run fails.

Ray Data's default is to restart forever, which turns a chunk that always kills its worker (out of
memory, a crashing CUDA kernel) into a run that never ends."""
CONNECT_TIMEOUT_S = 5.0
MERGE_TASKS_FROM = 32
"""Chunks (of ``chunk_size`` documents) from which the merge parts run as Ray tasks. Below, starting a
Ray Data execution (seconds of fixed cost) outweighs the parts (a chunk's part takes well under a
second); the one benchmark run with merge tasks on 8 chunks (80 articles, a machine loaded 8x) read a
ratio of 0.55 to its encode-only floor."""


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


class RayEngine(Engine):
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
        merge_in_workers: write the merge parts in Ray tasks (True) or in the driver (False); default
            (None) Ray tasks from :data:`MERGE_TASKS_FROM` chunks on. Either way a part holds one chunk,
            so the driver's memory stays flat; the tasks only buy speed, at a fixed start-up cost.
        progress: show a rich progress bar of the encoded documents.
        overwrite: delete a run stored in ``output_dir`` first (see :class:`~xprt_st.mining.engines.base.Engine`).
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
        merge_in_workers: bool | None = None,
        progress: bool = True,
        overwrite: bool = False,
    ) -> None:
        config = config or MiningConfig()
        config.validate()
        if config.num_shards != 1:
            raise MiningConfigError(
                f"num_shards={config.num_shards} is the local engine's one-job-per-shard mode; the Ray engine "
                "splits the work over its workers itself: drop --num-shards (or use --engine local)"
            )
        if num_workers is not None and num_workers < 1:
            raise MiningConfigError(f"num_workers={num_workers} must be >= 1 (or left out: one per GPU or CPU)")
        super().__init__(corpus, output_dir, config, model=model, progress=progress, overwrite=overwrite)
        self.worker_model = model
        # The driver only needs the tokenizer and the model's length limit: keep it off the workers' GPUs.
        if model is None:
            self.encoder = MiningEncoder(dataclasses.replace(self.config, device="cpu"), cache_root=self.output_dir)
        self.num_workers = num_workers
        self.address = address
        self.worker_restarts = worker_restarts
        self.merge_in_workers = merge_in_workers
        self.chunks_computed: list[int] = []
        """Chunks encoded by the last :meth:`run` (the others were already on disk)."""

    def run(self) -> dict[str, Any]:
        """Split, encode and merge; returns ``stats.json``'s content. Resumes a killed run."""
        # Everything that can be checked fails here, before a cluster starts or a file is written.
        sources = expand_sources(self.corpus)
        import_ray()
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address:
            check_address(address)
        self.prepare()  # the output folder, every input, the lock, and a stored run's settings and input
        try:
            with ray_cluster(address) as started_here:
                if not self.layout.shard_complete(0, 1):
                    self._mine(sources, started_here)
                return merge(self.output_dir, self.config, progress=self.progress, run_parts=self._merge_parts)
        finally:
            self.release()

    # ---------------------------------------------------------------- stages
    def _mine(self, sources: list[str | Path], fixed_cluster: bool) -> None:
        ray = import_ray()
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the driver shows one progress bar of its own
        workers, gpus = self._workers(ray, fixed_cluster)
        self._split_units(ray, sources)
        unit_counts = [self.layout.unit_split(u).split_counts() for u in range(len(sources))]
        counts = sum_counts(unit_counts)
        shard = self.layout.shard_dir(0, 1)
        shard.mkdir(parents=True, exist_ok=True)
        remove_temporary(shard)  # left by killed workers; no worker runs now
        scorer = TfidfScorer()
        if self.config.encodes:
            for u in range(len(sources)):
                scorer.update(TfidfScorer.load(self.layout.unit_split(u).frequencies_path))
        plan = chunk_plan(unit_counts, self.config.chunk_size)
        todo = self.chunks_todo(0, 1, len(plan))
        if todo:
            self._encode(ray, plan, todo, unit_counts, scorer, workers, gpus)
        self.finish_shard(0, 1, counts, len(plan))

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

    def _split_units(self, ray: Any, sources: list[str | Path]) -> None:
        todo = [u for u in range(len(sources)) if not self.layout.unit_split(u).done(self.config.encodes)]
        if not todo:
            return
        items = [{"unit": u, "source": str(sources[u]), "is_path": isinstance(sources[u], Path)} for u in todo]
        splitter = self.splitter()
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map(
            split_unit,
            fn_kwargs={"config": self.config, "splitter": splitter, "output_dir": str(self.output_dir)},
            num_cpus=1,
            max_retries=self.worker_restarts,
        )
        try:
            dataset.materialize()
        except Exception as error:
            raise stage_error("split", error, self.worker_restarts, len(todo)) from error

    def _encode(
        self,
        ray: Any,
        plan: list[list[tuple[int, int, int]]],
        todo: list[int],
        unit_counts: list[dict[str, Any]],
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
            "model_ref": [ray.put(self.worker_model)] if self.worker_model is not None else [],
            "scorer_ref": [ray.put(scorer)],
            "offsets": offsets,
        }
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            ChunkWorker,
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
            with progress_bar(self.progress) as progress:
                task = progress.add_task(f"ray: encoding ({workers} workers)", total=documents)
                for row in dataset.iter_rows():
                    self.chunks_computed.append(int(row["chunk"]))
                    progress.advance(task, int(row["documents"]))
                    done += 1
        except Exception as error:
            raise stage_error("encode", error, self.worker_restarts, len(todo), done) from error

    def _merge_parts(self, plan: MergePlan, chunks: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Each chunk's merge part in a Ray task that writes its own files; the driver gets counts only.

        A corpus of few chunks is merged in the driver instead (see ``merge_in_workers``).
        """
        in_workers = self.merge_in_workers
        if in_workers is None:
            in_workers = len(chunks) >= MERGE_TASKS_FROM
        if not in_workers:
            return [merge_part(plan, shard, chunk) for shard, chunk in chunks]
        ray = import_ray()
        items = [{"shard": shard, "chunk": chunk} for shard, chunk in chunks]
        dataset = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map(
            merge_unit, fn_kwargs={"plan": plan}, num_cpus=1, max_retries=self.worker_restarts
        )
        try:
            return [json.loads(row["counts"]) for row in dataset.iter_rows()]
        except Exception as error:
            raise stage_error("merge", error, self.worker_restarts, len(items)) from error


def stage_error(stage: str, error: Exception, restarts: int, todo: int, done: int | None = None) -> RayEngineError:
    """One message for a failed stage: what failed, what is kept, how to go on."""
    ray = import_ray()
    cause = error
    while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
        cause = cause.cause  # the worker's own exception, not Ray's wrapper
    kept = f" ({done} of {todo} chunks finished in this run are kept)" if done is not None else ""
    died = isinstance(cause, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError)
    reason = (
        f"a Ray worker process died ({type(cause).__name__}; restarted {restarts} times): out of "
        "memory, a crash in native code or a lost node; see `ray logs` or the dashboard, and lower --encode-batch-size "
        "or --chunk-size if it ran out of memory"
        if died
        else f"{type(cause).__name__}: {cause}"
    )
    return RayEngineError(
        f"the Ray {stage} stage failed: {reason}. Finished units and chunks are kept{kept}: rerun the same "
        "command to resume where it stopped."
    )


# -------------------------------------------------------------------- plan
def chunk_plan(unit_counts: list[dict[str, Any]], chunk_size: int) -> list[list[tuple[int, int, int]]]:
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


# -------------------------------------------------------------------- tasks and workers
def split_unit(row: dict[str, Any], config: MiningConfig, splitter: PassageSplitter, output_dir: str) -> dict:
    """Ray task: split one input unit into its folder (labels are ordinals within the unit)."""
    unit = int(row["unit"])
    source: str | Path = Path(row["source"]) if row["is_path"] else row["source"]
    folder = MiningLayout(output_dir).unit_split(unit)
    folder.directory.mkdir(parents=True, exist_ok=True)
    remove_temporary(folder.directory)
    counts = split_sources([source], config, splitter, folder)
    return {"unit": unit, "documents": int(counts["documents_with_passages"])}


def merge_unit(row: dict[str, Any], plan: MergePlan) -> dict:
    """Ray task: write one chunk's merge part; only its counts go back to the driver."""
    counts = merge_part(plan, int(row["shard"]), int(row["chunk"]))
    return {"counts": json.dumps(counts)}


class ChunkWorker:
    """Ray actor: loads the model once, then encodes, scores and writes one chunk per call."""

    def __init__(
        self,
        output_dir: str,
        config: MiningConfig,
        model_ref: list[Any],
        scorer_ref: list[Any],
        offsets: list[int],
    ) -> None:
        import ray

        model = ray.get(model_ref[0]) if model_ref else None
        self.config = config
        self.encoder = MiningEncoder(config, model, Path(output_dir))
        if model is None and config.encodes:
            _ = self.encoder.model  # load now, once per worker, not inside the first chunk's timing
        self.scorer: TfidfScorer = ray.get(scorer_ref[0])
        self.layout = MiningLayout(output_dir)
        self.offsets = offsets

    def documents(self, spans: list[list[int]]) -> list[Document]:
        """The chunk's documents, labelled with their ordinal in the whole input."""
        documents = []
        for unit, start, stop in spans:
            table = read_split_rows(self.layout.unit_split(unit).split_path, start, stop)
            documents += documents_of(table, label_offset=self.offsets[unit])
        return documents

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        chunks, counts, seconds = [], [], []
        for chunk, spans in zip(batch["chunk"], batch["spans"], strict=True):
            tick = time.perf_counter()
            documents = self.documents(json.loads(spans))
            table, encode_seconds, vectors = score_documents(documents, self.encoder.encode, self.scorer, self.config)
            embeddings = (vectors, self.encoder.identity()) if vectors is not None else None
            self.layout.write_chunk(0, 1, int(chunk), table, {"encode_seconds": encode_seconds}, embeddings)
            chunks.append(int(chunk))
            counts.append(len(documents))
            seconds.append(time.perf_counter() - tick)
        return {"chunk": chunks, "documents": counts, "seconds": seconds}
