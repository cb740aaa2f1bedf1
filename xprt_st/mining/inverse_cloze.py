"""Query-shaped anchors: one sentence of an anchor passage as the query, the passage BM25 puts first as its positive.

The inverse cloze task (Lee, Chang and Toutanova 2019, "Latent Retrieval for Weakly Supervised Open Domain
Question Answering", section 4): a sentence drawn from a passage is a pseudo-query, and the rest of the passage
(the sentence removed 90% of the time, kept 10%, so the model also learns that shared words matter) its positive.
What the paper does and this module differs in:

- **The positive is the lexical ranker's choice, not always the sentence's own passage.** Every passage of the
  anchor's document is a candidate, the anchor's own passage as its context (the sentence removed), and the
  candidates are ranked by the sentence's BM25 against each (:func:`xprt_st.mining.bm25.bm25_scores`: the corpus's
  hashed document frequencies, the document's own mean passage length, as ``--rank-by bm25``). The context wins
  when the sentence's words are the surrounding passage's; another passage wins when its words fit better. The
  ``top_k`` best are the group's related passages, the first the positive.
- **Within the document, not across the corpus**: the groups keep the mined groups' shape (a document's label,
  same-document masking in L_xp, hard negatives from other documents), so a positive from another document would
  be both a positive and a masked-out candidate of another row.
- **Sentences** are split at ``.``, ``!`` or ``?`` followed by white space (no abbreviation list); a query needs
  :data:`MIN_QUERY_WORDS` words. A passage with no such sentence beside another (a code listing, a table, one long
  sentence) gives a run of :data:`SPAN_WORDS` consecutive words instead, about a short query's length.
- **The same anchors as the mined groups** (centrality at or above the threshold), one group each in the same order,
  so the two differ only in the anchor's shape and where the positive comes from (and a comparison's retention text,
  read row by row from the mined groups, fits); the random draws are seeded by ``(seed, document label)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from xprt_st.mining.bm25 import bm25_scores

MIN_QUERY_WORDS = 4
"""Words a sentence needs to be a query (shorter ones are headings, list items or cut-off fragments)."""
SPAN_WORDS = 12
"""Words of the query cut from a passage without a query-shaped sentence (the Python FAQ's queries: 11 tokens)."""
REMOVE_PROBABILITY = 0.9
"""How often the query sentence is removed from its own passage when that passage is a related one (ICT's 90%)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by white space, empty pieces dropped.

    Example:
        >>> split_sentences("Tea has caffeine. Does coffee?  Yes!")
        ['Tea has caffeine.', 'Does coffee?', 'Yes!']
    """
    return [piece.strip() for piece in _SENTENCE_END.split(text) if piece.strip()]


def cloze_query(passage: str, rng: np.random.Generator, min_words: int = MIN_QUERY_WORDS) -> tuple[str, str, bool]:
    """The query cut from ``passage``, the passage without it (the context), and whether the query is a sentence.

    A sentence of ``min_words`` or more words, drawn uniformly, when the passage has one and another sentence beside
    it; else :data:`SPAN_WORDS` consecutive words at a uniform start (a passage that short is both sides whole).

    Example:
        >>> cloze_query("Green tea is rich in catechins. Drink it hot.", np.random.default_rng(0))
        ('Green tea is rich in catechins.', 'Drink it hot.', True)
    """
    sentences = split_sentences(passage)
    eligible = [i for i, sentence in enumerate(sentences) if len(sentence.split()) >= min_words]
    if len(sentences) >= 2 and eligible:
        chosen = eligible[int(rng.integers(len(eligible)))]
        return sentences[chosen], " ".join(s for i, s in enumerate(sentences) if i != chosen), True
    words = passage.split()
    length = max(min_words, min(SPAN_WORDS, len(words) // 3))
    if len(words) <= length:
        return passage, passage, False
    start = int(rng.integers(len(words) - length + 1))
    return " ".join(words[start : start + length]), " ".join(words[:start] + words[start + length :]), False


@dataclass(slots=True)
class ClozeGroup:
    """One query-shaped group: the query, its related passages best first, and what was shown of the own passage."""

    query: str
    related: list[int]
    """Passage indices of the document, BM25 of the query against each, best first (the anchor's own included)."""
    texts: list[str]
    """The related passages' texts as trained on: the anchor's own passage as its context when the sentence is
    removed."""
    scores: list[float]
    removed: bool
    """Whether the query was removed from the anchor's own passage."""
    sentence: bool
    """Whether the query is a sentence (else a run of words)."""

    def texts_of_group(self, top_k: int) -> list[str]:
        """The group's training texts: the query, then ``top_k`` related passages (the last repeated, as mined)."""
        return [self.query, *self.texts, *[self.texts[-1]] * (top_k - len(self.texts))]

    def meta(self, label: int, doc_id: str, anchor: int, centrality: float) -> dict[str, object]:
        """The group's ``groups_meta.jsonl`` line: the mined group's keys, the BM25 scores and the removal."""
        return {
            "label": label,
            "doc_id": doc_id,
            "kind": "inverse-cloze",
            "anchor_index": anchor,
            "related_indices": self.related,
            "num_related": len(self.related),
            "centrality": centrality,
            "bm25_scores": self.scores,
            "sentence_removed": self.removed,
            "query_is_sentence": self.sentence,
        }


def inverse_cloze_group(
    passages: Sequence[str],
    anchor: int,
    top_k: int,
    rng: np.random.Generator,
    counts: Callable[[Sequence[str]], sparse.spmatrix],
    idf: np.ndarray,
    remove_probability: float = REMOVE_PROBABILITY,
) -> ClozeGroup:
    """The query-shaped group of passage ``anchor`` of one document (the module doc).

    Args:
        passages: the document's passages.
        anchor: the anchor passage's index.
        top_k: related passages kept (fewer when the document has fewer passages).
        rng: the document's generator (the sentence drawn, then whether it is removed).
        counts: term counts of texts in the corpus's hash columns (``TfidfScorer.counts``).
        idf: BM25 IDF per hash column (:func:`~xprt_st.mining.bm25.bm25_idf` of the corpus's frequencies).
        remove_probability: how often the sentence is removed from the anchor's own passage.
    """
    query, context, sentence = cloze_query(passages[anchor], rng)
    removed = bool(rng.random() < remove_probability)
    candidates = [context if i == anchor else text for i, text in enumerate(passages)]
    passage_counts = sparse.csr_matrix(counts(candidates))
    average = float(passage_counts.sum()) / max(len(candidates), 1)
    scores = bm25_scores(counts([query]), passage_counts, idf, average)[0]  # (n,)
    order = np.argsort(-scores, kind="stable")[:top_k]
    shown = [passages[anchor] if i == anchor and not removed else candidates[i] for i in order.tolist()]
    return ClozeGroup(query, [int(i) for i in order], shown, [float(scores[i]) for i in order], removed, sentence)
