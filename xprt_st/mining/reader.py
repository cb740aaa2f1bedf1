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
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
TEXT_SUFFIXES = (".txt",)
ZIP_SUFFIXES = (".zip",)
_MAX_LOGGED_SKIPS = 20


class CorpusError(ValueError):
    """Base class of the corpus reading errors; the message names the source and the fix."""


class CorpusReadError(CorpusError):
    """A source is missing, unreadable or corrupt."""


class CorpusColumnError(CorpusError):
    """A source does not have the expected text (or id) field."""


@dataclass(slots=True)
class RawRecord:
    """One input document before passage splitting.

    ``text`` is None when the record is unusable; ``skip`` then says why (a key of ``stats.json``'s
    ``skipped``). ``origin`` is ``"<file>:<line>"`` (or the zip member) for error messages;
    ``text_field`` is the field the text was read from (None for .txt files and zips).
    """

    ordinal: int
    doc_id: str
    text: str | None
    origin: str
    skip: str | None = None
    repair: str | None = None
    text_field: str | None = None


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
) -> Iterator[RawRecord]:
    """Yield every input record, in a deterministic order, with its ordinal.

    Args:
        sources: files, folders or dataset names (see the module docstring).
        text_field: field with the document text (``"html"`` for raw pages).
        id_field: field with the document id; None uses ``"<file>:<line>"`` or the file name.
        split: split of a Hugging Face dataset.
        skip_unreadable: count a source that fails mid-way as ``skipped.unreadable_source`` and go on,
            instead of raising :class:`CorpusReadError`.
        skipped: counter for sources skipped with ``skip_unreadable``.
        fallback_text_field: field read instead of ``text_field`` in a source that lacks ``text_field``
            (``--html`` reads ``html`` and falls back to ``text``); each record's ``text_field`` says which.
    """
    ordinal = 0
    fields = _TextFields(text_field, fallback_text_field)
    for source in expand_sources(sources):
        try:
            for record in _iter_source(source, fields, id_field, split, ordinal):
                yield record
                ordinal = record.ordinal + 1
        except CorpusColumnError:
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


def check_sources(
    sources: Sequence[str | Path],
    text_field: str = "text",
    id_field: str | None = None,
    split: str = "train",
    skip_unreadable: bool = False,
    fallback_text_field: str | None = None,
) -> list[str | Path]:
    """Check every source before any work: it exists, opens, and its first record has the text field.

    Reads one record per source, so a wrong path, a corrupt file or a wrong ``--text-field`` fails
    in a second instead of after the model has loaded and the output folder was created. With
    ``skip_unreadable``, a source that cannot be read is left for :func:`iter_corpus` to count.

    Returns:
        The expanded sources (see :func:`expand_sources`).

    Raises:
        CorpusReadError: a missing path, an unsupported or unreadable file.
        CorpusColumnError: a source whose first record lacks the text (or id) field.
    """
    expanded = expand_sources(sources)
    fields = _TextFields(text_field, fallback_text_field)
    for source in expanded:
        records = _iter_source(source, fields, id_field, split, 0)
        try:
            next(records, None)
        except CorpusColumnError:
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
    source: str | Path, fields: _TextFields, id_field: str | None, split: str, start: int
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
        text, repair = decode_bytes(source.read_bytes())
        yield RawRecord(start, str(source), text, str(source), repair=repair)
    elif kind == "zip":
        yield from _iter_zip(source, start)
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
            else:
                if not isinstance(obj, dict):
                    record = RawRecord(ordinal, origin, None, origin, skip="invalid_json")
                    logged = _log_skip(logged, f"{origin}: a JSON {type(obj).__name__}, not an object; skipped")
                else:
                    if text_field is None:
                        text_field = fields.choose(obj.keys(), id_field, origin)
                    record = _record_from_mapping(obj, text_field, id_field, ordinal, origin, repair)
                    if record.skip:
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


def _iter_zip(path: Path, start: int) -> Iterator[RawRecord]:
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.lower().endswith(".txt") and not Path(n).name.startswith("."))
        if not names:
            raise CorpusReadError(f"{path}: the zip holds no .txt file; zips are read as one document per .txt")
        for ordinal, name in enumerate(names, start=start):
            text, repair = decode_bytes(archive.read(name))
            yield RawRecord(ordinal, name, text, f"{path}!{name}", repair=repair)


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
    return RawRecord(ordinal, doc_id, text, origin, repair=repair, text_field=text_field)


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

    xml = trafilatura.extract(
        html, output_format="xml", include_comments=False, include_tables=True, include_formatting=False
    )
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
