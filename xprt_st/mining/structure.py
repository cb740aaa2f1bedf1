"""Structure pairs: the queries a corpus already holds (titles, headings, link texts) paired with a passage.

A document's title and headings, and the texts of the links that point at it, were written by people to say what
the text is about; they are query-shaped and free (E5's CCPairs and GTE train on (title, passage) pairs, HLP on
anchor texts). ``xprt-st mine --structure titles,headings,links`` turns the sections that mining already maps to
passages (:mod:`xprt_st.mining.headings`) and the links of HTML pages (:mod:`xprt_st.mining.links`) into training
groups of the mined dataset's schema (``anchor``, ``positive``, ``related_2`` ..., ``label``):

- a title's positive is the document's most central passage (the first one when the document has one
  passage, which has no centrality);
- a heading's positive is the first passage of its section;
- a link's positive is the first passage of the page it points at, or of the section its ``#fragment`` names,
  resolved within the corpus (:mod:`xprt_st.mining.link_targets`); its label is the target page's.

A positive that begins with its own anchor (the extractors keep a heading's line in the text) has that copy cut
off (:func:`positive_text`), so the pair is not solved by copying words.

Every related column repeats the positive, as a mined group of a short document does, so any recipe that reads
the mined groups reads these. The ``label`` is the document's (a link's: its target page's), so the same-document
mask keeps a document's other passages from being its own title's negatives. Held-out documents (``--holdout``)
contribute none, neither their own titles, headings and links nor as a link's target: the held-out contract of
``titles:DIR`` holds. Titles and headings of the training documents are then what the model trains on, so
``titles:DIR`` on a structure-trained model is of the objective's own kind (as ``mined:DIR`` is for mined
positives).

A title or heading is dropped when it is empty, longer than :data:`MAX_ANCHOR_WORDS` words, or generic
(:data:`GENERIC_ANCHORS`: "Introduction", "See also", navigation words), when it is the positive's own text, or
when the same text is the title or heading of another training document (``shared``, :func:`shared_anchors`); a
link for the reasons of :data:`~xprt_st.mining.link_targets.LINK_DROPS`. Each drop is counted by kind and reason.

Example:
    >>> from xprt_st.mining.headings import Section
    >>> pairs, counts = document_pairs(
    ...     ["Tea is a drink.", "Green tea is not fermented."], [0.7, 0.9],
    ...     [Section("Tea", 0, 0, 2), Section("Contents", 2, 0, 1), Section("Green tea", 2, 1, 2)],
    ...     ("titles", "headings"))
    >>> [(p.kind, p.anchor, p.positive) for p in pairs]
    [('title', 'Tea', 1), ('heading', 'Green tea', 1)]
    >>> counts["dropped"]
    {'heading': {'generic': 1}}
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xprt_st.mining.derived import DERIVED_FROM, source_folder
from xprt_st.mining.headings import from_heading, section_opening
from xprt_st.mining.layout import STRUCTURE_DIR

STRUCTURE_RULES = 2
"""The version of the pairing rules (2: ``shared`` titles and headings dropped); ``DIR/structure`` written under other
rules is written again, not reused."""
STRUCTURE_KINDS = ("titles", "headings", "links")
"""What ``--structure`` accepts (links: of HTML pages mined with ``--html``)."""
MAX_ANCHOR_WORDS = 24
"""Longer titles and headings read as sentences of the text, not as what a passage is about."""
GENERIC_ANCHORS = frozenset(
    {
        "introduction",
        "overview",
        "contents",
        "table of contents",
        "see also",
        "references",
        "external links",
        "further reading",
        "notes",
        "footnotes",
        "navigation",
        "navigation menu",
        "menu",
        "home",
        "index",
        "next",
        "previous",
        "next topic",
        "previous topic",
        "this page",
        "quick search",
        "related",
        "summary",
        "abstract",
        "appendix",
        "examples",
        "example",
        "acknowledgements",
        "acknowledgments",
        "untitled",
    }
)
"""Headings that say where a passage sits, not what it is about (compared case-folded, end punctuation off)."""


@dataclass(frozen=True, slots=True)
class StructurePair:
    """One title or heading pair: its kind (``title`` or ``heading``), anchor text and positive passage index."""

    kind: str
    anchor: str
    positive: int


def parse_kinds(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"titles,links"`` (or a list) as the kinds in :data:`STRUCTURE_KINDS` order; raises ValueError on others."""
    if value is None:
        return ()
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [name.strip().lower() for name in names if name.strip()]
    unknown = [name for name in names if name not in STRUCTURE_KINDS]
    if unknown:
        raise ValueError(
            f"--structure: {', '.join(unknown)} is not one of {', '.join(STRUCTURE_KINDS)}; "
            "give e.g. --structure titles,headings,links"
        )
    return tuple(kind for kind in STRUCTURE_KINDS if kind in names)


def drop_reason(anchor: str) -> str | None:
    """Why ``anchor`` makes no structure pair (``empty``, ``too_long``, ``generic``), or None when it does."""
    words = anchor.split()
    if not words:
        return "empty"
    if len(words) > MAX_ANCHOR_WORDS:
        return "too_long"
    if " ".join(words).casefold().rstrip(".:;!?") in GENERIC_ANCHORS:
        return "generic"
    return None


def positive_text(passage: str, anchor: str) -> str:
    """``passage`` without a leading copy of ``anchor`` (and Markdown ``#`` marks, and the permalink mark or dash
    after it), when text remains after it.

    The extractors keep a heading's line in the text, so a section's first passage begins with the heading; left
    there, the pair is solved by copying the words, not by what the passage is about.
    """
    body = passage.lstrip().lstrip("#").lstrip()
    if body.casefold().startswith(anchor.casefold()) and body[len(anchor) :].strip():
        return body[len(anchor) :].lstrip(" \t\r\n:.-—–¶🔗")  # a Sphinx heading ends in "¶", a title "x — y"
    return passage


def document_pairs(
    passages: Sequence[str], centralities: Sequence[float], sections: Sequence[Any], kinds: Sequence[str]
) -> tuple[list[StructurePair], dict[str, Any]]:
    """The structure pairs of one document and what was kept and dropped, by kind and reason.

    Args:
        passages: the document's passages.
        centralities: each passage's centrality (NaN when not scored).
        sections: its :class:`~xprt_st.mining.headings.Section` list (title first).
        kinds: the kinds asked for (:func:`parse_kinds`).
    """
    pairs: list[StructurePair] = []
    kept: Counter[str] = Counter()
    dropped: dict[str, Counter[str]] = {}
    finite = [(c, -i) for i, c in enumerate(centralities) if not math.isnan(c)]
    central = -max(finite)[1] if finite else 0
    for section in sections:
        kind = "title" if section.is_title else "heading"
        if f"{kind}s" not in kinds or section.first >= len(passages):
            continue
        positive = central if section.is_title else section_opening(passages, section)
        reason = drop_reason(section.text)
        if reason is None and same_text(section.text, passages[positive]):
            reason = "same_as_passage"
        if reason is not None:
            dropped.setdefault(kind, Counter())[reason] += 1
            continue
        kept[kind] += 1
        pairs.append(StructurePair(kind, section.text, positive))
    return pairs, {"kept": dict(kept), "dropped": {k: dict(v) for k, v in dropped.items()}}


def anchor_key(anchor: str) -> str:
    """What makes two titles or headings the same text: case-folded, whitespace squashed, end punctuation off."""
    return " ".join(anchor.split()).casefold().rstrip(".:;!?")


def shared_anchors(anchors: Iterable[tuple[str, int]]) -> set[str]:
    """The :func:`anchor_key` of every title or heading text that ``anchors`` (``(text, document label)``) give to
    more than one document.

    Such a text names no one document: ArguAna's titles are its debates' topic words, each the title of 13
    arguments on average, and "Module contents" heads many pages of a library's documentation. As an anchor its
    positive is one of several documents it fits equally, and the others are in-batch or hard negatives that are
    not negatives, so :func:`write_structure_groups` drops every pair of such a text (``shared``). A text repeated
    within one document (two sections headed "Usage") is kept: the same-document mask covers it.

    Example:
        >>> sorted(shared_anchors([("Tax policy", 1), ("tax  policy.", 2), ("Usage", 3), ("Usage", 3)]))
        ['tax policy']
    """
    labels: dict[str, set[int]] = {}
    for text, label in anchors:
        labels.setdefault(anchor_key(text), set()).add(label)
    return {key for key, owners in labels.items() if len(owners) > 1}


def same_text(anchor: str, passage: str) -> bool:
    """Whether ``passage`` is ``anchor``'s own text (whitespace aside): no pair, the words would be copied."""
    return " ".join(anchor.split()) == " ".join(passage.split())


def add_counts(total: dict[str, Any], counts: dict[str, Any]) -> None:
    """Add one document's ``counts`` (from :func:`document_pairs`) into ``total`` in place."""
    for kind, n in counts["kept"].items():
        total["kept"][kind] = total["kept"].get(kind, 0) + n
    for kind, reasons in counts["dropped"].items():
        into = total["dropped"].setdefault(kind, {})
        for reason, n in reasons.items():
            into[reason] = into.get(reason, 0) + n


def structure_line(counts: dict[str, Any], folder: str | Path) -> str:
    """One line on what ``--structure`` wrote: the groups by kind and the drops, or that the corpus has none."""
    if not counts["groups"]:
        return f"structure: {counts['note']}; {folder}/{STRUCTURE_DIR} was not written"
    kept = ", ".join(f"{n} {kind}s" for kind, n in counts["kept"].items())
    dropped = sum(n for reasons in counts["dropped"].values() for n in reasons.values())
    return (
        f"structure: {counts['groups']} groups ({kept}; {dropped} dropped, by reason in stats.json's structure) "
        f"in {folder}/{STRUCTURE_DIR}: train with --mined {folder}/{STRUCTURE_DIR}"
    )


def links_problem(folder: str | Path, kinds: Sequence[str]) -> str | None:
    """Why ``--structure links`` cannot read the stored run of ``folder`` (mined before links were kept), or None."""
    import pyarrow.parquet as pq

    from xprt_st.mining.layout import PASSAGES_FILE, MiningLayout

    if "links" not in kinds:
        return None
    layout = MiningLayout(Path(folder))
    stored = layout.stored_settings()
    chunks = layout.chunk_dirs(int(stored["num_shards"])) if stored else []
    if chunks and "links" not in pq.read_schema(chunks[0] / PASSAGES_FILE).names:
        return (
            f"--structure links: {folder} was mined before the split stage kept link targets; mine again into a "
            "new folder (or drop links from --structure)"
        )
    return None


def write_structure_groups(
    folder: str | Path,
    kinds: Sequence[str],
    *,
    hard_negatives: int = 0,
    model: Any = None,
    max_ratio: float = 0.95,
    precision: str | None = None,
) -> dict[str, Any]:
    """Write the structure groups of the merged mining folder ``folder`` to ``folder/structure``; returns the counts.

    ``folder/structure`` is a mined folder of its own (the dataset and a ``stats.json`` whose ``settings`` say
    ``pairs: structure``), trained with ``--mined folder/structure``. The counts (kept by kind, dropped by kind
    and reason, held-out documents skipped) are also written under ``structure`` in ``folder/stats.json``.
    A corpus without titles or headings gets an empty count and no dataset, and the counts say so.
    ``hard_negatives=K`` adds ``negative_1 .. negative_K``
    (:func:`~xprt_st.mining.hard_negatives.structure_negatives`), encoded in ``precision`` (auto, fp32, bf16:
    :mod:`xprt_st.precision`; None: that of mining's stored vectors, which are then reused).
    """
    import shutil

    import datasets

    from xprt_st.columns import ANCHOR, LABEL, negative_columns
    from xprt_st.mining.holdout import is_held_out
    from xprt_st.mining.layout import STATS_FILE, MiningLayout, atomic_write_json, read_stats
    from xprt_st.mining.link_targets import Page, link_pairs, page_key
    from xprt_st.mining.merge import group_features, related_columns
    from xprt_st.mining.stages import anchors_of, links_of, sections_of

    folder = Path(folder)
    stats = read_stats(folder)
    if stats is None:
        raise FileNotFoundError(f"{folder} is not a merged mining folder (no {STATS_FILE}): mine it first")
    problem = links_problem(folder, kinds)
    if problem is not None:
        raise ValueError(problem)
    settings = stats.get("settings", {})
    previous = read_stats(folder / STRUCTURE_DIR)
    if previous is not None and _same_structure(previous, stats, kinds, hard_negatives):
        return previous["structure"]  # written from this merge with these settings: nothing to encode again
    holdout, seed = float(settings.get("holdout") or 0.0), int(settings.get("seed", 0))
    layout = MiningLayout(folder)
    stored = layout.require_run()
    top_k = int(stored["top_k"])
    text_columns = [ANCHOR, *related_columns(top_k)]
    rows: dict[str, list[Any]] = {name: [] for name in [*text_columns, LABEL]}
    total: dict[str, Any] = {"kinds": list(kinds), "kept": {}, "dropped": {}, "heldout_documents_skipped": 0}
    if "links" in kinds:
        total["heldout_links_skipped"] = 0
    columns = ["label", "doc_id", "text", "centrality", "headings"] + (["links", "anchors"] if "links" in kinds else [])
    pages: dict[str, Page] = {}  # every page a link can name (held-out ones too: their links are counted dropped)
    links: list[tuple[str, Any]] = []  # (linking page key, link) of the training pages
    pending: list[tuple[str, str, str, int]] = []  # (kind, anchor, positive, label) of the titles and headings

    def add_row(anchor: str, positive: str, label: int) -> None:
        rows[ANCHOR].append(anchor)
        for name in text_columns[1:]:
            rows[name].append(positive_text(positive, anchor))
        rows[LABEL].append(label)

    for table in layout.iter_passages(int(stored["num_shards"]), columns):
        data = table.to_pydict()
        start, n_rows = 0, len(data["label"])
        while start < n_rows:
            stop = start + 1
            while stop < n_rows and data["label"][stop] == data["label"][start]:
                stop += 1
            label, passages = int(data["label"][start]), data["text"][start:stop]
            sections = sections_of(data["headings"][start])
            own_links = links_of(data["links"][start]) if "links" in data else []
            held = holdout > 0 and is_held_out(data["doc_id"][start], holdout, seed)
            if "links" in data:
                anchors = {
                    a.id: passages[a.first] for a in anchors_of(data["anchors"][start]) if a.first < len(passages)
                }
                pages[page_key(data["doc_id"][start])] = Page(label, held, passages[0], anchors)
            if held:
                total["heldout_documents_skipped"] += bool(sections or own_links)
                if "links" in kinds:
                    total["heldout_links_skipped"] += len(own_links)
            else:
                links += [(page_key(data["doc_id"][start]), link) for link in own_links]
                pairs, counts = document_pairs(passages, data["centrality"][start:stop], sections, kinds)
                add_counts(total, counts)
                pending += [(pair.kind, pair.anchor, passages[pair.positive], label) for pair in pairs]
            start = stop
    shared = shared_anchors((anchor, label) for _, anchor, _, label in pending)
    for kind, anchor, positive, label in pending:
        if anchor_key(anchor) in shared:
            add_counts(total, {"kept": {kind: -1}, "dropped": {kind: {"shared": 1}}})
        else:  # a heading's positive from its line on: a small token window starts in the section before
            add_row(anchor, from_heading(positive, anchor) if kind == "heading" else positive, label)
    total["kept"] = {kind: n for kind, n in total["kept"].items() if n}
    if "links" in kinds:
        resolved, dropped = link_pairs(links, pages, same_text)
        total["links_found"] = len(links)
        add_counts(total, {"kept": {"link": len(resolved)} if resolved else {}, "dropped": {"link": dict(dropped)}})
        for pair in resolved:
            add_row(pair.anchor, pair.positive, pair.label)
    total["groups"] = len(rows[LABEL])
    total["documents_with_pairs"] = len(set(rows[LABEL]))
    if not total["groups"]:
        read = " (links are read from HTML pages mined with --html)" if "links" in kinds else ""
        total["note"] = f"the corpus has no {' or '.join(kinds)} to pair (none found, or every one dropped){read}"
    target = folder / STRUCTURE_DIR
    if target.is_dir():
        shutil.rmtree(target)
    if total["groups"]:
        features = group_features(top_k)
        if hard_negatives > 0:
            from xprt_st.mining.hard_negatives import structure_negatives

            negatives, total["hard_negatives"] = structure_negatives(
                folder, rows, hard_negatives, model, max_ratio, precision
            )
            for k, column in enumerate(negative_columns(hard_negatives)):
                rows[column] = [chosen[k] for chosen in negatives]
                features[column] = datasets.Value("string")
        dataset = datasets.Dataset.from_dict(rows, features=features)
        dataset.save_to_disk(str(target))
        own = {**stats, "settings": {**settings, "pairs": "structure", "structure": ",".join(kinds)}}
        own[DERIVED_FROM] = ".."
        own["settings"]["structure_rules"] = STRUCTURE_RULES
        own["groups"] = total["groups"]
        own["structure"] = total
        own.pop("hard_negatives", None)
        own["settings"]["hard_negatives"] = hard_negatives
        atomic_write_json(target / STATS_FILE, own)
    stats.setdefault("settings", {})["structure"] = ",".join(kinds)
    stats["structure"] = total
    atomic_write_json(folder / STATS_FILE, stats)
    return total


def _same_structure(previous: dict[str, Any], stats: dict[str, Any], kinds: Sequence[str], negatives: int) -> bool:
    """Whether ``previous`` (a ``structure/stats.json``) was written from the merge ``stats`` with these settings."""
    own = dict(previous.get("settings", {}))
    if own.get("structure") != ",".join(kinds) or int(own.get("hard_negatives") or 0) != negatives:
        return False
    if own.get("structure_rules", 1) != STRUCTURE_RULES:
        return False
    ignored = {"pairs", "structure", "hard_negatives", "hard_negative_max_ratio", "structure_rules"}
    merged = {k: v for k, v in stats.get("settings", {}).items() if k not in ignored}
    return all(own.get(k) == v for k, v in merged.items()) and previous.get("threshold") == stats.get("threshold")


def mixed_rows(mined: int, structure: int, ratio: float, seed: int) -> tuple[list[int], list[int]]:
    """Which mined and structure rows make a mix whose structure share is ``ratio``: every mined row once, and
    ``round(ratio / (1 - ratio) * mined)`` structure rows drawn without replacement while they last (each once per
    round), then shuffled with the rest by the batch sampler. With no mined row, every structure row once.

    Example:
        >>> mixed_rows(6, 4, 0.5, 0)[1]
        [2, 0, 1, 3, 3, 2]
    """
    import numpy as np

    if not 0.0 < ratio < 1.0:
        raise ValueError(f"structure_mix={ratio} is not in (0, 1)")
    if structure == 0:
        raise ValueError("a structure mix needs structure groups; the corpus has none")
    wanted = round(ratio / (1.0 - ratio) * mined) if mined else structure
    rng = np.random.default_rng(seed)
    rounds = -(-wanted // structure)
    drawn = np.concatenate([rng.permutation(structure) for _ in range(rounds)])[:wanted]
    return list(range(mined)), [int(i) for i in drawn]


def write_mixed_groups(
    structure_folder: str | Path, mined_folder: str | Path, target: str | Path, ratio: float, seed: int = 0
) -> dict[str, Any]:
    """Write ``target``: the mined groups of ``mined_folder`` and the structure groups of ``structure_folder``, the
    structure share ``ratio`` (:func:`mixed_rows`), for recipe ``structure-mixed``; returns its ``stats.json``.

    Both datasets must have the same columns (hard negatives in both, or in neither). The sampler shuffles the
    rows, so each batch holds about ``ratio`` structure groups (``ratio x batch size`` in expectation).
    """
    import shutil

    import datasets

    from xprt_st.mining.layout import STATS_FILE, atomic_write_json, read_stats

    mined = datasets.load_from_disk(str(mined_folder))
    structure = datasets.load_from_disk(str(structure_folder))
    if set(mined.column_names) != set(structure.column_names):
        raise ValueError(
            f"{mined_folder} has columns {mined.column_names} but {structure_folder} {structure.column_names}: "
            "give both the same --hard-negatives"
        )
    mined_rows, structure_rows = mixed_rows(len(mined), len(structure), ratio, seed)
    mixed = datasets.concatenate_datasets(
        [mined.select(mined_rows), structure.select(structure_rows).cast(mined.features)]
    )
    if (target := Path(target)).is_dir():
        shutil.rmtree(target)
    mixed.save_to_disk(str(target))
    stats = read_stats(structure_folder) or {}
    settings = {**stats.get("settings", {}), "pairs": "structure-mixed", "structure_mix": ratio}
    own = {**stats, "settings": settings, "groups": len(mixed)}
    if (source := source_folder(structure_folder)) is not None:  # whose documents the labels are
        own[DERIVED_FROM] = os.path.relpath(source, target)
    own["structure_mix"] = {"ratio": ratio, "mined_groups": len(mined_rows), "structure_groups": len(structure_rows)}
    atomic_write_json(target / STATS_FILE, own)
    return own
