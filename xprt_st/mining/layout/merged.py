"""The merged output: the parts each merge task writes into the staging folder, and their move into place."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

from xprt_st.mining.layout.folder import DATASET_INFO, DATASET_STATE, atomic_write_text


def part_name(shard: int, chunk: int) -> str:
    """The name stem of a merged output part: one per stored chunk, the same in every engine."""
    return f"{shard:05d}-{chunk:05d}"


class MergedParts:
    """The files one merge part (a stored chunk) writes into the staging folder; any process may write them."""

    GROUPS = "groups"
    HELDOUT_GROUPS = "heldout-groups"
    HELDOUT_PASSAGES = "heldout-passages"
    HELDOUT_TITLES = "heldout-titles"

    def __init__(self, staging: Path, name: str) -> None:
        self.staging = staging
        self.name = name

    def arrow(self, kind: str) -> Path:
        return self.staging / kind / f"data-{self.name}.arrow"

    @property
    def meta(self) -> Path:
        return self.staging / "meta" / f"{self.name}.jsonl"

    @property
    def passages(self) -> Path:
        return self.staging / "passages" / f"part-{self.name}.parquet"

    def make_folders(self) -> None:
        held = (self.HELDOUT_GROUPS, self.HELDOUT_PASSAGES, self.HELDOUT_TITLES)
        for folder in (self.GROUPS, *held, "meta", "passages"):
            (self.staging / folder).mkdir(parents=True, exist_ok=True)


def write_arrow(path: Path, table: pa.Table, features: Any) -> None:
    """An Arrow stream file as ``datasets`` writes it (schema with the features' metadata)."""
    from datasets.arrow_writer import ArrowWriter

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    writer = ArrowWriter(features=features, path=str(tmp))
    try:
        writer.write_table(table)
        writer.finalize()
    finally:
        writer.close()
    os.replace(tmp, path)


def _dataset_state(files: list[str], features: Any) -> tuple[str, str]:
    fingerprint = hashlib.sha256("\n".join(files).encode()).hexdigest()[:16]
    state = {
        "_data_files": [{"filename": name} for name in files],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    info = {"citation": "", "description": "", "features": features.to_dict(), "homepage": "", "license": ""}
    return json.dumps(state, indent=2, sort_keys=True), json.dumps(info, indent=2)


def publish_dataset(staged: Path, folder: Path, features: Any) -> None:
    """Move the Arrow files of ``staged`` into ``folder`` as a ``datasets.load_from_disk`` folder.

    Old ``data-*.arrow`` files of ``folder`` not among the new ones are removed; ``state.json``, which
    lists the files, is written last. A folder with no group still gets one (empty) Arrow file, since
    ``datasets`` cannot load a folder without one.
    """
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(path.name for path in staged.glob("data-*.arrow"))
    if not files:
        write_arrow(staged / "data-empty.arrow", features.arrow_schema.empty_table(), features)
        files = ["data-empty.arrow"]
    (folder / DATASET_STATE).unlink(missing_ok=True)  # while files move, the folder is not a dataset
    for old in folder.glob("data-*.arrow"):
        if old.name not in files:
            old.unlink()
    for name in files:
        os.replace(staged / name, folder / name)
    state, info = _dataset_state(files, features)
    atomic_write_text(folder / DATASET_INFO, info)
    atomic_write_text(folder / DATASET_STATE, state)


def publish_passages(staged: Path, folder: Path) -> None:
    """Replace ``folder`` (``passages.parquet``: a Parquet part per chunk, or an older single file)."""
    if folder.is_file():
        folder.unlink()
    old = folder.with_name(f"{folder.name}.old-{os.getpid()}")
    if folder.is_dir():
        os.replace(folder, old)
    os.replace(staged, folder)
    if old.is_dir():
        shutil.rmtree(old)


def concatenate_text(parts: list[Path], path: Path) -> None:
    """Concatenate text files into ``path`` (streamed, atomically)."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as handle:
                shutil.copyfileobj(handle, out)
    os.replace(tmp, path)


def replace_columns(folder: Path, dataset: Any, prefix: str, columns: dict[str, list[str]]) -> None:
    """Write ``dataset`` (the folder's groups) back into ``folder`` with its ``prefix*`` columns replaced by
    ``columns`` (name -> one text per group, in order): how a pass after the merge adds its columns (the hard
    negatives, the lexical candidates), staged and moved into place as a merge publishes its groups."""
    dataset = dataset.remove_columns([name for name in dataset.column_names if name.startswith(prefix)])
    for name, values in columns.items():
        dataset = dataset.add_column(name, values)
    features = dataset.features
    staging = folder / f".{prefix.strip('_')}.tmp"
    if staging.exists():  # left by a pass that was killed while it wrote
        shutil.rmtree(staging)
    try:
        dataset.save_to_disk(str(staging))
    except OSError as error:  # a full disk while staging: the folder's groups are as they were
        del dataset
        shutil.rmtree(staging, ignore_errors=True)
        from xprt_st.mining.write_failure import raise_write_failure

        raise_write_failure(folder, error, f"the {prefix}* columns")
        raise
    del dataset
    publish_dataset(staging, folder, features)
    shutil.rmtree(staging)
