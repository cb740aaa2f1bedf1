"""The paper's formulas against hand-computed values: centrality, corpus TF-IDF, reciprocal-rank fusion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xprt_st.mining.groups import document_groups, rank_related, select_anchors
from xprt_st.mining.scoring import (
    TfidfScorer,
    centrality,
    cosine_matrix,
    descending_ranks,
    reciprocal_rank_fusion,
    tfidf_cosine,
)


def test_rrf_worked_example_of_the_paper():
    # A: 1st by cosine, 6th by TF-IDF; B: 2nd on both. k = 10, weights 2 (cosine) and 1 (TF-IDF).
    fused = reciprocal_rank_fusion([np.array([1, 2]), np.array([6, 2])], weights=(2, 1), k=10)
    assert fused[0] == pytest.approx(2 / 11 + 1 / 16)
    assert fused[1] == pytest.approx(0.25)
    assert round(fused[0], 3) == 0.244
    assert fused[1] > fused[0]


def test_rank_related_orders_by_fused_score_with_the_worked_example():
    # Passage 0 is the anchor; candidates 1..7. A = passage 1, B = passage 2.
    emb = np.array([0.95, 0.90, 0.5, 0.4, 0.3, 0.2, 0.1])
    tfidf = np.array([0.4, 0.8, 0.9, 0.7, 0.6, 0.5, 0.3])  # ranks: A 6th, B 2nd, passage 3 1st
    n = 8
    emb_cos, tfidf_cos = np.eye(n), np.eye(n)
    emb_cos[0, 1:] = emb
    tfidf_cos[0, 1:] = tfidf
    ranking = rank_related(0, emb_cos, tfidf_cos, top_k=4, rank_by="fused")
    # B 0.25 > passage 3 (2/13 + 1/11 = 0.2448) > A (0.2443) > passage 4 (2/14 + 1/13)
    assert ranking.related == [2, 3, 1, 4]
    assert ranking.fused_scores[0] == pytest.approx(0.25)
    assert ranking.fused_scores[1] == pytest.approx(2 / 13 + 1 / 11)
    assert ranking.fused_scores[2] == pytest.approx(2 / 11 + 1 / 16)
    assert ranking.embedding_scores[0] == pytest.approx(0.90)
    assert ranking.tfidf_scores[2] == pytest.approx(0.4)
    assert rank_related(0, emb_cos, tfidf_cos, top_k=2, rank_by="embedding").related == [1, 2]
    assert rank_related(0, emb_cos, tfidf_cos, top_k=2, rank_by="tfidf").related == [3, 2]


def test_descending_ranks_are_one_based_and_stable_on_ties():
    assert descending_ranks(np.array([0.1, 0.9, 0.5, 0.9])).tolist() == [4, 1, 3, 2]


def test_centrality_on_hand_vectors():
    # Mean of (1,0), (0,1), (1,0), (1,0) is (0.75, 0.25): cos = 3/sqrt(10) and 1/sqrt(10).
    vectors = np.array([[2.0, 0.0], [0.0, 5.0], [1.0, 0.0], [3.0, 0.0]])  # norms do not matter
    scores = centrality(vectors)
    assert scores == pytest.approx([3 / math.sqrt(10), 1 / math.sqrt(10), 3 / math.sqrt(10), 3 / math.sqrt(10)])
    assert select_anchors(scores, 0.825).tolist() == [0, 2, 3]
    assert cosine_matrix(vectors)[0, 1] == pytest.approx(0.0)


def test_tfidf_idf_comes_from_the_corpus_not_one_document():
    corpus = ["apple banana", "apple cherry", "apple banana cherry", "durian"]
    scorer = TfidfScorer().fit(corpus)
    # idf = ln((1 + N) / (1 + df)) + 1 with N = 4
    assert scorer.idf["apple"] == pytest.approx(math.log(5 / 4) + 1)
    assert scorer.idf["banana"] == pytest.approx(math.log(5 / 3) + 1)
    assert scorer.idf["durian"] == pytest.approx(math.log(5 / 2) + 1)
    a, b = math.log(5 / 4) + 1, math.log(5 / 3) + 1
    cos = tfidf_cosine(scorer.transform(corpus[:2]))
    assert cos[0, 1] == pytest.approx(a * a / (a * a + b * b))  # 0.3959
    # The same two passages with an IDF fitted on their own document give another value (0.336).
    own = tfidf_cosine(TfidfScorer().fit(corpus[:2]).transform(corpus[:2]))
    c = math.log(3 / 2) + 1
    assert own[0, 1] == pytest.approx(1 / (1 + c * c))
    assert abs(own[0, 1] - cos[0, 1]) > 0.05


def test_tfidf_without_any_word_gives_zero_rows():
    scorer = TfidfScorer().fit(["!!! ???", "..."])
    assert not scorer.fitted
    assert tfidf_cosine(scorer.transform(["!!!", "?"])).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="empty"):
        TfidfScorer().fit([])


def test_document_groups_keeps_anchors_and_pads_short_documents():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.3], [0.0, 1.0]])  # passage 3: off-topic widget
    tfidf = np.eye(4)
    groups = document_groups(vectors, tfidf, threshold=0.825, top_k=4)
    assert groups.anchors == [0, 1, 2]
    for group in groups.groups:
        assert group.anchor not in group.related
        assert len(group.related) == 3  # only 3 other passages
        assert group.padded(4) == [*group.related, group.related[-1]]
    assert groups.groups[0].related[0] == 1  # nearest by both signals after ties in TF-IDF
    assert groups.covered() == {0, 1, 2, 3}
    assert document_groups(vectors[:1], tfidf[:1, :1]).groups == []  # one passage: no group


def test_tfidf_cosine_on_the_documents_own_columns_is_bit_for_bit_the_full_product():
    from xprt_st.mining.scoring import TfidfScorer, tfidf_cosine, tfidf_cosines

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(400)]
    documents = [
        [" ".join(rng.choice(words, rng.integers(1, 60))) for _ in range(rng.integers(2, 12))] for _ in range(30)
    ]
    documents.append(["", "no words here? ...", "one"])  # empty rows stay zero
    scorer = TfidfScorer().fit([p for d in documents for p in d])
    flat = scorer.transform([p for d in documents for p in d])
    offset = 0
    for passages in documents:
        rows = flat[offset : offset + len(passages)]
        offset += len(passages)
        full = np.asarray((rows @ rows.T).toarray(), dtype=np.float64)
        assert np.array_equal(tfidf_cosine(rows), full)
    # all documents in one block-diagonal product: each block is bit for bit the document's own
    together = tfidf_cosines(flat, [len(d) for d in documents])
    assert len(together) == len(documents)
    offset = 0
    for passages, block in zip(documents, together, strict=True):
        rows = flat[offset : offset + len(passages)]
        offset += len(passages)
        assert np.array_equal(block, tfidf_cosine(rows))


@pytest.mark.parametrize("rank_by", ["fused", "embedding", "tfidf"])
def test_ranking_every_anchor_at_once_equals_ranking_each_anchor(rank_by):
    from xprt_st.mining.groups import rank_every_anchor

    rng = np.random.default_rng(5)
    for n in [2, 3, 5, 9, 17]:
        embeddings = rng.normal(size=(n, 8))
        unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
        emb_cos = unit @ unit.T
        tfidf = np.round(rng.random((n, n)), 1)  # coarse values: many ties
        tfidf = (tfidf + tfidf.T) / 2
        emb_cos[0, 1:] = emb_cos[0, 1]  # a row of tied cosines
        for top_k in [1, 4, 20]:
            together = rank_every_anchor(emb_cos, tfidf, top_k, rank_by)
            assert together == [rank_related(i, emb_cos, tfidf, top_k, rank_by) for i in range(n)]
