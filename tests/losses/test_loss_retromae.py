"""RetroMAE: the enhanced-decoding attention mask's invariants, the two-stream decoder, and training."""

from __future__ import annotations

import copy

import pytest
import torch

from xprt_st.losses import RetroMAELoss, sample_enhanced_decoding_mask
from xprt_st.losses._common import pad_cat


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
        "pooling": "model",
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


def _cls_pooled(model):
    """The same encoder served with [CLS] pooling (RetroMAE's published setting)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    return SentenceTransformer(modules=[model[0], Pooling(32, "cls")], device="cpu")


@pytest.mark.parametrize("pooling", ["cls", "model"])
def test_goes_downhill(pooling, tiny_model, group_batch) -> None:
    features, _ = group_batch(tiny_model)
    model = _cls_pooled(tiny_model) if pooling == "cls" else tiny_model
    loss = RetroMAELoss(model, pooling=pooling)

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


def test_trains_the_served_vector_by_default_and_refuses_cls_on_a_mean_pooled_model(tiny_model) -> None:
    # Issue #11.1: the vector RetroMAE trains must be the vector the model serves and is evaluated with.
    assert RetroMAELoss(tiny_model).pooling == "model"
    with pytest.raises(ValueError, match="serves 'mean' pooling"):
        RetroMAELoss(tiny_model, pooling="cls")
    assert RetroMAELoss(_cls_pooled(tiny_model), pooling="cls").pooling == "cls"  # the paper's setting


def test_the_compare_runner_refuses_a_recipe_that_trains_another_vector(tiny_model, tiny_model_path, tmp_path) -> None:
    # Issue #11.1: a comparison evaluates every model with its own pooling; a RetroMAE recipe conditioning
    # the decoder on [CLS] is refused before anything runs, and the shipped recipe trains the served vector.
    from xprt_st.compare import CompareConfig, CompareConfigError
    from xprt_st.objectives import build_loss
    from xprt_st.recipe import load_recipe

    recipe = tmp_path / "retromae-cls.yaml"
    recipe.write_text(
        "name: retromae-cls\ndescription: RetroMAE on [CLS]\nobjective:\n  name: retromae\n  args: {pooling: cls}\n"
        "data:\n  requires: {positive: mined, pairs: mined}\n",
        encoding="utf-8",
    )
    raw = {"model": str(tiny_model_path), "corpus": [{"path": "unused.jsonl"}], "tasks": ["stsb"]}
    with pytest.raises(CompareConfigError, match=r"retromae-cls.*pooling: 'cls' trains a vector other than"):
        CompareConfig.from_dict({**raw, "recipes": ["xprt", str(recipe)]})
    CompareConfig.from_dict({**raw, "recipes": ["retromae"]})  # the shipped recipe passes
    shipped = load_recipe("retromae")
    assert build_loss("retromae", tiny_model, shipped.objective.args).pooling == "model"


def test_decoding_targets_are_every_token_but_the_first_and_the_last() -> None:
    # Issue #11.4: RetroMAE's official implementation scores neither [CLS] nor [SEP].
    from xprt_st.losses.retromae import decoding_targets

    attention = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    expected = torch.tensor([[False, True, True, True, False], [False, True, False, False, False]])
    assert torch.equal(decoding_targets(attention), expected)


def test_the_loss_scores_no_sep_and_masks_its_encoder_input_like_the_official_code(tiny_model, monkeypatch) -> None:
    # Issue #11.4: the decoder's targets leave out [SEP]; the encoder masks whole words with the 80/10/10 split.
    import xprt_st.losses.retromae as retromae

    seen = {}
    cross_entropy, encode = retromae.vocab_cross_entropy, retromae.encode_columns

    def record_targets(head, states, targets):
        seen["targets"] = targets
        return cross_entropy(head, states, targets)

    def record_encode(*args, **kwargs):
        seen["encode_kwargs"] = kwargs
        return encode(*args, **kwargs)

    monkeypatch.setattr(retromae, "vocab_cross_entropy", record_targets)
    monkeypatch.setattr(retromae, "encode_columns", record_encode)
    features = dict(tiny_model.preprocess(["the unbelievably fast pitcher struck out every batter"]))
    RetroMAELoss(tiny_model)([features], None)
    sep = tiny_model.tokenizer.sep_token_id
    assert sep not in seen["targets"].tolist()
    assert seen["targets"].numel() == int(features["attention_mask"].sum()) - 2
    assert seen["encode_kwargs"]["whole_words"] is not None
    assert seen["encode_kwargs"]["bert_corruption_vocab"] == len(tiny_model.tokenizer)


def test_whole_word_mask_takes_every_piece_of_a_chosen_word(tiny_model) -> None:
    from xprt_st.losses._common import continuation_pieces, sample_whole_word_mask, special_token_ids

    features = dict(tiny_model.preprocess(["unbelievably tokenization embeddings are hyperparameterized"] * 64))
    ids, attention = features["input_ids"], features["attention_mask"]
    continuation = continuation_pieces(tiny_model)
    assert continuation[ids].any()  # the sentence has words of several pieces
    mask = sample_whole_word_mask(
        ids, attention, special_token_ids(tiny_model), continuation, 0.3, torch.Generator().manual_seed(0)
    )
    pieces = continuation[ids]  # (rows, seq)
    # a continuation piece is masked exactly when the piece before it is
    assert torch.equal(mask[:, 1:][pieces[:, 1:]], mask[:, :-1][pieces[:, 1:]])
    assert not mask[:, 0].any() and mask.any(dim=1).all()
    maskable = int(attention[0].sum()) - 2
    assert mask.sum(dim=1).max().item() <= max(round(0.3 * maskable), int(mask.sum(dim=1).min()))


def test_bert_corruption_is_80_mask_10_random_10_kept() -> None:
    from xprt_st.losses._common import apply_bert_corruption

    ids = torch.full((200, 100), 7)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, ::2] = False
    out = apply_bert_corruption(ids, mask, 103, 30522, torch.Generator().manual_seed(0))
    assert torch.equal(out[~mask], ids[~mask])  # unmasked positions are never touched
    shares = [(out[mask] == 103).float().mean().item(), (out[mask] == 7).float().mean().item()]
    assert shares[0] == pytest.approx(0.8, abs=0.02) and shares[1] == pytest.approx(0.1, abs=0.02)


def test_whole_word_mask_skips_a_word_that_overflows_and_reaches_the_ratio(tiny_model) -> None:
    # Issue #19.3: like the whole-word collator, a word that would overflow the budget is skipped and the
    # next words are tried, so the realised share is the ratio (up to rounding), not ~27% for a 30% target.
    from xprt_st.losses._common import continuation_pieces, sample_whole_word_mask, special_token_ids

    words = "unbelievably tokenization embeddings hyperparameterized the a of pitcher game truck carbon".split()
    rng = torch.Generator().manual_seed(3)
    texts = []
    for _ in range(400):
        length = int(torch.randint(6, 40, (1,), generator=rng))
        texts.append(" ".join(words[int(i)] for i in torch.randint(len(words), (length,), generator=rng)))
    features = dict(tiny_model.preprocess(texts))
    ids, attention = features["input_ids"], features["attention_mask"]
    special = special_token_ids(tiny_model)
    continuation = continuation_pieces(tiny_model)
    mask = sample_whole_word_mask(ids, attention, special, continuation, 0.3, rng)
    eligible = attention.bool() & ~torch.isin(ids, special)
    maskable = eligible.sum(dim=1)
    share = mask.sum(dim=1) / maskable
    assert share.mean().item() == pytest.approx(0.3, abs=0.01)
    for row in range(len(texts)):
        # the greedy rule: at the end, no unmasked word would still fit in what is left of the budget
        positions = eligible[row].nonzero().flatten().tolist()
        sizes, masked = [], []
        for position in positions:
            if continuation[ids[row, position]] and sizes:
                sizes[-1] += 1
            else:
                sizes.append(1)
                masked.append(bool(mask[row, position]))
        left = max(round(float(maskable[row]) * 0.3), 1) - int(mask[row].sum())
        assert left >= 0 and all(size > left for size, chosen in zip(sizes, masked, strict=True) if not chosen)


def _normalized(model):
    """The tiny encoder served like all-MiniLM-L6-v2 and E5: mean pooling, then ``Normalize`` (|h| = 1)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    return SentenceTransformer(modules=[model[0], Pooling(32, "mean"), Normalize()], device="cpu")


def _record_decoder_inputs(monkeypatch) -> dict:
    """Record what ``enhanced_decode`` receives (the vectors and token ids) on every call."""
    import xprt_st.losses.retromae as retromae

    seen = {}
    decode = retromae.enhanced_decode

    def record(decoder, vectors, input_ids, allowed):
        seen.update(decoder=decoder, vectors=vectors.detach(), input_ids=input_ids)
        return decode(decoder, vectors, input_ids, allowed)

    monkeypatch.setattr(retromae, "enhanced_decode", record)
    return seen


@pytest.mark.parametrize("served", ["tiny-normalized", "minilm"])
def test_the_sentence_vector_enters_the_decoder_at_the_scale_of_its_context_tokens(
    served, tiny_model, group_batch, monkeypatch, request
) -> None:
    # Issue #19.1: with a model that ends in Normalize, |h| = 1 while the context tokens leave the decoder's
    # LayerNorm with norm sqrt(hidden) (19.6 for MiniLM): the bottleneck drowns. It must be within ~3x of them.
    model = _normalized(tiny_model) if served == "tiny-normalized" else copy.deepcopy(request.getfixturevalue("minilm"))
    features, _ = group_batch(model)
    seen = _record_decoder_inputs(monkeypatch)
    RetroMAELoss(model).eval()(features[:2], None)
    with torch.no_grad():
        context = seen["decoder"].embed(seen["input_ids"])[:, 1:]  # (rows, seq - 1, hidden)
    real = pad_cat([column["attention_mask"] for column in features[:2]])[:, 1:].bool()
    median = context[real].norm(dim=-1).median()
    ratio = seen["vectors"].norm(dim=-1) / median  # (rows,)
    assert ((ratio > 1 / 3) & (ratio < 3)).all(), ratio


@pytest.mark.parametrize("served", ["tiny", "tiny-normalized"])
def test_the_decoder_receives_the_served_embedding_under_model_pooling(
    served, tiny_model, group_batch, monkeypatch
) -> None:
    # Issue #19.2: capture what enhanced_decode receives; its direction must be the embedding the model
    # serves for the very (masked) input the encoder read, not e.g. the [CLS] state.
    import torch.nn.functional as F

    model = _normalized(tiny_model) if served == "tiny-normalized" else tiny_model
    features, _ = group_batch(model)
    seen = _record_decoder_inputs(monkeypatch)
    served_vectors = []
    model.register_forward_hook(lambda module, args, output: served_vectors.append(output["sentence_embedding"]))
    RetroMAELoss(model).eval()(features[:2], None)
    (embedding,) = served_vectors  # one batched encoder forward over both columns
    torch.testing.assert_close(F.normalize(seen["vectors"], dim=-1), F.normalize(embedding.detach(), dim=-1))
