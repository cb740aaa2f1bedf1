"""What a document goes through, as stages that take records and give records and counts.

A stage never knows who runs it: no path, shard, rank, engine or progress bar appears here. The
engines (:mod:`xprt_st.mining.engines`) decide which records a stage sees and where its output is
stored (:mod:`xprt_st.mining.layout`).

1. :class:`DocumentSplitter`: input records -> :class:`Document` records (HTML extracted, passages cut,
   de-duplicated and capped, the title and headings mapped to their passages, an HTML page's links and
   heading anchors kept), with the counts of what was read, skipped and repaired.
2. :func:`document_frequencies`: documents -> hashed document frequencies (summed over the corpus
   into one TF-IDF, whatever the split of the work).
3. :func:`score_chunk`: documents -> one row per passage with its centrality and its ``top_k``
   related passages as if it were an anchor, batch by batch (:data:`PASSAGE_SCHEMA`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from xprt_st.mining.bm25 import bm25_idf, bm25_matrices
from xprt_st.mining.groups import MIN_PASSAGES, rank_all_passages
from xprt_st.mining.headings import Section, markdown_headings, plain_title, sections
from xprt_st.mining.html_text import extract_main_text_with_headings
from xprt_st.mining.links import Anchor, Link, element_anchors, heading_anchors, page_links
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.records import RawRecord, is_plain_document
from xprt_st.mining.scoring import TfidfScorer, tfidf_cosines


@dataclass(slots=True)
class Document:
    """One document after splitting: its label (ordinal in the whole input), id, origin and passages."""

    label: int
    doc_id: str
    origin: str
    passages: list[str]
    token_counts: list[int]
    token_ids: np.ndarray | None = None
    """The passages' token ids end to end (``token_counts[i]`` each), or None.

    See :attr:`~xprt_st.mining.passages.SplitResult.token_ids`."""

    def passage_ids(self) -> list[np.ndarray | None]:
        """Each passage's token ids (views into :attr:`token_ids`), or None per passage without them."""
        if self.token_ids is None:
            return [None] * len(self.passages)
        ends = np.cumsum(self.token_counts)
        return [self.token_ids[end - n : end] for end, n in zip(ends, self.token_counts, strict=True)]

    headings: list[Section] = field(default_factory=list)
    """The title and section headings with the passages each covers (:mod:`xprt_st.mining.headings`)."""
    links: list[Link] = field(default_factory=list)
    """An HTML page's links, text and target (:mod:`xprt_st.mining.links`); empty for other documents."""
    anchors: list[Anchor] = field(default_factory=list)
    """The ids of an HTML page's headings with the first passage of each section (what a ``#fragment`` names)."""


HEADINGS_TYPE = pa.list_(
    pa.struct([("text", pa.string()), ("level", pa.int32()), ("first", pa.int32()), ("stop", pa.int32())])
)
"""A document's :class:`~xprt_st.mining.headings.Section` list as stored (an empty list without any)."""


LINKS_TYPE = pa.list_(pa.struct([("text", pa.string()), ("target", pa.string()), ("navigation", pa.bool_())]))
"""A document's :class:`~xprt_st.mining.links.Link` list as stored (an empty list without any)."""
ANCHORS_TYPE = pa.list_(pa.struct([("id", pa.string()), ("first", pa.int32())]))
"""A document's :class:`~xprt_st.mining.links.Anchor` list as stored (an empty list without any)."""


def headings_column(documents: Sequence[Document]) -> list[list[dict[str, Any]]]:
    """Each document's sections as plain dicts, the values of a :data:`HEADINGS_TYPE` column."""
    return [
        [{"text": h.text, "level": h.level, "first": h.first, "stop": h.stop} for h in doc.headings]
        for doc in documents
    ]


def links_column(documents: Sequence[Document]) -> list[list[dict[str, Any]]]:
    """Each document's links as plain dicts, the values of a :data:`LINKS_TYPE` column."""
    return [[{"text": x.text, "target": x.target, "navigation": x.navigation} for x in doc.links] for doc in documents]


def anchors_column(documents: Sequence[Document]) -> list[list[dict[str, Any]]]:
    """Each document's anchors as plain dicts, the values of an :data:`ANCHORS_TYPE` column."""
    return [[{"id": a.id, "first": a.first} for a in doc.anchors] for doc in documents]


def links_of(values: list[dict[str, Any]] | None) -> list[Link]:
    """The links of one stored :data:`LINKS_TYPE` value (None, from a file written without them: none)."""
    return [Link(v["text"], v["target"], bool(v["navigation"])) for v in values or []]


def anchors_of(values: list[dict[str, Any]] | None) -> list[Anchor]:
    """The anchors of one stored :data:`ANCHORS_TYPE` value (None, from a file written without them: none)."""
    return [Anchor(v["id"], int(v["first"])) for v in values or []]


def sections_of(values: list[dict[str, Any]] | None) -> list[Section]:
    """The sections of one stored :data:`HEADINGS_TYPE` value (None, from a file written without them: none)."""
    return [Section(v["text"], int(v["level"]), int(v["first"]), int(v["stop"])) for v in values or []]


PASSAGE_SCHEMA = pa.schema(
    [
        ("label", pa.int64()),
        ("doc_id", pa.string()),
        ("origin", pa.string()),
        ("passage_index", pa.int32()),
        ("text", pa.string()),
        ("n_tokens", pa.int32()),
        ("centrality", pa.float64()),
        ("related", pa.list_(pa.int32())),
        ("embedding_scores", pa.list_(pa.float64())),
        ("tfidf_scores", pa.list_(pa.float64())),
        ("fused_scores", pa.list_(pa.float64())),
        ("nearest", pa.int32()),
        ("headings", HEADINGS_TYPE),
        ("links", LINKS_TYPE),
        ("anchors", ANCHORS_TYPE),
    ]
)
"""One scored passage: what :func:`score_chunk` gives and what the merge reads. ``headings``, ``links`` and
``anchors`` hold the document's title and headings, links and heading anchors on the row of its first passage, and
are empty on the others. ``nearest`` is the passage the embedding cosine ranks first for this passage as an anchor
(-1 without a ranking; null in chunks scored before it was kept)."""

SPLIT_SCHEMA = pa.schema(
    [
        ("label", pa.int64()),
        ("doc_id", pa.string()),
        ("origin", pa.string()),
        ("passages", pa.list_(pa.string())),
        ("token_counts", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
        ("headings", HEADINGS_TYPE),
        ("links", LINKS_TYPE),
        ("anchors", ANCHORS_TYPE),
    ]
)
"""One split document, as stored between the split stage and the scoring stage."""


class DocumentSplitter:
    """Input records -> documents with passages (the first step inside a mining engine, not a command's stage of
    :mod:`xprt_st.pipeline`); :attr:`counts` says what was read, skipped and repaired.

    Args:
        splitter: the passage splitter (with the mining model's tokenizer and token budget).
        html: extract the main text of raw HTML pages first.
    """

    def __init__(self, splitter: PassageSplitter, html: bool) -> None:
        self.splitter = splitter
        self.html = html
        self._counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self._repairs: Counter[str] = Counter()
        self._text_fields: Counter[str] = Counter()
        self._documents_with_passages = 0

    def run(self, records: Iterable[RawRecord]) -> Iterator[Document]:
        """The documents of ``records`` that have at least one passage, in input order."""
        for record in records:
            document = self.split(record)
            if document is not None:
                yield document

    def split(self, record: RawRecord) -> Document | None:
        self._counts["documents"] += 1
        if record.repair:
            self._repairs[record.repair] += 1
        if record.skip or record.text is None:
            self.skipped[record.skip or "missing_text_field"] += 1
            return None
        if record.text_field is not None:
            self._text_fields[record.text_field] += 1
        self._counts["duplicate_documents"] += record.repeats_text
        self._counts["duplicate_ids"] += record.repeats_id
        text, title = record.text, record.title
        links: list[Link] = []
        ids: list[tuple[str, tuple[str, ...]]] = []
        elements: list[tuple[str, str]] = []
        if self.html and not is_plain_document(record):
            if not text.strip():  # an empty page: a document with no text, not a parser's three ERROR lines
                self.skipped["empty"] += 1
                return None
            text, marks, page_title = extract_main_text_with_headings(text, record.origin)
            if text is None:
                # a page cut at the read cap (a huge inline attribute or data: URI) lost its text to the cut
                self.skipped["html_cut_before_main_text" if record.bytes_not_read else "html_no_main_text"] += 1
                return None
            title = title or page_title
            links, ids, elements = page_links(record.text, text, record.origin)
        else:
            marks = markdown_headings(text)
            if title is None:  # a Markdown page's first "# ..." is its title, as an HTML page's first <h1>
                title = next((m.text for m in marks if m.level == 1), None) if marks else plain_title(text)
        split = self.splitter.split(text)
        self._counts["duplicate_passages_removed"] += split.duplicates_removed
        if split.truncated:
            self._counts["documents_truncated"] += 1
            self._counts["characters_over_cap"] += split.characters_over_cap
        if not split.passages:
            self.skipped["empty"] += 1
            return None
        if len(split.passages) < MIN_PASSAGES:
            self.skipped["single_passage"] += 1
        self._counts["passages"] += len(split.passages)
        self._documents_with_passages += 1
        found = sections(marks, title, split.spans, len(text))
        anchors = heading_anchors(marks, ids, split.spans, len(text))
        anchors += element_anchors(elements, text, split.spans, {anchor.id for anchor in anchors})
        return Document(
            record.ordinal,
            record.doc_id,
            record.origin,
            split.passages,
            split.token_counts,
            split.token_ids,
            headings=found,
            links=links,
            anchors=anchors,
        )

    @property
    def counts(self) -> dict[str, Any]:
        """The counts so far, in the shape ``stats.json`` sums (see :func:`~xprt_st.mining.stats.sum_counts`)."""
        return {
            **dict(self._counts),
            "skipped": dict(self.skipped),
            "repairs": dict(self._repairs),
            "text_fields": dict(self._text_fields),
            "documents_with_passages": self._documents_with_passages,
        }


def document_frequencies(documents: Iterable[Document]) -> TfidfScorer:
    """The hashed document frequencies of the documents' passages (one passage = one TF-IDF document)."""
    return TfidfScorer().partial_fit([p for doc in documents for p in doc.passages])


def passage_slices(documents: Sequence[Document], passages_per_call: int) -> list[tuple[int, int]]:
    """Runs of whole documents holding about ``passages_per_call`` passages: one encoder call each."""
    slices, start, total = [], 0, 0
    for i, doc in enumerate(documents):
        total += len(doc.passages)
        if total >= passages_per_call:
            slices.append((start, i + 1))
            start, total = i + 1, 0
    if start < len(documents):
        slices.append((start, len(documents)))
    return slices


@dataclass
class ScoredBatch:
    """The scored rows of a run of documents (:data:`PASSAGE_SCHEMA`) and what it cost."""

    table: pa.Table
    documents: int
    encode_seconds: float
    vectors: np.ndarray | None = None
    """One L2-normalised vector per row of ``table`` (NaN rows: passages not encoded); None when none was."""


def score_chunk(
    documents: Sequence[Document],
    encode: Callable[[list[str], list[np.ndarray | None]], np.ndarray],
    scorer: TfidfScorer,
    *,
    top_k: int,
    rank_by: str,
    encodes: bool,
    passages_per_call: int,
) -> Iterator[ScoredBatch]:
    """Encode and rank every passage of every document, a few thousand passages per encoder call.

    Every document with at least two passages gets its passages' centralities and, for each
    passage, its ``top_k`` related passages (fused embedding and corpus TF-IDF ranking) as if it
    were an anchor, so the threshold can change later without encoding again. Documents of one
    passage (or every document, when ``encodes`` is false) keep a NaN centrality and no ranking.
    ``encode(passages, token_ids)`` returns L2-normalised vectors (``token_ids``: each passage's ids
    from the splitter, or None); it sorts each call by length, as sentence-transformers does, so the
    batches (and the vectors) are those of any engine that calls with the same documents.
    """
    for start, stop in passage_slices(documents, passages_per_call):
        batch_docs = documents[start:stop]
        scored = [d for d in batch_docs if len(d.passages) >= MIN_PASSAGES and encodes]
        flat = [p for d in scored for p in d.passages]
        flat_ids = [ids for d in scored for ids in d.passage_ids()]
        tick = time.perf_counter()
        vectors = encode(flat, flat_ids) if flat else np.zeros((0, 1), dtype=np.float32)
        seconds = time.perf_counter() - tick
        sizes = [len(d.passages) for d in scored]
        cosines = tfidf_cosines(scorer.transform(flat), sizes) if flat else []
        lexical: list[np.ndarray | None] = [None] * len(scored)
        if rank_by == "bm25" and flat:
            idf = bm25_idf(scorer.document_frequencies, scorer.passages)
            lexical = list(bm25_matrices(scorer.counts(flat), sizes, idf))
        offset = 0
        rankings: dict[int, tuple[np.ndarray, list[Any]]] = {}
        for doc, doc_tfidf, doc_bm25 in zip(scored, cosines, lexical, strict=True):
            n = len(doc.passages)
            rankings[doc.label] = rank_all_passages(vectors[offset : offset + n], doc_tfidf, top_k, rank_by, doc_bm25)
            offset += n
        rows: dict[str, list[Any]] = {name: [] for name in PASSAGE_SCHEMA.names}
        kept = _row_vectors(batch_docs, scored, vectors) if flat else None
        for doc in batch_docs:
            scores, ranked = rankings.get(doc.label, (None, []))
            for i, text in enumerate(doc.passages):
                ranking = ranked[i] if ranked else None
                rows["label"].append(doc.label)
                rows["doc_id"].append(doc.doc_id)
                rows["origin"].append(doc.origin)
                rows["passage_index"].append(i)
                rows["text"].append(text)
                rows["n_tokens"].append(doc.token_counts[i])
                rows["centrality"].append(float(scores[i]) if scores is not None else float("nan"))
                rows["related"].append(ranking.related if ranking else [])
                rows["embedding_scores"].append(ranking.embedding_scores if ranking else [])
                rows["tfidf_scores"].append(ranking.tfidf_scores if ranking else [])
                rows["fused_scores"].append(ranking.fused_scores if ranking else [])
                rows["nearest"].append(ranking.nearest if ranking else -1)
                rows["headings"].extend(headings_column([doc]) if i == 0 else [[]])
                rows["links"].extend(links_column([doc]) if i == 0 else [[]])
                rows["anchors"].extend(anchors_column([doc]) if i == 0 else [[]])
        yield ScoredBatch(pa.table(rows, schema=PASSAGE_SCHEMA), len(batch_docs), seconds, kept)


def _row_vectors(batch_docs: Sequence[Document], scored: Sequence[Document], vectors: np.ndarray) -> np.ndarray:
    """The encoded vectors placed at their documents' rows of the batch; NaN rows for documents not encoded."""
    encoded = {doc.label for doc in scored}
    out = np.full((sum(len(d.passages) for d in batch_docs), vectors.shape[1]), np.nan, dtype=np.float32)
    row = offset = 0
    for doc in batch_docs:
        n = len(doc.passages)
        if doc.label in encoded:
            out[row : row + n] = vectors[offset : offset + n]
            offset += n
        row += n
    return out
