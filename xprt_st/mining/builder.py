"""Stream a corpus into xPRT training groups: passages, batched encoding, shards, checkpoints, statistics.

The work is split in two stages so that nothing expensive is ever done twice:

1. **Shard stage** (one job per shard, any scheduler): read the documents of the shard
   (``ordinal % num_shards == shard_index``), extract HTML, cut passages and save them
   (``split.parquet``) with their hashed document frequencies (``document_frequencies.npz``); sum
   those of every shard into one corpus-wide TF-IDF (a shard splits the shards nobody has split
   yet, see :meth:`GroupBuilder.corpus_tfidf`); then, chunk by chunk of
   ``chunk_size`` documents, encode the passages and store, for EVERY passage, its centrality and its
   ``top_k`` related passages as if it were an anchor. Every file is written to a temporary name and
   renamed; a chunk counts as done only once its folder is renamed into place, and the shard once
   its ``COMPLETE`` marker is written, last. A killed job resumes at the first missing chunk.
2. **Merge** (automatic once every shard is complete, or ``xprt-st mine --merge DIR``): apply the
   threshold (a fixed value, or a quantile of the whole corpus's centralities), build the groups (or
   an ablation), and write the training dataset, the side files and ``stats.json``. Because the
   merge reads only stored scores, a new threshold, quantile or ablation needs no re-encoding.

Output folder::

    DIR/                       datasets.load_from_disk(DIR): anchor, positive, related_2..related_k, label
    DIR/stats.json             figures of the run (see :func:`merge`), settings, skips by reason
    DIR/groups_meta.jsonl      one line per group: doc id, passage indices, centrality, the three scores
    DIR/passages.parquet       every passage: label, doc id, index, text, centrality, anchor / in-group flags
    DIR/mining_config.json     the settings that shaped the stored passages and scores, and the input's
                               identity (paths, sizes, times, SHA-256): both checked on resume
    DIR/shards/shard-SSSSS-of-NNNNN/{split.parquet, document_frequencies.npz, chunk-CCCCC/, COMPLETE}
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xprt_st.columns import ANCHOR, LABEL
from xprt_st.mining.ablations import PAIRS, POSITIVES, document_rng, random_related, random_spans, span_group_count
from xprt_st.mining.groups import (
    DEFAULT_THRESHOLD_QUANTILE,
    DEFAULT_TOP_K,
    MIN_PASSAGES,
    RANK_BY,
    rank_all_passages,
)
from xprt_st.mining.passages import (
    DEFAULT_MAX_PASSAGES,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_TOKENS,
    DEFAULT_OVERLAP_TOKENS,
    PassageSplitter,
)
from xprt_st.mining.reader import (
    check_sources,
    extract_main_text,
    input_differences,
    input_identity,
    iter_corpus,
)
from xprt_st.mining.scoring import TfidfScorer, tfidf_cosine
from xprt_st.mining.tfidf import N_FEATURES
from xprt_st.paths import output_folder_problem

logger = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
STATS_FILE = "stats.json"
CONFIG_FILE = "mining_config.json"
META_FILE = "groups_meta.jsonl"
PASSAGES_FILE = "passages.parquet"
INPUTS_KEY = "inputs"
"""Key of ``mining_config.json`` that holds the input identity (:func:`~xprt_st.mining.reader.input_identity`)."""
REPORT_FILE = "report.html"
DF_FILE = "document_frequencies.npz"
TFIDF_SCHEME = f"corpus-hashed-{N_FEATURES}"
"""Recorded in ``mining_config.json``: runs scored with another TF-IDF (e.g. per shard) are not resumed."""


SPLIT_ROW_GROUP = 1024
"""Rows (documents) per Parquet row group of the files this module writes."""


class MiningError(RuntimeError):
    """Base class of mining failures."""


class MiningConfigError(MiningError, ValueError):
    """An invalid setting, or settings that differ from those of the stored run being resumed."""


class MiningInputError(MiningConfigError):
    """The output folder holds a run mined from other input than the one given now."""


class MiningOutputError(MiningError, ValueError):
    """The output folder cannot be created or written (an existing file, a read-only parent)."""


class NoGroupsError(MiningError):
    """No passage passed the threshold; ``stats.json`` and the per-passage centralities are written."""


@dataclass
class MiningConfig:
    """Every setting of a mining run; defaults are the paper's where it has one, except the threshold.

    Stage-1 settings (passages, model, ranking, sharding) shape the stored scores and must not change
    when a run resumes; merge settings (threshold, quantile, positive, pairs, seed) may change on
    every ``--merge``.
    """

    text_field: str | None = None
    """Field with the document text; None means ``"html"`` with ``html=True``, else ``"text"``."""
    id_field: str | None = None
    """Field with the document id (kept in the side files, never in the training dataset)."""
    html: bool = False
    """Extract the main text of raw HTML pages with trafilatura."""
    split: str = "train"
    """Split of a Hugging Face dataset source."""
    model: str | None = None
    """Mining model name or path; None is the packaged offline all-MiniLM-L6-v2 (the paper: E5)."""
    prompt: str | None = None
    """Prompt prepended to every passage, e.g. ``"passage: "`` for E5."""
    prompt_name: str | None = None
    """Name of a prompt in the model's ``prompts`` (alternative to ``prompt``)."""
    device: str | None = None
    batch_size: int = 64
    max_tokens: int = DEFAULT_MAX_TOKENS
    min_tokens: int = DEFAULT_MIN_TOKENS
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS
    max_passages: int = DEFAULT_MAX_PASSAGES
    top_k: int = DEFAULT_TOP_K
    rank_by: str = "fused"
    num_shards: int = 1
    chunk_size: int = 1000
    """Documents per checkpoint inside a shard."""
    skip_unreadable: bool = False
    threshold: float | None = None
    """A fixed centrality threshold for anchors (the paper's is 0.825, set for E5 on FineWeb)."""
    threshold_quantile: float | None = None
    """When set, the threshold is this quantile of the corpus's centralities (overrides ``threshold``).
    With neither set, it is :data:`~xprt_st.mining.groups.DEFAULT_THRESHOLD_QUANTILE` (0.5): a fixed
    value suits one model only, while a quantile gives paper-like coverage whichever model mines."""
    positive: str = "mined"
    pairs: str = "mined"
    seed: int = 0

    MERGE_FIELDS = ("threshold", "threshold_quantile", "positive", "pairs", "seed")
    RUNTIME_FIELDS = ("device", "batch_size", "skip_unreadable")

    def __post_init__(self) -> None:
        self.validate()

    @property
    def resolved_text_field(self) -> str:
        return self.text_field or ("html" if self.html else "text")

    @property
    def fallback_text_field(self) -> str | None:
        """``"text"`` with ``html`` and no explicit field: raw pages are often stored under ``text``."""
        return "text" if self.html and self.text_field is None else None

    @property
    def anchor_quantile(self) -> float | None:
        """The quantile that sets the threshold: the given one, the default one, or None for a fixed threshold."""
        if self.threshold_quantile is not None:
            return self.threshold_quantile
        return DEFAULT_THRESHOLD_QUANTILE if self.threshold is None else None

    @property
    def threshold_source(self) -> str:
        """How the threshold is set, as ``stats.json`` says: ``fixed``, ``quantile Q`` or ``quantile Q (default)``."""
        if self.threshold_quantile is not None:
            return f"quantile {self.threshold_quantile}"
        return f"quantile {DEFAULT_THRESHOLD_QUANTILE} (default)" if self.threshold is None else "fixed"

    @property
    def encodes(self) -> bool:
        """Random-span pairs need no encoder: stage 1 then only cuts passages."""
        return self.pairs != "random-span"

    def validate(self) -> None:
        """Raise :class:`MiningConfigError` listing every invalid setting with its valid values."""
        problems = []
        for name, value, valid in (
            ("rank_by", self.rank_by, RANK_BY),
            ("positive", self.positive, POSITIVES),
            ("pairs", self.pairs, PAIRS),
        ):
            if value not in valid:
                problems.append(f"{name}={value!r} is not one of {list(valid)}")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            problems.append(f"threshold={self.threshold} is not a cosine in [-1, 1]")
        if self.threshold_quantile is not None and not 0.0 <= self.threshold_quantile <= 1.0:
            problems.append(f"threshold_quantile={self.threshold_quantile} is not in [0, 1]")
        for name in ("top_k", "batch_size", "num_shards", "chunk_size", "max_tokens", "max_passages"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if self.prompt is not None and self.prompt_name is not None:
            problems.append("give prompt or prompt_name, not both")
        if problems:
            raise MiningConfigError("invalid mining settings: " + "; ".join(problems))

    def stage_settings(self) -> dict[str, Any]:
        """Settings that shape stored passages and scores (compared on resume)."""
        skip = set(self.MERGE_FIELDS) | set(self.RUNTIME_FIELDS)
        settings = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
        settings["text_field"] = self.resolved_text_field
        settings["encodes"] = self.encodes
        settings["tfidf"] = TFIDF_SCHEME
        return settings


@dataclass(slots=True)
class _ShardDocument:
    label: int
    doc_id: str
    origin: str
    passages: list[str]
    token_counts: list[int]


@dataclass
class ShardResult:
    """What one shard job did: counts (summed into ``stats.json``) and which chunks it computed."""

    shard_index: int
    counts: dict[str, Any] = field(default_factory=dict)
    chunks_computed: list[int] = field(default_factory=list)
    chunks_reused: list[int] = field(default_factory=list)


class GroupBuilder:
    """Mine xPRT training groups from a corpus into ``output_dir``, shard by shard, resumably.

    Example (a notebook)::

        from xprt_st.mining import GroupBuilder, MiningConfig
        builder = GroupBuilder(["bbc-fulltext.zip"], "mined/bbc", MiningConfig(threshold_quantile=0.4))
        stats = builder.run()          # all shards here, then the merge
        datasets.load_from_disk("mined/bbc")

    On a cluster, run ``builder.run_shard(i)`` (``xprt-st mine ... --num-shards N --shard-index i``)
    as one job per shard; the last one to finish merges.

    Args:
        corpus: files, folders, zips or dataset names (see :mod:`xprt_st.mining.reader`).
        output_dir: the output folder (created; reused to resume).
        config: the settings; defaults are the paper's.
        model: an already loaded SentenceTransformer (else ``config.model`` is loaded on first need).
        progress: show rich progress bars (documents/s, ETA).
        overwrite: delete a run stored in ``output_dir`` (its mining files only) and mine again, instead
            of refusing a folder mined from other input or with other settings.

    Before any work (model loading included), the output folder is checked to be creatable, every
    input to exist and open with the text field, and a stored run to match the input and settings.
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
        self._model = model
        self.progress = progress
        self.overwrite = overwrite
        self._pool: Any = None
        self._prepared = False

    # ---------------------------------------------------------------- model
    @property
    def model(self) -> Any:
        if self._model is None:
            from xprt_st.models import load_model

            self._model = load_model(self.config.model, device=self.config.device)
        return self._model

    def _prompt_text(self) -> str:
        if self.config.prompt_name is not None:
            prompts = getattr(self.model, "prompts", {}) or {}
            if self.config.prompt_name not in prompts:
                raise MiningConfigError(
                    f"prompt_name={self.config.prompt_name!r} is not a prompt of the model; it has {sorted(prompts)}. "
                    'Use --prompt "passage: " to give the text directly.'
                )
            return prompts[self.config.prompt_name]
        return self.config.prompt or ""

    def splitter(self) -> PassageSplitter:
        """The passage splitter with ``max_tokens`` capped to what the model reads after special and prompt tokens."""
        tokenizer = self.model.tokenizer
        budget = self.config.max_tokens
        max_length = getattr(self.model, "max_seq_length", None)
        if max_length:
            prompt = self._prompt_text()
            prompt_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
            special = tokenizer.num_special_tokens_to_add(pair=False)
            budget = min(budget, max_length - special - prompt_tokens)
            if budget < self.config.max_tokens:
                logger.info("max_tokens capped from %d to %d by the model", self.config.max_tokens, budget)
        return PassageSplitter(
            tokenizer,
            max_tokens=budget,
            min_tokens=min(self.config.min_tokens, budget),
            overlap_tokens=min(self.config.overlap_tokens, budget - 1),
            max_passages=self.config.max_passages,
        )

    def encode(self, passages: list[str]) -> np.ndarray:
        """L2-normalised passage vectors, batched; several GPUs encode in parallel through a process pool."""
        kwargs: dict[str, Any] = {
            "batch_size": self.config.batch_size,
            "convert_to_numpy": True,
            "normalize_embeddings": True,
            "show_progress_bar": False,
        }
        if self.config.prompt_name is not None:
            kwargs["prompt_name"] = self.config.prompt_name
        elif self.config.prompt is not None:
            kwargs["prompt"] = self.config.prompt
        if self._pool is None and self.config.device is None and _cuda_device_count() > 1:
            self._pool = self.model.start_multi_process_pool()
        if self._pool is not None:
            kwargs["pool"] = self._pool
        return np.asarray(self.model.encode(passages, **kwargs), dtype=np.float32)

    def close(self) -> None:
        """Stop the multi-GPU pool, if one was started."""
        if self._pool is not None:
            self.model.stop_multi_process_pool(self._pool)
            self._pool = None

    # ---------------------------------------------------------------- layout
    def shard_dir(self, shard_index: int) -> Path:
        return self.output_dir / "shards" / f"shard-{shard_index:05d}-of-{self.config.num_shards:05d}"

    def shard_complete(self, shard_index: int) -> bool:
        return (self.shard_dir(shard_index) / COMPLETE).is_file()

    def _check_shard_index(self, shard_index: int) -> None:
        if not 0 <= shard_index < self.config.num_shards:
            raise MiningConfigError(f"shard_index={shard_index} is not in [0, num_shards={self.config.num_shards})")

    def _prepare(self) -> None:
        """Validate the output folder and the inputs, clear it with ``overwrite``, check or record the run.

        Nothing is written into the output folder before the inputs are known to be valid, so a typo
        in a path leaves no ``mining_config.json`` behind to block the corrected command.
        """
        if self._prepared:
            return
        check_output_dir(self.output_dir)
        check_sources(
            self.corpus,
            text_field=self.config.resolved_text_field,
            id_field=self.config.id_field,
            split=self.config.split,
            skip_unreadable=self.config.skip_unreadable,
            fallback_text_field=self.config.fallback_text_field,
        )
        if self.overwrite:
            clear_mining_output(self.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        path = self.output_dir / CONFIG_FILE
        settings = self.config.stage_settings()
        if path.is_file():
            stored = json.loads(path.read_text())
            changed = {k: (stored.get(k), v) for k, v in settings.items() if stored.get(k) != v}
            if changed:
                details = ", ".join(f"{k}: stored {a!r}, now {b!r}" for k, (a, b) in changed.items())
                raise MiningConfigError(
                    f"{self.output_dir} holds a run mined with other settings ({details}). Resume with the same "
                    "settings, change only merge settings (threshold, quantile, positive, pairs, seed) with --merge, "
                    "choose a new --output, or pass --overwrite to delete the stored run and mine again."
                )
            self._check_stored_inputs(stored, path)
        else:
            settings[INPUTS_KEY] = input_identity(self.corpus, self.config.split)
            _atomic_write_text(path, json.dumps(settings, indent=2, sort_keys=True))
        self._prepared = True

    def _check_stored_inputs(self, stored: dict[str, Any], path: Path) -> None:
        """Refuse a rerun into ``output_dir`` (a resume, or a re-merge of complete shards) on other input."""
        if INPUTS_KEY not in stored:
            # A run stored before inputs were recorded: record them now so later resumes are checked.
            logger.warning("%s records no input identity (an older run); recording the current input", path)
            stored[INPUTS_KEY] = input_identity(self.corpus, self.config.split)
            _atomic_write_text(path, json.dumps(stored, indent=2, sort_keys=True))
            return
        differences = input_differences(stored[INPUTS_KEY], self.corpus, self.config.split)
        if differences:
            shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
            raise MiningInputError(
                f"{self.output_dir} holds a run mined from other input, so its groups are not those of the input "
                f"given now. Mined from: {_describe_inputs(stored[INPUTS_KEY])}. Given now: "
                f"{', '.join(str(c) for c in self.corpus)}. Differences: {shown}. Mine into a new --output folder, "
                "or pass --overwrite to delete the stored run and mine this input."
            )

    # ---------------------------------------------------------------- stage 1
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
        indices = range(self.config.num_shards) if shard_index is None else [shard_index]
        self._prepare()
        result: ShardResult | None = None
        try:
            for index in indices:
                result = self.run_shard(index)
        finally:
            self.close()
        if merge and all(self.shard_complete(i) for i in range(self.config.num_shards)):
            return self.merge()
        if merge:
            missing = [i for i in range(self.config.num_shards) if not self.shard_complete(i)]
            logger.info("shard(s) %s not complete yet; the last shard to finish merges", missing)
        assert result is not None
        return result

    def run_shard(self, shard_index: int) -> ShardResult:
        """Mine shard ``shard_index`` of ``num_shards``: resumes at its first missing chunk; a no-op when complete."""
        self._check_shard_index(shard_index)
        if self.overwrite and not self._prepared:
            raise MiningConfigError("overwrite clears the whole folder: call run(), not run_shard(), with it")
        self._prepare()
        directory = self.shard_dir(shard_index)
        result = ShardResult(shard_index)
        if self.shard_complete(shard_index):
            logger.info("shard %d is complete; nothing to do", shard_index)
            result.counts = json.loads((directory / COMPLETE).read_text())
            return result
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.tmp*"):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        documents, counts = self._split_stage(shard_index, directory)
        if self.config.encodes and not (directory / DF_FILE).is_file():
            TfidfScorer().partial_fit([p for doc in documents for p in doc.passages]).save(directory / DF_FILE)
        num_chunks = max(1, -(-len(documents) // self.config.chunk_size))
        chunk_counts: Counter[str] = Counter()
        todo = [c for c in range(num_chunks) if not (directory / f"chunk-{c:05d}").is_dir()]
        result.chunks_reused = [c for c in range(num_chunks) if c not in todo]
        if todo:
            scorer = self.corpus_tfidf() if self.config.encodes else TfidfScorer()
            with _progress(self.progress) as progress:
                task = progress.add_task(f"shard {shard_index}: encoding", total=len(documents))
                for c in range(num_chunks):
                    chunk_docs = documents[c * self.config.chunk_size : (c + 1) * self.config.chunk_size]
                    if c in todo:
                        self._mine_chunk(c, chunk_docs, scorer, directory, progress, task)
                        result.chunks_computed.append(c)
                    else:
                        progress.advance(task, len(chunk_docs))
        for c in range(num_chunks):
            chunk_stats = directory / f"chunk-{c:05d}" / STATS_FILE
            chunk_counts.update(json.loads(chunk_stats.read_text()))
        counts["encode_seconds"] = round(float(chunk_counts.pop("encode_seconds", 0.0)), 3)
        result.counts = counts
        _atomic_write_text(directory / COMPLETE, json.dumps(counts, indent=2, sort_keys=True))
        return result

    def corpus_tfidf(self) -> TfidfScorer:
        """The TF-IDF of the whole corpus: the document frequencies of every shard's passages, summed.

        A shard whose counts are missing is split here first (its ``split.parquet`` is written
        atomically and reused by its own job), so one job per shard still scores with corpus-wide
        IDF, and the groups do not depend on ``num_shards``.
        """
        scorer = TfidfScorer()
        for index in range(self.config.num_shards):
            path = self.shard_dir(index) / DF_FILE
            if not path.is_file():
                self.shard_dir(index).mkdir(parents=True, exist_ok=True)
                documents, _ = self._split_stage(index, self.shard_dir(index))
                TfidfScorer().partial_fit([p for doc in documents for p in doc.passages]).save(path)
            scorer.update(TfidfScorer.load(path))
        return scorer

    def _split_stage(self, shard_index: int, directory: Path) -> tuple[list[_ShardDocument], dict[str, Any]]:
        """Read the shard's documents and cut passages, or load them from ``split.parquet`` when resuming."""
        split_path = directory / "split.parquet"
        counts_path = directory / "split_stats.json"
        if split_path.is_file() and counts_path.is_file():
            return _load_split(split_path), json.loads(counts_path.read_text())
        splitter = self.splitter()
        skipped: Counter[str] = Counter()
        repairs: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        documents: list[_ShardDocument] = []
        text_fields: Counter[str] = Counter()
        records = iter_corpus(
            self.corpus,
            text_field=self.config.resolved_text_field,
            id_field=self.config.id_field,
            split=self.config.split,
            skip_unreadable=self.config.skip_unreadable,
            skipped=skipped,
            fallback_text_field=self.config.fallback_text_field,
        )
        with _progress(self.progress) as progress:
            task = progress.add_task(f"shard {shard_index}: reading", total=None)
            for record in records:
                if record.ordinal % self.config.num_shards != shard_index:
                    continue
                progress.advance(task)
                counts["documents"] += 1
                if record.repair:
                    repairs[record.repair] += 1
                if record.skip or record.text is None:
                    skipped[record.skip or "missing_text_field"] += 1
                    continue
                if record.text_field is not None:
                    text_fields[record.text_field] += 1
                text = record.text
                if self.config.html:
                    text = extract_main_text(text, record.origin)
                    if text is None:
                        skipped["html_no_main_text"] += 1
                        continue
                split = splitter.split(text)
                counts["duplicate_passages_removed"] += split.duplicates_removed
                if split.truncated:
                    counts["documents_truncated"] += 1
                    counts["characters_over_cap"] += split.characters_over_cap
                if not split.passages:
                    skipped["empty"] += 1
                    continue
                if len(split.passages) < MIN_PASSAGES:
                    skipped["single_passage"] += 1
                counts["passages"] += len(split.passages)
                documents.append(
                    _ShardDocument(record.ordinal, record.doc_id, record.origin, split.passages, split.token_counts)
                )
        result: dict[str, Any] = dict(counts)
        result["skipped"] = dict(skipped)
        result["repairs"] = dict(repairs)
        result["text_fields"] = dict(text_fields)
        result["documents_with_passages"] = len(documents)
        _atomic_write_parquet(split_path, _split_table(documents))
        _atomic_write_text(counts_path, json.dumps(result, indent=2, sort_keys=True))
        return documents, result

    def _mine_chunk(
        self,
        chunk_index: int,
        documents: list[_ShardDocument],
        scorer: TfidfScorer,
        directory: Path,
        progress: Any,
        task: Any,
    ) -> None:
        """Encode one chunk, score every passage of every document, and write ``chunk-CCCCC/`` atomically."""
        rows: dict[str, list[Any]] = {name: [] for name in _PASSAGE_SCHEMA.names}
        encode_seconds = 0.0
        # Encode a few thousand passages per call: sentence-transformers sorts each call by length.
        for start, stop in _slices(documents, max(self.config.batch_size * 16, 1)):
            batch_docs = documents[start:stop]
            scored = [d for d in batch_docs if len(d.passages) >= MIN_PASSAGES and self.config.encodes]
            flat = [p for d in scored for p in d.passages]
            tick = time.perf_counter()
            vectors = self.encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
            encode_seconds += time.perf_counter() - tick
            tfidf = scorer.transform(flat) if flat else None
            offset = 0
            rankings: dict[int, tuple[np.ndarray, list[Any]]] = {}
            for doc in scored:
                n = len(doc.passages)
                doc_tfidf = tfidf_cosine(tfidf[offset : offset + n])
                rankings[doc.label] = rank_all_passages(
                    vectors[offset : offset + n], doc_tfidf, self.config.top_k, self.config.rank_by
                )
                offset += n
            for doc in batch_docs:
                scores, ranked = rankings.get(doc.label, (None, []))
                for i, text in enumerate(doc.passages):
                    ranking = ranked[i] if ranked else None
                    rows["label"].append(doc.label)
                    rows["doc_id"].append(doc.doc_id)
                    rows["origin"].append(doc.origin)
                    rows["passage_index"].append(i)
                    rows["text"].append(text)
                    rows["n_tokens"].append(doc.token_counts[i])
                    rows["centrality"].append(float(scores[i]) if scores is not None else float("nan"))
                    rows["related"].append(ranking.related if ranking else [])
                    rows["embedding_scores"].append(ranking.embedding_scores if ranking else [])
                    rows["tfidf_scores"].append(ranking.tfidf_scores if ranking else [])
                    rows["fused_scores"].append(ranking.fused_scores if ranking else [])
            progress.advance(task, len(batch_docs))
        self._write_chunk(directory, chunk_index, pa.table(rows, schema=_PASSAGE_SCHEMA), encode_seconds)

    def _write_chunk(self, directory: Path, chunk_index: int, table: pa.Table, encode_seconds: float) -> None:
        final = directory / f"chunk-{chunk_index:05d}"
        tmp = directory / f"chunk-{chunk_index:05d}.tmp-{os.getpid()}"
        tmp.mkdir(parents=True)
        pq.write_table(table, tmp / PASSAGES_FILE)
        (tmp / STATS_FILE).write_text(json.dumps({"encode_seconds": encode_seconds}))
        os.replace(tmp, final)

    # ---------------------------------------------------------------- stage 2
    def merge(self) -> dict[str, Any]:
        """Build the dataset, side files and ``stats.json`` from the complete shards; see :func:`merge`."""
        return merge(self.output_dir, self.config, progress=self.progress)


def check_output_dir(output_dir: Path) -> None:
    """Raise :class:`MiningOutputError` when ``output_dir`` cannot be a folder this process writes into."""
    problem = output_folder_problem(output_dir, "--output")
    if problem is not None:
        raise MiningOutputError(problem)


def clear_mining_output(output_dir: Path) -> None:
    """Delete a mining run stored in ``output_dir`` (``--overwrite``): only the files mining writes, never others."""
    if not output_dir.is_dir():
        return
    logger.warning("--overwrite: deleting the mining run stored in %s", output_dir)
    for name in ("shards", *(p.name for p in output_dir.glob(".dataset.tmp-*"))):
        if (output_dir / name).is_dir():
            shutil.rmtree(output_dir / name)
    for name in (CONFIG_FILE, STATS_FILE, META_FILE, PASSAGES_FILE, REPORT_FILE, "state.json", "dataset_info.json"):
        (output_dir / name).unlink(missing_ok=True)
    for path in output_dir.glob("data-*.arrow"):
        path.unlink()


def _slices(documents: list[_ShardDocument], passages_per_call: int) -> list[tuple[int, int]]:
    slices, start, total = [], 0, 0
    for i, doc in enumerate(documents):
        total += len(doc.passages)
        if total >= passages_per_call:
            slices.append((start, i + 1))
            start, total = i + 1, 0
    if start < len(documents):
        slices.append((start, len(documents)))
    return slices


_PASSAGE_SCHEMA = pa.schema(
    [
        ("label", pa.int64()),
        ("doc_id", pa.string()),
        ("origin", pa.string()),
        ("passage_index", pa.int32()),
        ("text", pa.string()),
        ("n_tokens", pa.int32()),
        ("centrality", pa.float64()),
        ("related", pa.list_(pa.int32())),
        ("embedding_scores", pa.list_(pa.float64())),
        ("tfidf_scores", pa.list_(pa.float64())),
        ("fused_scores", pa.list_(pa.float64())),
    ]
)


def _split_table(documents: list[_ShardDocument]) -> pa.Table:
    return pa.table(
        {
            "label": [d.label for d in documents],
            "doc_id": [d.doc_id for d in documents],
            "origin": [d.origin for d in documents],
            "passages": [d.passages for d in documents],
            "token_counts": [d.token_counts for d in documents],
        },
        schema=pa.schema(
            [
                ("label", pa.int64()),
                ("doc_id", pa.string()),
                ("origin", pa.string()),
                ("passages", pa.list_(pa.string())),
                ("token_counts", pa.list_(pa.int32())),
            ]
        ),
    )


def _load_split(path: Path) -> list[_ShardDocument]:
    table = pq.read_table(path).to_pydict()
    return [
        _ShardDocument(label, doc_id, origin, passages, counts)
        for label, doc_id, origin, passages, counts in zip(
            table["label"], table["doc_id"], table["origin"], table["passages"], table["token_counts"], strict=True
        )
    ]


# -------------------------------------------------------------------- merge
def related_columns(top_k: int) -> list[str]:
    """``positive, related_2, ..., related_{top_k}`` (the column contract of :mod:`xprt_st.columns` for k = 4)."""
    return ["positive", *[f"related_{i}" for i in range(2, top_k + 1)]]


def load_passages(output_dir: str | Path, num_shards: int | None = None) -> pa.Table:
    """All stored passages of the complete shards of ``output_dir``, in shard and chunk order."""
    output_dir = Path(output_dir)
    settings = json.loads((output_dir / CONFIG_FILE).read_text()) if (output_dir / CONFIG_FILE).is_file() else {}
    num_shards = num_shards or settings.get("num_shards")
    if not num_shards:
        raise MiningError(f"{output_dir} holds no mining run ({CONFIG_FILE} is missing); run xprt-st mine first")
    tables = []
    for shard in range(num_shards):
        directory = output_dir / "shards" / f"shard-{shard:05d}-of-{num_shards:05d}"
        if not (directory / COMPLETE).is_file():
            raise MiningError(
                f"shard {shard} of {num_shards} in {output_dir} is not complete; run "
                f"xprt-st mine ... --num-shards {num_shards} --shard-index {shard} first (it resumes)"
            )
        for chunk in sorted(directory.glob("chunk-[0-9][0-9][0-9][0-9][0-9]")):
            tables.append(pq.read_table(chunk / PASSAGES_FILE, schema=_PASSAGE_SCHEMA))
    return pa.concat_tables(tables) if tables else _PASSAGE_SCHEMA.empty_table()


def effective_threshold(centralities: np.ndarray, config: MiningConfig) -> float | None:
    """The fixed threshold, or the quantile of the finite ``centralities``; None when there is none to take."""
    quantile = config.anchor_quantile
    if quantile is None:
        return float(config.threshold) if config.threshold is not None else None
    finite = centralities[np.isfinite(centralities)]
    return float(np.quantile(finite, quantile)) if len(finite) else None


def merge(output_dir: str | Path, config: MiningConfig | None = None, progress: bool = True) -> dict[str, Any]:
    """Turn the stored passage scores into the training dataset, the side files and ``stats.json``.

    ``stats.json`` figures (the paper's on 100K FineWeb documents in brackets):

    - ``documents``: input records read, skipped ones included;
    - ``documents_with_groups`` and ``document_coverage = documents_with_groups / documents`` [99%];
    - ``groups``; ``groups_per_document = groups / documents_with_groups`` [7.0];
      ``groups_per_input_document = groups / documents``;
    - ``passages``: passages of all documents after de-duplication and the per-document cap;
    - ``passage_coverage``: passages that appear in at least one group, as anchor or as one of the
      ``top_k`` related passages, over ``passages`` [68%] (padding repeats are counted once);
    - ``anchors``, ``threshold`` (the effective value; None when a quantile was asked of a corpus where
      no passage was scored), ``threshold_source``, centrality quantiles, ``skipped`` by reason,
      ``repairs``, ``text_fields`` (documents read from each field), and ``settings``.

    Raises:
        NoGroupsError: after writing everything, when no group was formed; the message names the
            cause: the dominant skip reason and its fix when no document could be scored, else the
            effective threshold and how to lower it.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise MiningError(f"{output_dir} is not a folder written by xprt-st mine; give the --output of a mining run")
    stored = json.loads((output_dir / CONFIG_FILE).read_text()) if (output_dir / CONFIG_FILE).is_file() else None
    if stored is None:
        raise MiningError(f"{output_dir} holds no mining run ({CONFIG_FILE} is missing); run xprt-st mine first")
    if config is None:
        fields = {f.name for f in dataclasses.fields(MiningConfig)}
        config = MiningConfig(**{k: v for k, v in stored.items() if k in fields})
    num_shards = int(stored["num_shards"])
    if config.pairs == "mined" and not stored.get("encodes", True):
        raise MiningConfigError(
            f"{output_dir} was mined with pairs='random-span' (nothing encoded); mined groups need a new run"
        )
    top_k = int(stored["top_k"])
    table = load_passages(output_dir, num_shards)
    counts = _merged_shard_counts(output_dir, num_shards)
    columns = table.to_pydict()
    labels = np.asarray(columns["label"], dtype=np.int64)
    centralities = np.asarray(columns["centrality"], dtype=np.float64)
    threshold = effective_threshold(centralities, config)

    # Row ranges of each document (rows are stored grouped by document, in passage order).
    boundaries = np.flatnonzero(np.diff(labels)) + 1 if len(labels) else np.array([], dtype=np.int64)
    starts = np.concatenate([[0], boundaries]).astype(np.int64) if len(labels) else np.array([], dtype=np.int64)
    stops = np.concatenate([boundaries, [len(labels)]]).astype(np.int64) if len(labels) else starts

    group_rows: dict[str, list[Any]] = {name: [] for name in [ANCHOR, *related_columns(top_k)]}
    group_rows[LABEL] = []
    meta_lines: list[str] = []
    is_anchor = np.zeros(len(labels), dtype=bool)
    in_group = np.zeros(len(labels), dtype=bool)
    documents_with_groups = 0
    padded_groups = 0
    texts = columns["text"]
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        n = stop - start
        label = int(labels[start])
        doc_id = columns["doc_id"][start]
        if n < MIN_PASSAGES:
            continue
        rng = document_rng(config.seed, label)
        groups: list[tuple[list[str], dict[str, Any]]] = []
        if config.pairs == "random-span":
            count = span_group_count(centralities[start:stop], threshold)  # as many as mined anchors, if scored
            for spans in random_spans(texts[start:stop], top_k, rng, num_groups=count):
                groups.append((spans, {"label": label, "doc_id": doc_id, "kind": "random-span"}))
        else:
            for i in range(n):
                row = start + i
                if threshold is None or not centralities[row] >= threshold:
                    continue
                if config.positive == "random":
                    related = random_related(i, n, top_k, rng)
                    scores: dict[str, Any] = {}
                else:
                    related = list(columns["related"][row])
                    scores = {
                        "embedding_scores": columns["embedding_scores"][row],
                        "tfidf_scores": columns["tfidf_scores"][row],
                        "fused_scores": columns["fused_scores"][row],
                    }
                is_anchor[row] = True
                in_group[row] = True
                in_group[[start + j for j in related]] = True
                padded = related + [related[-1]] * (top_k - len(related))
                padded_groups += len(related) < top_k
                meta = {
                    "label": label,
                    "doc_id": doc_id,
                    "anchor_index": i,
                    "related_indices": related,
                    "num_related": len(related),
                    "centrality": float(centralities[row]),
                    **scores,
                }
                groups.append(([texts[row], *[texts[start + j] for j in padded]], meta))
        if groups:
            documents_with_groups += 1
        for texts_of_group, meta in groups:
            for name, text in zip([ANCHOR, *related_columns(top_k)], texts_of_group, strict=True):
                group_rows[name].append(text)
            group_rows[LABEL].append(label)
            meta_lines.append(json.dumps(meta, ensure_ascii=False))

    stats = _stats(
        counts=counts,
        config=config,
        stored=stored,
        threshold=threshold,
        centralities=centralities,
        groups=len(group_rows[LABEL]),
        documents_with_groups=documents_with_groups,
        passages=len(labels),
        anchors=int(is_anchor.sum()),
        covered=int(in_group.sum()),
        padded_groups=padded_groups,
    )
    _write_dataset(output_dir, group_rows, top_k)
    _atomic_write_text(output_dir / META_FILE, "".join(line + "\n" for line in meta_lines))
    side = table.select(["label", "doc_id", "passage_index", "text", "n_tokens", "centrality"])
    side = side.append_column("is_anchor", pa.array(is_anchor)).append_column("in_group", pa.array(in_group))
    _atomic_write_parquet(output_dir / PASSAGES_FILE, side)
    _atomic_write_text(output_dir / STATS_FILE, json.dumps(stats, indent=2, sort_keys=True))
    scored = sum(1 for start, stop in zip(starts.tolist(), stops.tolist(), strict=True) if stop - start >= MIN_PASSAGES)
    skips = _skip_diagnosis(stats, scored, stored)
    if stats["groups"] == 0:
        if scored == 0 or threshold is None or config.pairs != "mined":
            cause = skips or f"no document had the {MIN_PASSAGES} passages a group needs."
            raise NoGroupsError(f"no groups in {output_dir}: {cause} stats.json is written.")
        quantiles = stats.get("centrality_quantiles") or {}
        raise NoGroupsError(
            f"no passage reached the centrality threshold {threshold:.4f} ({stats['threshold_source']}) in "
            f"{output_dir} (centrality quantiles {quantiles}; {stats['passages']} passages of {scored} scored "
            f"documents). The threshold depends on the model and corpus: re-merge without re-encoding with "
            f"`xprt-st mine --merge {output_dir} --threshold-quantile 0.5` (anchors: the more central half of the "
            "passages) or a lower --threshold. "
            + (f"Also, {skips[0].lower()}{skips[1:]} " if skips else "")
            + "stats.json is written."
        )
    if skips is not None:
        logger.warning("%s", skips)
    return stats


SKIP_FIXES = {
    "invalid_json": "lines that are not JSON objects: give UTF-8 JSON Lines (a UTF-16 or binary file reads as "
    "nothing but such lines; re-encode it, e.g. `iconv -f UTF-16 -t UTF-8`)",
    "missing_text_field": "records without the text field: pass --text-field with the field that holds the text",
    "text_not_a_string": "records whose text field is not a string: pass --text-field with the field that holds "
    "the text",
    "empty": "documents with no text: check --text-field (and --html)",
    "single_passage": "documents of a single passage, while a group needs 2 passages of one document: give longer "
    "documents, or cut shorter passages with a lower --max-tokens and --min-tokens",
    "html_no_main_text": "pages where trafilatura found no main text: drop --html when the input is plain text",
    "unreadable_source": "sources that could not be read (logged above): fix or remove them",
}
"""Each ``stats.json`` skip reason, said in words with its fix (the diagnosis when nothing survives)."""


def _skip_diagnosis(stats: dict[str, Any], scored: int, stored: dict[str, Any]) -> str | None:
    """A sentence naming the dominant skip reason and its fix when (almost) no document could be scored.

    "Almost": fewer than 1 in 10 of the documents read had the 2 passages that scoring needs. None
    when enough documents were scored, so a problem that remains is the threshold's.
    """
    documents = stats["documents"]
    if documents and scored * 10 >= documents:
        return None
    if documents == 0:
        inputs = _describe_inputs(stored.get(INPUTS_KEY, []))
        return f"the input held no document (read from {inputs}): are the files empty?"
    skipped = {reason: count for reason, count in stats.get("skipped", {}).items() if count}
    if not skipped:
        return None
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(skipped.items(), key=lambda kv: -kv[1]))
    dominant = max(skipped, key=lambda reason: skipped[reason])
    fix = SKIP_FIXES.get(dominant, dominant)
    return (
        f"{scored} of {documents} documents had passages to score; skipped by reason: {reasons}. Most skips are {fix}."
    )


def _describe_inputs(identity: list[dict[str, Any]]) -> str:
    """The inputs of a stored identity in a few words: up to 3 paths or dataset names, then a count."""
    names = [entry.get("path") or f"dataset {entry.get('dataset')}" for entry in identity]
    if not names:
        return "(no input recorded)"
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more files" if len(names) > 3 else "")


def _merged_shard_counts(output_dir: Path, num_shards: int) -> dict[str, Any]:
    total: Counter[str] = Counter()
    by_key: dict[str, Counter[str]] = {"skipped": Counter(), "repairs": Counter(), "text_fields": Counter()}
    encode_seconds = 0.0
    for shard in range(num_shards):
        path = output_dir / "shards" / f"shard-{shard:05d}-of-{num_shards:05d}" / COMPLETE
        counts = json.loads(path.read_text())
        for key, counter in by_key.items():
            counter.update(counts.pop(key, {}))
        encode_seconds += float(counts.pop("encode_seconds", 0.0))
        total.update({k: v for k, v in counts.items() if isinstance(v, int)})
    merged = {key: dict(counter) for key, counter in by_key.items()}
    return {**total, **merged, "encode_seconds": round(encode_seconds, 3)}


def _stats(
    *,
    counts: dict[str, Any],
    config: MiningConfig,
    stored: dict[str, Any],
    threshold: float | None,
    centralities: np.ndarray,
    groups: int,
    documents_with_groups: int,
    passages: int,
    anchors: int,
    covered: int,
    padded_groups: int,
) -> dict[str, Any]:
    documents = int(counts.get("documents", 0))
    finite = centralities[np.isfinite(centralities)]
    quantiles = (
        {f"q{int(q * 100)}": round(float(np.quantile(finite, q)), 4) for q in (0.1, 0.5, 0.9)} if len(finite) else {}
    )
    merge_settings = {name: getattr(config, name) for name in MiningConfig.MERGE_FIELDS}
    return {
        "documents": documents,
        "documents_with_passages": int(counts.get("documents_with_passages", 0)),
        "documents_with_groups": documents_with_groups,
        "document_coverage": round(documents_with_groups / documents, 4) if documents else 0.0,
        "groups": groups,
        "groups_per_document": round(groups / documents_with_groups, 3) if documents_with_groups else 0.0,
        "groups_per_input_document": round(groups / documents, 3) if documents else 0.0,
        "passages": passages,
        "anchors": anchors if config.pairs == "mined" else None,
        "passage_coverage": round(covered / passages, 4) if passages and config.pairs == "mined" else None,
        "groups_with_padded_related": padded_groups,
        "threshold": round(threshold, 6) if config.pairs == "mined" and threshold is not None else None,
        "threshold_source": _threshold_source(config, threshold),
        "centrality_quantiles": quantiles,
        "duplicate_passages_removed": int(counts.get("duplicate_passages_removed", 0)),
        "documents_truncated": int(counts.get("documents_truncated", 0)),
        "characters_over_cap": int(counts.get("characters_over_cap", 0)),
        "skipped": counts.get("skipped", {}),
        "repairs": counts.get("repairs", {}),
        "text_fields": counts.get("text_fields", {}),
        "encode_seconds": counts.get("encode_seconds", 0.0),
        "settings": {**{k: v for k, v in stored.items() if k != INPUTS_KEY}, **merge_settings},
    }


def _threshold_source(config: MiningConfig, threshold: float | None) -> str | None:
    """How the threshold was set; says so when a quantile had no centralities to be taken of."""
    if config.pairs != "mined":
        return None
    if threshold is None and config.anchor_quantile is not None:
        return f"{config.threshold_source}: none, no passage was scored"
    return config.threshold_source


def _write_dataset(output_dir: Path, rows: dict[str, list[Any]], top_k: int) -> None:
    """Save the groups with ``save_to_disk`` into a temporary folder, then move the files into ``output_dir``."""
    import datasets

    features = datasets.Features(
        {name: datasets.Value("string") for name in [ANCHOR, *related_columns(top_k)]}
        | {LABEL: datasets.Value("int64")}
    )
    dataset = datasets.Dataset.from_dict(rows, features=features)
    tmp = output_dir / f".dataset.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    was_enabled = not datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()
    try:
        # An empty dataset needs one explicit shard, else datasets writes no arrow file and cannot load it.
        dataset.save_to_disk(str(tmp), num_shards=1 if len(dataset) == 0 else None)
    finally:
        if was_enabled:
            datasets.utils.enable_progress_bars()
    for old in output_dir.glob("data-*.arrow"):
        old.unlink()
    moved = sorted(tmp.iterdir(), key=lambda p: p.name == "state.json")  # state.json last: it lists the files
    for path in moved:
        os.replace(path, output_dir / path.name)
    tmp.rmdir()


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _atomic_write_parquet(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    # Small row groups let a Ray worker read one chunk's rows of a big split file without the rest.
    pq.write_table(table, tmp, row_group_size=SPLIT_ROW_GROUP)
    os.replace(tmp, path)


def _cuda_device_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a CPU-only or broken CUDA install counts as no GPU
        return 0


class _NullProgress:
    def __enter__(self) -> _NullProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, task: Any, advance: float = 1) -> None:
        return None

    def __bool__(self) -> bool:
        return False


def _progress(enabled: bool) -> Any:
    """A rich progress bar with documents/s and ETA, or a silent stand-in."""
    if not enabled:
        return _NullProgress()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class _Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:.1f} docs/s" if speed else "- docs/s", style="progress.data.speed")

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )


SUMMARY_KEYS = (
    "documents",
    "documents_with_groups",
    "document_coverage",
    "groups",
    "groups_per_document",
    "passages",
    "anchors",
    "passage_coverage",
    "threshold",
    "threshold_source",
    "groups_with_padded_related",
    "duplicate_passages_removed",
    "documents_truncated",
    "characters_over_cap",
)
"""The ``stats.json`` figures a mining summary shows, in order (the CLI table and the HTML report)."""


def summary_table(stats: dict[str, Any]) -> Any:
    """The ``stats.json`` figures next to the paper's, as a rich table (the CLI prints it)."""
    from rich.table import Table

    table = Table(title="xPRT mining summary")
    table.add_column("figure")
    table.add_column("this run", justify="right")
    table.add_column("paper (100K FineWeb, E5)", justify="right")
    paper = {"document_coverage": "99%", "groups_per_document": "7.0", "passage_coverage": "68%"}
    percent = {"document_coverage", "passage_coverage"}
    for key in SUMMARY_KEYS:
        value = stats.get(key)
        shown = "-" if value is None else (f"{value:.1%}" if key in percent else str(value))
        table.add_row(key, shown, paper.get(key, ""))
    for reason, count in sorted((stats.get("skipped") or {}).items()):
        table.add_row(f"skipped: {reason}", str(count), "")
    for repair, count in sorted((stats.get("repairs") or {}).items()):
        table.add_row(f"repaired: {repair}", str(count), "")
    for name, count in sorted((stats.get("text_fields") or {}).items()):
        table.add_row(f"text read from field: {name}", str(count), "")
    return table


def mine(corpus: Sequence[str | Path] | str | Path, output_dir: str | Path, **settings: Any) -> dict[str, Any]:
    """Mine ``corpus`` into ``output_dir`` in this process (all shards, then the merge); returns the stats.

    ``settings`` are :class:`MiningConfig` fields plus ``model`` as a loaded SentenceTransformer or a
    name, ``progress`` and ``overwrite`` (see :class:`GroupBuilder`). The defaults are the CLI's:
    anchors above the median centrality of the corpus unless ``threshold`` or ``threshold_quantile``
    is given (``threshold=0.825`` is the paper's). ``engine="ray"`` (with ``num_workers`` and
    ``ray_address``) runs on a Ray cluster instead (:class:`~xprt_st.mining.ray_engine.RayEngine`),
    with the same output.
    """
    if isinstance(corpus, str | Path):
        corpus = [corpus]
    progress = settings.pop("progress", True)
    overwrite = settings.pop("overwrite", False)
    model = settings.pop("model", None)
    engine = settings.pop("engine", "local")
    ray_settings = {"num_workers": settings.pop("num_workers", None), "address": settings.pop("ray_address", None)}
    if model is not None and not isinstance(model, str | Path):
        config = MiningConfig(**settings)
    else:
        config, model = MiningConfig(model=None if model is None else str(model), **settings), None
    if engine == "ray":
        from xprt_st.mining.ray_engine import RayEngine

        engine_run = RayEngine(
            corpus, output_dir, config, model=model, progress=progress, overwrite=overwrite, **ray_settings
        )
        return engine_run.run()
    if engine != "local":
        raise MiningConfigError(f"engine={engine!r} is not one of ['local', 'ray']")
    builder = GroupBuilder(corpus, output_dir, config, model=model, progress=progress, overwrite=overwrite)
    result = builder.run()
    assert isinstance(result, dict)
    return result
