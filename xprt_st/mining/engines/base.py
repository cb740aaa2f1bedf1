"""What every engine shares: checks before any work, the split of a set of records, scoring a chunk,
skipping finished chunks, adding up chunk counts, and the ``COMPLETE`` marker written last.

An engine only decides who runs each stage on which records; the stages are
:mod:`xprt_st.mining.stages`, the files :mod:`xprt_st.mining.layout`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from xprt_st.mining.config import MiningConfig, MiningConfigError
from xprt_st.mining.encoder import MiningEncoder
from xprt_st.mining.layout import SPLIT_ROW_GROUP, MiningLayout, SplitFolder
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.reader import check_sources, iter_corpus
from xprt_st.mining.stages import PASSAGE_SCHEMA, Document, DocumentSplitter, document_frequencies, score_chunk
from xprt_st.mining.stats import sum_counts
from xprt_st.mining.tfidf import TfidfScorer


@dataclass
class ShardResult:
    """What one shard job did: counts (summed into ``stats.json``) and which chunks it computed."""

    shard_index: int
    counts: dict[str, Any] = field(default_factory=dict)
    chunks_computed: list[int] = field(default_factory=list)
    chunks_reused: list[int] = field(default_factory=list)


def split_sources(
    sources: Sequence[str | Path],
    config: MiningConfig,
    splitter: PassageSplitter,
    folder: SplitFolder,
    keep: Callable[[int], bool] | None = None,
    on_record: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Read ``sources``, split the records whose ordinal ``keep`` accepts (all by default) into ``folder``.

    Streams: documents go to the split file row group by row group, and their document frequencies
    (when the run encodes) into one running sum, so memory holds one row group, not the shard.
    Returns the split counts.
    """
    documents = DocumentSplitter(splitter, html=config.html)
    records = iter_corpus(
        sources,
        text_field=config.resolved_text_field,
        id_field=config.id_field,
        split=config.split,
        skip_unreadable=config.skip_unreadable,
        skipped=documents.skipped,
        fallback_text_field=config.fallback_text_field,
        title_field=config.title_field,
    )
    frequencies = TfidfScorer()
    writer = folder.split_writer()
    batch: list[Document] = []

    def flush() -> None:
        writer.write(batch)
        if config.encodes:
            frequencies.update(document_frequencies(batch))
        batch.clear()

    try:
        for record in records:
            if keep is not None and not keep(record.ordinal):
                continue
            if on_record is not None:
                on_record()
            document = documents.split(record)
            if document is not None:
                batch.append(document)
                if len(batch) >= SPLIT_ROW_GROUP:
                    flush()
        flush()
    except BaseException:
        writer.abort()
        raise
    if config.encodes:
        frequencies.save(folder.frequencies_path)
    writer.finish(documents.counts)
    return documents.counts


def score_documents(
    documents: Sequence[Document],
    encode: Callable[[list[str], list[np.ndarray | None]], np.ndarray],
    scorer: TfidfScorer,
    config: MiningConfig,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[pa.Table, float, np.ndarray | None]:
    """Score a chunk's documents (:func:`~xprt_st.mining.stages.score_chunk`): its rows, seconds in the encoder,
    and the rows' vectors (NaN rows where not encoded; None when nothing was encoded)."""
    tables, seconds, vectors = [], 0.0, []
    batches = score_chunk(
        documents,
        encode,
        scorer,
        top_k=config.top_k,
        rank_by=config.rank_by,
        encodes=config.encodes,
        # A few thousand passages per call: sentence-transformers sorts each call by length.
        passages_per_call=max(config.batch_size * 16, 1),
    )
    for batch in batches:
        tables.append(batch.table)
        seconds += batch.encode_seconds
        vectors.append(batch.vectors)
        if on_batch is not None:
            on_batch(batch.documents)
    table = pa.concat_tables(tables) if tables else PASSAGE_SCHEMA.empty_table()
    return table, seconds, _chunk_vectors(vectors, [t.num_rows for t in tables])


def _chunk_vectors(parts: list[np.ndarray | None], rows: list[int]) -> np.ndarray | None:
    """The batches' vectors stacked (a batch with none encoded: NaN rows); None when no batch encoded any."""
    dims = {p.shape[1] for p in parts if p is not None}
    if not dims:
        return None
    dim = dims.pop()
    filled = [
        p if p is not None else np.full((n, dim), np.nan, dtype=np.float32) for p, n in zip(parts, rows, strict=True)
    ]
    return np.concatenate(filled, axis=0)


def check_output_outside_inputs(output_dir: Path, corpus: Sequence[str | Path]) -> None:
    """Refuse an ``--output`` inside an input folder: a rerun would read the run's own files as input."""
    output = output_dir.resolve()
    for source in corpus:
        folder = Path(source)
        if folder.is_dir() and output.is_relative_to(folder.resolve()):
            raise MiningConfigError(
                f"--output {output_dir} is inside the input folder {source}: a later run would read the mined "
                f"files as input. Choose an --output outside {source}."
            )


class Engine:
    """The part of an engine that does not depend on who runs the work.

    Args:
        corpus: files, folders, zips or dataset names (see :mod:`xprt_st.mining.reader`).
        output_dir: the output folder (created; reused to resume).
        config: the settings; defaults are the paper's.
        model: an already loaded SentenceTransformer (else ``config.model`` is loaded on first need).
        progress: show rich progress bars (documents/s, ETA).
        overwrite: delete a run stored in ``output_dir`` (its mining files only) and mine again, instead
            of refusing a folder mined from other input or with other settings.
    """

    def __init__(
        self,
        corpus: Sequence[str | Path],
        output_dir: str | Path,
        config: MiningConfig | None = None,
        model: Any = None,
        progress: bool = True,
        overwrite: bool = False,
    ) -> None:
        self.corpus = list(corpus)
        self.output_dir = Path(output_dir)
        self.config = config or MiningConfig()
        self.config.validate()
        self.encoder = MiningEncoder(self.config, model, self.output_dir)
        self.layout = MiningLayout(self.output_dir)
        self.progress = progress
        self.overwrite = overwrite
        self._prepared = False

    @property
    def model(self) -> Any:
        return self.encoder.model

    def splitter(self) -> PassageSplitter:
        return self.encoder.splitter()

    def encode(self, passages: list[str], token_ids: list[np.ndarray | None] | None = None) -> np.ndarray:
        return self.encoder.encode(passages, token_ids)

    def close(self) -> None:
        self.encoder.close()

    lock_scope = "run"
    """What this engine's lock covers: the whole folder; a local shard job locks its shard only."""

    def prepare(self) -> None:
        """Validate the output folder and the inputs, take the folder's lock, clear it with ``overwrite``,
        check or record the run.

        Nothing is written into the output folder before the inputs are known to be valid, so a typo
        in a path leaves no ``mining_config.json`` behind to block the corrected command. The lock is
        released by :meth:`release`.
        """
        if self._prepared:
            return
        self.layout.check_writable()
        check_sources(
            self.corpus,
            text_field=self.config.resolved_text_field,
            id_field=self.config.id_field,
            split=self.config.split,
            skip_unreadable=self.config.skip_unreadable,
            fallback_text_field=self.config.fallback_text_field,
            html=self.config.html,
            title_field=self.config.title_field,
        )
        check_output_outside_inputs(self.output_dir, self.corpus)
        if self.overwrite or self.layout.stored_settings() is None:
            # A new run records its settings only once its mining model has loaded: a model that does not load
            # then leaves no folder behind to refuse the corrected command ("other settings: model ...").
            _ = self.encoder.model
        self._lock = self.layout.lock(self.lock_scope)
        self._lock.acquire()
        try:
            had_run = self.layout.stored_settings() is not None
            if self.overwrite:
                self.layout.clear()
            if not had_run:  # a folder of a mining run keeps the user's files beside it, untouched
                self.layout.check_not_foreign()
            self.layout.check_or_record_run(self.config.stage_settings(), self.corpus, self.config.split)
        except BaseException:
            self.release()
            raise
        self._prepared = True

    def release(self) -> None:
        """Release the folder's lock (after the run, whatever its outcome)."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
            self._lock = None
        self._prepared = False

    def chunks_todo(self, shard: int, num_shards: int, num_chunks: int) -> list[int]:
        """The chunks of a shard not yet stored (a killed run resumes at these)."""
        return [c for c in range(num_chunks) if not self.layout.chunk_done(shard, num_shards, c)]

    def score(
        self, documents: Sequence[Document], scorer: TfidfScorer, on_batch: Any = None
    ) -> tuple[pa.Table, float, np.ndarray | None]:
        return score_documents(documents, self.encode, scorer, self.config, on_batch)

    def write_chunk(
        self,
        shard: int,
        num_shards: int,
        chunk: int,
        table: pa.Table,
        encode_seconds: float,
        vectors: np.ndarray | None = None,
    ) -> None:
        embeddings = (vectors, self.encoder.identity()) if vectors is not None else None
        self.layout.write_chunk(shard, num_shards, chunk, table, {"encode_seconds": encode_seconds}, embeddings)

    def finish_shard(self, shard: int, num_shards: int, counts: dict[str, Any], num_chunks: int) -> dict[str, Any]:
        """Add the chunks' counts to the split's and write the shard's ``COMPLETE`` marker (last)."""
        chunk_counts = sum_counts(self.layout.chunk_counts(shard, num_shards, c) for c in range(num_chunks))
        counts = {**counts, "encode_seconds": round(float(chunk_counts.get("encode_seconds", 0.0)), 3)}
        self.layout.mark_shard_complete(shard, num_shards, counts)
        return counts
