"""The hybrid teacher: its logits and KL by hand, BM25 against a batch, and the loss on a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import COLUMNS, GROUPS

from xprt_st.losses import CrossPassageLoss, HybridTeacherLoss
from xprt_st.losses.hybrid_teacher import corpus_lexicon, hybrid_teacher_logits, hybrid_teacher_loss
from xprt_st.mining.bm25 import BM25Lexicon, bm25_idf, bm25_matrix, bm25_scores

PASSAGES = [text for column in COLUMNS for text in GROUPS[column]]


def _z(row: np.ndarray) -> np.ndarray:
    return (row - row.mean()) / row.std()


def test_teacher_logits_are_the_z_scored_fusion_on_the_starts_spread() -> None:
    rng = np.random.default_rng(0)
    start, lexical = rng.normal(size=(3, 5)) * 4, rng.gamma(2.0, size=(3, 5))
    expected = np.stack([_z(_z(s) + 0.5 * _z(lex)) * s.std() for s, lex in zip(start, lexical, strict=True)])
    got = hybrid_teacher_logits(torch.tensor(start), torch.tensor(lexical), lexical_weight=0.5)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(got.numpy().std(axis=1), start.std(axis=1), rtol=1e-10)  # as sharp as the start


def test_without_lexical_signal_the_teacher_is_the_start() -> None:
    start = torch.tensor([[3.0, -1.0, 0.5], [0.0, 2.0, 1.0]], dtype=torch.float64)
    centred = start - start.mean(dim=1, keepdim=True)
    flat = torch.full_like(start, 7.0)  # no candidate shares more words with the anchor than another
    torch.testing.assert_close(hybrid_teacher_logits(start, flat), centred)
    torch.testing.assert_close(hybrid_teacher_logits(start, torch.rand_like(start), lexical_weight=0.0), centred)


def test_kl_by_hand_and_zero_when_the_student_is_the_teacher() -> None:
    anchors = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    candidates = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    flat = torch.zeros(1, 2, dtype=torch.float64)
    assert hybrid_teacher_loss(anchors, candidates, anchors, candidates, flat).item() == pytest.approx(0.0, abs=1e-12)
    # BM25 prefers the second candidate: z(start) = (1, -1), z(bm25) = (-1, 1), fused row flat -> teacher uniform
    lexical = torch.tensor([[0.0, 3.0]], dtype=torch.float64)
    p = math.exp(20) / (math.exp(20) + 1)  # the student's softmax of cosines (1, 0) over 0.05
    expected = 0.5 * math.log(0.5 / p) + 0.5 * math.log(0.5 / (1 - p))
    value = hybrid_teacher_loss(anchors, candidates, anchors, candidates, lexical, temperature=0.05)
    assert value.item() == pytest.approx(expected, rel=1e-9)


def test_bm25_scores_equal_the_documents_matrix_with_its_mean_length() -> None:
    counts = np.array([[1, 2, 0, 0], [0, 1, 1, 0], [3, 0, 0, 1]])
    idf = bm25_idf(np.array([2, 2, 1, 1]), 10)
    np.testing.assert_allclose(bm25_scores(counts, counts, idf, counts.sum(axis=1).mean()), bm25_matrix(counts, idf))


def test_the_lexicon_ranks_the_passage_with_the_rare_shared_word_first() -> None:
    lexicon = BM25Lexicon.fit(PASSAGES)
    scores = lexicon.scores(["pitchers throw a slider"], GROUPS["related_3"])
    assert int(np.argmax(scores[0])) == 3  # "some pitchers also throw a slider"
    assert scores.shape == (1, 4) and (scores >= 0).all()


def test_the_loss_reads_its_batch_texts_back_and_its_l_xp_is_cross_passages(tiny_model, group_batch) -> None:
    tiny_model.eval()
    features, labels = group_batch(tiny_model)
    columns = features[:4]  # anchor, positive and two candidates read as hard negatives
    loss = HybridTeacherLoss(tiny_model, corpus_lexicon(PASSAGES, tiny_model), hard_negatives=2)
    assert loss._texts(columns[:1]) == GROUPS["anchor"]
    terms = loss([dict(column) for column in columns], labels)
    assert set(terms) == {"xp", "hybrid", "retention"}
    plain = CrossPassageLoss(tiny_model, hard_negatives=2)([dict(column) for column in columns], labels)
    assert terms["xp"].item() == pytest.approx(plain.item(), rel=1e-5)
    assert terms["retention"].item() == pytest.approx(0.0, abs=1e-6)  # the student is still the start
    assert terms["hybrid"].item() > 0  # BM25 reorders some candidates
    sum(terms.values()).backward()
    assert all(parameter.grad is None for parameter in loss.teacher.parameters())


def test_without_bm25_the_hybrid_term_starts_at_zero(tiny_model, group_batch) -> None:
    tiny_model.eval()
    features, labels = group_batch(tiny_model)
    loss = HybridTeacherLoss(
        tiny_model, corpus_lexicon(PASSAGES, tiny_model), lexical_weight=0.0, retention_weight=None
    )
    terms = loss([dict(column) for column in features[:2]], labels)
    assert set(terms) == {"xp", "hybrid"} and terms["hybrid"].item() == pytest.approx(0.0, abs=1e-6)


def test_bad_weights_are_refused(tiny_model) -> None:
    lexicon = BM25Lexicon.fit(PASSAGES)
    with pytest.raises(ValueError, match="hybrid_weight"):
        HybridTeacherLoss(tiny_model, lexicon, hybrid_weight=-1.0)


def test_retention_reads_its_own_columns_when_given(tiny_model, group_batch) -> None:
    """As xprt-st compare trains it: the mined (anchor, positive) in two columns after the loss's own."""
    tiny_model.eval()
    features, labels = group_batch(tiny_model)
    lexicon = corpus_lexicon(PASSAGES, tiny_model)
    loss = HybridTeacherLoss(tiny_model, lexicon, retention_columns=(2, 3))
    with torch.no_grad():
        tiny_model[0].auto_model.embeddings.word_embeddings.weight.mul_(1.5)  # the student moves from its start
    own = HybridTeacherLoss(tiny_model, lexicon, teacher=loss.teacher)
    columns = [dict(column) for column in features[:4]]
    terms = loss(columns, labels)
    same_text = own([dict(column) for column in features[:2]], labels)
    other_text = own([dict(column) for column in features[2:4]], labels)
    assert terms["xp"].item() == pytest.approx(same_text["xp"].item(), rel=1e-5)
    assert terms["retention"].item() == pytest.approx(other_text["retention"].item(), rel=1e-5)
    assert terms["retention"].item() != pytest.approx(same_text["retention"].item(), rel=1e-3)
    with pytest.raises(ValueError, match="retention_columns"):
        HybridTeacherLoss(tiny_model, lexicon, hard_negatives=2, retention_columns=(2, 3))


def test_lexical_candidates_join_the_teachers_candidates_and_not_l_xps_negatives(tiny_model, group_batch) -> None:
    tiny_model.eval()
    features, labels = group_batch(tiny_model)
    lexicon = corpus_lexicon(PASSAGES, tiny_model)
    columns = features[:5]  # anchor, positive, one hard negative, two lexical candidates
    loss = HybridTeacherLoss(tiny_model, lexicon, hard_negatives=1, lexical_candidates=2, retention_weight=None)
    terms = loss([dict(column) for column in columns], labels)
    # L_xp sees the hard negative only: as the loss without the lexical columns
    without = HybridTeacherLoss(tiny_model, lexicon, hard_negatives=1, retention_weight=None, teacher=loss.teacher)
    alone = without([dict(column) for column in columns[:3]], labels)
    assert terms["xp"].item() == pytest.approx(alone["xp"].item(), rel=1e-5)
    # the hybrid term ranks every positive, the hard negatives and the lexical candidates, by hand
    with torch.no_grad():
        vectors = [tiny_model(dict(column))["sentence_embedding"] for column in columns]
        lexical = torch.as_tensor(
            lexicon.scores(loss._texts(columns[:1]), loss._texts(columns[1:])), dtype=torch.float32
        )
        assert lexical.shape == (4, 4 * 4)
        expected = hybrid_teacher_loss(vectors[0], torch.cat(vectors[1:]), vectors[0], torch.cat(vectors[1:]), lexical)
    assert terms["hybrid"].item() == pytest.approx(loss.hybrid_weight * expected.item(), rel=1e-4)
    assert terms["hybrid"].item() != pytest.approx(alone["hybrid"].item(), rel=1e-3)
    with pytest.raises(ValueError, match="2 lexical columns"):
        loss([dict(column) for column in columns[:4]], labels)
