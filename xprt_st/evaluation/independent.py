"""An independent check of mteb's numbers: brute-force cosine ranking, nDCG@10 by hand, scipy Spearman.

Nothing here goes through mteb: embeddings come from ``SentenceTransformer.encode`` (L2-normalised),
scores are a numpy matrix product, rankings a sort, nDCG@10 the formula of
:func:`xprt_st.evaluation.analysis.ndcg_at_k` and Spearman ``scipy.stats.spearmanr``. The only thing
copied from mteb's conventions is what the task defines: a document's text is title and text joined,
a query's own id is never a result when ``ignore_identical_ids`` is set, and tied scores are ordered as
trec_eval orders them (by document id, descending), since ArguAna holds duplicate documents.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer

from xprt_st.evaluation.analysis import ndcg_at_k
from xprt_st.evaluation.readers import BEIRData, STSData


def rank_documents(
    scores: np.ndarray,
    doc_ids: Sequence[str],
    *,
    k: int = 10,
    exclude: str | None = None,
    ties: str = "trec_eval",
) -> list[str]:
    """Top ``k`` document ids by score; ``exclude`` is never returned.

    Args:
        scores: one score per document, aligned with ``doc_ids``.
        doc_ids: the documents' ids.
        k: how many ids to return.
        exclude: an id never returned (ArguAna: the query's own argument).
        ties: ``"trec_eval"`` orders equal scores by document id descending (what pytrec_eval, hence
            mteb, does); ``"ascending"`` by id ascending (to measure how much ties matter).
    """
    if ties not in {"trec_eval", "ascending"}:
        raise ValueError(f"ties must be 'trec_eval' or 'ascending', got {ties!r}")
    budget = min(len(doc_ids), k + 1 + 64)
    # a generous candidate pool so that ties straddling the k-th position are all seen
    candidates = np.argpartition(-scores, budget - 1)[:budget] if budget < len(doc_ids) else np.arange(len(doc_ids))
    threshold = scores[candidates].min()
    pool = np.nonzero(scores >= threshold)[0]
    # two stable sorts: ids first (the tie order), then scores
    ordered = sorted(pool.tolist(), key=lambda i: doc_ids[i], reverse=ties == "trec_eval")
    ordered.sort(key=lambda i: -float(scores[i]))
    return [doc_ids[i] for i in ordered if doc_ids[i] != exclude][:k]


def encode_normalized(model: SentenceTransformer, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """``model.encode`` with L2 normalisation, as float32 numpy."""
    return model.encode(
        list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    ).astype(np.float32)


def independent_ndcg_at_10(
    model: SentenceTransformer,
    data: BEIRData,
    *,
    ignore_identical_ids: bool = False,
    batch_size: int = 64,
    ties: str = "trec_eval",
) -> tuple[float, dict[str, float]]:
    """Mean nDCG@10 over the queries of ``data`` and the per-query values, by brute-force cosine ranking."""
    doc_ids = list(data.corpus)
    query_ids = list(data.qrels)
    doc_embeddings = encode_normalized(model, [data.document_text(d) for d in doc_ids], batch_size)
    query_embeddings = encode_normalized(model, [data.queries[q] for q in query_ids], batch_size)
    per_query: dict[str, float] = {}
    for start in range(0, len(query_ids), 256):
        block = query_embeddings[start : start + 256] @ doc_embeddings.T
        for offset, scores in enumerate(block):
            qid = query_ids[start + offset]
            ranking = rank_documents(scores, doc_ids, exclude=qid if ignore_identical_ids else None, ties=ties)
            per_query[qid] = ndcg_at_k(ranking, data.qrels[qid], 10)
    return float(np.mean(list(per_query.values()))), per_query


def independent_sts_spearman(model: SentenceTransformer, data: STSData, *, batch_size: int = 64) -> float:
    """Spearman correlation between gold scores and the cosine of the two sentences' embeddings."""
    first = encode_normalized(model, data.sentence1, batch_size)
    second = encode_normalized(model, data.sentence2, batch_size)
    cosine = (first * second).sum(axis=1)
    return float(spearmanr(data.score, cosine).statistic)
