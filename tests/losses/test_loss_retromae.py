"""RetroMAE: the enhanced-decoding attention mask's invariants, the two-stream decoder, and training."""

from __future__ import annotations

import pytest
import torch

from xprt_st.losses import RetroMAELoss, sample_enhanced_decoding_mask


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    attention = torch.tensor([[1] * 12, [1] * 7 + [0] * 5])
    maskable = attention.bool().clone()
    maskable[:, 0] = False  # [CLS]
    maskable[0, 11] = False  # [SEP]
    maskable[1, 6] = False  # [SEP]
    return attention, maskable


def test_every_row_sees_the_sentence_vector_and_never_itself_or_padding() -> None:
    attention, maskable = _batch()
    allowed = sample_enhanced_decoding_mask(attention, maskable, 0.5, torch.Generator().manual_seed(0))
    assert allowed.shape == (2, 12, 12) and allowed.dtype == torch.bool
    assert allowed[:, :, 0].all()
    diagonal = allowed.diagonal(dim1=1, dim2=2)[:, 1:]  # query i at key i, beyond position 0
    assert not diagonal.any()
    assert not allowed[1, :, 7:].any()  # padding is never visible


def test_hidden_share_is_the_mask_ratio_and_special_tokens_stay_visible() -> None:
    attention, maskable = _batch()
    allowed = sample_enhanced_decoding_mask(attention, maskable, 0.5, torch.Generator().manual_seed(1))
    for row, count in ((0, 10), (1, 5)):
        hidden_maskable = (~allowed[row] & maskable[row][None, :]).sum(dim=1)  # per query
        hidden_maskable_without_self = hidden_maskable - maskable[row].long()  # the token itself is hidden too
        # round(0.5 * count) sampled tokens, plus the query itself when it is a maskable token
        assert set(hidden_maskable_without_self.tolist()) <= {round(0.5 * count) - 1, round(0.5 * count)}
    assert allowed[0, :, 11][torch.arange(12) != 11].all()  # [SEP] is visible to every other query


def test_rows_get_different_contexts_and_the_sample_is_reproducible() -> None:
    attention, maskable = _batch()
    first = sample_enhanced_decoding_mask(attention, maskable, 0.5, torch.Generator().manual_seed(2))
    again = sample_enhanced_decoding_mask(attention, maskable, 0.5, torch.Generator().manual_seed(2))
    assert torch.equal(first, again)
    rows = {tuple(first[0, i].tolist()) for i in range(1, 11)}
    assert len(rows) > 5  # position-specific, not one shared mask


def test_loss_returns_decoder_and_mlm_and_reaches_every_part(tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    loss = RetroMAELoss(tiny_model)
    terms = loss(features[:1], None)
    assert set(terms) == {"decoder", "mlm"}
    sum(terms.values()).backward()
    assert loss.decoder.layer.query.weight.grad.abs().sum() > 0
    assert tiny_model[0].auto_model.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert loss.decoder.condition is None  # RetroMAE's vector enters as is
    assert loss.get_config_dict() == {
        "encoder_mask_ratio": 0.3,
        "decoder_mask_ratio": 0.5,
        "pooling": "cls",
        "mlm_weight": 1.0,
    }


def test_the_decoder_cannot_read_the_token_it_predicts(tiny_model) -> None:
    from xprt_st.losses.retromae import enhanced_decode

    loss = RetroMAELoss(tiny_model).eval()
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102]])
    allowed = sample_enhanced_decoding_mask(torch.ones_like(ids), torch.tensor([[0, 1, 1, 1, 1, 0]]).bool(), 0.5)
    vector = torch.randn(1, 32)
    base = enhanced_decode(loss.decoder, vector, ids, allowed)
    changed = ids.clone()
    changed[0, 3] = 4248  # change token 3: query 3 must not notice
    other = enhanced_decode(loss.decoder, vector, changed, allowed)
    torch.testing.assert_close(base[0, 3], other[0, 3])


@pytest.mark.parametrize("pooling", ["cls", "model"])
def test_goes_downhill(pooling, tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    loss = RetroMAELoss(tiny_model, pooling=pooling)

    def measure() -> float:
        loss.eval()
        torch.manual_seed(5)
        with torch.no_grad():
            value = float(sum(loss([dict(features[0])], None).values()))
        loss.train()
        return value

    before = measure()
    optimizer = torch.optim.AdamW(loss.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(6):
        value = sum(loss([dict(features[0])], None).values())
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    assert measure() < before


def test_rejects_an_unknown_pooling(tiny_model) -> None:
    with pytest.raises(ValueError, match="'cls' or 'model'"):
        RetroMAELoss(tiny_model, pooling="max")
