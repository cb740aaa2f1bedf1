"""Link texts as structure pairs: each link resolved within the corpus to the first passage of its target.

``xprt-st mine --structure links`` reads the links the split stage kept of every HTML page
(:mod:`xprt_st.mining.links`) and pairs a link's text with the first passage of the page it points at, or, with a
``#fragment``, of the section whose heading carries that id, else the passage that holds the element carrying it
(an API entry's ``<dt id>``). The target is found by the page's id (a file's path,
a zip member's path, the ``--id-field`` value): the ``href`` resolved against the linking page's id as a relative
URL would be (``../library/os.html`` from ``python3.11/html/reference/import.html``), a link to a folder as its
``index.html``, or the ``href`` itself as an id. The group's label is the target page's, so the same-document mask
keeps the target's other passages from being the link's negatives.

A link is dropped, and counted by reason (:data:`LINK_DROPS`), when it is navigation (outside the main text), its
text is empty, too long or generic, its target is no page of the corpus, it points at its own page without a
fragment, its target is a held-out page, its fragment names no heading or element of the target, the positive is
its own text, or the same text already points at the same passage. Held-out pages contribute no links either (the
caller skips them), so the held-out contract holds on both ends.

Example:
    >>> resolve("docs/ref/import.html", "../lib/os.html#files")
    ('docs/lib/os.html', 'files')
    >>> resolve("docs/ref/import.html", "https://example.com/")
    (None, '')
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urljoin, urlsplit

from xprt_st.mining.links import Link

MAX_LINK_WORDS = 12
"""Longer link texts are sentences that hold a link, not a name for its target."""
GENERIC_LINK_TEXTS = frozenset(
    {
        "here",
        "click here",
        "this",
        "this link",
        "link",
        "links",
        "more",
        "read more",
        "learn more",
        "see",
        "see here",
        "next",
        "previous",
        "prev",
        "back",
        "up",
        "top",
        "back to top",
        "index",
        "home",
        "contents",
        "source",
        "[source]",
        "download",
        "edit",
        "permalink",
        "details",
        "documentation",
        "website",
    }
)
"""Link texts that say where a link goes, not what is there (compared case-folded, end punctuation off)."""
LINK_DROPS = (
    "navigation",
    "empty",
    "too_long",
    "generic",
    "outside_corpus",
    "same_page",
    "held_out_target",
    "unknown_fragment",
    "same_as_passage",
    "duplicate",
)
"""Why a link makes no pair, in the order they are tested (``stats.json``: ``structure.dropped.link``)."""
_OUTSIDE_SCHEMES = ("mailto", "javascript", "tel", "data", "ftp", "news", "irc")


def page_key(doc_id: str) -> str:
    """A page id as links name it: a URL without its query and fragment, or a path normalised (``a/./b`` = ``a/b``)."""
    parts = urlsplit(doc_id)
    if parts.scheme and parts.netloc:
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}{posixpath.normpath(unquote(parts.path) or '/')}"
    return posixpath.normpath(unquote(doc_id))


def resolve(base: str, href: str) -> tuple[str | None, str]:
    """``href`` on the page ``base`` as ``(the key of the page it names, its fragment)``; the key is ``base``'s own
    for a fragment-only link, and None for a link that can name no page of the corpus (``mailto:``, a URL on
    another site of a corpus whose ids are paths)."""
    href = href.strip()
    parts = urlsplit(href)
    fragment = unquote(parts.fragment)
    if parts.scheme.lower() in _OUTSIDE_SCHEMES:
        return None, fragment
    if not parts.path and not parts.netloc:  # "#section", "?page=2", "": this page
        return page_key(base), fragment
    base_is_url = bool(urlsplit(base).scheme and urlsplit(base).netloc)
    if parts.scheme or parts.netloc:
        return (page_key(href) if base_is_url else None), fragment
    if base_is_url:
        return page_key(urljoin(base, href)), fragment
    path = unquote(parts.path)
    joined = path if path.startswith("/") else posixpath.join(posixpath.dirname(page_key(base)), path)
    return posixpath.normpath(joined) + ("/" if path.endswith("/") else ""), fragment


def text_drop_reason(text: str) -> str | None:
    """Why a link's ``text`` names nothing (``empty``: no letter, ``too_long``, ``generic``), or None."""
    if not any(character.isalpha() for character in text):
        return "empty"
    if len(text.split()) > MAX_LINK_WORDS:
        return "too_long"
    if " ".join(text.split()).casefold().rstrip(".:;!?»›→ ") in GENERIC_LINK_TEXTS:
        return "generic"
    return None


@dataclass(slots=True)
class Page:
    """What a link's target needs of a page: its label, whether it is held out, its first passage and anchors."""

    label: int
    held_out: bool
    first: str
    anchors: dict[str, str] = field(default_factory=dict)
    """Each heading id of the page with the first passage of its section, each other id with its passage."""


@dataclass(frozen=True, slots=True)
class LinkPair:
    """A resolved link: its text (the anchor), the target page's label and the target passage's text."""

    anchor: str
    label: int
    positive: str


def find_page(pages: Mapping[str, Page], key: str, href: str, source: str = "") -> Page | None:
    """The page ``key`` names: itself, its ``index.html`` (a folder), or ``href`` taken as a page id. A root-relative
    key (``/b.html``, as wget mirrors write links) of a corpus whose ids are paths is looked up under the linking
    page's top folder (``site/b.html`` from ``site/a/c.html``), then as a path from the corpus root (``b.html``)."""
    keys = [key]
    if key.startswith("/") and not source.startswith("/") and "://" not in source:
        top = source.split("/", 1)[0] if "/" in source else ""
        keys = [posixpath.join(top, key.lstrip("/")), key.lstrip("/")] if top else [key.lstrip("/")]
    for root in keys:
        for candidate in (root.rstrip("/"), posixpath.join(root, "index.html")):
            if candidate in pages:
                return pages[candidate]
    candidate = page_key(href.split("#", 1)[0])
    return pages.get(candidate)


def link_pairs(
    links: Iterable[tuple[str, Link]], pages: Mapping[str, Page], same_passage: Callable[[str, str], bool]
) -> tuple[list[LinkPair], Counter[str]]:
    """The pairs of ``links`` (``(linking page key, link)``, training pages only) and the drops by reason.

    ``pages`` maps each page key (:func:`page_key`) of the corpus, held-out pages included, to its :class:`Page`;
    ``same_passage(anchor, passage)`` says when a passage is its anchor's own text.
    """
    pairs: list[LinkPair] = []
    dropped: Counter[str] = Counter()
    seen: set[tuple[str, int, str]] = set()
    for source, link in links:
        reason, pair = _link_pair(source, link, pages, same_passage)
        if pair is not None:
            key = (" ".join(pair.anchor.split()).casefold(), pair.label, pair.positive)
            if key in seen:
                reason, pair = "duplicate", None
            else:
                seen.add(key)
                pairs.append(pair)
        if reason is not None:
            dropped[reason] += 1
    return pairs, dropped


def _link_pair(
    source: str, link: Link, pages: Mapping[str, Page], same_passage: Callable[[str, str], bool]
) -> tuple[str | None, LinkPair | None]:
    if link.navigation:
        return "navigation", None
    reason = text_drop_reason(link.text)
    if reason is not None:
        return reason, None
    key, fragment = resolve(source, link.target)
    page = find_page(pages, key, link.target, source) if key is not None else None
    if page is None:
        return "outside_corpus", None
    if pages.get(source) is page and not fragment:
        return "same_page", None
    if page.held_out:
        return "held_out_target", None
    positive = page.anchors.get(fragment) if fragment else page.first
    if positive is None:
        return "unknown_fragment", None
    if same_passage(link.text, positive):
        return "same_as_passage", None
    return None, LinkPair(link.text, page.label, positive)
