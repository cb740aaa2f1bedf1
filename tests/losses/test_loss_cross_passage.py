"""L_xp on hand-computable inputs, same-document masking, equivalence with MNRL, and a training step."""

from __future__ import annotations

import math

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from xprt_st.losses import CrossPassageLoss
from xprt_st.losses.cross_passage import cross_passage_loss


def paper_vectors() -> tuple[torch.Tensor, torch.Tensor]:
    """3 anchors and 3 positives with cos(a_i, s_i) = 0.8 and cos(a_i, s_j) = 0.5 for j != i.

    a_i = alpha e_i + beta u and s_j = gamma e_j + delta u with beta*delta = 0.5 and alpha*gamma = 0.3.
    """
    beta2 = (1.16 + math.sqrt(1.16**2 - 1)) / 2
    delta2 = 0.25 / beta2
    alpha, beta = math.sqrt(1 - beta2), math.sqrt(beta2)
    gamma, delta = math.sqrt(1 - delta2), math.sqrt(delta2)
    eye = torch.eye(4, dtype=torch.float64)[:3]
    common = torch.tensor([0, 0, 0, 1.0], dtype=torch.float64)
    anchors = alpha * eye + beta * common
    positives = gamma * eye + delta * common
    return anchors, positives


def test_paper_example_gives_the_positive_99_5_percent() -> None:
    anchors, positives = paper_vectors()
    cosines = anchors @ positives.T
    assert torch.allclose(cosines, 0.5 + 0.3 * torch.eye(3, dtype=torch.float64))
    probability = math.exp(16) / (math.exp(16) + 2 * math.exp(10))
    assert probability == pytest.approx(0.995, abs=5e-4)
    loss = cross_passage_loss(anchors, positives, labels=None, temperature=0.05)
    assert loss.item() == pytest.approx(-math.log(probability), rel=1e-9)


def test_same_document_group_is_removed_from_the_negatives() -> None:
    anchors, positives = paper_vectors()
    labels = torch.tensor([5, 5, 6])  # groups 0 and 1 come from the same document
    loss = cross_passage_loss(anchors, positives, labels, temperature=0.05)
    one_negative = -math.log(math.exp(16) / (math.exp(16) + math.exp(10)))
    two_negatives = -math.log(math.exp(16) / (math.exp(16) + 2 * math.exp(10)))
    # rows 0 and 1 keep one negative each, row 2 keeps two; both directions are alike here
    assert loss.item() == pytest.approx((2 * one_negative + two_negatives) / 3, rel=1e-9)


def test_masked_not_down_weighted_a_same_document_twin_changes_nothing() -> None:
    anchors, positives = paper_vectors()
    labels = torch.tensor([5, 5, 6])
    before = cross_passage_loss(anchors, positives, labels)
    # make group 1 an exact copy of group 0: a down-weighted negative would raise row 0's loss
    twin_anchors, twin_positives = anchors.clone(), positives.clone()
    twin_anchors[1], twin_positives[1] = anchors[0], positives[0]
    after_rows = cross_passage_loss(twin_anchors[:2], twin_positives[:2], labels[:2])
    assert after_rows.item() == 0.0
    # and group 2, from another document, still sees both as negatives
    assert before.item() > 0


def test_row_without_any_negative_is_finite_and_zero() -> None:
    anchors, positives = paper_vectors()
    anchors.requires_grad_(True)
    loss = cross_passage_loss(anchors, positives, torch.tensor([3, 3, 3]))
    loss.backward()
    assert loss.item() == 0.0
    assert torch.isfinite(anchors.grad).all() and anchors.grad.abs().max() == 0


def test_equals_symmetric_mnrl_when_every_group_is_its_own_document(tiny_model, group_batch) -> None:
    tiny_model.eval()
    features, _ = group_batch(tiny_model)
    labels = torch.arange(4)
    ours = CrossPassageLoss(tiny_model)(features, labels)
    mnrl = MultipleNegativesRankingLoss(
        tiny_model, scale=20.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
    )([dict(features[0]), dict(features[1])], None)
    assert ours.item() == pytest.approx(mnrl.item(), rel=1e-5)


def test_float_labels_are_rejected_with_the_reason(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    with pytest.raises(TypeError, match="document ids"):
        CrossPassageLoss(tiny_model)(features, labels.float())


def test_gradient_reaches_the_encoder_and_a_few_steps_go_downhill(tiny_model, group_batch) -> None:
    torch.manual_seed(0)
    features, labels = group_batch(tiny_model)
    loss = CrossPassageLoss(tiny_model)
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-3)
    values = []
    for _ in range(6):
        value = loss([dict(column) for column in features], labels)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        values.append(value.item())
    assert values[-1] < values[0]
    assert loss.get_config_dict() == {
        "temperature": 0.05,
        "gather_across_devices": False,
        "encoder_mask_ratio": 0.0,
        "hard_negatives": 0,
        "mini_batch_size": None,
    }


def test_masked_variant_reads_the_same_15_percent_masked_passes_as_xprt(tiny_model, group_batch) -> None:
    # Issue #19.6: the fill-in head to head (xPRT vs L_xp alone) must change only the fill-in terms. With
    # encoder_mask_ratio=0.15, L_xp alone scores the same masked passes xPRT's L_xp reads: same masks drawn in
    # the same order from the same seed, so the same value and the same gradient.
    from xprt_st.losses import XPRTLoss

    features, labels = group_batch(tiny_model)
    xprt = XPRTLoss(tiny_model, retention_weight=None).eval()
    masked = CrossPassageLoss(tiny_model, encoder_mask_ratio=0.15).eval()
    torch.manual_seed(11)
    full = xprt([dict(column) for column in features], labels)["xp"]
    (full_grad,) = torch.autograd.grad(full, [tiny_model[0].auto_model.embeddings.word_embeddings.weight])
    torch.manual_seed(11)
    alone = masked([dict(column) for column in features], labels)
    (alone_grad,) = torch.autograd.grad(alone, [tiny_model[0].auto_model.embeddings.word_embeddings.weight])
    torch.testing.assert_close(alone, full, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alone_grad, full_grad, rtol=1e-4, atol=1e-7)
    unmasked = CrossPassageLoss(tiny_model).eval()([dict(column) for column in features], labels)
    assert abs(unmasked.item() - alone.item()) > 1e-4  # the masking does change what L_xp reads
    assert masked.get_config_dict()["encoder_mask_ratio"] == 0.15


def test_with_retention_keeps_the_masked_variants_masked_pass(tiny_model, group_batch) -> None:
    # The continued setting wraps L_xp in WithRetention, which reuses unmasked embeddings for a plain L_xp; the
    # masked variant must still score its 15%-masked pass (and retention the unmasked text).
    from xprt_st.losses import WithRetention

    features, labels = group_batch(tiny_model)
    masked = CrossPassageLoss(tiny_model, encoder_mask_ratio=0.15).eval()
    wrapped = WithRetention(masked, retention_weight=40.0).eval()
    torch.manual_seed(5)
    alone = masked([dict(column) for column in features[:2]], labels)
    torch.manual_seed(5)
    terms = wrapped([dict(column) for column in features[:2]], labels)
    torch.testing.assert_close(terms["base"], alone)
    assert terms["retention"].item() == pytest.approx(0.0, abs=1e-6)  # unmasked student = teacher at step 0


def test_hard_negatives_join_the_forward_direction_only_by_hand() -> None:
    # 2 groups in 2 dims: a_0 = s_0 = e_0, a_1 = s_1 = e_1 (cos 1 to the own positive, 0 to the other);
    # anchor 0's hard negatives have cosines 0.6 and 0.0 to it, anchor 1's 0.8 and 0.6.
    anchors = torch.eye(2, dtype=torch.float64)
    positives = torch.eye(2, dtype=torch.float64)
    negatives = torch.tensor(
        [[[0.6, 0.8], [0.0, 1.0]], [[0.6, 0.8], [0.8, 0.6]]], dtype=torch.float64
    )  # (batch 2, K 2, dim 2), unit vectors
    tau = 0.5
    e = math.exp
    forward_0 = -math.log(e(1 / tau) / (e(1 / tau) + e(0) + e(0.6 / tau) + e(0.0)))
    forward_1 = -math.log(e(1 / tau) / (e(1 / tau) + e(0) + e(0.8 / tau) + e(0.6 / tau)))
    backward = -math.log(e(1 / tau) / (e(1 / tau) + e(0)))  # unchanged: positives pick among anchors
    expected = ((forward_0 + forward_1) / 2 + backward) / 2
    loss = cross_passage_loss(anchors, positives, None, temperature=tau, negatives=negatives)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    # no negatives (or K = 0): the paper's loss, unchanged
    paper = cross_passage_loss(anchors, positives, None, temperature=tau)
    assert cross_passage_loss(anchors, positives, None, tau, negatives=negatives[:, :0]).item() == paper.item()
    assert paper.item() == pytest.approx(backward, rel=1e-12)


def test_hard_negatives_are_read_from_the_columns_after_the_positive(tiny_model) -> None:
    texts = [["alpha beta", "gamma delta"], ["alpha gamma", "beta delta"], ["epsilon", "zeta"], ["eta", "theta"]]
    features = [tiny_model.tokenize(column) for column in texts]
    labels = torch.tensor([0, 1])
    plain = CrossPassageLoss(tiny_model)
    hard = CrossPassageLoss(tiny_model, hard_negatives=2)
    with torch.no_grad():
        embeddings = [tiny_model(dict(f))["sentence_embedding"] for f in features]
        expected = cross_passage_loss(
            embeddings[0], embeddings[1], labels, 0.05, negatives=torch.stack(embeddings[2:], 1)
        )
        assert hard(features, labels).item() == pytest.approx(expected.item(), rel=1e-5)
        # the paper's loss ignores the extra columns
        assert plain(features, labels).item() == pytest.approx(
            cross_passage_loss(embeddings[0], embeddings[1], labels, 0.05).item(), rel=1e-5
        )
    with pytest.raises(ValueError, match="4, got 3"):
        hard(features[:3], labels)
    assert hard.get_config_dict()["hard_negatives"] == 2
