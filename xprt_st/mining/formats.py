"""How each corpus file type is read into :class:`~xprt_st.mining.records.RawRecord` values.

Accepted types: ``*.jsonl``, ``*.jsonl.gz``, ``*.json.gz``, ``*.ndjson`` (one JSON object a line), ``*.parquet``
(one row a document), document files (:data:`DOCUMENT_SUFFIXES`: ``*.txt``, Markdown ``*.md``, HTML ``*.html``) and
``*.zip`` archives of them (one document a file), a folder written by ``datasets.Dataset.save_to_disk``, or a
Hugging Face dataset name. A document file is read as it is: an HTML page is raw HTML (``--html`` extracts its main
text), a Markdown page keeps its ``#`` headings (:func:`~xprt_st.mining.headings.markdown_headings` finds them).
Pages are documents in a folder or zip of pages only (:func:`without_readme_pages`).

Bytes that are not UTF-8 (one BBC article is latin-1) are decoded as cp1252/latin-1 and counted under
``repairs.decoded_latin1``; they are not a reason to drop a document. Per-record problems (a line that
is not JSON, a missing or non-string text field) are counted skips with the file and line logged; a
source that cannot be read at all, or whose first record lacks the text field, raises an error that
names the file and says how to fix it.

A record that is valid JSON but cannot be read as text (a lone surrogate such as ``"\\ud800"``, which is
not Unicode text, or nesting deeper than the JSON reader's recursion limit) is yielded with the skip
:data:`~xprt_st.mining.records.UNREADABLE_RECORD` and its ``problem``. A ``.txt`` file or zip member is read
as a stream and stops at :data:`DEFAULT_MAX_DOCUMENT_CHARS` characters, so a small zip holding a huge member
costs a few MB, not the member's size (the bytes left unread are on the record,
:attr:`~xprt_st.mining.records.RawRecord.bytes_not_read`).
"""

from __future__ import annotations

import codecs
import gzip
import json
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from xprt_st.mining.records import UNREADABLE_RECORD, CorpusColumnError, CorpusReadError, RawRecord

logger = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
TEXT_SUFFIXES = (".txt",)
PAGE_SUFFIXES = (".md", ".markdown", ".html", ".htm")
"""Markdown and HTML pages: documents of a folder of pages, but a README beside a dataset's files is not one
(:func:`~xprt_st.mining.reader.expand_sources`)."""
DOCUMENT_SUFFIXES = (*TEXT_SUFFIXES, *PAGE_SUFFIXES)
"""Files read as one document each (alone, in a folder or in a zip); HTML pages need ``--html``."""
ZIP_SUFFIXES = (".zip",)
SUPPORTED_FILES = "*.jsonl, *.jsonl.gz, *.parquet, *.zip, or one document per *.txt, *.md or *.html file"
"""The accepted file types, as error messages name them."""
_MAX_LOGGED_SKIPS = 20
DEFAULT_MAX_DOCUMENT_CHARS = 1_000_000
"""Characters read from one ``.txt`` file or zip member; the rest is not read. About three times the prefix the
passage splitter tokenises with its default settings (256 passages x 128 tokens x 10 characters), so a document
cut here is still counted as truncated by the splitter."""


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


def without_readme_pages(items: list[Any], names: list[str]) -> list[Any]:
    """``items`` without the Markdown and HTML pages, unless pages are all there is (``names``: each item's name).

    In a folder or zip of pages every page is a document; beside other corpus files (a dataset's ``.txt``,
    JSONL, Parquet or zip files) a ``README.md`` or an ``index.html`` describes the data and is not one.
    """
    pages = [name.lower().endswith(PAGE_SUFFIXES) for name in names]
    return items if all(pages) else [item for item, page in zip(items, pages, strict=True) if not page]


def source_kind(path: Path) -> str | None:
    """``"jsonl"``, ``"parquet"``, ``"txt"`` (a document file) or ``"zip"`` from the name of ``path``; None else."""
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(DOCUMENT_SUFFIXES):
        return "txt"
    if name.endswith(ZIP_SUFFIXES):
        return "zip"
    return None


@dataclass(slots=True)
class TextFields:
    """The text field to read, the one read instead in a source that lacks it, and the title field (or None)."""

    preferred: str
    fallback: str | None = None
    title: str | None = None

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
        if self.title and self.title not in names:
            raise CorpusColumnError(
                f"{origin}: no title field {self.title!r}; the fields are {names}. Fix --title-field."
            )
        return chosen


def iter_source(
    source: str | Path, fields: TextFields, id_field: str | None, split: str, start: int, max_chars: int
) -> Iterator[RawRecord]:
    """The records of one expanded source (a file, a saved dataset folder or a dataset name), from ordinal ``start``."""
    if isinstance(source, str):
        yield from _iter_hf(source, fields, id_field, split, start)
        return
    kind = source_kind(source)
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


def _iter_jsonl(path: Path, fields: TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    ordinal = start
    text_field: str | None = None
    logged = 0
    with opener(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if line_number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]  # utf-8-sig: the BOM is not part of the first record
                _warn_bom_once(path)
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
                    record = _record_from_mapping(obj, text_field, id_field, ordinal, origin, repair, fields.title)
                    if record.skip == UNREADABLE_RECORD:
                        logged = _log_skip(logged, f"{origin}: {record.problem}; skipped")
                    elif record.skip:
                        logged = _log_skip(logged, f"{origin}: {record.skip} ({text_field!r}); skipped")
            yield record
            ordinal += 1


_BOM_WARNED: set[str] = set()
"""Files whose byte-order mark was reported: a file read twice (the checks, then the corpus) is reported once."""


def _warn_bom_once(path: Path) -> None:
    key = str(Path(path).resolve())
    if key not in _BOM_WARNED:
        _BOM_WARNED.add(key)
        logger.warning("%s starts with a UTF-8 byte-order mark; read as utf-8-sig (the mark is dropped)", path)


def _iter_parquet(path: Path, fields: TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid (a ValueError) or OSError subclasses
        raise CorpusReadError(f"{path}: not a readable Parquet file: {error}") from error
    text_field = fields.choose(parquet.schema_arrow.names, id_field, str(path))
    columns = [text_field] + ([id_field] if id_field else []) + ([fields.title] if fields.title else [])
    ordinal = start
    row = 0
    for batch in parquet.iter_batches(columns=columns, batch_size=1024):
        for obj in batch.to_pylist():
            row += 1
            yield _record_from_mapping(obj, text_field, id_field, ordinal, f"{path}:row {row}", None, fields.title)
            ordinal += 1


def _iter_zip(path: Path, start: int, max_chars: int) -> Iterator[RawRecord]:
    with zipfile.ZipFile(path) as archive:
        names = sorted(
            n for n in archive.namelist() if n.lower().endswith(DOCUMENT_SUFFIXES) and not Path(n).name.startswith(".")
        )
        names = without_readme_pages(names, names)
        if not names:
            raise CorpusReadError(
                f"{path}: the zip holds no .txt, .md or .html file; zips are read as one document per such file"
            )
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
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte-order mark (utf-8-sig) is not text
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


def _iter_saved_dataset(path: Path, fields: TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        raise CorpusReadError(f"{path}: a DatasetDict with splits {list(loaded)}; give the folder of one split")
    yield from _iter_dataset(loaded, str(path), fields, id_field, start)


def _iter_hf(name: str, fields: TextFields, id_field: str | None, split: str, start: int) -> Iterator[RawRecord]:
    import datasets

    try:
        loaded = datasets.load_dataset(name, split=split, streaming=True)
    except Exception as error:  # the hub client raises many types; all mean "could not load"
        raise CorpusReadError(
            f"{name}: could not load the Hugging Face dataset (split {split!r}): {type(error).__name__}: {error}. "
            "Offline, give local JSONL/Parquet files or a folder saved with save_to_disk instead."
        ) from error
    yield from _iter_dataset(loaded, name, fields, id_field, start)


def _iter_dataset(dataset: Any, name: str, fields: TextFields, id_field: str | None, start: int) -> Iterator[RawRecord]:
    names = getattr(dataset, "column_names", None)
    text_field = fields.choose(names, id_field, name) if names else None
    for ordinal, obj in enumerate(dataset, start=start):
        if text_field is None:  # a streamed dataset may not know its columns before the first row
            text_field = fields.choose(obj.keys(), id_field, name)
        origin = f"{name}:row {ordinal - start + 1}"
        yield _record_from_mapping(obj, text_field, id_field, ordinal, origin, None, fields.title)


def _record_from_mapping(
    obj: dict[str, Any],
    text_field: str,
    id_field: str | None,
    ordinal: int,
    origin: str,
    repair: str | None,
    title_field: str | None = None,
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
    title = obj.get(title_field) if title_field else None
    if not isinstance(title, str) or _lone_surrogate(title) is not None:
        title = None  # a missing, non-text or unencodable title leaves the document without one, as without a field
    return RawRecord(ordinal, doc_id, text, origin, repair=repair, text_field=text_field, title=title or None)


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
