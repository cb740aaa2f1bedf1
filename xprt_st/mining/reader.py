"""Corpus input: JSONL / JSONL.gz / Parquet files, folders or zips of .txt files, datasets, and HTML extraction.

Every source is read in a fixed order (files sorted by path, records in file order), and each record
gets an ``ordinal``: its position in the whole input. Sharding takes ``ordinal % num_shards ==
shard_index``, so any job that reads the same inputs picks the same documents.

Accepted sources (several may be given; a folder is searched recursively):

- ``*.jsonl``, ``*.jsonl.gz``, ``*.json.gz``: one JSON object a line; ``text_field`` holds the text,
  the optional ``id_field`` the document id (default ``"<file>:<line>"``);
- ``*.parquet``: one row a document, same fields;
- ``*.txt`` files and ``*.zip`` archives of ``.txt`` files (e.g. the BBC News zip): one document a file,
  id = the path of the file (inside the zip); the first line (headline) is kept as a block;
- a folder written by ``datasets.Dataset.save_to_disk``, or a Hugging Face dataset name (``split``).

Bytes that are not UTF-8 (one BBC article is latin-1) are decoded as cp1252/latin-1 and counted under
``repairs.decoded_latin1``; they are not a reason to drop a document. Per-record problems (a line that
is not JSON, a missing or non-string text field) are counted skips with the file and line logged; a
source that cannot be read at all, or whose first record lacks the text field, raises an error that
names the file and says how to fix it.

A record that is valid JSON but cannot be read as text (a lone surrogate such as ``"\\ud800"``, which is
not Unicode text, or nesting deeper than the JSON reader's recursion limit) stops the run with its file
and line named, or is skipped and counted as ``unreadable_record`` with ``--skip-unreadable``. A ``.txt``
file or zip member is read as a stream and stops at :data:`DEFAULT_MAX_DOCUMENT_CHARS` characters, so a
small zip holding a huge member costs a few MB, not the member's size (the bytes left unread are on the
record, :attr:`RawRecord.bytes_not_read`). :func:`check_sources` refuses a text field that holds raw HTML
when ``--html`` is not given, and :func:`iter_corpus` counts exact duplicate texts and ids with a bounded
memory (:class:`DuplicateCounter`).
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import logging
import re
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

logger = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
TEXT_SUFFIXES = (".txt",)
ZIP_SUFFIXES = (".zip",)
_MAX_LOGGED_SKIPS = 20
UNREADABLE_RECORD = "unreadable_record"
"""Skip reason (``stats.json``'s ``skipped``) of a record that is JSON but not readable text (``skip_unreadable``)."""
DEFAULT_MAX_DOCUMENT_CHARS = 1_000_000
"""Characters read from one ``.txt`` file or zip member; the rest is not read. About three times the prefix the
passage splitter tokenises with its default settings (256 passages x 128 tokens x 10 characters), so a document
cut here is still counted as truncated by the splitter."""
MARKUP_SAMPLE = 20
"""Records of each source whose text is checked for HTML markup when ``--html`` is not given."""
MARKUP_SHARE = 0.5
"""Share of the sampled records that must look like markup for the source to be refused."""


class CorpusError(ValueError):
    """Base class of the corpus reading errors; the message names the source and the fix."""


class CorpusReadError(CorpusError):
    """A source is missing, unreadable or corrupt."""


class CorpusColumnError(CorpusError):
    """A source does not have the expected text (or id) field."""


class CorpusRecordError(CorpusReadError):
    """One record cannot be read as text; the message names its file and line (``--skip-unreadable`` counts it)."""


class CorpusMarkupError(CorpusError):
    """The text field holds raw HTML while ``--html`` was not given."""


@dataclass(slots=True)
class RawRecord:
    """One input document before passage splitting.

    ``text`` is None when the record is unusable; ``skip`` then says why (a key of ``stats.json``'s
    ``skipped``). ``origin`` is ``"<file>:<line>"`` (or the zip member) for error messages;
    ``text_field`` is the field the text was read from (None for .txt files and zips). ``problem`` says
    why a record skipped as :data:`UNREADABLE_RECORD` cannot be read; ``bytes_not_read`` counts the bytes
    of a ``.txt`` file or zip member left unread past the character cap (0 when read whole).
    """

    ordinal: int
    doc_id: str
    text: str | None
    origin: str
    skip: str | None = None
    repair: str | None = None
    text_field: str | None = None
    problem: str | None = None
    bytes_not_read: int = 0


def decode_bytes(data: bytes) -> tuple[str, str | None]:
    """UTF-8 text of ``data``, falling back to cp1252 then latin-1; the second item names the repair."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "decoded_latin1"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "decoded_latin1"


def expand_sources(sources: Sequence[str | Path]) -> list[str | Path]:
    """Files (sorted, folders searched recursively) and dataset names, in a deterministic order.

    Raises:
        CorpusReadError: a path that does not exist and does not look like a dataset name, or a
            folder that holds no supported file.
    """
    expanded: list[str | Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
                expanded.append(path)
                continue
            files = sorted(p for p in path.rglob("*") if p.is_file() and _kind(p) is not None)
            if not files:
                raise CorpusReadError(
                    f"folder {path} holds no corpus file; expected *.jsonl, *.jsonl.gz, *.parquet, *.txt or *.zip"
                )
            expanded.extend(files)
        elif path.is_file():
            if _kind(path) is None:
                raise CorpusReadError(
                    f"{path}: unsupported file type; give *.jsonl, *.jsonl.gz, *.parquet, *.txt or *.zip"
                )
            expanded.append(path)
        elif _looks_like_dataset_name(str(source)):
            expanded.append(str(source))
        else:
            raise CorpusReadError(f"{source}: no such file or folder (and not a Hugging Face dataset name)")
    return expanded


def input_identity(sources: Sequence[str | Path], split: str = "train") -> list[dict[str, Any]]:
    """The identity of what :func:`iter_corpus` reads: one entry per input file, in reading order.

    A file is ``{"path", "size", "mtime_ns", "sha256"}`` (absolute path; a saved dataset folder
    contributes each of its files); a Hugging Face dataset name is ``{"dataset", "split"}``. The
    builder stores this next to the settings and refuses to resume on other input
    (:func:`input_differences`). Hashing reads every file once, a small cost next to encoding it.
    """
    identity: list[dict[str, Any]] = []
    for source in expand_sources(sources):
        if isinstance(source, str):
            identity.append({"dataset": source, "split": split})
            continue
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in files:
            stat = path.stat()
            identity.append(
                {
                    "path": str(path.resolve()),
                    "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns,
                    "sha256": _sha256(path),
                }
            )
    return identity


def input_differences(stored: list[dict[str, Any]], sources: Sequence[str | Path], split: str = "train") -> list[str]:
    """How ``sources`` differ from the ``stored`` :func:`input_identity`; empty when they are the same input.

    A file whose size and modification time are unchanged counts as unchanged without being read; a
    file whose time changed is hashed, so a file rewritten with the same bytes still matches.
    """
    current: list[dict[str, Any]] = []
    for source in expand_sources(sources):
        if isinstance(source, str):
            current.append({"dataset": source, "split": split})
        else:
            files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
            current.extend({"path": str(p.resolve()), "file": p} for p in files)
    names = [_input_name(entry) for entry in stored]
    now = [_input_name(entry) for entry in current]
    differences = [f"{name} is no longer an input" for name in names if name not in now]
    differences += [f"{name} is a new input" for name in now if name not in names]
    if differences:
        return differences
    if names != now:
        return ["the same inputs are given in another order (document labels follow the order)"]
    for old, new in zip(stored, current, strict=True):
        path = new.get("file")
        if path is None:
            continue
        stat = path.stat()
        if stat.st_size != old.get("size"):
            differences.append(f"{path}: {old.get('size')} bytes when mined, {stat.st_size} now")
        elif stat.st_mtime_ns != old.get("mtime_ns") and _sha256(path) != old.get("sha256"):
            differences.append(f"{path}: same size but other content (modified since it was mined)")
    return differences


def _input_name(entry: dict[str, Any]) -> str:
    return entry["path"] if "path" in entry else f"dataset {entry['dataset']} (split {entry['split']})"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _looks_like_dataset_name(name: str) -> bool:
    return "/" in name and not name.startswith((".", "/", "~")) and name.count("/") == 1 and "." not in name


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(TEXT_SUFFIXES):
        return "txt"
    if name.endswith(ZIP_SUFFIXES):
        return "zip"
    return None


def iter_corpus(
    sources: Sequence[str | Path],
    text_field: str = "text",
    id_field: str | None = None,
    split: str = "train",
    skip_unreadable: bool = False,
    skipped: Counter[str] | None = None,
    fallback_text_field: str | None = None,
    max_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    counts: Counter[str] | None = None,
) -> Iterator[RawRecord]:
    """Yield every input record, in a deterministic order, with its ordinal.

    Args:
        sources: files, folders or dataset names (see the module docstring).
        text_field: field with the document text (``"html"`` for raw pages).
        id_field: field with the document id; None uses ``"<file>:<line>"`` or the file name.
        split: split of a Hugging Face dataset.
        skip_unreadable: count a source that fails mid-way as ``skipped.unreadable_source``, and a record
            that cannot be read as text as ``skipped.unreadable_record`` (the record is yielded with that
            ``skip``), and go on, instead of raising :class:`CorpusReadError` / :class:`CorpusRecordError`.
        skipped: counter for sources skipped with ``skip_unreadable``.
        fallback_text_field: field read instead of ``text_field`` in a source that lacks ``text_field``
            (``--html`` reads ``html`` and falls back to ``text``); each record's ``text_field`` says which.
        max_chars: characters read from one ``.txt`` file or zip member (see :data:`DEFAULT_MAX_DOCUMENT_CHARS`).
        counts: receives ``duplicate_documents`` (records whose text equals an earlier record's) and
            ``duplicate_ids`` (records whose id equals an earlier record's); a warning reports both when the
            input has been read (see :class:`DuplicateCounter` for the memory bound).
    """
    ordinal = 0
    fields = _TextFields(text_field, fallback_text_field)
    duplicates = DuplicateCounter()
    for source in expand_sources(sources):
        try:
            for record in _iter_source(source, fields, id_field, split, ordinal, max_chars):
                if record.skip == UNREADABLE_RECORD and not skip_unreadable:
                    raise CorpusRecordError(
                        f"{record.origin}: {record.problem}. Fix or remove this record, or pass --skip-unreadable to "
                        "count it and go on."
                    )
                if record.text is not None:
                    duplicates.add(record)
                yield record
                ordinal = record.ordinal + 1
        except (CorpusColumnError, CorpusRecordError):
            raise
        except (OSError, EOFError, zipfile.BadZipFile, CorpusReadError, ValueError) as error:
            message = f"{source}: cannot read past record {ordinal}: {type(error).__name__}: {error}"
            if not skip_unreadable:
                raise CorpusReadError(
                    f"{message}. Fix or remove the file, or pass --skip-unreadable to count it and go on."
                ) from error
            logger.warning("%s; skipped (skip_unreadable)", message)
            if skipped is not None:
                skipped["unreadable_source"] += 1
    duplicates.report()
    if counts is not None:
        counts["duplicate_documents"] += duplicates.documents
        counts["duplicate_ids"] += duplicates.ids


def check_sources(
    sources: Sequence[str | Path],
    text_field: str = "text",
    id_field: str | None = None,
    split: str = "train",
    skip_unreadable: bool = False,
    fallback_text_field: str | None = None,
    html: bool | None = None,
) -> list[str | Path]:
    """Check every source before any work: it exists, opens, and its first record has the text field.

    Reads one record per source, so a wrong path, a corrupt file or a wrong ``--text-field`` fails
    in a second instead of after the model has loaded and the output folder was created. With
    ``skip_unreadable``, a source that cannot be read is left for :func:`iter_corpus` to count.
    With ``html=False`` (the run does not extract HTML), the first :data:`MARKUP_SAMPLE` records of each
    source are also read, and a source whose texts are mostly HTML markup is refused
    (:func:`check_not_markup`); ``html=None`` (a caller that does not say) skips that check.

    Returns:
        The expanded sources (see :func:`expand_sources`).

    Raises:
        CorpusReadError: a missing path, an unsupported or unreadable file.
        CorpusColumnError: a source whose first record lacks the text (or id) field.
        CorpusRecordError: a first record that cannot be read as text (without ``skip_unreadable``).
        CorpusMarkupError: with ``html=False``, a source whose text field holds raw HTML pages.
    """
    expanded = expand_sources(sources)
    fields = _TextFields(text_field, fallback_text_field)
    for source in expanded:
        records = _iter_source(source, fields, id_field, split, 0, DEFAULT_MAX_DOCUMENT_CHARS)
        try:
            first = next(records, None)
            if first is not None and first.skip == UNREADABLE_RECORD and not skip_unreadable:
                raise CorpusRecordError(
                    f"{first.origin}: {first.problem}. Fix or remove this record, or pass --skip-unreadable to "
                    "count it and go on."
                )
            if html is False and first is not None:
                sample = [first, *(record for _, record in zip(range(MARKUP_SAMPLE - 1), records, strict=False))]
                check_not_markup(sample, source)
        except (CorpusColumnError, CorpusRecordError, CorpusMarkupError):
            raise
        except (OSError, EOFError, zipfile.BadZipFile, CorpusReadError, ValueError) as error:
            if skip_unreadable:
                continue
            raise CorpusReadError(
                f"{source}: cannot be read: {type(error).__name__}: {error}. Fix or remove the file, or pass "
                "--skip-unreadable to count it and go on."
            ) from error
        finally:
            records.close()
    return expanded


_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:-]*(?:\s[^<>]*)?/?>")
_PAGE_START = ("<!doctype html", "<html", "<?xml")


def looks_like_markup(text: str) -> bool:
    """Whether ``text`` is an HTML (or XML) page rather than prose that may mention a tag.

    True when it starts like a page (``<!DOCTYPE html``, ``<html``), or holds at least 10 tags that take
    at least 10% of its characters. Raw web pages sit far above that (the Debian pages of the shared data:
    36 or more tags, 15% to 80% of the characters); a text that mentions ``<div>`` or quotes a snippet
    stays far below.
    """
    if text.lstrip()[:16].lower().startswith(_PAGE_START):
        return True
    tags = _TAG.findall(text)
    return len(tags) >= 10 and sum(map(len, tags)) >= 0.1 * len(text)


def check_not_markup(records: Sequence[RawRecord], source: str | Path) -> None:
    """Refuse ``source`` when most of its sampled ``records`` hold HTML markup (see :func:`looks_like_markup`).

    Mining markup as text makes groups of raw tags (``</th></tr><tr><td width="10%">``) and exits without
    a word, so this runs before any work when ``--html`` is not given.

    Raises:
        CorpusMarkupError: naming the source, the field, the share of records and the fix (``--html``).
    """
    texts = [(record, record.text) for record in records if record.text]
    markup = [(record, text) for record, text in texts if looks_like_markup(text)]
    if not texts or len(markup) < MARKUP_SHARE * len(texts):
        return
    record, text = markup[0]
    field = f"field {record.text_field!r}" if record.text_field else "text"
    example = " ".join(text.split())[:60]
    raise CorpusMarkupError(
        f"{source}: the {field} of {len(markup)} of its first {len(texts)} records is HTML markup (e.g. "
        f"{record.origin}: {example!r}); mined as text it would make groups of raw tags. Pass --html to extract "
        "the main text of each page, or --text-field with a field that holds plain text."
    )


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
        """Check ``record`` (which has a text) against the earlier ones and remember it."""
        if self._texts.add(_hash64(record.text or "")):
            self.documents += 1
            self._example(f"{record.origin} repeats an earlier document's text")
        if self._ids.add(_hash64(record.doc_id)):
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


@dataclass(slots=True)
class _TextFields:
    """The text field to read, and the one read instead in a source that lacks it."""

    preferred: str
    fallback: str | None = None

    def choose(self, names: Any, id_field: str | None, origin: str) -> str:
        """The field of a source with these field names; raises :class:`CorpusColumnError` naming the fields."""
        names = list(names)
        if self.preferred in names:
            chosen = self.preferred
        elif self.fallback is not None and self.fallback in names:
            chosen = self.fallback
            logger.info("%s: no %r field; reading the text from %r", origin, self.preferred, chosen)
        else:
            wanted = repr(self.preferred) + (f" (nor {self.fallback!r})" if self.fallback else "")
            raise CorpusColumnError(
                f"{origin}: no text field {wanted}; the fields are {names}. Pass --text-field with the field that "
                "holds the text (e.g. --text-field html --html for raw pages)."
            )
        if id_field and id_field not in names:
            raise CorpusColumnError(f"{origin}: no id field {id_field!r}; the fields are {names}. Fix --id-field.")
        return chosen


def _iter_source(
    source: str | Path, fields: _TextFields, id_field: str | None, split: str, start: int, max_chars: int
) -> Iterator[RawRecord]:
    if isinstance(source, str):
        yield from _iter_hf(source, fields, id_field, split, start)
        return
    kind = _kind(source)
    if kind == "jsonl":
        yield from _iter_jsonl(source, fields, id_field, start)
    elif kind == "parquet":
        yield from _iter_parquet(source, fields, id_field, start)
    elif kind == "txt":
        with source.open("rb") as handle:
            text, repair, unread = read_capped(handle, source.stat().st_size, max_chars, str(source))
        yield RawRecord(start, str(source), text, str(source), repair=repair, bytes_not_read=unread)
    elif kind == "zip":
        yield from _iter_zip(source, start, max_chars)
    else:
        yield from _iter_saved_dataset(source, fields, id_field, start)


def _iter_jsonl(path: Path, fields: _TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    ordinal = start
    text_field: str | None = None
    logged = 0
    with opener(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            origin = f"{path}:{line_number}"
            line, repair = decode_bytes(raw)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                record = RawRecord(ordinal, origin, None, origin, skip="invalid_json")
                logged = _log_skip(logged, f"{origin}: not a JSON object ({error.msg}); skipped")
            except RecursionError:
                problem = "the JSON is nested deeper than the reader's recursion limit, so the record cannot be read"
                record = RawRecord(ordinal, origin, None, origin, skip=UNREADABLE_RECORD, problem=problem)
                logged = _log_skip(logged, f"{origin}: {problem}; skipped")
            else:
                if not isinstance(obj, dict):
                    record = RawRecord(ordinal, origin, None, origin, skip="invalid_json")
                    logged = _log_skip(logged, f"{origin}: a JSON {type(obj).__name__}, not an object; skipped")
                else:
                    if text_field is None:
                        text_field = fields.choose(obj.keys(), id_field, origin)
                    record = _record_from_mapping(obj, text_field, id_field, ordinal, origin, repair)
                    if record.skip == UNREADABLE_RECORD:
                        logged = _log_skip(logged, f"{origin}: {record.problem}; skipped")
                    elif record.skip:
                        logged = _log_skip(logged, f"{origin}: {record.skip} ({text_field!r}); skipped")
            yield record
            ordinal += 1


def _iter_parquet(path: Path, fields: _TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid (a ValueError) or OSError subclasses
        raise CorpusReadError(f"{path}: not a readable Parquet file: {error}") from error
    text_field = fields.choose(parquet.schema_arrow.names, id_field, str(path))
    columns = [text_field] + ([id_field] if id_field else [])
    ordinal = start
    row = 0
    for batch in parquet.iter_batches(columns=columns, batch_size=1024):
        for obj in batch.to_pylist():
            row += 1
            yield _record_from_mapping(obj, text_field, id_field, ordinal, f"{path}:row {row}", None)
            ordinal += 1


def _iter_zip(path: Path, start: int, max_chars: int) -> Iterator[RawRecord]:
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.lower().endswith(".txt") and not Path(n).name.startswith("."))
        if not names:
            raise CorpusReadError(f"{path}: the zip holds no .txt file; zips are read as one document per .txt")
        for ordinal, name in enumerate(names, start=start):
            origin = f"{path}!{name}"
            with archive.open(name) as member:
                text, repair, unread = read_capped(member, archive.getinfo(name).file_size, max_chars, origin)
            yield RawRecord(ordinal, name, text, origin, repair=repair, bytes_not_read=unread)


_READ_BLOCK = 1 << 16


def read_capped(handle: IO[bytes], size: int, max_chars: int, origin: str = "") -> tuple[str, str | None, int]:
    """The text of the binary stream ``handle`` (``size`` bytes), read in blocks up to ``max_chars`` characters.

    At most ``4 * max_chars`` bytes (plus one block) are read, whatever ``size`` is: a 300 MB zip member costs a
    few MB. Decoding is UTF-8, falling back to cp1252/latin-1 for the whole read prefix as :func:`decode_bytes`
    does (a UTF-8 character cut by a block end is not mistaken for bad bytes).

    Returns:
        The text (at most ``max_chars`` characters), the repair (``"decoded_latin1"`` or None), and the bytes of
        the stream that were not read (0 when it was read whole). A cut is logged with ``origin``.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    blocks: list[bytes] = []
    pieces: list[str] = []
    chars = 0
    read = 0
    utf8 = True
    while chars <= max_chars:
        block = handle.read(_READ_BLOCK)
        if not block:
            break
        read += len(block)
        blocks.append(block)
        if utf8:
            try:
                piece = decoder.decode(block)
            except UnicodeDecodeError:
                utf8 = False
            else:
                pieces.append(piece)
                chars += len(piece)
                continue
        chars = read  # cp1252 and latin-1 are one character a byte
    text, repair = "", None
    if utf8:
        try:
            text = "".join(pieces) + decoder.decode(b"", final=read >= size)
        except UnicodeDecodeError:  # the stream ends inside a UTF-8 character
            utf8 = False
    if not utf8:
        text, repair = decode_bytes(b"".join(blocks))
    unread = max(0, size - read)
    if len(text) > max_chars or unread:
        logger.warning(
            "%s: %d bytes; only its first %d characters are read (%d bytes left unread)",
            origin,
            size,
            max_chars,
            unread,
        )
        text = text[:max_chars]
    return text, repair, unread


def _iter_saved_dataset(path: Path, fields: _TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        raise CorpusReadError(f"{path}: a DatasetDict with splits {list(loaded)}; give the folder of one split")
    yield from _iter_dataset(loaded, str(path), fields, id_field, start)


def _iter_hf(name: str, fields: _TextFields, id_field: str | None, split: str, start: int) -> Iterator[RawRecord]:
    import datasets

    try:
        loaded = datasets.load_dataset(name, split=split, streaming=True)
    except Exception as error:  # the hub client raises many types; all mean "could not load"
        raise CorpusReadError(
            f"{name}: could not load the Hugging Face dataset (split {split!r}): {type(error).__name__}: {error}. "
            "Offline, give local JSONL/Parquet files or a folder saved with save_to_disk instead."
        ) from error
    yield from _iter_dataset(loaded, name, fields, id_field, start)


def _iter_dataset(
    dataset: Any, name: str, fields: _TextFields, id_field: str | None, start: int
) -> Iterator[RawRecord]:
    names = getattr(dataset, "column_names", None)
    text_field = fields.choose(names, id_field, name) if names else None
    for ordinal, obj in enumerate(dataset, start=start):
        if text_field is None:  # a streamed dataset may not know its columns before the first row
            text_field = fields.choose(obj.keys(), id_field, name)
        yield _record_from_mapping(obj, text_field, id_field, ordinal, f"{name}:row {ordinal - start + 1}", None)


def _record_from_mapping(
    obj: dict[str, Any], text_field: str, id_field: str | None, ordinal: int, origin: str, repair: str | None
) -> RawRecord:
    doc_id = origin
    if id_field and obj.get(id_field) is not None:
        doc_id = str(obj[id_field])
    if text_field not in obj or obj[text_field] is None:
        return RawRecord(ordinal, doc_id, None, origin, skip="missing_text_field")
    text = obj[text_field]
    if isinstance(text, bytes):
        text, repair = decode_bytes(text)
    if not isinstance(text, str):
        return RawRecord(ordinal, doc_id, None, origin, skip="text_not_a_string")
    for name, value in ((text_field, text), (id_field, doc_id)):
        position = _lone_surrogate(value)
        if position is not None:
            problem = (
                f"field {name!r} holds a lone surrogate ({value[position]!r} at character {position}), which is not "
                "Unicode text (a UTF-16 half written as a JSON \\u escape), so it cannot be tokenised"
            )
            return RawRecord(ordinal, doc_id, None, origin, skip=UNREADABLE_RECORD, problem=problem)
    return RawRecord(ordinal, doc_id, text, origin, repair=repair, text_field=text_field)


def _lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate code point of ``text`` (not encodable as UTF-8), else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def _log_skip(logged: int, message: str) -> int:
    if logged < _MAX_LOGGED_SKIPS:
        logger.warning(message)
    elif logged == _MAX_LOGGED_SKIPS:
        logger.warning("more skipped records in this file are counted in stats.json but not logged")
    return logged + 1


_BLOCK_TAGS = {"p", "head", "row", "code", "quote", "item", "list", "table", "div", "main", "cell"}
_CONTAINER_TAGS = {"main", "list", "item", "table", "quote", "div", "cell"}


def extract_main_text(html: str, origin: str = "") -> str | None:
    """The main text of an HTML page, one block (heading, paragraph, list item, table row) per paragraph.

    Uses trafilatura (the extractor FineWeb used) without comments, keeping tables; navigation bars,
    search boxes, sidebars and footers are dropped by its boilerplate detection. Blocks are separated
    by blank lines so the passage splitter follows the page's structure. Returns None when trafilatura
    finds no main text.
    """
    import trafilatura
    from lxml import etree

    options = {"include_comments": False, "include_tables": True}
    if nesting_depth(html) > PARSER_DEPTH_LIMIT:
        xml, deep_text = _extract_deep_page(html, origin, options)
        if deep_text is not None:
            return deep_text
    else:
        xml = trafilatura.extract(html, output_format="xml", include_formatting=False, **options)
    if not xml:
        return None
    try:
        root = etree.fromstring(xml.encode("utf-8"))
    except etree.XMLSyntaxError as error:
        logger.warning("%s: trafilatura produced unparsable XML (%s); using its plain-text output", origin, error)
        return trafilatura.extract(html, output_format="txt", include_comments=False, include_tables=True)
    main = root.find("main")
    blocks = list(_xml_blocks(main if main is not None else root))
    return "\n\n".join(b for b in blocks if b) or None


PARSER_DEPTH_LIMIT = 255
"""Element nesting past which libxml2 (under lxml, under trafilatura) stops building the tree: such a page
comes back with no main text, though the text is there."""
_VOID_TAGS = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)  # elements that never hold others
_TAG_TOKEN = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^<>]*?(/?)>")


def nesting_depth(html: str) -> int:
    """Deepest element nesting of ``html``, counted from its tags (void and self-closed elements excluded).

    An estimate from the tag sequence alone: unclosed ``<p>`` or ``<li>`` count as nested. It only decides
    whether a page takes the deep-page path of :func:`extract_main_text`, which keeps the text either way.
    """
    depth = deepest = 0
    for match in _TAG_TOKEN.finditer(html):
        closing, name, self_closed = match.groups()
        if name.lower() in _VOID_TAGS or self_closed:
            continue
        depth = max(0, depth - 1) if closing else depth + 1
        deepest = max(deepest, depth)
    return deepest


def _extract_deep_page(html: str, origin: str, options: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(xml, None)`` from trafilatura on the page with its middle wrappers removed, or ``(None, text)``.

    A page nested deeper than :data:`PARSER_DEPTH_LIMIT` loses its deep part in libxml2's tree (trafilatura
    then finds no main text, or only the navigation: the page counted as ``html_no_main_text`` though its
    text is there). :func:`flatten_nesting` drops the tags of the middle
    levels, keeping the outer page structure and the inner levels where the text sits, and trafilatura
    runs on that (boilerplate removal kept). When it still finds nothing, the text of every element but
    scripts and styles is taken (:func:`plain_text_of_html`, navigation and footers included; logged).
    """
    import trafilatura

    xml = trafilatura.extract(flatten_nesting(html), output_format="xml", include_formatting=False, **options)
    if xml:
        logger.info(
            "%s: nested deeper than %d levels; its middle wrapper tags were dropped", origin, PARSER_DEPTH_LIMIT
        )
        return xml, None
    text = plain_text_of_html(html)
    if text:
        logger.warning(
            "%s: nested deeper than %d levels and no main text found once flattened; its whole text is used, "
            "navigation and footers included",
            origin,
            PARSER_DEPTH_LIMIT,
        )
    return None, text


def flatten_nesting(html: str, keep: int = 100) -> str:
    """``html`` without the tags of elements that are neither in the outer ``keep`` levels nor the inner ``keep``.

    Every element is kept when its depth is at most ``keep`` (the page's outer structure: body, header,
    navigation, main) or when at most ``keep`` levels of elements lie below it (the paragraphs, lists and
    headings that hold the text); the tags of the other elements (the middle wrappers) are removed, their
    text and children kept. The result nests at most ``2 * keep`` levels, within libxml2's limit.
    """
    tokens = [(m.start(), m.end(), *m.groups()) for m in _TAG_TOKEN.finditer(html)]
    depth_of: dict[int, int] = {}
    height_of: dict[int, int] = {}
    closer_of: dict[int, int] = {}
    stack: list[list[int]] = []  # [token index, depth, deepest depth below it]
    for index, (_, _, closing, name, self_closed) in enumerate(tokens):
        if name.lower() in _VOID_TAGS or self_closed:
            continue
        if not closing:
            stack.append([index, len(stack) + 1, len(stack) + 1])
            continue
        if not stack:
            continue
        opened, depth, deepest = stack.pop()
        depth_of[opened], height_of[opened], closer_of[opened] = depth, deepest - depth, index
        if stack:
            stack[-1][2] = max(stack[-1][2], deepest)
    while stack:  # elements never closed
        opened, depth, deepest = stack.pop()
        depth_of[opened], height_of[opened] = depth, deepest - depth
        if stack:
            stack[-1][2] = max(stack[-1][2], deepest)
    dropped = {i for i, depth in depth_of.items() if depth > keep and height_of[i] >= keep}
    dropped |= {closer_of[i] for i in dropped if i in closer_of}
    pieces: list[str] = []
    position = 0
    for index in sorted(dropped):
        start, end = tokens[index][0], tokens[index][1]
        pieces.append(html[position:start])
        position = end
    pieces.append(html[position:])
    return "".join(pieces)


_SKIPPED_TEXT_TAGS = frozenset({"script", "style", "noscript", "template", "head"})
_PLAIN_BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd div dl dt figcaption figure footer form h1 h2 h3 h4 h5 h6 header "
    "hr li main nav ol p pre section table td th tr ul".split()
)


def plain_text_of_html(html: str) -> str | None:
    """The text of ``html`` outside scripts, styles and ``<head>``, one blank-line block per block element.

    Uses the standard library's tokenizing HTML parser, which keeps no tree and so has no nesting limit.
    Returns None when the page has no text.
    """
    from html.parser import HTMLParser

    blocks: list[list[str]] = [[]]
    skipping: list[str] = []

    class _Collector(HTMLParser):
        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in _SKIPPED_TEXT_TAGS:
                skipping.append(tag)
            elif tag in _PLAIN_BLOCK_TAGS and blocks[-1]:
                blocks.append([])

        def handle_endtag(self, tag: str) -> None:
            if skipping and tag == skipping[-1]:
                skipping.pop()
            elif tag in _PLAIN_BLOCK_TAGS and blocks[-1]:
                blocks.append([])

        def handle_data(self, data: str) -> None:
            if not skipping and data.strip():
                blocks[-1].append(data)

    collector = _Collector(convert_charrefs=True)
    collector.feed(html)
    collector.close()
    text = "\n\n".join(squashed for block in blocks if (squashed := _squash(" ".join(block))))
    return text or None


def _xml_blocks(element: Any) -> Iterator[str]:
    if element.text and element.text.strip():
        yield _squash(element.text)
    for child in element:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag == "row":
            yield " | ".join(_squash("".join(cell.itertext())) for cell in child)
        elif tag in _CONTAINER_TAGS and any(isinstance(g.tag, str) and g.tag in _BLOCK_TAGS for g in child):
            yield from _xml_blocks(child)
        else:
            yield _squash("".join(child.itertext()))
        if child.tail and child.tail.strip():
            yield _squash(child.tail)


def _squash(text: str) -> str:
    return " ".join(text.split())
