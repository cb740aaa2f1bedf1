"""The links of an HTML page (text and target) and the anchor ids of its headings, read beside its main text.

A link's text was written by an author to name the page or section it points at, so (link text, first passage of
the target) is a query-shaped pair (HLP, hyperlink-induced pre-training, ACL 2022); ``xprt-st mine --structure
links`` pairs them (:mod:`xprt_st.mining.link_targets`). What mining keeps of a page is unchanged: the main text
still comes from trafilatura alone (:mod:`xprt_st.mining.html_text`); this module parses the raw page a second
time (lxml) and only reads from it:

- every ``<a href>`` with its text (whitespace squashed, permalink marks such as ``¶`` dropped) and its ``href``
  as written; a link is marked ``navigation`` when it sits in a navigation element (``<nav>``, ``<header>``,
  ``<footer>``, ``<aside>``, a ``role`` of navigation, banner, contentinfo or search, or a class or id such as
  ``sidebar``, ``related``, ``breadcrumb``, ``toc``: :func:`in_navigation`) or when its text is not in the main
  text (trafilatura dropped it as boilerplate);
- the ids a ``#fragment`` can name on each ``<h1>``-``<h3>`` heading (:func:`heading_ids`): the heading's own
  ``id`` (or ``name``), those of elements inside it (``<a name>``), those of empty elements just before it
  (Sphinx's ``<span id>``), and its parent's when the heading opens it (``<section id>``, ``<div class="section"
  id>``). They are matched, in order and by text, to the headings of the main text, and each id is stored with
  the first passage of its section (:func:`heading_anchors`).

Example:
    >>> page = ('<html><body><nav><a href="index.html">Home</a></nav><main><section id="use"><h2>Use it</h2>'
    ...         '<p>See <a href="api.html#run">the run function</a>.</p></section></main></body></html>')
    >>> links, ids = page_links(page, "Use it\\n\\nSee the run function.")
    >>> [(link.text, link.target, link.navigation) for link in links]
    [('Home', 'index.html', True), ('the run function', 'api.html#run', False)]
    >>> ids
    [('Use it', ('use',))]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xprt_st.mining.headings import MAX_LEVEL, TextHeading, clean_heading

logger = logging.getLogger(__name__)

NAVIGATION_TAGS = frozenset({"nav", "header", "footer", "aside"})
NAVIGATION_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "menu", "menubar"})
NAVIGATION_NAMES = frozenset({"related", "toc", "masthead", "topbar", "header", "footer"})
"""Class or id tokens of a navigation block, matched whole (Sphinx's ``related`` bar, Wikipedia's ``toc``)."""
NAVIGATION_STEMS = ("nav", "sidebar", "breadcrumb", "menu", "pagination")
"""Parts of a class or id token that mark a navigation block (``navbar``, ``sphinxsidebar``, ``md-nav__link``)."""
_HEADING_TAGS = {f"h{level}": level for level in range(1, MAX_LEVEL + 1)}


@dataclass(frozen=True, slots=True)
class Link:
    """One ``<a href>`` of a page: its text, its ``href`` as written, and whether it is outside the main text."""

    text: str
    target: str
    navigation: bool


@dataclass(frozen=True, slots=True)
class Anchor:
    """An id a ``#fragment`` can name, and the first passage of the heading's section it marks."""

    id: str
    first: int


def link_text(text: str) -> str:
    """A link's text with its whitespace squashed and permalink marks (``¶``, ``🔗``) dropped."""
    return " ".join(text.replace("¶", " ").replace("🔗", " ").split())


def parse_page(html: str) -> Any:
    """The page as an lxml tree, or None when lxml cannot read it (logged by the caller's origin)."""
    import lxml.html
    from lxml import etree

    try:
        return lxml.html.document_fromstring(html.encode("utf-8", "replace"), lxml.html.HTMLParser(encoding="utf-8"))
    except (etree.ParserError, ValueError):
        return None


def _tokens(element: Any) -> list[str]:
    return f"{element.get('class') or ''} {element.get('id') or ''}".lower().split()


def in_navigation(element: Any) -> bool:
    """True when ``element`` or an element around it is a navigation block (see the module doc)."""
    while element is not None:
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag.lower() in NAVIGATION_TAGS or (element.get("role") or "").lower() in NAVIGATION_ROLES:
            return True
        for token in _tokens(element):
            if token in NAVIGATION_NAMES or any(stem in token for stem in NAVIGATION_STEMS):
                return True
        element = element.getparent()
    return False


def _blank(node: Any) -> bool:
    """True for an element without text, a comment or a processing instruction (tails aside)."""
    return not isinstance(node.tag, str) or not node.text_content().strip()


def _ids(node: Any) -> list[str | None]:
    return [node.get("id"), node.get("name")] if isinstance(node.tag, str) else []


def heading_ids(root: Any) -> list[tuple[str, tuple[str, ...]]]:
    """Each ``<h1>``-``<h3>`` of the page, in order: its cleaned text and the ids that name it (module doc)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for heading in root.iter(*_HEADING_TAGS):
        text = clean_heading(heading.text_content())
        if text is None:
            continue
        ids = _ids(heading) + [value for inner in heading.iterdescendants() for value in _ids(inner)]
        opens_parent = not (heading.getparent() is not None and (heading.getparent().text or "").strip())
        for before in heading.itersiblings(preceding=True):
            if not _blank(before) or (before.tail or "").strip():
                opens_parent = False
                break
            ids += _ids(before)
        parent = heading.getparent()
        if opens_parent and parent is not None and parent.tag not in ("body", "html"):
            ids.append(parent.get("id"))
        found.append((text, tuple(dict.fromkeys(i.strip() for i in ids if i and i.strip()))))
    return found


def page_links(html: str, main_text: str, origin: str = "") -> tuple[list[Link], list[tuple[str, tuple[str, ...]]]]:
    """The links of ``html`` and the ids of its headings (:func:`heading_ids`); ``main_text`` is what mining kept.

    A page lxml cannot read has neither (logged with ``origin``).
    """
    root = parse_page(html)
    if root is None:
        logger.info("%s: the page could not be parsed for its links; it has none", origin)
        return [], []
    kept = " ".join(main_text.split())
    links = []
    for anchor in root.iter("a"):
        href = anchor.get("href")
        if href is None:
            continue
        text = link_text(anchor.text_content())
        navigation = in_navigation(anchor) or (bool(text) and text not in kept)
        links.append(Link(text, href.strip(), navigation))
    return links, heading_ids(root)


def heading_anchors(
    marks: Sequence[TextHeading],
    ids: Sequence[tuple[str, tuple[str, ...]]],
    passage_spans: Sequence[tuple[int, int]],
    text_length: int,
) -> list[Anchor]:
    """Each id of :func:`heading_ids` with the first passage of its heading's section in the main text.

    The page's headings (``ids``) are matched in order to the main text's headings (``marks``) by their cleaned
    text, case-folded: a page heading that trafilatura dropped is skipped over. A section spans from its
    heading to the next heading of its level or lower (as :func:`~xprt_st.mining.headings.sections` says); an id
    whose section holds no passage, or that an earlier heading already named, is left out.
    """
    anchors: list[Anchor] = []
    seen: set[str] = set()
    position = 0
    for number, mark in enumerate(marks):
        match = next((j for j in range(position, len(ids)) if ids[j][0].casefold() == mark.text.casefold()), None)
        if match is None:
            continue
        position = match + 1
        end = next((m.start for m in marks[number + 1 :] if m.level <= mark.level), text_length)
        first = next((i for i, (start, stop) in enumerate(passage_spans) if start < end and stop > mark.start), None)
        if first is None:
            continue
        for name in ids[match][1]:
            if name not in seen:
                seen.add(name)
                anchors.append(Anchor(name, first))
    return anchors
