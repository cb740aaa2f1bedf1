"""What the corpus reader yields and raises: :class:`RawRecord` and the :class:`CorpusError` family.

Every error message names the source (file, line or row) and says how to fix it; a record that cannot be used is
yielded with ``text=None`` and a ``skip`` reason counted in ``stats.json``'s ``skipped``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xprt_st.errors import XPRTError

UNREADABLE_RECORD = "unreadable_record"
"""Skip reason (``stats.json``'s ``skipped``) of a record that is JSON but not readable text (``skip_unreadable``)."""

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
    "html_cut_before_main_text": "pages cut at the read cap of 1,000,000 characters (logged above) before their "
    "main text began, e.g. by a huge inline attribute or data: URI: strip it from the page",
    "unreadable_source": "sources that could not be read (logged above): fix or remove them",
}
"""Each ``stats.json`` skip reason, said in words with its fix (the diagnosis when nothing survives)."""

RECORD_SKIPS = ("invalid_json", "missing_text_field", "text_not_a_string")
"""Skip reasons that say the record itself is not of the expected shape (a wrong format or field), not its text."""


class CorpusError(XPRTError, ValueError):
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
    ``repeats_text`` and ``repeats_id`` are set by :func:`~xprt_st.mining.reader.iter_corpus` when the text,
    or the id, equals an earlier record's in the whole input, so a stage that keeps some records (one shard's)
    counts the duplicates among them and the shards' counts add up to the input's. ``title`` is the record's
    ``--title-field`` value (None without one, or when it is empty): what :mod:`xprt_st.mining.headings` keeps.
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
    repeats_text: bool = False
    repeats_id: bool = False
    title: str | None = None


def is_plain_document(record: RawRecord) -> bool:
    """True for a ``.txt`` or Markdown file (or zip member): read as text even with ``--html``, which extracts
    the main text of HTML pages and of records' text fields only."""
    return record.text_field is None and record.doc_id.lower().endswith((".txt", ".md", ".markdown"))
