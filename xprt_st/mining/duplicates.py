"""Counting exact duplicate texts and ids of the corpus in a bounded memory (64-bit hashes, open addressing)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.mining.records import RawRecord

logger = logging.getLogger(__name__)


class DuplicateCounter:
    """Counts records whose text, or id, equals an earlier record's, in a memory that does not grow with the corpus.

    Each text and id is reduced to a 64-bit BLAKE2b hash kept in an open-addressing table of at most
    :data:`DUPLICATE_TABLE_SLOTS` slots (8 bytes each: 16 MiB per table, 32 MiB for both). Up to about 1.4
    million distinct texts (and ids) are remembered, so duplicates are counted exactly in a corpus of that
    size (a 64-bit hash collision among 1.4 million texts has a chance of about 1e-7); past it, later
    records are still checked against the remembered ones but not added, and the warning says so.
    Duplicates are counted, not dropped: the groups of two copies of a document become in-batch false
    negatives for each other, which the user should know about and may want to fix at the source.
    """

    def __init__(self, max_slots: int | None = None) -> None:
        slots = max_slots or DUPLICATE_TABLE_SLOTS
        self._texts = _Hash64Set(slots)
        self._ids = _Hash64Set(slots)
        self.documents = 0
        self.ids = 0
        self._examples: list[str] = []

    def add(self, record: RawRecord) -> None:
        """Check ``record`` (which has a text) against the earlier ones, mark it if it repeats one, remember it."""
        if self._texts.add(_hash64(record.text or "")):
            record.repeats_text = True
            self.documents += 1
            self._example(f"{record.origin} repeats an earlier document's text")
        if self._ids.add(_hash64(record.doc_id)):
            record.repeats_id = True
            self.ids += 1
            self._example(f"{record.origin} repeats the id {record.doc_id!r}")

    def _example(self, line: str) -> None:
        if len(self._examples) < 3:
            self._examples.append(line)

    @property
    def saturated(self) -> bool:
        """Whether a table is full, so records past that point were checked but not remembered."""
        return self._texts.full or self._ids.full

    def report(self) -> None:
        """Log one warning when duplicates were found."""
        if not (self.documents or self.ids):
            return
        bound = (
            f" (duplicates were looked for among the first {len(self._texts):,} distinct texts only)"
            if self.saturated
            else ""
        )
        logger.warning(
            "%d document(s) repeat an earlier document's exact text and %d repeat an earlier id%s, e.g. %s. They "
            "are kept; copies of one document in a batch are false negatives for each other, so remove them at "
            "the source if they are not meant.",
            self.documents,
            self.ids,
            bound,
            "; ".join(self._examples),
        )


DUPLICATE_TABLE_SLOTS = 1 << 21
"""Slots of each :class:`DuplicateCounter` table (8 bytes each); it stops growing at 70% load."""


def _hash64(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1  # 0 marks an empty slot


class _Hash64Set:
    """A set of non-zero 64-bit integers in a numpy table with linear probing; grows to ``max_slots`` slots."""

    def __init__(self, max_slots: int) -> None:
        self._table = np.zeros(min(4096, max_slots), dtype=np.uint64)
        self._size = 0
        self._max_slots = max_slots
        self.full = False

    def __len__(self) -> int:
        return self._size

    def add(self, value: int) -> bool:
        """Insert ``value``; True when it was already present."""
        table = self._table
        mask = len(table) - 1
        slot = value & mask
        while True:
            held = int(table[slot])
            if held == 0:
                break
            if held == value:
                return True
            slot = (slot + 1) & mask
        if self.full:
            return False
        table[slot] = value
        self._size += 1
        if 10 * self._size > 7 * len(table):
            if 2 * len(table) <= self._max_slots:
                self._grow()
            else:
                self.full = True
        return False

    def _grow(self) -> None:
        held = self._table[self._table != 0]
        self._table = np.zeros(2 * len(self._table), dtype=np.uint64)
        self._size = 0
        for value in held.tolist():
            self.add(value)


def heldout_contamination(passages_file: str | Path, max_examples: int = 3) -> dict[str, Any]:
    """Held-out documents and passages whose exact text is also in the training part, under another id.

    Read from a merged folder's ``passages.parquet`` (one row a passage, documents contiguous, with ``held_out``).
    A document's text is taken as its passages in order; two copies of one document, or one passage shared by
    two documents, held out on one side and trained on the other, make the label-free score partly a score
    on training text. The held-out side is kept in memory (hashes), the training side is streamed.

    Returns:
        ``{"documents": n, "passages": m, "examples": ["<held-out id> = <training id>", ...]}``.
    """
    import pyarrow.dataset as ds

    parquet = ds.dataset(str(passages_file), format="parquet")  # a file, or a folder of one part per chunk
    if "held_out" not in parquet.schema.names:
        return {"documents": 0, "passages": 0, "examples": []}

    def documents(held: bool) -> Iterator[tuple[str, int, list[int]]]:
        """(doc id, document hash, passage hashes) of each document on one side."""
        current: tuple[int, str] | None = None
        passages: list[int] = []
        for batch in parquet.to_batches(columns=["label", "doc_id", "text", "held_out"], batch_size=4096):
            rows = batch.to_pydict()
            columns = (rows["label"], rows["doc_id"], rows["text"], rows["held_out"])
            for label, doc_id, text, flag in zip(*columns, strict=True):
                if bool(flag) != held:
                    continue
                if current is not None and label != current[0]:
                    yield current[1], _hash64("\x00".join(map(str, passages))), passages
                    passages = []
                if not passages:
                    current = (label, str(doc_id))
                passages.append(_hash64(text or ""))
        if current is not None and passages:
            yield current[1], _hash64("\x00".join(map(str, passages))), passages

    held_documents: dict[int, list[str]] = {}
    held_passages: dict[int, int] = {}
    for doc_id, document, passages in documents(held=True):
        held_documents.setdefault(document, []).append(doc_id)
        for passage in passages:
            held_passages[passage] = held_passages.get(passage, 0) + 1
    if not held_documents:
        return {"documents": 0, "passages": 0, "examples": []}
    hit_documents: dict[int, str] = {}
    hit_passages: set[int] = set()
    for doc_id, document, passages in documents(held=False):
        if document in held_documents and document not in hit_documents:
            hit_documents[document] = doc_id
        hit_passages.update(passage for passage in passages if passage in held_passages)
    examples = [
        f"{held_documents[document][0]} = {doc_id}" for document, doc_id in list(hit_documents.items())[:max_examples]
    ]
    return {
        "documents": sum(len(held_documents[document]) for document in hit_documents),
        "passages": sum(held_passages[passage] for passage in hit_passages),
        "examples": examples,
    }
