"""Corpus input: JSONL / JSONL.gz / Parquet files, document files (.txt, .md, .html), folders, zips, datasets.

Every source is read in a fixed order (files sorted by path, records in file order), and each record
gets an ``ordinal``: its position in the whole input. Sharding takes ``ordinal % num_shards ==
shard_index``, so any job that reads the same inputs picks the same documents.

Accepted sources (several may be given; a folder is searched recursively):

- ``*.jsonl``, ``*.jsonl.gz``, ``*.json.gz``: one JSON object a line; ``text_field`` holds the text,
  the optional ``id_field`` the document id (default ``"<file>:<line>"``);
- ``*.parquet``: one row a document, same fields;
- document files, ``*.txt``, ``*.md`` and ``*.html`` (raw HTML: give ``--html``), and ``*.zip`` archives of them
  (e.g. the BBC News zip): one document a file, id = the path of the file (inside the zip); the first line
  (headline) is kept as a block. A folder (or zip) of ``.txt``, Markdown and HTML files is read whole; beside data
  files (JSONL, Parquet, zips) a page is the data's README, not a document
  (:func:`~xprt_st.mining.formats.without_readme_pages`); skipped files are logged by name;
- a folder written by ``datasets.Dataset.save_to_disk``, or a Hugging Face dataset name (``split``).


A source that cannot be read at all, or whose first record lacks the text field, raises an error that names
the file and says how to fix it; a record that cannot be read as text stops the run with its file and line
named, or is skipped and counted as ``unreadable_record`` with ``--skip-unreadable``. :func:`check_sources`
refuses a text field that holds raw HTML when ``--html`` is not given (:mod:`xprt_st.mining.markup`), and
:func:`iter_corpus` counts exact duplicate texts and ids with a bounded memory
(:mod:`xprt_st.mining.duplicates`).

The code is split by idea: :mod:`xprt_st.mining.records` (the record and the errors),
:mod:`xprt_st.mining.formats` (how each file type is read), :mod:`xprt_st.mining.markup`,
:mod:`xprt_st.mining.duplicates` and :mod:`xprt_st.mining.html_text` (main-text extraction of pages). Their
public names are importable from here too.
"""

from __future__ import annotations

import logging
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from xprt_st.fingerprint import file_sha256
from xprt_st.mining.duplicates import DUPLICATE_TABLE_SLOTS, DuplicateCounter
from xprt_st.mining.formats import (
    DEFAULT_MAX_DOCUMENT_CHARS,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    SUPPORTED_FILES,
    TEXT_SUFFIXES,
    ZIP_SUFFIXES,
    TextFields,
    decode_bytes,
    iter_source,
    read_capped,
    source_kind,
    warn_unread_files,
    within_folder,
    without_readme_pages,
)
from xprt_st.mining.html_text import (
    PARSER_DEPTH_LIMIT,
    extract_main_text,
    flatten_nesting,
    nesting_depth,
    plain_text_of_html,
)
from xprt_st.mining.markup import MARKUP_SAMPLE, MARKUP_SHARE, check_not_markup, looks_like_markup
from xprt_st.mining.records import (
    RECORD_SKIPS,
    SKIP_FIXES,
    UNREADABLE_RECORD,
    CorpusColumnError,
    CorpusError,
    CorpusMarkupError,
    CorpusReadError,
    CorpusRecordError,
    RawRecord,
)

__all__ = [
    "DEFAULT_MAX_DOCUMENT_CHARS",
    "DUPLICATE_TABLE_SLOTS",
    "JSONL_SUFFIXES",
    "MARKUP_SAMPLE",
    "MARKUP_SHARE",
    "PARQUET_SUFFIXES",
    "PARSER_DEPTH_LIMIT",
    "TEXT_SUFFIXES",
    "UNREADABLE_RECORD",
    "ZIP_SUFFIXES",
    "CorpusColumnError",
    "CorpusError",
    "CorpusMarkupError",
    "CorpusReadError",
    "CorpusRecordError",
    "DuplicateCounter",
    "RawRecord",
    "check_not_markup",
    "check_sources",
    "decode_bytes",
    "expand_sources",
    "extract_main_text",
    "flatten_nesting",
    "input_differences",
    "input_identity",
    "iter_corpus",
    "looks_like_markup",
    "nesting_depth",
    "plain_text_of_html",
    "read_capped",
]

logger = logging.getLogger(__name__)


def expand_sources(sources: Sequence[str | Path]) -> list[str | Path]:
    """Files (sorted, folders searched recursively) and dataset names, in a deterministic order.

    Raises:
        CorpusReadError: a path that does not exist and does not look like a dataset name, or a
            folder that holds no supported file.
    """
    expanded: list[str | Path] = []
    for source in sources:
        path = Path(source)
        if path.exists():
            # one spelling per file (./c.jsonl, c.jsonl, dir/../c.jsonl, a symlink to it): without --id-field a
            # document's id is "<file>:<line>", and the held-out draw hashes that id
            path = path.resolve()
        if path.is_dir():
            if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
                expanded.append(path)
                continue
            every = within_folder(path, sorted(p for p in path.rglob("*") if p.is_file()))
            files = [p for p in every if source_kind(p) is not None]
            warn_unread_files(str(path), [str(p.relative_to(path)) for p in every if source_kind(p) is None])
            files = without_readme_pages(files, [str(p.relative_to(path)) for p in files])
            if not files:
                raise CorpusReadError(f"folder {path} holds no corpus file; expected {SUPPORTED_FILES}")
            expanded.extend(files)
        elif path.is_file():
            if source_kind(path) is None:
                raise CorpusReadError(f"{path}: unsupported file type; give {SUPPORTED_FILES}")
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
                    "sha256": file_sha256(path),
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
        elif stat.st_mtime_ns != old.get("mtime_ns") and file_sha256(path) != old.get("sha256"):
            differences.append(f"{path}: same size but other content (modified since it was mined)")
    return differences


def _input_name(entry: dict[str, Any]) -> str:
    return entry["path"] if "path" in entry else f"dataset {entry['dataset']} (split {entry['split']})"


def _looks_like_dataset_name(name: str) -> bool:
    return "/" in name and not name.startswith((".", "/", "~")) and name.count("/") == 1 and "." not in name


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
    title_field: str | None = None,
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
        title_field: field with the document title (``--title-field``), kept on each record's ``title``.
    """
    ordinal = 0
    fields = TextFields(text_field, fallback_text_field, title_field)
    duplicates = DuplicateCounter()
    for source in expand_sources(sources):
        try:
            for record in iter_source(source, fields, id_field, split, ordinal, max_chars):
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


def check_records_usable(sample: Sequence[RawRecord], source: str | Path) -> None:
    """Refuse a source none of whose first records has the expected shape (not JSON objects, no text string).

    ``sample`` is the source's first records (:data:`MARKUP_SAMPLE` of them when the first is unusable). A file
    that is not JSON Lines, or whose text field holds no string, would be mined to nothing after the model
    loaded; one bad record among good ones is counted and skipped as mining goes.

    Raises:
        CorpusRecordError: naming the source, the reasons and their fix, when every sampled record is skipped
            for one of :data:`RECORD_SKIPS`.
    """
    if not sample or not all(record.skip in RECORD_SKIPS for record in sample):
        return
    reasons = Counter(str(record.skip) for record in sample)
    dominant = reasons.most_common(1)[0][0]
    listed = ", ".join(f"{reason} {count}" for reason, count in reasons.most_common())
    raise CorpusRecordError(
        f"{source}: none of its first {len(sample)} record(s) can be read ({listed}, from {sample[0].origin}); "
        f"they are {SKIP_FIXES[dominant]}"
    )


def check_sources(
    sources: Sequence[str | Path],
    text_field: str = "text",
    id_field: str | None = None,
    split: str = "train",
    skip_unreadable: bool = False,
    fallback_text_field: str | None = None,
    html: bool | None = None,
    title_field: str | None = None,
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
        CorpusColumnError: a source whose first record lacks the text (or id, or title) field.
        CorpusRecordError: a first record that cannot be read as text (without ``skip_unreadable``).
        CorpusMarkupError: with ``html=False``, a source whose text field holds raw HTML pages.
        CorpusReadError: also when every source reads as empty (no record at all), before any model loads.
    """
    expanded = expand_sources(sources)
    fields = TextFields(text_field, fallback_text_field, title_field)
    any_record = False
    for source in expanded:
        records = iter_source(source, fields, id_field, split, 0, DEFAULT_MAX_DOCUMENT_CHARS)
        try:
            first = next(records, None)
            any_record = any_record or first is not None
            if first is not None and first.skip == UNREADABLE_RECORD and not skip_unreadable:
                raise CorpusRecordError(
                    f"{first.origin}: {first.problem}. Fix or remove this record, or pass --skip-unreadable to "
                    "count it and go on."
                )
            sample = [first] if first is not None else []
            if first is not None and (html is False or first.skip in RECORD_SKIPS):
                sample += [record for _, record in zip(range(MARKUP_SAMPLE - 1), records, strict=False)]
            check_records_usable(sample, source)
            if html is False and sample:
                check_not_markup(sample, source)
        except (CorpusColumnError, CorpusRecordError, CorpusMarkupError):
            raise
        except (OSError, EOFError, zipfile.BadZipFile, CorpusReadError, ValueError) as error:
            if skip_unreadable:
                any_record = True  # unknown: left for iter_corpus to count, as any other unreadable source
                continue
            raise CorpusReadError(
                f"{source}: cannot be read: {type(error).__name__}: {error}. Fix or remove the file, or pass "
                "--skip-unreadable to count it and go on."
            ) from error
        finally:
            records.close()
    if expanded and not any_record:
        names = ", ".join(str(source) for source in expanded[:3]) + (", ..." if len(expanded) > 3 else "")
        raise CorpusReadError(f"{names}: no documents to read (every source is empty)")
    return expanded
