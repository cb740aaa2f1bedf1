"""A split stage's folder: ``split.parquet`` (streamed row group by row group), its counts, its frequencies."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xprt_st.mining.stages import (
    SPLIT_SCHEMA,
    Document,
    anchors_column,
    anchors_of,
    headings_column,
    links_column,
    links_of,
    sections_of,
)

DF_FILE = "document_frequencies.npz"
SPLIT_FILE = "split.parquet"
SPLIT_STATS_FILE = "split_stats.json"
SPLIT_ROW_GROUP = 1024
"""Rows (documents) per Parquet row group of split files: a Ray worker reads one chunk's rows alone."""


def _atomic_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _token_id_column(documents: Sequence[Document]) -> pa.Array:
    """Each document's token ids as one list (null without them), built from the arrays, not Python ints."""
    lengths = np.array([0 if d.token_ids is None else len(d.token_ids) for d in documents], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    present = [d.token_ids for d in documents if d.token_ids is not None]
    values = np.concatenate(present).astype(np.int32) if present else np.zeros(0, dtype=np.int32)
    missing = pa.array([d.token_ids is None for d in documents], type=pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values), mask=missing)


def split_table(documents: Sequence[Document]) -> pa.Table:
    """The split stage's documents as one Arrow table: a row per document with its passages, token counts and ids."""
    return pa.table(
        {
            "label": [d.label for d in documents],
            "doc_id": [d.doc_id for d in documents],
            "origin": [d.origin for d in documents],
            "passages": [d.passages for d in documents],
            "token_counts": [d.token_counts for d in documents],
            "token_ids": _token_id_column(documents),
            "headings": headings_column(documents),
            "links": links_column(documents),
            "anchors": anchors_column(documents),
        },
        schema=SPLIT_SCHEMA,
    )


def _token_ids_of(table: pa.Table) -> list[np.ndarray | None]:
    """The ``token_ids`` column as arrays (None per null row; all None for a split file written without it)."""
    if "token_ids" not in table.column_names:
        return [None] * table.num_rows
    column = table.column("token_ids").combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # an empty table keeps zero chunks
        return [None] * table.num_rows
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return [values[offsets[i] : offsets[i + 1]] if valid[i] else None for i in range(len(column))]


def documents_of(table: pa.Table, label_offset: int = 0) -> list[Document]:
    """The documents of (part of) a split file, labels shifted by ``label_offset``."""
    columns = table.select(["label", "doc_id", "origin", "passages", "token_counts"]).to_pydict()
    # a split file written before headings (or links) were kept has no such column: its documents have none
    headings, links, anchors = (
        table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
        for name in ("headings", "links", "anchors")
    )
    return [
        Document(
            label + label_offset,
            doc_id,
            origin,
            passages,
            counts,
            ids,
            sections_of(marks),
            links_of(targets),
            anchors_of(names),
        )
        for label, doc_id, origin, passages, counts, ids, marks, targets, names in zip(
            columns["label"],
            columns["doc_id"],
            columns["origin"],
            columns["passages"],
            columns["token_counts"],
            _token_ids_of(table),
            headings,
            links,
            anchors,
            strict=True,
        )
    ]


def read_split_rows(path: Path, start: int, stop: int) -> pa.Table:
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
    return parquet.read_row_groups(groups).slice(start - first, stop - start)


class SplitFolder:
    """A folder holding one split stage's output: a shard's, or one Ray input unit's."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def done(self, with_frequencies: bool) -> bool:
        names = [SPLIT_FILE, SPLIT_STATS_FILE] + ([DF_FILE] if with_frequencies else [])
        return all((self.directory / name).is_file() for name in names)

    @property
    def split_path(self) -> Path:
        return self.directory / SPLIT_FILE

    @property
    def frequencies_path(self) -> Path:
        return self.directory / DF_FILE

    def has_split(self) -> bool:
        return self.split_path.is_file() and (self.directory / SPLIT_STATS_FILE).is_file()

    def split_writer(self) -> SplitWriter:
        """A writer of the split file, row group by row group; :meth:`SplitWriter.finish` puts it in place."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return SplitWriter(self)

    def read_documents(self, start: int = 0, stop: int | None = None) -> list[Document]:
        """Documents ``start:stop`` of the split file (all by default), reading only their row groups."""
        if stop is None:
            return documents_of(pq.read_table(self.split_path))
        return documents_of(read_split_rows(self.split_path, start, stop))

    def split_counts(self) -> dict[str, Any]:
        return json.loads((self.directory / SPLIT_STATS_FILE).read_text())


class SplitWriter:
    """Streams documents into a split file under a temporary name; nothing is in place before :meth:`finish`."""

    def __init__(self, folder: SplitFolder) -> None:
        self.folder = folder
        self._tmp = folder.split_path.with_name(f"{SPLIT_FILE}.tmp-{os.getpid()}")
        self._writer = pq.ParquetWriter(self._tmp, SPLIT_SCHEMA)

    def write(self, documents: Sequence[Document]) -> None:
        if documents:
            self._writer.write_table(split_table(documents), row_group_size=SPLIT_ROW_GROUP)

    def finish(self, counts: dict[str, Any]) -> None:
        self._writer.close()
        os.replace(self._tmp, self.folder.split_path)
        _atomic_json(self.folder.directory / SPLIT_STATS_FILE, counts)  # last: it marks the split done

    def abort(self) -> None:
        self._writer.close()
        self._tmp.unlink(missing_ok=True)
