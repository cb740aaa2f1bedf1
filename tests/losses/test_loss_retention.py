"""L_ret on hand-computable inputs, the WithRetention wrapper, and the loss-owned state contract."""

from __future__ import annotations

import math

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from xprt_st.losses import CrossPassageLoss, RetentionLoss, WithRetention
from xprt_st.losses.retention import retention_loss


def test_two_by_two_by_hand() -> None:
    # student: a_0 . s_0 = 1, a_0 . s_1 = 0 ... identity cosines; teacher: every cosine equal
    student_a = torch.eye(2, dtype=torch.float64)
    student_s = torch.eye(2, dtype=torch.float64)
    teacher = torch.ones(2, 2, dtype=torch.float64)
    value = retention_loss(student_a, student_s, teacher, teacher, temperature=0.05)
    # teacher rows are uniform (0.5, 0.5); student rows are softmax(20, 0) = (p, 1-p)
    p = math.exp(20) / (math.exp(20) + 1)
    kl = 0.5 * math.log(0.5 / p) + 0.5 * math.log(0.5 / (1 - p))
    assert value.item() == pytest.approx(kl, rel=1e-9)  # rows and columns agree here


def test_zero_when_the_student_equals_the_teacher_and_positive_after_a_change(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    loss = RetentionLoss(tiny_model)
    loss.model.eval()
    assert loss(features, None).item() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    value = loss(features, None)
    assert value.item() > 0
    value.backward()
    assert all(parameter.grad is None for parameter in loss.teacher.parameters())
    assert any(parameter.grad is not None and parameter.grad.abs().sum() > 0 for parameter in tiny_model.parameters())


def test_retention_weight_is_a_plain_float_the_callback_can_set(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    loss = RetentionLoss(tiny_model)
    assert isinstance(loss.retention_weight, float) and loss.retention_weight == 40.0
    with torch.no_grad():
        tiny_model[0].auto_model.embeddings.word_embeddings.weight.mul_(1.5)
    full = loss(features, None).item()
    loss.retention_weight = 10.0
    assert loss(features, None).item() == pytest.approx(full / 4, rel=1e-4)


def test_with_retention_wraps_mnrl_and_keeps_its_value(tiny_model, group_batch) -> None:
    tiny_model.eval()
    features, _ = group_batch(tiny_model)
    base = MultipleNegativesRankingLoss(tiny_model)
    plain = base([dict(column) for column in features[:2]], None).item()
    wrapped = WithRetention(base, retention_weight=40.0)
    terms = wrapped([dict(column) for column in features[:2]], None)
    assert set(terms) == {"base", "retention"}
    assert terms["base"].item() == pytest.approx(plain, rel=1e-5)
    assert terms["retention"].item() == pytest.approx(0.0, abs=1e-5)
    wrapped.retention_weight = 0.0
    assert wrapped([dict(column) for column in features[:2]], None)["retention"].item() == 0.0


def test_with_retention_state_holds_the_encoder_once(tiny_model) -> None:
    wrapped = WithRetention(CrossPassageLoss(tiny_model))
    keys = list(wrapped.state_dict())
    owned = [key for key in keys if not key.startswith(("model.", "teacher."))]
    assert owned == []  # nothing loss-owned, and no second copy of the encoder under "loss.model."
    assert wrapped.loss.model is wrapped.model
    assert [name for name, _ in wrapped.named_children()] == ["model", "teacher", "loss"]


@pytest.mark.parametrize("objective", ["xprt", "self-only", "cross-passage", "retromae", "tsdae"])
def test_every_objective_starts_with_zero_retention(objective, tiny_model, group_batch) -> None:
    # Issue #11.3: with the student equal to the teacher, retention is 0 at step 0 for every recipe: every
    # student, xPRT's included, embeds the unmasked anchor and positive, as the frozen teacher does.
    import random

    from xprt_st.columns import GROUP_COLUMNS
    from xprt_st.losses._common import encode_columns, special_token_ids
    from xprt_st.models import frozen_copy
    from xprt_st.objectives import DAMAGED, build_loss, delete_words, get_objective

    features, labels = group_batch(tiny_model)
    by_column = dict(zip(GROUP_COLUMNS, features, strict=True))
    rng = random.Random(0)
    anchors = tiny_model.tokenizer.batch_decode(features[0]["input_ids"], skip_special_tokens=True)
    by_column[DAMAGED] = dict(tiny_model.preprocess([delete_words(text, 0.6, rng) for text in anchors]))
    args = {"tie_encoder_decoder": True} if objective == "tsdae" else {}
    loss = build_loss(objective, tiny_model, args, teacher=frozen_copy(tiny_model), retention_weight=40.0)
    loss.eval()  # no dropout: the student is then exactly the teacher
    columns = get_objective(objective).dataset_columns(retention=True)
    torch.manual_seed(0)
    terms = loss([dict(by_column[column]) for column in columns], labels)
    assert terms["retention"].item() == pytest.approx(0.0, abs=1e-5)
    # and the term is live: masking alone moves a student away from the teacher (xPRT's student before the fix)
    masked = encode_columns(
        tiny_model, features[:2], mask_ratio=0.15, special_ids=special_token_ids(tiny_model), mask_token_id=103
    ).embeddings
    assert retention_loss(*masked, *encode_columns(tiny_model, features[:2]).embeddings).item() > 1e-3


def test_the_teacher_merges_a_pair_whose_anchor_the_student_embedded(tiny_model, group_batch) -> None:
    """The student's first column runs on its own and the model writes its outputs into that dict; the teacher
    must still run anchor and positive as one merged forward (one forward, not two), with the same vectors."""
    import copy

    from xprt_st.losses.retention import teacher_embeddings

    features, _ = group_batch(tiny_model)
    pair = [dict(column) for column in features[:2]]
    tiny_model(pair[0])  # what a separate anchor forward leaves behind
    assert "sentence_embedding" in pair[0] and "sentence_embedding" not in pair[1]
    teacher = copy.deepcopy(tiny_model).eval()
    rows = []
    teacher.register_forward_hook(lambda module, args, output: rows.append(output["sentence_embedding"].size(0)))
    merged = teacher_embeddings(teacher, pair)
    assert rows == [8]  # 4 anchors + 4 positives in one forward
    with torch.no_grad():
        alone = [teacher(dict(column))["sentence_embedding"] for column in features[:2]]
    for got, want in zip(merged, alone, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
