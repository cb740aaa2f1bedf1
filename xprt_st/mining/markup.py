"""The raw-HTML check: refuse a text field that holds web pages when ``--html`` is not given."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from xprt_st.mining.records import CorpusMarkupError, RawRecord

MARKUP_SAMPLE = 20
"""Records of each source whose text is checked for HTML markup when ``--html`` is not given."""
MARKUP_SHARE = 0.5
"""Share of the sampled records that must look like markup for the source to be refused."""

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
