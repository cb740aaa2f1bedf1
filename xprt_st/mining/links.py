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
  the first passage of its section (:func:`heading_anchors`);
- every other id on the page (:func:`element_ids`: an API entry's ``<dt id>``, Sphinx's empty ``<span id>`` target
  before a paragraph or an entry, a term's ``<span id>``), with the first words of the text it marks: found in the
  main text, each id is stored with the passage that holds those words (:func:`element_anchors`). Sphinx's
  cross-references (``functions.html#eval``) name such entries, not headings.

Example:
    >>> page = ('<html><body><nav><a href="index.html">Home</a></nav><main><section id="use"><h2>Use it</h2>'
    ...         '<p>See <a href="api.html#run">the run function</a>.</p></section></main></body></html>')
    >>> links, ids, elements = page_links(page, "Use it\\n\\nSee the run function.")
    >>> [(link.text, link.target, link.navigation) for link in links]
    [('Home', 'index.html', True), ('the run function', 'api.html#run', False)]
    >>> ids
    [('Use it', ('use',))]
    >>> elements  # the <section id> names the heading already
    []
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from xprt_st.mining.headings import MAX_LEVEL, TextHeading, clean_heading

logger = logging.getLogger(__name__)

NAVIGATION_TAGS = frozenset({"nav", "header", "footer", "aside"})
NAVIGATION_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "menu", "menubar"})
NAVIGATION_NAMES = frozenset({"related", "toc", "masthead", "topbar", "header", "footer"})
"""Class or id tokens of a navigation block, matched whole (Sphinx's ``related`` bar, Wikipedia's ``toc``)."""
NAVIGATION_STEMS = ("nav", "sidebar", "breadcrumb", "menu", "pagination")
"""Parts of a class or id token that mark a navigation block (``navbar``, ``sphinxsidebar``, ``md-nav__link``)."""
_HEADING_TAGS = {f"h{level}": level for level in range(1, MAX_LEVEL + 1)}
ELEMENT_WORDS = 8
"""How many of an element's first words find it in the main text (enough to tell two API entries apart)."""
_NO_TEXT_TAGS = frozenset(
    {"html", "head", "title", "meta", "link", "script", "style", "noscript", "body", "form", "input", "button"}
    | {"select", "option", "textarea", "img", "iframe", "svg"}
)
"""Elements whose id marks no text of the main text (the page itself, scripts, form controls, images)."""


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


def _marked_words(element: Any) -> str:
    """The first :data:`ELEMENT_WORDS` words of the text ``element`` marks: its own, or, when it has none (an empty
    target ``<span id>``), what follows it (its tail, else its next sibling with text). A ``<dt id>`` (a Python API
    entry's signature) marks its ``<dd>``, the description: a link to the entry is about what it does, and a
    passage may end at the signature with the description in the next."""
    following = element.getnext()
    if str(element.tag).lower() == "dt" and following is not None and str(following.tag).lower() == "dd":
        words = link_text(following.text_content()).split()
        if words:
            return " ".join(words[:ELEMENT_WORDS])
    for text in (element.text_content(), element.tail or "", *(s.text_content() for s in element.itersiblings())):
        words = link_text(text).split()
        if words:
            return " ".join(words[:ELEMENT_WORDS])
    return ""


def element_ids(root: Any, headings: Sequence[tuple[str, tuple[str, ...]]] = ()) -> list[tuple[str, str]]:
    """Every id or ``<a name>`` of the page that names no heading (``headings``: :func:`heading_ids`), in page order,
    with the first words of the text it marks (:func:`_marked_words`); ids inside navigation blocks, on elements
    that mark no text (:data:`_NO_TEXT_TAGS`) or marking no words are left out, and each id counts once."""
    named = {name for _, ids in headings for name in ids}
    found: list[tuple[str, str]] = []
    for element in root.iter():
        if not isinstance(element.tag, str) or element.tag.lower() in _NO_TEXT_TAGS | _HEADING_TAGS.keys():
            continue
        names = [name.strip() for name in _ids(element) if name and name.strip() and name.strip() not in named]
        if not names or in_navigation(element):
            continue
        words = _marked_words(element)
        for name in dict.fromkeys(names) if words else ():
            named.add(name)
            found.append((name, words))
    return found


def page_links(
    html: str, main_text: str, origin: str = ""
) -> tuple[list[Link], list[tuple[str, tuple[str, ...]]], list[tuple[str, str]]]:
    """The links of ``html``, the ids of its headings (:func:`heading_ids`) and its other ids with the words they
    mark (:func:`element_ids`); ``main_text`` is what mining kept. A ``<base href>`` is joined to each link's
    ``href``, as a browser does.

    A page lxml cannot read has none of them (logged with ``origin``).
    """
    root = parse_page(html)
    if root is None:
        logger.info("%s: the page could not be parsed for its links; it has none", origin)
        return [], [], []
    kept = " ".join(main_text.split())
    # a <base href> is what a browser resolves every relative link against: the stored href is the joined one
    base = next((b.get("href").strip() for b in root.iter("base") if (b.get("href") or "").strip()), None)
    links = []
    for anchor in root.iter("a"):
        href = anchor.get("href")
        if href is None:
            continue
        text = link_text(anchor.text_content())
        navigation = in_navigation(anchor) or (bool(text) and text not in kept)
        links.append(Link(text, urljoin(base, href.strip()) if base else href.strip(), navigation))
    headings = heading_ids(root)
    return links, headings, element_ids(root, headings)


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


def element_anchors(
    elements: Sequence[tuple[str, str]],
    text: str,
    passage_spans: Sequence[tuple[int, int]],
    taken: Collection[str] = (),
) -> list[Anchor]:
    """Each id of :func:`element_ids` with the passage of the main text ``text`` that holds the words it marks.

    The words are looked up case-folded with the whitespace squashed, from where the previous element's were found
    (the page's order), else from the start; the passage is the first that ends after them. An id already in
    ``taken`` (a heading's), or whose words are not in the main text (trafilatura dropped them), is left out.

    Example:
        >>> text = "Built-ins\\n\\neval(expression)\\nRuns it."
        >>> element_anchors([("eval", "EVAL(expression)")], text, [(0, 9), (11, 36)])
        [Anchor(id='eval', first=1)]
    """
    words = list(re.finditer(r"\S+", text))
    folded = [match.group().casefold() for match in words]
    offsets = [0]
    for word in folded[:-1]:
        offsets.append(offsets[-1] + len(word) + 1)
    joined = " ".join(folded)
    ends = [stop for _, stop in passage_spans]
    anchors: list[Anchor] = []
    seen = set(taken)
    cursor = 0
    for name, marked in elements:
        if name in seen:
            continue
        wanted = " ".join(marked.split()).casefold()
        at = joined.find(wanted, cursor)
        if at < 0:
            at = joined.find(wanted)
        if at < 0 or not wanted:
            continue
        cursor = at
        where = words[bisect.bisect_right(offsets, at) - 1].start()
        first = bisect.bisect_right(ends, where)
        if first < len(passage_spans):
            seen.add(name)
            anchors.append(Anchor(name, first))
    return anchors
