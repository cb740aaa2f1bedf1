"""Lexical references for retrieval evaluation: ``bm25`` and ``hybrid:MODEL`` as model names.

A search team's first question about a dense model is whether it beats BM25 on its own documents, and how far a
fusion of the two is ahead of both. These two names answer it through the same mteb run, per-query nDCG@10 and
paired intervals as any dense model (:func:`xprt_st.evaluation.run.evaluate_models`).

- ``bm25``: :class:`BM25Search`, the maintained ``bm25s`` package (tokenizer, stemmer, scoring) in mteb's search
  protocol, with the settings of :data:`BM25_SETTINGS` pinned (not detected from the task's language): the text
  indexed is ``title + "\\n" + text``; the tokenizer is bm25s's (lower case, the regular
  expression ``\\b\\w\\w+\\b``: words of two or more letters or digits); the 33 English stopwords of bm25s (Lucene's
  English stop set); the Snowball English stemmer of PyStemmer; Lucene's BM25 formula with ``k1 = 1.2`` and
  ``b = 0.75``. These are Elasticsearch's defaults with its ``english`` analyzer, the setting of BEIR's published
  BM25 figures, so the line reads against them; the differences that remain: Elasticsearch's standard tokenizer
  (which keeps one-letter words), its Porter stemmer with a possessive filter, and BEIR's two fields (title and
  text scored apart: the better field's score plus half the other's, ``best_fields`` with ``tie_breaker`` 0.5)
  against one field here. Only documents sharing a term with the query are returned, as Elasticsearch returns them.
- ``hybrid:MODEL``: :class:`HybridSearch` of BM25 and ``MODEL`` (any name ``evaluate`` takes, ``default``
  included), fused by reciprocal-rank fusion with ``k = 60`` and equal weights over each one's top 1,000 (mteb's
  ``top_k`` for retrieval). Why RRF: it reads only ranks, so it needs no calibration between BM25's unbounded scores
  and a cosine in [-1, 1], has no parameter fitted on labels (a team has none), and is the fusion the miner already
  uses (:func:`xprt_st.mining.scoring.reciprocal_rank_fusion`). Score fusions (mteb's ``dbsf``, ``rsf``) depend on
  the score distributions of each query's candidate list.

Both score retrieval tasks with labels only: an STS task has no ranking for BM25 to make, and the label-free tasks
(``mined:DIR``, ``titles:DIR``) compare a dense model's vectors.

Example:
    >>> parse_lexical_spec("hybrid:default")
    LexicalSpec(kind='hybrid', dense='default')
    >>> parse_lexical_spec("bm25"), parse_lexical_spec("./runs/model") is None
    (LexicalSpec(kind='bm25', dense=None), True)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from xprt_st.errors import XPRTError
from xprt_st.evaluation.model_kinds import MODEL_KINDS, ModelKind, find_model_kind, register_model_kind
from xprt_st.system_memory import available_ram_bytes

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

BM25 = "bm25"
"""The model name of the BM25 reference."""
HYBRID_PREFIX = "hybrid:"
"""``hybrid:MODEL``: BM25 fused with MODEL by reciprocal-rank fusion."""

BM25_SETTINGS: dict[str, Any] = {
    "stopwords": "en",
    "stemmer_language": "english",
    "k1": 1.2,
    "b": 0.75,
    "method": "lucene",
}
"""bm25s's settings: English stopwords, PyStemmer's Snowball English stemmer, Lucene's BM25 with Elasticsearch's
k1 and b."""

RRF_K = 60
"""The rank constant of reciprocal-rank fusion (Cormack et al. 2009's value, mteb's default)."""

BM25_BYTES_PER_CHARACTER = 10
"""Peak RAM that indexing adds per character of the corpus's text: tokens as Python lists, then bm25s's sparse
arrays. Measured 8.1 to 9.0 bytes on 20,000 and 60,000 synthetic documents of 120 words (``/proc`` peak RSS over
the RSS before indexing; docs/reliability.md, round 7), rounded up."""

GIB = 2**30

INSTALL_HINT = "pip install 'bm25s>=0.3.16' 'PyStemmer>=3.1.0'"
"""The line that installs what ``bm25`` and ``hybrid:MODEL`` need (both are dependencies of xprt-st)."""


class LexicalSpecError(XPRTError, ValueError):
    """A ``bm25`` or ``hybrid:MODEL`` name that cannot run: its packages are missing, or no dense model is named."""


class BM25MemoryError(XPRTError, MemoryError):
    """The BM25 index of a corpus would not fit the RAM still free (raised before tokenizing, instead of the
    kernel's out-of-memory kill some minutes later)."""


def check_bm25_memory(documents: int, characters: int, available: float | None) -> float:
    """The bytes indexing ``documents`` of ``characters`` in all should need (:data:`BM25_BYTES_PER_CHARACTER`);
    a :class:`BM25MemoryError` naming both figures and the fix where that is more than ``available`` (None:
    unknown, no check).

    Example:
        >>> check_bm25_memory(1_000, 700_000, available=2**30)
        7000000
        >>> check_bm25_memory(1_000_000, 700_000_000, available=2 * 2**30)
        Traceback (most recent call last):
        ...
        xprt_st.evaluation.lexical.BM25MemoryError: bm25: indexing 1,000,000 documents (700,000,000 characters) \
needs about 6.5 GiB of RAM, 2.0 GiB is free: evaluate on a sample (--max-corpus N keeps every judged document) or \
on a machine with more memory
    """
    needed = BM25_BYTES_PER_CHARACTER * characters
    if available is not None and needed > available:
        raise BM25MemoryError(
            f"bm25: indexing {documents:,} documents ({characters:,} characters) needs about {needed / GIB:.1f} GiB "
            f"of RAM, {available / GIB:.1f} GiB is free: evaluate on a sample (--max-corpus N keeps every judged "
            "document) or on a machine with more memory"
        )
    return needed


@dataclass(frozen=True)
class LexicalSpec:
    """A lexical model name, parsed: ``kind`` is ``"bm25"`` or ``"hybrid"``; ``dense`` the hybrid's dense model."""

    kind: str
    dense: str | None = None


def parse_lexical_spec(spec: object) -> LexicalSpec | None:
    """The :class:`LexicalSpec` of a registered model kind's name (``bm25``, ``hybrid:MODEL``: case as written;
    :mod:`xprt_st.evaluation.model_kinds`), else None (a dense model)."""
    found = find_model_kind(spec)
    if found is None:
        return None
    kind, dense = found
    return LexicalSpec(kind.name, dense)


def is_lexical_spec(spec: object) -> bool:
    """Whether ``spec`` names a registered model kind (``bm25``, ``hybrid:MODEL``) rather than a dense model."""
    return parse_lexical_spec(spec) is not None


def check_lexical_spec(spec: str) -> LexicalSpec:
    """Check a model kind's name before any work: its packages import (bm25s and PyStemmer for the two shipped
    here), a prefixed kind names its dense model.

    The dense model itself is checked by the caller (:func:`xprt_st.models.resolve_model_name`).

    Raises:
        LexicalSpecError: with the fix in one line.
    """
    parsed = parse_lexical_spec(spec)
    if parsed is None:
        known = " or ".join(repr(kind.spelling) for kind in MODEL_KINDS.values())
        raise LexicalSpecError(f"{spec!r} is not a lexical model name; give {known}")
    kind = MODEL_KINDS[parsed.kind]
    if kind.prefix is not None and not parsed.dense:
        raise LexicalSpecError(f"{spec!r} names no dense model; write {kind.spelling}, e.g. {kind.prefix}default")
    if kind.prefix is not None and is_lexical_spec(parsed.dense):
        raise LexicalSpecError(f"{spec!r}: the model after {kind.prefix!r} must be a dense model, not {parsed.dense!r}")
    if kind.check is not None:
        kind.check()
    return parsed


def _check_bm25_packages() -> None:
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError as error:
        raise LexicalSpecError(f"bm25 needs bm25s and PyStemmer ({error}): {INSTALL_HINT}") from error


def lexical_label(spec: str, dense_label: str | None = None) -> str:
    """The name in tables: a kind's own name (``bm25``), or its prefix and the dense model's own label."""
    parsed = parse_lexical_spec(spec)
    if parsed is None:
        return BM25
    prefix = MODEL_KINDS[parsed.kind].prefix
    return parsed.kind if prefix is None else prefix + (dense_label or str(parsed.dense))


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def bm25_revision(settings: dict[str, Any] | None = None) -> str:
    """A hash of all that decides BM25's ranking: the settings, the bm25s and PyStemmer versions and what
    :class:`BM25Search` returns (the mteb result cache's revision, so another setting or version is scored again)."""
    used = BM25_SETTINGS if settings is None else settings
    identity = [used, _package_version("bm25s"), _package_version("PyStemmer"), "matching documents only"]
    return hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _meta(name: str, revision: str) -> Any:  # noqa: ANN401 (mteb's ModelMeta, imported lazily)
    from mteb.models.model_meta import ModelMeta

    return ModelMeta.create_empty(overwrites={"name": name, "revision": revision})


def _query_texts(queries: Any) -> list[str]:  # noqa: ANN401 (a datasets.Dataset of mteb's queries)
    """The queries' text, with an instruction appended where a task gives one (as mteb does for its models)."""
    texts = list(queries["text"])
    if "instruction" in queries.column_names:
        texts = [t if i is None else f"{t} {i}" for t, i in zip(texts, queries["instruction"], strict=True)]
    return texts


class BM25Search:
    """BM25 over a task's corpus, in mteb's search protocol (``index`` then ``search``), computed by ``bm25s``.

    mteb ships a BM25 search model on bm25s too (``mteb.models.model_implementations.bm25.BM25Search``); this one
    differs in three ways: its settings are :data:`BM25_SETTINGS` whatever the task's language metadata says; its
    progress bars follow the evaluation's ``show_progress_bar`` (mteb's always draw); and it returns only the
    documents that share a term with the query, as Elasticsearch does, rather than every document with the ones
    that match nothing tied at 0 (whose order by id would otherwise decide some of a short query's top 10).
    """

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        """``settings`` replaces some of :data:`BM25_SETTINGS` (a study of them; ``None`` as ``stopwords`` or
        ``stemmer_language``: no stopword list, no stemmer); the references always use the stated ones."""
        self.settings = {**BM25_SETTINGS, **(settings or {})}
        unknown = set(self.settings) - set(BM25_SETTINGS)
        if unknown:
            raise ValueError(f"unknown BM25 settings {sorted(unknown)}; known: {sorted(BM25_SETTINGS)}")
        self.mteb_model_meta = _meta("xprt-st/bm25", bm25_revision(self.settings))
        self._ids: list[str] = []
        self._retriever: Any = None
        self._indexed = False
        """Whether the corpus had a term to index; without one every query finds nothing."""
        self._stemmer: Any = None

    def _tokenize(self, texts: list[str], *, ids: bool, show: bool) -> Any:  # noqa: ANN401 (bm25s's tokens)
        import bm25s

        return bm25s.tokenize(
            texts, stopwords=self.settings["stopwords"], stemmer=self._stemmer, return_ids=ids, show_progress=show
        )

    def index(self, corpus: Any, *, encode_kwargs: dict[str, Any], **kwargs: Any) -> None:  # noqa: ANN401
        """Tokenize and index ``title + "\\n" + text`` of every document (mteb's hook)."""
        import bm25s
        import Stemmer

        show = bool(encode_kwargs.get("show_progress_bar", False))
        language = self.settings["stemmer_language"]
        self._stemmer = None if language is None else Stemmer.Stemmer(language)
        self._ids = [str(doc_id) for doc_id in corpus["id"]]
        titles = corpus["title"] if "title" in corpus.column_names else [""] * len(self._ids)
        texts = [f"{title or ''}\n{text}" for title, text in zip(titles, corpus["text"], strict=True)]
        check_bm25_memory(len(texts), sum(map(len, texts)), available_ram_bytes())
        settings = {key: self.settings[key] for key in ("k1", "b", "method")}
        tokens = self._tokenize(texts, ids=True, show=show)
        self._retriever = bm25s.BM25(**settings)
        if not tokens.vocab:  # bm25s cannot index a corpus without a term (max() of an empty sequence)
            logger.warning(
                "bm25: none of the %d documents has a term BM25 indexes (a word of two or more letters or digits "
                "that is not a stopword): it finds no document for any query, and scores 0",
                len(self._ids),
            )
            return
        self._retriever.index(tokens, show_progress=show)
        self._indexed = True

    def search(
        self,
        queries: Any,  # noqa: ANN401 (a datasets.Dataset of mteb's queries)
        *,
        top_k: int,
        encode_kwargs: dict[str, Any],
        top_ranked: dict[str, list[str]] | None = None,
        **kwargs: Any,  # noqa: ANN401 (mteb's other hook arguments, unused)
    ) -> dict[str, dict[str, float]]:
        """Each query's ``top_k`` documents with a BM25 score above 0 (mteb's hook); with ``top_ranked`` (a
        reranking task), only the documents it lists for the query."""
        if self._retriever is None:
            raise RuntimeError("BM25Search.search before index: mteb indexes the corpus first")
        if not self._indexed:
            return {query_id: {} for query_id in queries["id"]}
        show = bool(encode_kwargs.get("show_progress_bar", False))
        tokens = self._tokenize(_query_texts(queries), ids=False, show=show)
        found, scores = self._retriever.retrieve(tokens, k=min(top_k, len(self._ids)), show_progress=show)
        results: dict[str, dict[str, float]] = {}
        for row, query_id in enumerate(queries["id"]):
            allowed = set(top_ranked[query_id]) if top_ranked and query_id in top_ranked else None
            results[query_id] = {
                self._ids[doc]: float(score)
                for doc, score in zip(found[row], scores[row], strict=True)
                if score > 0 and (allowed is None or self._ids[doc] in allowed)
            }
        return results


class HybridSearch:
    """BM25 and a dense model fused by reciprocal-rank fusion, in mteb's search protocol.

    The fusion is mteb's own (``mteb.models.hybrid_wrappers.fuse_rrf``: ``sum_m w_m / (k + rank_m(d))`` with equal
    weights, a document absent from one list getting nothing from it, ties ordered by descending id); the class
    differs from mteb's ``HybridSearch`` only in drawing no progress bars of its own.
    """

    def __init__(self, dense: SentenceTransformer, *, name: str, dense_revision: str) -> None:
        from mteb.models import SentenceTransformerEncoderWrapper
        from mteb.models.search_wrappers import SearchEncoderWrapper

        self.lexical = BM25Search()
        self.dense = SearchEncoderWrapper(SentenceTransformerEncoderWrapper(dense))
        revision = hashlib.sha1(f"rrf{RRF_K}:{bm25_revision()}:{dense_revision}".encode()).hexdigest()[:16]
        self.mteb_model_meta = _meta(name, revision)

    def index(self, corpus: Any, **kwargs: Any) -> None:  # noqa: ANN401 (mteb's corpus Dataset and hook arguments)
        """Index the corpus in both models (mteb's hook)."""
        self.lexical.index(corpus, **kwargs)
        self.dense.index(corpus, **kwargs)

    def search(self, queries: Any, *, top_k: int, **kwargs: Any) -> dict[str, dict[str, float]]:  # noqa: ANN401
        """Each query's ``top_k`` documents by fused score, from each model's top ``max(top_k, 100)`` (mteb's hook)."""
        from mteb.models.hybrid_wrappers import fuse_rrf

        depth = max(top_k, 100)
        lists = [model.search(queries, top_k=depth, **kwargs) for model in (self.lexical, self.dense)]
        results: dict[str, dict[str, float]] = {}
        for query_id in queries["id"]:
            fused = fuse_rrf([found.get(query_id, {}) for found in lists], [0.5, 0.5], rrf_k=RRF_K)
            ranked = sorted(fused.items(), key=lambda item: (item[1], item[0]), reverse=True)[:top_k]
            results[query_id] = dict(ranked)
        return results


def bm25_search() -> BM25Search:
    """The BM25 search model with :data:`BM25_SETTINGS`, keyed ``xprt-st/bm25`` at :func:`bm25_revision`."""
    return BM25Search()


def hybrid_search(dense: SentenceTransformer, *, key_name: str, dense_revision: str) -> HybridSearch:
    """BM25 and ``dense`` fused by reciprocal-rank fusion (:data:`RRF_K`, equal weights).

    Args:
        dense: the loaded dense model.
        key_name: the mteb result key's name (``xprt-st/hybrid-<label>``).
        dense_revision: the dense model's fingerprint; with :func:`bm25_revision` it makes the key's revision.
    """
    return HybridSearch(dense, name=key_name, dense_revision=dense_revision)


register_model_kind(
    ModelKind(
        BM25, "BM25 over the task's corpus (bm25s, Lucene's formula)", search=bm25_search, check=_check_bm25_packages
    )
)
register_model_kind(
    ModelKind(
        "hybrid",
        "BM25 fused with a dense model by reciprocal ranks",
        search=hybrid_search,
        prefix=HYBRID_PREFIX,
        check=_check_bm25_packages,
    )
)
