"""The fill-in decoder, L_cross, L_self and L_MLM: shapes, masking rules, gradient flow, downhill steps."""

from __future__ import annotations

import pytest
import torch

from xprt_st.losses import CrossFillInLoss, FillInDecoder, MLMLoss, SelfFillInLoss
from xprt_st.losses._common import pad_cat, sample_token_mask, special_token_ids
from xprt_st.losses.fill_in import sample_scored_positions
from xprt_st.models import word_embeddings


def test_token_mask_never_touches_special_or_padding(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    ids, attention = features[0]["input_ids"], features[0]["attention_mask"]
    special = special_token_ids(tiny_model)
    mask = sample_token_mask(ids, attention, special, 0.6)
    assert not mask[torch.isin(ids, special)].any()
    assert not mask[attention == 0].any()
    maskable = (attention.bool() & ~torch.isin(ids, special)).sum(1)
    assert torch.equal(mask.sum(1), (maskable.float() * 0.6).round().long().clamp(min=1))


def test_decoder_shares_the_encoder_embeddings_without_registering_them(tiny_model) -> None:
    decoder = FillInDecoder(tiny_model)
    assert decoder._word_embeddings is word_embeddings(tiny_model)
    assert not any("word_embeddings" in key or "position_embeddings" in key for key in decoder.state_dict())
    assert decoder.layer.num_heads == tiny_model[0].auto_model.config.num_attention_heads
    states = decoder.fill_in(torch.tensor([[101, 2023, 102, 0]]), torch.tensor([[1, 1, 1, 0]]), torch.randn(1, 32))
    assert states.shape == (1, 4, 32)


def test_conditioning_vector_changes_the_prediction(tiny_model) -> None:
    decoder = FillInDecoder(tiny_model).eval()
    ids, mask = torch.tensor([[101, 103, 103, 102]]), torch.ones(1, 4, dtype=torch.long)
    first = decoder.fill_in(ids, mask, torch.zeros(1, 32))
    second = decoder.fill_in(ids, mask, torch.ones(1, 32))
    assert not torch.allclose(first, second)


def _train(loss, features, steps: int = 6, lr: float = 3e-3) -> tuple[float, float]:
    """Loss on a fixed seed before and after ``steps`` AdamW steps (eval mode for the measurements)."""

    def measure() -> float:
        loss.eval()
        torch.manual_seed(123)
        with torch.no_grad():
            value = loss([dict(column) for column in features], None)
        loss.train()
        return float(sum(value.values()) if isinstance(value, dict) else value)

    before = measure()
    optimizer = torch.optim.AdamW([p for p in loss.parameters() if p.requires_grad], lr=lr)
    torch.manual_seed(0)
    for _ in range(steps):
        value = loss([dict(column) for column in features], None)
        value = sum(value.values()) if isinstance(value, dict) else value
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    return before, measure()


@pytest.mark.parametrize("loss_class", [CrossFillInLoss, SelfFillInLoss, MLMLoss])
def test_each_decoder_term_goes_downhill_and_reaches_encoder_and_decoder(loss_class, tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    loss = loss_class(tiny_model)
    torch.manual_seed(0)
    value = loss([dict(column) for column in features], None)
    assert torch.isfinite(value)
    value.backward()
    encoder_layer = tiny_model[0].auto_model.encoder.layer[0].attention.self.query.weight
    assert encoder_layer.grad is not None and encoder_layer.grad.abs().sum() > 0
    assert loss.mlm_head.dense.weight.grad.abs().sum() > 0
    if hasattr(loss, "decoder"):
        assert loss.decoder.layer.query.weight.grad.abs().sum() > 0
        assert loss.decoder.condition.weight.grad.abs().sum() > 0
    tiny_model.zero_grad()
    before, after = _train(loss, features)
    assert after < before


def test_self_fill_in_is_zero_when_the_decoder_reproduces_the_teacher(tiny_model) -> None:
    loss = SelfFillInLoss(tiny_model)
    states = torch.randn(2, 5, 32)
    ids = torch.tensor([[101, 2023, 2003, 2019, 102], [101, 2178, 2028, 1012, 102]])
    attention = torch.ones_like(ids)
    # swap the decoder for one that returns the encoder's own states: student == teacher
    loss.decoder.fill_in = lambda input_ids, attention_mask, vectors: torch.cat([states[:1], states[1:]])
    encoder_mask = torch.tensor([[False, True, False, True, False], [False, False, True, False, False]])
    value = loss.compute_loss_from_token_states(
        [torch.zeros(1, 32)] * 2,
        [states[:1], states[1:]],
        [ids[:1], ids[1:]],
        [attention[:1], attention[1:]],
        [encoder_mask[:1], encoder_mask[1:]],
    )
    assert value.item() == pytest.approx(0.0, abs=1e-6)


def test_cross_fill_in_decodes_eight_passages_per_group(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model, groups=2)
    loss = CrossFillInLoss(tiny_model)
    seen = {}
    original = loss.decoder.fill_in

    def spy(input_ids, attention_mask, vectors):
        seen["rows"] = input_ids.size(0)
        return original(input_ids, attention_mask, vectors)

    loss.decoder.fill_in = spy
    loss(features, None)
    assert seen["rows"] == 8 * 2  # one batched pass: anchor -> 4 related and 4 related -> anchor


def test_config_dicts_report_the_paper_defaults(tiny_model) -> None:
    assert CrossFillInLoss(tiny_model).get_config_dict() == {
        "decoder_mask_ratio": 0.6,
        "encoder_mask_ratio": 0.15,
        "num_condition_vectors": 4,
        "prediction_ratio": 1.0,
        "decoder_mini_batch_size": 64,  # issue 28: decoder rows per block (no effect on the loss)
    }
    assert MLMLoss(tiny_model).get_config_dict() == {"mask_ratio": 0.15}


def test_scored_positions_are_an_exact_uniform_sample_of_the_masked_ones() -> None:
    generator = torch.Generator().manual_seed(0)
    mask = torch.rand(6, 20, generator=generator) < 0.6  # (rows, seq)
    assert sample_scored_positions(mask, 1.0) is mask
    torch.manual_seed(0)
    counts = torch.zeros(mask.shape)
    draws = 2000
    for _ in range(draws):
        scored = sample_scored_positions(mask, 0.25)
        assert not (scored & ~mask).any()  # only masked positions are scored
        assert int(scored.sum()) == round(0.25 * int(mask.sum()))
        counts += scored
    frequency = counts[mask] / draws  # each masked position: about 0.25 of the draws
    assert frequency.min() > 0.18 and frequency.max() < 0.32
    assert counts[~mask].sum() == 0
    assert sample_scored_positions(torch.zeros(2, 3, dtype=torch.bool), 0.25).sum() == 0
    assert int(sample_scored_positions(torch.tensor([[True, False]]), 0.1).sum()) == 1  # never an empty loss


@pytest.mark.parametrize("loss_class", [CrossFillInLoss, SelfFillInLoss])
def test_prediction_ratio_scores_a_sample_and_still_trains(loss_class, tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    full, sampled = loss_class(tiny_model), loss_class(tiny_model, prediction_ratio=0.25)
    assert sampled.get_config_dict()["prediction_ratio"] == 0.25
    rows = {}
    for name, loss in (("full", full), ("sampled", sampled)):
        original = loss._fill_in_loss

        def spy(vectors, ids, mask, score, *rest, _original=original, _name=name):
            def recording(states, scored, block):  # the decoder's states at the scored positions
                rows[_name] = (states.size(0), int(scored.sum()))
                return score(states, scored, block)

            return _original(vectors, ids, mask, recording, *rest)

        loss._fill_in_loss = spy
        torch.manual_seed(0)
        assert torch.isfinite(loss([dict(column) for column in features], None))
    assert rows["full"][0] == rows["full"][1] and rows["sampled"][0] == rows["sampled"][1]
    assert rows["sampled"][0] == round(0.25 * rows["full"][0])  # same seed: same mask, a quarter scored
    before, after = _train(sampled, features)
    assert after < before
    with pytest.raises(ValueError, match="prediction_ratio"):
        loss_class(tiny_model, prediction_ratio=0.0)


def _capture_self_fill_in(monkeypatch) -> dict:
    """Record L_self's encoder pass, the positions it scores and the teacher states it reads there."""
    import xprt_st.losses.fill_in as fill_in

    seen: dict = {}
    encode, scored_positions, kl = fill_in.encode_columns, fill_in.sample_scored_positions, fill_in.vocab_kl_divergence

    def record_encode(*args, **kwargs):
        seen["encoded"] = encode(*args, **kwargs)
        return seen["encoded"]

    def record_scored(*args, **kwargs):
        seen["scored"] = scored_positions(*args, **kwargs)
        return seen["scored"]

    def record_kl(head, states, teacher_states):
        seen["teacher_states"] = teacher_states
        return kl(head, states, teacher_states)

    monkeypatch.setattr(fill_in, "encode_columns", record_encode)
    monkeypatch.setattr(fill_in, "sample_scored_positions", record_scored)
    monkeypatch.setattr(fill_in, "vocab_kl_divergence", record_kl)
    return seen


def test_self_fill_in_reads_its_teacher_only_where_the_encoder_masked(tiny_model, group_batch, monkeypatch) -> None:
    # Issue #11.2: L_MLM trains the head only at the encoder's [MASK] positions, so those are the only positions
    # where the teacher is a trained distribution; the decoder must hide every one of them.
    features, _ = group_batch(tiny_model)
    seen = _capture_self_fill_in(monkeypatch)
    torch.manual_seed(0)
    SelfFillInLoss(tiny_model)([dict(column) for column in features], None)
    encoder_masked = pad_cat(seen["encoded"].masks, value=False)  # (2 * batch, seq)
    assert seen["scored"].any()
    assert not (seen["scored"] & ~encoder_masked).any()  # every scored position is an MLM target
    assert torch.equal(seen["scored"], encoder_masked)  # and every MLM target of a and s_1 is scored


def test_sample_token_mask_takes_the_included_positions_first(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    ids, attention = features[0]["input_ids"], features[0]["attention_mask"]
    special = special_token_ids(tiny_model)
    include = sample_token_mask(ids, attention, special, 0.15, torch.Generator().manual_seed(0))
    mask = sample_token_mask(ids, attention, special, 0.6, torch.Generator().manual_seed(1), include=include)
    assert not (include & ~mask).any()
    maskable = (attention.bool() & ~torch.isin(ids, special)).sum(1)
    assert torch.equal(mask.sum(1), (maskable.float() * 0.6).round().long().clamp(min=1))


def test_after_an_mlm_warm_up_the_teacher_knows_the_words_l_self_reads(tiny_model, group_batch, monkeypatch) -> None:
    # Issue #11.2, behaviour: after a short MLM warm-up of the tiny model, the teacher at every position L_self
    # reads gives the true word far more than uniform probability (the fresh head gives it about 1/30522).
    features, _ = group_batch(tiny_model)
    texts = [dict(column) for column in features]
    warm_up = MLMLoss(tiny_model)
    optimizer = torch.optim.Adam([*tiny_model.parameters(), *warm_up.mlm_head.parameters()], lr=2e-2)
    torch.manual_seed(0)
    for _ in range(12):
        value = warm_up([dict(column) for column in texts], None)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    seen = _capture_self_fill_in(monkeypatch)
    loss = SelfFillInLoss(tiny_model, mlm_head=warm_up.mlm_head).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        loss([dict(column) for column in texts], None)
        ids = pad_cat(seen["encoded"].input_ids)[seen["scored"]]  # (scored,)
        log_probs = warm_up.mlm_head(seen["teacher_states"]).log_softmax(-1)  # (scored, vocab)
        true = log_probs.gather(-1, ids[:, None])[:, 0]  # (scored,)
    uniform = -torch.log(torch.tensor(float(log_probs.size(-1)))).item()  # -10.33
    assert ids.numel() > 0
    assert true.median().item() > uniform + 4.0  # e^4: over 50x the uniform probability at most positions
