"""Lexical references for retrieval evaluation: ``bm25`` and ``hybrid:MODEL`` as model names.

A search team's first question about a dense model is whether it beats BM25 on its own documents, and how far a
fusion of the two is ahead of both. These two names answer it through the same mteb run, per-query nDCG@10 and
paired intervals as any dense model (:func:`xprt_st.evaluation.run.evaluate_models`).

- ``bm25``: mteb's BM25 search model (``mteb.models.model_implementations.bm25.BM25Search``), built on the
  maintained ``bm25s`` package, with the settings of :data:`BM25_SETTINGS` pinned (not detected from the task's
  language): the text indexed is ``title + "\\n" + text``; the tokenizer is bm25s's (lower case, the regular
  expression ``\\b\\w\\w+\\b``: words of two or more letters or digits); the 33 English stopwords of bm25s (Lucene's
  English stop set); the Snowball English stemmer of PyStemmer; Lucene's BM25 formula with ``k1 = 1.2`` and
  ``b = 0.75``. These are Elasticsearch's defaults with its ``english`` analyzer, the setting of BEIR's published
  BM25 figures, so the line reads against them; the differences that remain: Elasticsearch's standard tokenizer
  (which keeps one-letter words), its Porter stemmer with a possessive filter, and BEIR's two fields (title and
  text scored apart, the better one taken) against one field here.
- ``hybrid:MODEL``: mteb's ``HybridSearch`` of BM25 and ``MODEL`` (any name ``evaluate`` takes, ``default``
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
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

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
"""The arguments of mteb's ``BM25Search``: English stopwords and Snowball stemmer, Elasticsearch's k1 and b."""

RRF_K = 60
"""The rank constant of reciprocal-rank fusion (Cormack et al. 2009's value, mteb's default)."""

INSTALL_HINT = "pip install 'bm25s>=0.3.16' 'PyStemmer>=3.1.0'"
"""The line that installs what ``bm25`` and ``hybrid:MODEL`` need (both are dependencies of xprt-st)."""


class LexicalSpecError(ValueError):
    """A ``bm25`` or ``hybrid:MODEL`` name that cannot run: its packages are missing, or no dense model is named."""


@dataclass(frozen=True)
class LexicalSpec:
    """A lexical model name, parsed: ``kind`` is ``"bm25"`` or ``"hybrid"``; ``dense`` the hybrid's dense model."""

    kind: str
    dense: str | None = None


def parse_lexical_spec(spec: object) -> LexicalSpec | None:
    """The :class:`LexicalSpec` of ``bm25`` or ``hybrid:MODEL`` (case as written), else None (a dense model)."""
    if not isinstance(spec, str):
        return None
    if spec == BM25:
        return LexicalSpec(BM25)
    if spec.startswith(HYBRID_PREFIX):
        return LexicalSpec("hybrid", spec[len(HYBRID_PREFIX) :])
    return None


def is_lexical_spec(spec: object) -> bool:
    """Whether ``spec`` names ``bm25`` or ``hybrid:MODEL`` rather than a dense model."""
    return parse_lexical_spec(spec) is not None


def check_lexical_spec(spec: str) -> LexicalSpec:
    """Check a lexical name before any work: bm25s and PyStemmer import, a hybrid names its dense model.

    The dense model itself is checked by the caller (:func:`xprt_st.models.resolve_model_name`).

    Raises:
        LexicalSpecError: with the fix in one line.
    """
    parsed = parse_lexical_spec(spec)
    if parsed is None:
        raise LexicalSpecError(f"{spec!r} is not a lexical model name; give {BM25!r} or '{HYBRID_PREFIX}MODEL'")
    if parsed.kind == "hybrid" and not parsed.dense:
        raise LexicalSpecError(
            f"{spec!r} names no dense model; write {HYBRID_PREFIX}MODEL, e.g. {HYBRID_PREFIX}default"
        )
    if parsed.kind == "hybrid" and is_lexical_spec(parsed.dense):
        raise LexicalSpecError(f"{spec!r}: the second model of a hybrid must be a dense model, not {parsed.dense!r}")
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError as error:
        raise LexicalSpecError(f"{spec!r} needs bm25s and PyStemmer ({error}): {INSTALL_HINT}") from error
    return parsed


def lexical_label(spec: str, dense_label: str | None = None) -> str:
    """The name in tables: ``bm25``, or ``hybrid:`` and the dense model's own label."""
    parsed = parse_lexical_spec(spec)
    if parsed is None or parsed.kind == BM25:
        return BM25
    return HYBRID_PREFIX + (dense_label or str(parsed.dense))


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def bm25_revision() -> str:
    """A hash of all that decides BM25's ranking: the settings and the bm25s and PyStemmer versions (the mteb
    result cache's revision, so another setting or version is scored again)."""
    identity = [BM25_SETTINGS, _package_version("bm25s"), _package_version("PyStemmer")]
    return hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _with_meta(search: Any, name: str, revision: str) -> Any:  # noqa: ANN401 (mteb's search models share no base)
    from mteb.models.model_meta import ModelMeta

    search.mteb_model_meta = ModelMeta.create_empty(overwrites={"name": name, "revision": revision})
    return search


def bm25_search() -> Any:  # noqa: ANN401 (mteb's BM25Search, imported lazily)
    """mteb's BM25 search model with :data:`BM25_SETTINGS`, keyed ``xprt-st/bm25`` at :func:`bm25_revision`."""
    from mteb.models.model_implementations.bm25 import BM25Search

    return _with_meta(BM25Search(**BM25_SETTINGS), "xprt-st/bm25", bm25_revision())


def hybrid_search(dense: SentenceTransformer, *, key_name: str, dense_revision: str) -> Any:  # noqa: ANN401
    """mteb's ``HybridSearch`` of BM25 and ``dense`` by reciprocal-rank fusion (:data:`RRF_K`, equal weights).

    Args:
        dense: the loaded dense model.
        key_name: the mteb result key's name (``xprt-st/hybrid-<label>``).
        dense_revision: the dense model's fingerprint; with :func:`bm25_revision` it makes the key's revision.
    """
    from mteb.models import SentenceTransformerEncoderWrapper
    from mteb.models.hybrid_wrappers import HybridSearch

    search = HybridSearch([bm25_search(), SentenceTransformerEncoderWrapper(dense)], fusion_strategy="rrf", rrf_k=RRF_K)
    revision = hashlib.sha1(f"rrf{RRF_K}:{bm25_revision()}:{dense_revision}".encode()).hexdigest()[:16]
    return _with_meta(search, key_name, revision)
