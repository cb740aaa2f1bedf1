"""The mining output folder: the names of its files, the run manifest, the shards and their chunks.

Every file is written under a temporary name and renamed into place; a shard's ``COMPLETE`` marker,
a dataset's ``state.json`` and the run's ``stats.json`` are written last, so whatever a killed run
leaves is either whole or ignored (and its temporary files are removed by the next run).

::

    DIR/                          datasets.load_from_disk(DIR): anchor, positive, related_2..related_k, label
    DIR/data-SSSSS-CCCCC.arrow    the training groups, one Arrow file per chunk (memory-mapped by datasets)
    DIR/state.json, dataset_info.json
    DIR/stats.json                figures of the run, settings, skips by reason
    DIR/groups_meta.jsonl         one line per training group: doc id, passage indices, centrality, scores
    DIR/passages.parquet/         every passage, one Parquet part per chunk: label, doc id, index, text,
                                  centrality, is_anchor, in_group, held_out (``pyarrow.parquet.read_table``)
    DIR/heldout/groups/           with --holdout: the held-out documents' groups (a datasets folder)
    DIR/heldout/passages/         with --holdout: every passage of the held-out documents (a datasets folder)
    DIR/heldout/titles/           with --holdout, when the held-out documents have any: their titles and headings,
                                  each with the passages it covers (a datasets folder)
    DIR/embeddings.npy            the passages' vectors from mining's encoder in passages.parquet's row order (NaN
                                  rows: not encoded), with DIR/embeddings.json (encoder identity, text hash); reused
                                  by the hard-negative pass (:mod:`xprt_st.mining.layout.embeddings`)
    DIR/mining_config.json        the run manifest: settings that shaped the scores and the input's identity
    DIR/.xprt-mine-run.lock       while a run writes: its pid, host and start (``.xprt-mine-shard-IIIII.lock``
                                  for a shard job)
    DIR/shards/shard-SSSSS-of-NNNNN/{split.parquet, split_stats.json, document_frequencies.npz,
                                     chunk-CCCCC/{passages.parquet, stats.json,
                                     embeddings.npy, embeddings.json}, COMPLETE}
    DIR/shards/ray-units/unit-UUUUU/{split.parquet, split_stats.json, document_frequencies.npz}
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from xprt_st.encode_backend import CACHE_DIR
from xprt_st.mining.config import (
    MiningConfigError,
    MiningError,
    MiningInputError,
    MiningOutputError,
    stored_model_name,
)
from xprt_st.mining.layout.embeddings import EMBEDDINGS_FILE, EMBEDDINGS_RECORD
from xprt_st.mining.layout.split import DF_FILE, SPLIT_FILE, SPLIT_ROW_GROUP, SPLIT_STATS_FILE, SplitFolder
from xprt_st.mining.layout.unfinished import MERGE_UNFINISHED, unfinished_problem
from xprt_st.mining.reader import input_differences, input_identity
from xprt_st.mining.stages import PASSAGE_SCHEMA
from xprt_st.mining.tfidf import TfidfScorer
from xprt_st.output_folder import remove_path
from xprt_st.paths import output_folder_problem

logger = logging.getLogger(__name__)

__all__ = [
    "CHUNK_PATTERN",
    "COMPLETE",
    "CONFIG_FILE",
    "DATASET_INFO",
    "DATASET_STATE",
    "DF_FILE",
    "HELDOUT_DIR",
    "HELDOUT_GROUPS",
    "HELDOUT_PASSAGES",
    "HELDOUT_TITLES",
    "INPUTS_KEY",
    "LOCK_PREFIX",
    "LOG_FILE",
    "MERGE_TMP",
    "MERGE_UNFINISHED",
    "META_FILE",
    "OWNED_NAMES",
    "PASSAGES_FILE",
    "REPORT_FILE",
    "SHARDS_DIR",
    "SPLIT_FILE",
    "SPLIT_ROW_GROUP",
    "SPLIT_STATS_FILE",
    "STATS_FILE",
    "STRUCTURE_DIR",
    "STRUCTURE_MIXED_DIR",
    "UNITS_DIR",
    "MiningLayout",
    "atomic_write_json",
    "atomic_write_parquet",
    "atomic_write_text",
    "describe_inputs",
    "link_stored_run",
    "load_heldout",
    "load_passages",
    "remove_temporary",
    "unfinished_problem",
]

COMPLETE = "COMPLETE"
STATS_FILE = "stats.json"
CONFIG_FILE = "mining_config.json"
META_FILE = "groups_meta.jsonl"
PASSAGES_FILE = "passages.parquet"
REPORT_FILE = "report.html"
SHARDS_DIR = "shards"
UNITS_DIR = Path(SHARDS_DIR, "ray-units")
"""Under ``shards/``, so whatever clears the shards clears the Ray engine's units too."""
HELDOUT_DIR = "heldout"
HELDOUT_GROUPS = Path(HELDOUT_DIR, "groups")
"""The held-out anchors' groups (``--holdout``), a datasets folder beside the training groups."""
HELDOUT_PASSAGES = Path(HELDOUT_DIR, "passages")
"""Every passage of every held-out document, a datasets folder."""
HELDOUT_TITLES = Path(HELDOUT_DIR, "titles")
"""The held-out documents' titles and section headings (``label``, ``kind``, ``level``, ``text``, ``passages``:
the indices of the passages it covers), a datasets folder; absent when none was found."""
STRUCTURE_DIR = "structure"
"""The structure groups (``--structure``, :mod:`xprt_st.mining.structure`), a mined folder of its own."""
STRUCTURE_MIXED_DIR = "structure-mixed"
"""The mined groups mixed with the structure groups (``--structure-mix``), a mined folder of its own."""
MERGE_TMP = ".merge.tmp"
LOCK_PREFIX = ".xprt-mine-"
LOG_FILE = "xprt-st.log"
"""The log the CLI writes into the folder it runs in (``xprt_st.cli.common``); mining's to keep."""
DATASET_STATE = "state.json"
DATASET_INFO = "dataset_info.json"
INPUTS_KEY = "inputs"
"""Key of ``mining_config.json`` that holds the input identity (:func:`~xprt_st.mining.reader.input_identity`)."""
OWNED_NAMES = (
    CONFIG_FILE,
    STATS_FILE,
    MERGE_UNFINISHED,
    META_FILE,
    PASSAGES_FILE,
    REPORT_FILE,
    DATASET_STATE,
    DATASET_INFO,
    HELDOUT_DIR,
    STRUCTURE_DIR,
    STRUCTURE_MIXED_DIR,
    LOG_FILE,
    EMBEDDINGS_FILE,
    EMBEDDINGS_RECORD,
    CACHE_DIR,
)
"""Top-level names mining writes (with ``data-*.arrow``, temporary folders, locks and ``shards/`` parts);
``.onnx-cache`` holds the exports of ``--encode-backend onnx|openvino``."""
CHUNK_PATTERN = "chunk-[0-9][0-9][0-9][0-9][0-9]"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def atomic_write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented, key-sorted JSON to ``path`` atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True))


def atomic_write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` through a temporary file and a rename, so a reader never sees half a file."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, row_group_size=SPLIT_ROW_GROUP)
    os.replace(tmp, path)


def remove_temporary(directory: Path) -> None:
    """Delete what killed writers left in ``directory`` (names with ``.tmp``); call when no writer runs there."""
    for stale in directory.glob("*.tmp*"):
        remove_path(stale)


class MiningLayout:
    """The files of one mining output folder (see the module docstring)."""

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)

    # ------------------------------------------------------------ the run manifest
    @property
    def config_path(self) -> Path:
        return self.output_dir / CONFIG_FILE

    def stored_settings(self) -> dict[str, Any] | None:
        return json.loads(self.config_path.read_text()) if self.config_path.is_file() else None

    def require_run(self) -> dict[str, Any]:
        """The stored settings; :class:`MiningError` when the folder holds no mining run."""
        if not self.output_dir.is_dir():
            raise MiningError(
                f"{self.output_dir} is not a folder written by xprt-st mine; give the --output of a mining run"
            )
        stored = self.stored_settings()
        if stored is None:
            raise MiningError(
                f"{self.output_dir} holds no mining run ({CONFIG_FILE} is missing); run xprt-st mine first"
            )
        return stored

    def check_writable(self) -> None:
        problem = output_folder_problem(self.output_dir, "--output")
        if problem is not None:
            raise MiningOutputError(problem)

    def changed_settings(self, settings: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """The stage settings (:meth:`MiningConfig.stage_settings`) that differ from the stored run's, each as
        ``(stored, now)``; empty without a stored run."""
        stored = self.stored_settings()
        if stored is None:
            return {}
        if "model" in stored:  # a run recorded before the default's spellings were made one
            stored = {**stored, "model": stored_model_name(stored["model"])}
        return {k: (stored.get(k), v) for k, v in settings.items() if stored.get(k) != v}

    def check_or_record_run(self, settings: dict[str, Any], corpus: Sequence[str | Path], split: str) -> None:
        """Record the run's settings and input identity, or check them against the stored run (a resume)."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        stored = self.stored_settings()
        if stored is None:
            atomic_write_json(self.config_path, {**settings, INPUTS_KEY: input_identity(corpus, split)})
            return
        changed = self.changed_settings(settings)
        if changed:
            details = ", ".join(f"{k}: stored {a!r}, now {b!r}" for k, (a, b) in changed.items())
            reason = f"{self.output_dir} holds a run mined with other settings ({details})."
            raise MiningConfigError(
                f"{reason} Resume with the same settings, change only merge settings (threshold, quantile, positive, "
                "pairs, seed, holdout) with --merge, choose a new --output, or pass --overwrite to delete the stored "
                "run and mine again.",
                reason=reason,
            )
        if INPUTS_KEY not in stored:
            # A run stored before inputs were recorded: record them now so later resumes are checked.
            logger.warning("%s records no input identity (an older run); recording the current input", self.config_path)
            atomic_write_json(self.config_path, {**stored, INPUTS_KEY: input_identity(corpus, split)})
            return
        differences = input_differences(stored[INPUTS_KEY], corpus, split)
        if differences:
            shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
            reason = (
                f"{self.output_dir} holds a run mined from other input, so its groups are not those of the input "
                f"given now. Mined from: {describe_inputs(stored[INPUTS_KEY])}. Given now: "
                f"{', '.join(str(c) for c in corpus)}. Differences: {shown}."
            )
            raise MiningInputError(
                f"{reason} Mine into a new --output folder, or pass --overwrite to delete the stored run and mine "
                "this input.",
                reason=reason,
            )

    def owned(self) -> list[Path]:
        """Every path of this folder that mining writes (the manifest of what ``--overwrite`` deletes).

        Under ``shards/`` only the shard and Ray unit folders are mining's; anything else a user put
        there (or beside the mining files) is not listed, so it is never deleted.
        """
        root = self.output_dir
        if not root.is_dir():
            return []
        patterns = [*OWNED_NAMES, "data-*.arrow", f"{MERGE_TMP}*", ".dataset.tmp-*", f"{LOCK_PREFIX}*.lock"]
        found = {path for pattern in patterns for path in root.glob(pattern)}
        shards = root / SHARDS_DIR
        if shards.is_symlink():  # a view of another run's shards (link_stored_run): the link is ours, not its target
            found.add(shards)
        elif shards.is_dir():
            found |= {shards / UNITS_DIR.name} if (shards / UNITS_DIR.name).exists() else set()
            found |= set(shards.glob("shard-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"))
        return sorted(found)

    def foreign(self) -> list[str]:
        """Names in this folder that mining did not write (shown relative to the folder)."""
        if not self.output_dir.is_dir():
            return []
        owned = set(self.owned())
        names = []
        for path in sorted(self.output_dir.iterdir()):
            if path.name == SHARDS_DIR and path.is_dir() and path not in owned:
                names += [f"{SHARDS_DIR}/{p.name}" for p in sorted(path.iterdir()) if p not in owned]
            elif path not in owned and path.name != SHARDS_DIR:
                names.append(path.name)
        return names

    def check_not_foreign(self) -> None:
        """Refuse to start a run in a folder that holds no mining run but holds other files (the user's)."""
        if self.stored_settings() is not None:
            return
        if not self.output_dir.is_dir():
            return
        foreign = []  # without a run's manifest nothing here is mining's but the command's own log, lock and export
        for path in sorted(self.output_dir.iterdir()):  # (the model loads, and exports, before the run is recorded)
            if path.name in (LOG_FILE, CACHE_DIR) or (path.name.startswith(LOCK_PREFIX) and path.suffix == ".lock"):
                continue
            if path.name == SHARDS_DIR and path.is_dir() and not path.is_symlink() and any(path.iterdir()):
                foreign += [f"{SHARDS_DIR}/{p.name}" for p in sorted(path.iterdir())]
            else:
                foreign.append(path.name)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise MiningOutputError(
                f"--output {self.output_dir} holds files that xprt-st mine did not write ({shown}), and mining "
                "would write stats.json, state.json and shards/ beside or over them. Choose an empty or new "
                "--output folder, or move those files out first."
            )

    def clear(self) -> None:
        """Delete a mining run stored here (``--overwrite``): only what :meth:`owned` lists, never other files, and
        never through a symlink (a linked ``shards/`` is unlinked; the run it points to is kept)."""
        owned = self.owned()
        if not owned:
            return
        logger.warning("--overwrite: deleting the mining run stored in %s", self.output_dir)
        for path in owned:
            if path.name in (LOG_FILE, CACHE_DIR) or path.name.startswith(LOCK_PREFIX):
                continue  # the running command's own log and lock; exports keyed by their weights stay valid
            remove_path(path)
        shards = self.output_dir / SHARDS_DIR
        if shards.is_dir() and not shards.is_symlink() and not any(shards.iterdir()):
            shards.rmdir()

    def lock(self, scope: str = "run") -> Any:
        """The lock of this folder (``scope="run"``) or of one shard job's part of it (``"shard-IIIII"``)."""
        from xprt_st.mining.layout.lock import FolderLock

        what = self.output_dir if scope == "run" else f"{scope} of {self.output_dir}"
        return FolderLock(self.output_dir / f"{LOCK_PREFIX}{scope}.lock", f"the mining folder {what}")

    # ------------------------------------------------------------ shards and chunks
    def shard_dir(self, shard_index: int, num_shards: int) -> Path:
        return self.output_dir / SHARDS_DIR / f"shard-{shard_index:05d}-of-{num_shards:05d}"

    def shard_split(self, shard_index: int, num_shards: int) -> SplitFolder:
        return SplitFolder(self.shard_dir(shard_index, num_shards))

    def unit_split(self, unit: int) -> SplitFolder:
        return SplitFolder(self.output_dir / UNITS_DIR / f"unit-{unit:05d}")

    def corpus_frequencies(self, num_shards: int) -> TfidfScorer:
        """The corpus's hashed document frequencies (a ``TfidfScorer``): every shard's counts summed, or, after a
        Ray run, every unit's; what mining scored with."""
        files = [self.shard_split(i, num_shards).frequencies_path for i in range(num_shards)]
        if not all(path.is_file() for path in files):
            files = sorted((self.output_dir / UNITS_DIR).glob(f"unit-*/{DF_FILE}"))
        if not files:
            raise FileNotFoundError(f"{self.output_dir} holds no document frequencies: mine it with an encoder first")
        scorer = TfidfScorer()
        for path in files:
            scorer.update(TfidfScorer.load(path))
        return scorer

    def shard_complete(self, shard_index: int, num_shards: int) -> bool:
        return (self.shard_dir(shard_index, num_shards) / COMPLETE).is_file()

    def shard_counts(self, shard_index: int, num_shards: int) -> dict[str, Any]:
        return json.loads((self.shard_dir(shard_index, num_shards) / COMPLETE).read_text())

    def mark_shard_complete(self, shard_index: int, num_shards: int, counts: dict[str, Any]) -> None:
        atomic_write_json(self.shard_dir(shard_index, num_shards) / COMPLETE, counts)

    def chunk_dir(self, shard_index: int, num_shards: int, chunk: int) -> Path:
        return self.shard_dir(shard_index, num_shards) / f"chunk-{chunk:05d}"

    def chunk_done(self, shard_index: int, num_shards: int, chunk: int) -> bool:
        return self.chunk_dir(shard_index, num_shards, chunk).is_dir()

    def write_chunk(
        self,
        shard_index: int,
        num_shards: int,
        chunk: int,
        table: pa.Table,
        counts: dict,
        embeddings: tuple[Any, dict[str, Any]] | None = None,
    ) -> None:
        """Write a scored chunk into a temporary folder and rename it into place (the chunk's marker).

        ``embeddings``: the rows' vectors and their encoder's identity, kept for the later stages
        (:mod:`xprt_st.mining.layout.embeddings`)."""
        final = self.chunk_dir(shard_index, num_shards, chunk)
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        tmp.mkdir(parents=True)
        pq.write_table(table, tmp / PASSAGES_FILE)
        if embeddings is not None:
            from xprt_st.mining.layout.embeddings import write_chunk_embeddings

            write_chunk_embeddings(tmp, *embeddings)
        (tmp / STATS_FILE).write_text(json.dumps(counts))
        os.replace(tmp, final)

    def chunk_counts(self, shard_index: int, num_shards: int, chunk: int) -> dict[str, Any]:
        return json.loads((self.chunk_dir(shard_index, num_shards, chunk) / STATS_FILE).read_text())

    def chunks(self, num_shards: int) -> list[tuple[int, int]]:
        """``(shard, chunk)`` of every stored chunk of the complete shards, in shard and chunk order."""
        found = []
        for shard in range(num_shards):
            directory = self.shard_dir(shard, num_shards)
            if not (directory / COMPLETE).is_file():
                raise MiningError(
                    f"shard {shard} of {num_shards} in {self.output_dir} is not complete; run "
                    f"xprt-st mine ... --num-shards {num_shards} --shard-index {shard} first (it resumes)"
                )
            found += [(shard, int(path.name[-5:])) for path in sorted(directory.glob(CHUNK_PATTERN))]
        return found

    def stored_chunks(self) -> int:
        """How many scored chunks are stored (in any shard): the work a rerun resumes from."""
        return len(list((self.output_dir / SHARDS_DIR).glob(f"shard-*/{CHUNK_PATTERN}")))

    def read_chunk(self, shard: int, num_shards: int, chunk: int, columns: list[str] | None = None) -> pa.Table:
        path = self.chunk_dir(shard, num_shards, chunk) / PASSAGES_FILE
        schema = PASSAGE_SCHEMA if columns is None else pa.schema([PASSAGE_SCHEMA.field(c) for c in columns])
        return pq.read_table(path, columns=columns, schema=schema)

    def chunk_dirs(self, num_shards: int) -> list[Path]:
        """The folder of every stored chunk of the complete shards, in shard and chunk order."""
        return [self.chunk_dir(shard, num_shards, chunk) for shard, chunk in self.chunks(num_shards)]

    def iter_passages(self, num_shards: int, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The stored passages chunk by chunk (bounded memory), in shard and chunk order."""
        for shard, chunk in self.chunks(num_shards):
            yield self.read_chunk(shard, num_shards, chunk, columns)

    def centralities(self, num_shards: int) -> Iterator[Any]:
        """The stored centrality column, chunk by chunk (numpy float64 arrays)."""
        for table in self.iter_passages(num_shards, ["centrality"]):
            yield table.column("centrality").to_numpy()

    # ------------------------------------------------------------ the merged output
    def merge_staging(self) -> Path:
        return self.output_dir / f"{MERGE_TMP}-{os.getpid()}"

    def remove_stale_merges(self) -> None:
        for path in self.output_dir.glob(f"{MERGE_TMP}*"):
            remove_path(path)
        for path in self.output_dir.glob(".dataset.tmp-*"):  # left by older versions' merges
            remove_path(path)

    def write_stats(self, stats: dict[str, Any]) -> None:
        atomic_write_json(self.output_dir / STATS_FILE, stats)


def link_stored_run(source: str | Path, target: str | Path) -> dict[str, Any]:
    """Make ``target`` a second view of ``source``'s stored run, to merge with other options without encoding.

    The shards are linked (not copied) and the run record copied; returns that record (``mining_config.json``).
    """
    source, target = Path(source), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    link = target / SHARDS_DIR
    if not link.exists():
        link.symlink_to((source / SHARDS_DIR).resolve(), target_is_directory=True)
    shutil.copyfile(source / CONFIG_FILE, target / CONFIG_FILE)
    return json.loads((source / CONFIG_FILE).read_text(encoding="utf-8"))


def load_heldout(folder: str | Path) -> tuple[Any, Any] | None:
    """The held-out part of a mined folder: ``(groups, passages)`` datasets, or None without one.

    ``groups`` has the training columns (anchor, positive, related_2..related_k, label) plus
    ``anchor_index`` (int64) and ``related_index`` (list of int64, ranked, best first): passage
    indices within the document. ``passages`` has ``label`` (int64, the groups' document label),
    ``passage`` (int64, index within the document) and ``text``: every passage of every held-out
    document, anchor or not.
    """
    import datasets

    unfinished_problem(Path(folder))
    groups, passages = Path(folder) / HELDOUT_GROUPS, Path(folder) / HELDOUT_PASSAGES
    if not (groups / DATASET_STATE).is_file() or not (passages / DATASET_STATE).is_file():
        return None
    return datasets.load_from_disk(str(groups)), datasets.load_from_disk(str(passages))


def load_passages(output_dir: str | Path, num_shards: int | None = None) -> pa.Table:
    """All stored passages of the complete shards of ``output_dir``, in shard and chunk order, in memory.

    For a corpus too large for that, read them chunk by chunk with :meth:`MiningLayout.iter_passages`.
    """
    layout = MiningLayout(output_dir)
    if num_shards is None:
        num_shards = int(layout.require_run()["num_shards"])
    tables = list(layout.iter_passages(num_shards))
    return pa.concat_tables(tables) if tables else PASSAGE_SCHEMA.empty_table()


def describe_inputs(identity: list[dict[str, Any]]) -> str:
    """The inputs of a stored identity in a few words: up to 3 paths or dataset names, then a count."""
    names = [entry.get("path") or f"dataset {entry.get('dataset')}" for entry in identity]
    if not names:
        return "(no input recorded)"
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more files" if len(names) > 3 else "")
