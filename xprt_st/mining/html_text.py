"""Main-text extraction of HTML pages (trafilatura), with the flattening of pages nested past libxml2's limit."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from xprt_st.mining.headings import MAX_LEVEL, TextHeading, clean_heading

logger = logging.getLogger(__name__)


_BLOCK_TAGS = {"p", "head", "row", "code", "quote", "item", "list", "table", "div", "main", "cell"}
_CONTAINER_TAGS = {"main", "list", "item", "table", "quote", "div", "cell"}


def extract_main_text(html: str, origin: str = "") -> str | None:
    """The main text of an HTML page, one block (heading, paragraph, list item, table row) per paragraph.

    Uses trafilatura (the extractor FineWeb used) without comments, keeping tables; navigation bars,
    search boxes, sidebars and footers are dropped by its boilerplate detection. Blocks are separated
    by blank lines so the passage splitter follows the page's structure. Returns None when trafilatura
    finds no main text.
    """
    return extract_main_text_with_headings(html, origin)[0]


def extract_main_text_with_headings(html: str, origin: str = "") -> tuple[str | None, list[TextHeading], str | None]:
    """The main text of :func:`extract_main_text`, its ``<h1>``-``<h3>`` headings, and the page's title.

    Each heading carries the character offset of its block in the returned text, so the passages of its
    section can be found once the text is split (:func:`~xprt_st.mining.headings.sections`). The title is the
    first ``<h1>`` of the main text, else the page's ``<title>`` (None without either). A page that takes the
    deep-page fallback or whose extraction is unparsable has its text but no headings.
    """
    import trafilatura
    from lxml import etree

    options = {"include_comments": False, "include_tables": True}
    page_title = _page_title(html)
    if nesting_depth(html) > PARSER_DEPTH_LIMIT:
        xml, deep_text = _extract_deep_page(html, origin, options)
        if deep_text is not None:
            return deep_text, [], page_title
    else:
        xml = trafilatura.extract(html, output_format="xml", include_formatting=False, **options)
    if not xml:
        return None, [], page_title
    try:
        root = etree.fromstring(xml.encode("utf-8"))
    except etree.XMLSyntaxError as error:
        logger.warning("%s: trafilatura produced unparsable XML (%s); using its plain-text output", origin, error)
        text = trafilatura.extract(html, output_format="txt", include_comments=False, include_tables=True)
        return text, [], page_title
    main = root.find("main")
    blocks = [(text, level) for text, level in _xml_blocks(main if main is not None else root) if text]
    if not blocks:
        return None, [], page_title
    headings: list[TextHeading] = []
    offset = 0
    for text, level in blocks:
        if level is not None and level <= MAX_LEVEL and (heading := clean_heading(text)) is not None:
            headings.append(TextHeading(heading, level, offset))
        offset += len(text) + 2  # the blank line that joins the blocks
    first_h1 = next((h.text for h in headings if h.level == 1), None)
    return "\n\n".join(text for text, _ in blocks), headings, first_h1 or page_title


_TITLE_TAG = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_HEAD_LEVEL = re.compile(r"^h([1-6])$")


def _page_title(html: str) -> str | None:
    """The text of the page's ``<title>`` element, entities decoded; None without one."""
    import html as html_module

    match = _TITLE_TAG.search(html[:200_000])
    return clean_heading(html_module.unescape(re.sub(r"<[^>]+>", " ", match.group(1)))) if match else None


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


def _xml_blocks(element: Any) -> Iterator[tuple[str, int | None]]:
    """The blocks of trafilatura's XML, each with its heading level (``<head rend="h2">``: 2) or None."""
    if element.text and element.text.strip():
        yield _squash(element.text), None
    for child in element:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag == "row":
            yield " | ".join(_squash("".join(cell.itertext())) for cell in child), None
        elif tag in _CONTAINER_TAGS and any(isinstance(g.tag, str) and g.tag in _BLOCK_TAGS for g in child):
            yield from _xml_blocks(child)
        else:
            level = _HEAD_LEVEL.match(child.get("rend") or "") if tag == "head" else None
            yield _squash("".join(child.itertext())), int(level.group(1)) if level else None
        if child.tail and child.tail.strip():
            yield _squash(child.tail), None


def _squash(text: str) -> str:
    return " ".join(text.split())
