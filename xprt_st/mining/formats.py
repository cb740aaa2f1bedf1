"""How each corpus file type is read into :class:`~xprt_st.mining.records.RawRecord` values.

Accepted types: ``*.jsonl``, ``*.jsonl.gz``, ``*.json.gz``, ``*.ndjson`` (one JSON object a line), ``*.parquet``
(one row a document), document files (:data:`DOCUMENT_SUFFIXES`: ``*.txt``, Markdown ``*.md``, HTML ``*.html``) and
``*.zip`` archives of them (one document a file), a folder written by ``datasets.Dataset.save_to_disk``, or a
Hugging Face dataset name. A document file is read as it is: an HTML page is raw HTML (``--html`` extracts its main
text), a Markdown page keeps its ``#`` headings (:func:`~xprt_st.mining.headings.markdown_headings` finds them).
A folder or zip of ``.txt``, Markdown and HTML files is read whole; a page beside data files (JSONL, Parquet, a
zip) is their README, not a document (:func:`without_readme_pages`), and files of other types are skipped; both
are logged with their names. A zip inside a zip is read too, :data:`MAX_ZIP_DEPTH` levels deep.

A document file with a UTF-16 or UTF-32 byte-order mark is decoded by it (:func:`bom_codec`). Bytes that are not
UTF-8 (one BBC article is latin-1) are decoded as cp1252/latin-1 and counted under
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
DATA_SUFFIXES = (*JSONL_SUFFIXES, *PARQUET_SUFFIXES, *ZIP_SUFFIXES)
"""Files of many documents: a Markdown or HTML page beside them is their README."""
MAX_ZIP_DEPTH = 3
"""Zips read inside zips: a zip member of a zip is read, down to this many levels (then skipped and said)."""
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
    """``items`` without the pages that describe the data rather than belong to it (``names``: each item's name).

    A folder (or zip) of pages only is read whole. Beside data files (JSONL, Parquet or a zip) every Markdown or
    HTML page (a ``README.md``, an ``index.html``) describes the data and is not a document. Beside ``.txt``
    documents, pages are documents too, except a page named ``README``: the BBC zip's ``README.md``. Each page
    dropped is logged once with the reason (give it by name to read it).
    """
    pages = [name.lower().endswith(PAGE_SUFFIXES) for name in names]
    if all(pages):
        return items
    data = [name for name in names if name.lower().endswith(DATA_SUFFIXES)]
    beside = f"data files ({data[0]}{' ...' if len(data) > 1 else ''})" if data else "other documents"
    kept = []
    for item, name, page in zip(items, names, pages, strict=True):
        if page and (data or Path(name).stem.lower() == "readme"):
            _warn_once(
                f"readme:{name}",
                f"{name}: a page beside {beside} is read as the data's README, not a document; give the page by "
                "name to mine it",
            )
        else:
            kept.append(item)
    return kept


_WARNED: set[str] = set()
"""Notes already logged: a source read twice (the checks, then the corpus) is reported once."""


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message)


def warn_unread_files(where: str, names: list[str]) -> None:
    """Log once which files of ``where`` (a folder or zip) are not read, by type: the reader skips them."""
    shown = [name for name in names if not Path(name).name.startswith(".")]
    if shown:
        listed = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
        _warn_once(
            f"unread:{where}:{len(shown)}",
            f"{where}: {len(shown)} file(s) of a type the reader does not read are skipped ({listed}); "
            f"it reads {SUPPORTED_FILES}",
        )


def within_folder(folder: Path, files: list[Path]) -> list[Path]:
    """The ``files`` found under ``folder`` (resolved) that lie in it: a symlink to a file outside (the system's user
    database, a private key, as an archive from someone else can carry) is not read, and is named in a warning.
    A corpus folder is read within itself."""
    inside, outside = [], []
    for path in files:
        (inside if path.resolve().is_relative_to(folder) else outside).append(path)
    if outside:
        names = [str(path.relative_to(folder)) for path in outside]
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        _warn_once(
            f"outside:{folder}:{len(names)}",
            f"{folder}: {len(names)} link(s) to files outside the folder are not read ({listed}); a corpus folder "
            "is read within itself: copy such a file in, or give it as a source of its own",
        )
    return inside


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
        records = _iter_archive(archive, str(path), "", start, max_chars, 1)
        first = next(records, None)
        if first is None:
            raise CorpusReadError(
                f"{path}: the zip holds no .txt, .md or .html file; zips are read as one document per such file"
            )
        yield first
        yield from records


def _iter_archive(
    archive: zipfile.ZipFile, origin: str, prefix: str, start: int, max_chars: int, depth: int
) -> Iterator[RawRecord]:
    """The documents of ``archive`` and of the zips inside it (to :data:`MAX_ZIP_DEPTH`), members sorted by name.

    A member's id is its path inside the zip, a nested zip's members ``inner.zip!doc.txt``; each member is read
    with the same character cap as a file.
    """
    members = sorted(n for n in archive.namelist() if not n.endswith("/") and not Path(n).name.startswith("."))
    kept = [n for n in members if n.lower().endswith((*DOCUMENT_SUFFIXES, *ZIP_SUFFIXES))]
    warn_unread_files(origin, [n for n in members if n not in kept])
    ordinal = start
    for name in without_readme_pages(kept, kept):
        inner = f"{origin}!{name}"
        if name.lower().endswith(ZIP_SUFFIXES):
            if depth >= MAX_ZIP_DEPTH:
                _warn_once(f"deep:{inner}", f"{inner}: a zip {depth} zips deep is skipped (at most {MAX_ZIP_DEPTH})")
                continue
            with archive.open(name) as member, zipfile.ZipFile(member) as nested:
                for record in _iter_archive(nested, inner, f"{prefix}{name}!", ordinal, max_chars, depth + 1):
                    yield record
                    ordinal += 1
            continue
        with archive.open(name) as member:
            text, repair, unread = read_capped(member, archive.getinfo(name).file_size, max_chars, inner)
        yield RawRecord(ordinal, f"{prefix}{name}", text, inner, repair=repair, bytes_not_read=unread)
        ordinal += 1


_READ_BLOCK = 1 << 16


def bom_codec(head: bytes) -> str:
    """The codec a byte-order mark at the start of ``head`` names (``utf-32``, ``utf-16``), else ``utf-8``.

    Example:
        >>> bom_codec("text".encode("utf-16")), bom_codec(codecs.BOM_UTF8 + b"text"), bom_codec(b"text")
        ('utf-16', 'utf-8', 'utf-8')
    """
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def read_capped(handle: IO[bytes], size: int, max_chars: int, origin: str = "") -> tuple[str, str | None, int]:
    """The text of the binary stream ``handle`` (``size`` bytes), read in blocks up to ``max_chars`` characters.

    At most ``4 * max_chars`` bytes (plus one block) are read, whatever ``size`` is: a 300 MB zip member costs a
    few MB. Decoding is UTF-8, or UTF-16/UTF-32 when a byte-order mark says so (:func:`bom_codec`; Windows
    Notepad's "Unicode"), falling back to cp1252/latin-1 for the whole read prefix as :func:`decode_bytes` does
    (a character cut by a block end is not mistaken for bad bytes).

    Returns:
        The text (at most ``max_chars`` characters), the repair (``"decoded_latin1"`` or None), and the bytes of
        the stream that were not read (0 when it was read whole). A cut is logged with ``origin``.
    """
    first = handle.read(_READ_BLOCK)
    codec = bom_codec(first)
    decoder = codecs.getincrementaldecoder(codec)()
    pending = [first]
    blocks: list[bytes] = []
    pieces: list[str] = []
    chars = 0
    read = 0
    decoding = True
    while chars <= max_chars:
        block = pending.pop() if pending else handle.read(_READ_BLOCK)
        if not block:
            break
        read += len(block)
        blocks.append(block)
        if decoding:
            try:
                piece = decoder.decode(block)
            except UnicodeDecodeError:
                decoding = False
            else:
                pieces.append(piece)
                chars += len(piece)
                continue
        chars = read  # cp1252 and latin-1 are one character a byte
    text, repair = "", None
    if decoding:
        try:
            text = "".join(pieces) + decoder.decode(b"", final=read >= size)
        except UnicodeDecodeError:  # the stream ends inside a character
            decoding = False
    if not decoding:
        text, repair = decode_bytes(b"".join(blocks))
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark (utf-8-sig, or one the utf-16 codec kept) is not text
    unread = max(0, size - read)
    if len(text) > max_chars or unread:
        # once a file: the check before work reads its first records, and the run reads them again
        _warn_once(
            f"cap:{origin}:{size}:{max_chars}",
            f"{origin}: {size} bytes; only its first {max_chars} characters are read ({unread} bytes left unread)",
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
