"""What people wrote about a document: its title and section headings, each mapped to the passages it covers.

These texts were written by the document's author, not chosen by an embedding model, so the label-free task
built on them (``titles:DIR``, :mod:`xprt_st.evaluation.titles`) does not reward the mining model's own
neighbourhoods. Where they come from:

- a title field of the record (``--title-field``; BEIR corpora carry ``title``): the whole document;
- HTML (``--html``): the first ``<h1>`` of the main text, else the page's ``<title>``, is the title; the
  ``<h1>``-``<h3>`` headings of the main text are section headings (:mod:`xprt_st.mining.html_text` keeps their
  positions);
- Markdown: ATX headings (``#``, ``##``, ``###`` at the start of a line, outside fenced code blocks) are section
  headings (:func:`markdown_headings`), and the first ``#`` heading is the title when the record has none (as an
  HTML page's first ``<h1>``);
- plain text: a first line that reads as a headline (short, no closing punctuation, a blank line after it, as
  in the BBC News files) is the title (:func:`plain_title`), and only when nothing above found one.

A heading at level ``L`` covers the text from its own position to the next heading of level ``L`` or lower (the
end of the document when there is none); the title (level :data:`TITLE_LEVEL`) covers the whole document. A
passage belongs to a section when its characters overlap the section's span, so a passage that runs across a
section boundary belongs to both. Sections are stored as passage ranges ``[first, stop)`` (:class:`Section`).

Example:
    >>> text = "## Intro\\nSome words.\\n\\n## Use\\nMore words."
    >>> marks = markdown_headings(text)
    >>> [(m.text, m.level, m.start) for m in marks]
    [('Intro', 2, 0), ('Use', 2, 22)]
    >>> sections(marks, None, [(0, 20), (22, 40)], len(text))
    [Section(text='Intro', level=2, first=0, stop=1), Section(text='Use', level=2, first=1, stop=2)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

TITLE_LEVEL = 0
"""The level of a document title: it covers every passage of the document."""
MAX_LEVEL = 3
"""Deepest heading level kept (``<h3>``, ``###``): deeper ones mark passages too small to be a section."""
MAX_HEADING_CHARS = 200
"""Longer "headings" are text that a page marked up as one, not a heading; they are dropped."""
MAX_HEADLINE_WORDS = 20
"""Most words in a plain-text first line read as a headline (:func:`plain_title`)."""

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADLINE_END = (".", ",", ";", ":")
_PERMALINKS = "¶🔗"
"""Marks that documentation generators append to a heading as a link to it (Sphinx, MkDocs); a ``#`` is one only
when set apart by a space."""


@dataclass(frozen=True, slots=True)
class TextHeading:
    """A heading found in a document's text: its text, level (1-3) and the character where its section starts."""

    text: str
    level: int
    start: int


@dataclass(frozen=True, slots=True)
class Section:
    """A title or heading and the passages it covers, ``first`` to ``stop - 1`` (indices of kept passages)."""

    text: str
    level: int
    first: int
    stop: int

    @property
    def is_title(self) -> bool:
        """True for the document's title (level :data:`TITLE_LEVEL`)."""
        return self.level == TITLE_LEVEL


def clean_heading(text: str | None) -> str | None:
    """``text`` with its whitespace squashed and a trailing permalink mark (``¶``, ``🔗``, `` #``) dropped; None
    when empty, or longer than :data:`MAX_HEADING_CHARS`.

    Sphinx and MkDocs end every heading with a ``¶`` link to itself, which trafilatura keeps as text: it is no
    word of the heading.
    """
    if text is None:
        return None
    squashed = " ".join(str(text).split()).rstrip(_PERMALINKS).rstrip()
    if squashed.endswith(" #"):  # a "#" link set apart from the words ("C#" keeps its own)
        squashed = squashed[:-2].rstrip()
    return squashed if squashed and len(squashed) <= MAX_HEADING_CHARS else None


def markdown_headings(text: str) -> list[TextHeading]:
    """The ATX headings of levels 1-3 of ``text`` (``# Title``), outside fenced code blocks, in order.

    ``start`` is the offset of the heading line: a section begins with its heading.
    """
    found: list[TextHeading] = []
    fenced = False
    offset = 0
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            match = _ATX.match(line.rstrip("\r\n"))
            if match and len(match.group(1)) <= MAX_LEVEL:
                heading = clean_heading(match.group(2))
                if heading is not None:
                    found.append(TextHeading(heading, len(match.group(1)), offset))
        offset += len(line)
    return found


def plain_title(text: str) -> str | None:
    """The first line of ``text`` when it reads as a headline, else None.

    A headline is at most :data:`MAX_HEADLINE_WORDS` words, does not end in ``. , ; :`` (a sentence or a
    salutation does), and is followed by a blank line and more text, as in the BBC News files.
    """
    stripped = text.lstrip()
    first, newline, rest = stripped.partition("\n")
    if not newline or not rest.strip():
        return None
    after = rest.split("\n", 1)[0]
    if after.strip():
        return None
    headline = clean_heading(first)
    if headline is None or len(headline.split()) > MAX_HEADLINE_WORDS or headline.endswith(_HEADLINE_END):
        return None
    return headline


def sections(
    headings: Sequence[TextHeading], title: str | None, passage_spans: Sequence[tuple[int, int]], text_length: int
) -> list[Section]:
    """The title and each heading with the range of passages it covers (see the module doc).

    Args:
        headings: the headings of the text, in order of ``start``.
        title: the document's title (covers every passage), or None.
        passage_spans: each kept passage's ``(start, end)`` character span in the text, in order.
        text_length: the length of the text (the end of the last section).

    Returns:
        The title first, then the headings in document order; a heading that covers no passage, or that
        repeats the title's text or an earlier heading's text and range, is left out.
    """
    found: list[Section] = []
    if not passage_spans:
        return found
    seen: set[tuple[str, int, int]] = set()
    title = clean_heading(title)
    if title is not None:
        found.append(Section(title, TITLE_LEVEL, 0, len(passage_spans)))
    title_key = title.casefold() if title is not None else None
    for number, heading in enumerate(headings):
        end = next((h.start for h in headings[number + 1 :] if h.level <= heading.level), text_length)
        inside = [i for i, (start, stop) in enumerate(passage_spans) if start < end and stop > heading.start]
        if not inside:
            continue
        key = (heading.text.casefold(), inside[0], inside[-1] + 1)
        if key[0] == title_key or key in seen:
            continue
        seen.add(key)
        found.append(Section(heading.text, heading.level, inside[0], inside[-1] + 1))
    return found


def _heading_line(passage: str, heading: str) -> re.Match[str] | None:
    """The line of ``passage`` that is ``heading`` (Markdown marks, a permalink mark aside), after other text."""
    line = re.compile(rf"^[#\s]*{re.escape(heading)}[ \t:.¶]*$", re.IGNORECASE | re.MULTILINE)
    found = line.search(passage)
    return found if found is not None and passage[: found.start()].strip() else None


def section_opening(passages: Sequence[str], section: Section) -> int:
    """The passage of ``section`` that holds its opening text.

    A section's first passage may begin inside the section before it (a token window of a small ``--max-tokens``
    holds the previous section's last sentence, then the heading line): when nothing follows the heading's line
    there, the section's next passage holds its opening text. Its text is :func:`from_heading`'s.

    Example:
        >>> section_opening(["End of A.\\n\\nPart B", "B is about tea."], Section("Part B", 2, 0, 2))
        1
    """
    index = section.first
    found = _heading_line(passages[index], section.text)
    if found is not None and not passages[index][found.end() :].strip():
        if index + 1 < min(section.stop, len(passages)):
            return index + 1
    return index


def from_heading(passage: str, heading: str) -> str:
    """``passage`` from ``heading``'s line on, when that line follows other text (the previous section's end);
    else ``passage`` itself. Left there, that text would be most of a heading's positive.

    Example:
        >>> from_heading("End of A.\\n\\nPart B\\nB is about tea.", "Part B")
        'Part B\\nB is about tea.'
    """
    found = _heading_line(passage, heading)
    if found is None or not passage[found.end() :].strip():
        return passage
    return passage[found.start() :].lstrip()
