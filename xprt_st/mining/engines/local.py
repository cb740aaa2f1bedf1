"""The local engine: one process runs one shard or all of them, then merges (the reference engine).

Shard ``i`` of ``num_shards`` holds the documents whose ordinal is ``i`` modulo ``num_shards``; each
shard is split once (``split.parquet``, reused on resume), then scored chunk by chunk of
``chunk_size`` documents. The TF-IDF is the whole corpus's: a shard job splits the shards nobody has
split yet to count their document frequencies (see :meth:`GroupBuilder.corpus_tfidf`), so the groups
do not depend on ``num_shards``. The last shard job to finish merges.
"""

from __future__ import annotations

import logging
from typing import Any

from xprt_st.mining.config import MiningConfigError
from xprt_st.mining.engines.base import Engine, ShardResult, split_sources
from xprt_st.mining.layout import remove_temporary
from xprt_st.mining.merge import merge
from xprt_st.mining.progress import progress_bar
from xprt_st.mining.tfidf import TfidfScorer
from xprt_st.stage_timing import advance, stage

logger = logging.getLogger(__name__)


class GroupBuilder(Engine):
    """Mine xPRT training groups from a corpus into ``output_dir``, shard by shard, resumably.

    Example (a notebook)::

        from xprt_st.mining import GroupBuilder, MiningConfig
        builder = GroupBuilder(["bbc-fulltext.zip"], "mined/bbc", MiningConfig(threshold_quantile=0.4))
        stats = builder.run()          # all shards here, then the merge
        datasets.load_from_disk("mined/bbc")

    On a cluster, run ``builder.run_shard(i)`` (``xprt-st mine ... --num-shards N --shard-index i``)
    as one job per shard; the last one to finish merges. Arguments: see
    :class:`~xprt_st.mining.engines.base.Engine`. Before any work (model loading included), the output
    folder is checked to be creatable, every input to exist and open with the text field, and a
    stored run to match the input and settings.
    """

    @property
    def num_shards(self) -> int:
        return self.config.num_shards

    def shard_complete(self, shard_index: int) -> bool:
        return self.layout.shard_complete(shard_index, self.num_shards)

    def _check_shard_index(self, shard_index: int) -> None:
        if not 0 <= shard_index < self.num_shards:
            raise MiningConfigError(f"shard_index={shard_index} is not in [0, num_shards={self.num_shards})")

    def run(self, shard_index: int | None = None, merge: bool = True) -> dict[str, Any] | ShardResult:
        """Run one shard (``shard_index``) or all of them, then merge once every shard is complete.

        Returns ``stats.json``'s content when a merge ran, else the :class:`ShardResult` of the shard.
        """
        if self.overwrite and shard_index is not None:
            raise MiningConfigError(
                "--overwrite deletes every shard of the folder, which would discard the work of the other shard "
                "jobs: delete the old run once (or run without --shard-index), then start the shard jobs without it"
            )
        if shard_index is not None:
            self._check_shard_index(shard_index)
        indices = range(self.num_shards) if shard_index is None else [shard_index]
        if shard_index is not None and self.num_shards > 1:
            self.lock_scope = f"shard-{shard_index:05d}"  # the other shards' jobs run at the same time
        self.prepare()
        result: ShardResult | None = None
        try:
            try:
                for index in indices:
                    result = self._run_shard(index)
            finally:
                self.close()
            if merge and all(self.shard_complete(i) for i in range(self.num_shards)):
                return self.merge()
        finally:
            self.release()
        if merge:
            missing = [i for i in range(self.num_shards) if not self.shard_complete(i)]
            logger.info("shard(s) %s not complete yet; the last shard to finish merges", missing)
        assert result is not None
        return result

    def run_shard(self, shard_index: int) -> ShardResult:
        """Mine shard ``shard_index`` of ``num_shards``: resumes at its first missing chunk; a no-op when complete."""
        self._check_shard_index(shard_index)
        if self.overwrite and not self._prepared:
            raise MiningConfigError("overwrite clears the whole folder: call run(), not run_shard(), with it")
        if self._prepared:
            return self._run_shard(shard_index)
        if self.num_shards > 1:
            self.lock_scope = f"shard-{shard_index:05d}"
        self.prepare()
        try:
            return self._run_shard(shard_index)
        finally:
            self.close()
            self.release()

    def _run_shard(self, shard_index: int) -> ShardResult:
        n = self.num_shards
        result = ShardResult(shard_index)
        if self.shard_complete(shard_index):
            logger.info("shard %d is complete; nothing to do", shard_index)
            result.counts = self.layout.shard_counts(shard_index, n)
            return result
        folder = self.layout.shard_split(shard_index, n)
        folder.directory.mkdir(parents=True, exist_ok=True)
        remove_temporary(folder.directory)
        counts = self.split_shard(shard_index)
        total = int(counts.get("documents_with_passages", 0))
        size = self.config.chunk_size
        num_chunks = max(1, -(-total // size))
        todo = self.chunks_todo(shard_index, n, num_chunks)
        result.chunks_reused = [c for c in range(num_chunks) if c not in todo]
        if todo:
            scorer = self.corpus_tfidf() if self.config.encodes else TfidfScorer()
            done = [0]

            def scored(count: int) -> None:
                progress.advance(task, count)
                done[0] += count
                advance(done[0], total)

            with progress_bar(self.progress) as progress:
                task = progress.add_task(f"shard {shard_index}: encoding", total=total)
                for c in range(num_chunks):
                    if c not in todo:
                        scored(min(size, total - c * size))
                        continue
                    chunk_docs = folder.read_documents(c * size, min((c + 1) * size, total))
                    table, seconds, vectors = self.score(chunk_docs, scorer, scored)
                    self.write_chunk(shard_index, n, c, table, seconds, vectors)
                    result.chunks_computed.append(c)
        result.counts = self.finish_shard(shard_index, n, counts, num_chunks)
        return result

    def split_shard(self, shard_index: int) -> dict[str, Any]:
        """Read and split the shard's documents into its split file (once: a resume reuses it); its counts."""
        folder = self.layout.shard_split(shard_index, self.num_shards)
        if folder.has_split() and (folder.frequencies_path.is_file() or not self.config.encodes):
            return folder.split_counts()
        read = [0]

        def on_record() -> None:
            progress.advance(task)
            read[0] += 1
            advance(read[0])

        with stage("read corpus"), progress_bar(self.progress) as progress:
            task = progress.add_task(f"shard {shard_index}: reading", total=None)
            return split_sources(
                self.corpus,
                self.config,
                self.splitter(),
                folder,
                keep=lambda ordinal: ordinal % self.num_shards == shard_index,
                on_record=on_record,
            )

    def corpus_tfidf(self) -> TfidfScorer:
        """The TF-IDF of the whole corpus: the document frequencies of every shard's passages, summed.

        A shard whose counts are missing is split here first (its split file is written atomically
        and reused by its own job), so one job per shard still scores with corpus-wide IDF.
        """
        for index in range(self.num_shards):
            if not self.layout.shard_split(index, self.num_shards).frequencies_path.is_file():
                self.split_shard(index)
        return self.layout.corpus_frequencies(self.num_shards)

    def merge(self) -> dict[str, Any]:
        """Build the dataset, side files and ``stats.json`` from the complete shards; see :func:`merge`."""
        return merge(self.output_dir, self.config, progress=self.progress)
