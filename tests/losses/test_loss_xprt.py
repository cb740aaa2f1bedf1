"""XPRTLoss: the dict of weighted terms, one batched pass == per-column passes, contract, and the trainer."""

from __future__ import annotations

import pytest
import torch

from xprt_st.losses import CrossPassageLoss, XPRTLoss
from xprt_st.losses.cross_passage import cross_passage_loss

ALL_TERMS = {"xp", "cross", "self", "mlm", "unif", "retention"}


def test_returns_every_weighted_term(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model)
    terms = loss(features, labels)
    assert set(terms) == ALL_TERMS
    assert all(term.dim() == 0 and torch.isfinite(term) for term in terms.values())
    assert set(loss.terms) == ALL_TERMS


def test_weights_scale_the_terms_and_zero_disables_them(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, mlm_weight=0, unif_weight=0.5, retention_weight=None)
    loss.eval()
    terms = loss(features, labels)
    assert set(terms) == {"xp", "unif"}
    assert loss.cross_fill_in is None and loss.decoder is None and loss.mlm_head is None and loss.teacher is None
    # only the unmasked pair is embedded, so xp equals the stand-alone term exactly
    alone = CrossPassageLoss(tiny_model)(features, labels)
    assert terms["xp"].item() == pytest.approx(alone.item(), rel=1e-6)
    from xprt_st.losses.uniformity import uniformity_loss

    anchors = tiny_model(dict(features[0]))["sentence_embedding"]
    assert terms["unif"].item() == pytest.approx(0.5 * uniformity_loss(anchors).item(), rel=1e-5)


def test_change_only_the_positive_reads_only_anchor_and_positive(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, mlm_weight=0, unif_weight=0, retention_weight=None)
    calls = []
    handle = tiny_model.register_forward_hook(lambda module, args, output: calls.append(args[0]["input_ids"]))
    loss(features[:2], labels)  # two columns are enough
    handle.remove()
    assert len(calls) == 1 and calls[0].size(0) == 2 * 4  # one forward: anchor and positive
    assert not (calls[0] == tiny_model.tokenizer.mask_token_id).any()  # unmasked text


def test_full_loss_runs_one_encoder_forward_over_five_columns(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model, retention_weight=None)
    calls = []
    handle = tiny_model.register_forward_hook(lambda module, args, output: calls.append(args[0]["input_ids"].size(0)))
    loss(features, labels)
    handle.remove()
    assert calls == [5 * 4]


def test_needs_the_related_columns_when_cross_fill_in_is_on(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    with pytest.raises(ValueError, match="related_2"):
        XPRTLoss(tiny_model, retention_weight=None)(features[:2], labels)


def _terms_and_grads(model, features, labels, merge_columns: bool):
    torch.manual_seed(0)  # the same decoder and head initialisation for both paths
    loss = XPRTLoss(model, merge_columns=merge_columns)
    loss.eval()  # no dropout, so both paths see the same network
    torch.manual_seed(42)
    terms = loss([dict(column) for column in features], labels)
    sum(terms.values()).backward()
    grads = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
    return {key: value.item() for key, value in terms.items()}, grads


def test_batched_encoder_pass_equals_per_column_passes(tiny_model, group_batch) -> None:
    import copy

    features, labels = group_batch(tiny_model)
    # columns of different widths, so the merged batch really pads
    assert len({column["input_ids"].size(1) for column in features}) > 1
    other = copy.deepcopy(tiny_model)
    batched_terms, batched_grads = _terms_and_grads(tiny_model, features, labels, merge_columns=True)
    column_terms, column_grads = _terms_and_grads(other, features, labels, merge_columns=False)
    assert batched_terms.keys() == column_terms.keys()
    for key in batched_terms:
        assert batched_terms[key] == pytest.approx(column_terms[key], rel=1e-4, abs=1e-6), key
    assert batched_grads.keys() == column_grads.keys()
    for name in batched_grads:
        torch.testing.assert_close(batched_grads[name], column_grads[name], rtol=1e-3, atol=1e-5, msg=name)


def test_loss_owned_state_is_decoder_and_head_only(tiny_model) -> None:
    loss = XPRTLoss(tiny_model)
    owned = {key.split(".")[0] for key in loss.state_dict() if not key.startswith(("model.", "teacher."))}
    assert owned == {"decoder", "mlm_head"}
    assert [name for name, _ in loss.named_children()][:4] == ["model", "teacher", "decoder", "mlm_head"]
    assert loss.cross_fill_in.decoder is loss.decoder and loss.self_fill_in.mlm_head is loss.mlm_head


def test_retention_weight_is_settable_and_reported(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, mlm_weight=0, unif_weight=0)
    assert loss.retention_weight == 40.0
    loss.retention_weight = 0.0
    assert loss(features, labels)["retention"].item() == 0.0
    assert loss.get_config_dict()["retention_weight"] == 0.0
    assert "temperature" in loss.get_config_dict() and "xPRT" in loss.citation


def test_xp_term_is_the_pure_function_on_the_masked_embeddings(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    loss = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, unif_weight=0, retention_weight=None).eval()
    torch.manual_seed(3)
    terms = loss(features, labels)
    from xprt_st.losses._common import encode_columns

    torch.manual_seed(3)
    encoded = encode_columns(
        tiny_model, features[:5], mask_ratio=0.15, special_ids=loss.special_ids, mask_token_id=loss.mask_token_id
    )
    expected = cross_passage_loss(encoded.embeddings[0], encoded.embeddings[1], labels)
    assert terms["xp"].item() == pytest.approx(expected.item(), rel=1e-6)


NEGATIVES = [
    ["the truck line is built in michigan", "a batter reached base on a walk", "fast balls break less", "rock salt"],
    ["carbon dioxide is a gas", "pickup trucks carry loads", "the umpire called the game", "leaks are rare"],
]
"""Two hard-negative columns for the four groups: passages that read like another group's."""


def test_hard_negatives_feed_xp_only_from_the_same_masked_pass(tiny_model, group_batch) -> None:
    from xprt_st.losses._common import encode_columns

    features, labels = group_batch(tiny_model)
    negatives = [dict(tiny_model.preprocess(column)) for column in NEGATIVES]
    torch.manual_seed(0)
    hard = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, retention_weight=None, hard_negatives=2).eval()
    torch.manual_seed(0)
    paper = XPRTLoss(tiny_model, cross_weight=0, self_weight=0, retention_weight=None).eval()
    calls = []
    handle = tiny_model.register_forward_hook(lambda module, args, output: calls.append(args[0]["input_ids"].size(0)))
    torch.manual_seed(3)
    terms = hard(features + negatives, labels)
    handle.remove()
    assert calls == [7 * 4]  # one masked forward: the group's five columns and the two negative columns
    torch.manual_seed(3)
    encoded = encode_columns(
        tiny_model,
        features + negatives,
        mask_ratio=0.15,
        special_ids=hard.special_ids,
        mask_token_id=hard.mask_token_id,
    )
    e = encoded.embeddings
    expected = cross_passage_loss(e[0], e[1], labels, negatives=torch.stack(e[5:], dim=1))
    assert terms["xp"].item() == pytest.approx(expected.item(), rel=1e-5)
    torch.manual_seed(3)
    without = paper(features, labels)
    assert terms["xp"].item() > without["xp"].item() + 1e-4  # the negatives are candidates: L_xp grows
    # the other terms read the group's columns only (the masks of the first five columns are drawn first)
    for key in ("mlm", "unif"):
        assert terms[key].item() == pytest.approx(without[key].item(), rel=1e-4, abs=1e-6), key
    assert hard.get_config_dict()["hard_negatives"] == 2 and paper.get_config_dict()["hard_negatives"] == 0


def test_change_only_the_positive_with_hard_negatives_is_cross_passage_with_them(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    negatives = [dict(tiny_model.preprocess(column)) for column in NEGATIVES]
    only_xp = {"cross_weight": 0, "self_weight": 0, "mlm_weight": 0, "unif_weight": 0, "retention_weight": None}
    loss = XPRTLoss(tiny_model, **only_xp, hard_negatives=2).eval()
    alone = CrossPassageLoss(tiny_model, hard_negatives=2).eval()
    with torch.no_grad():
        # the negatives are the last columns, after the group's five (the xprt objective's layout) or after two
        assert loss(features + negatives, labels)["xp"].item() == pytest.approx(
            alone(features[:2] + negatives, labels).item(), rel=1e-5
        )
        assert loss(features[:2] + negatives, labels)["xp"].item() == pytest.approx(
            alone(features[:2] + negatives, labels).item(), rel=1e-5
        )
    with pytest.raises(ValueError, match=r"negative_1 \.\. negative_2"):
        XPRTLoss(tiny_model, retention_weight=None, hard_negatives=2)(features[:3] + negatives, labels)
    with pytest.raises(ValueError, match="whole number"):
        XPRTLoss(tiny_model, hard_negatives=-1)


def test_trains_inside_sentence_transformer_trainer(tiny_model, group_dataset, tmp_path) -> None:
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    loss = XPRTLoss(tiny_model)
    features = [dict(tiny_model.preprocess(group_dataset[column][:8])) for column in group_dataset.column_names[:5]]
    labels = torch.tensor(group_dataset["label"][:8])

    def measure() -> float:
        loss.eval()
        torch.manual_seed(7)
        with torch.no_grad():
            terms = loss([dict(column) for column in features], labels)
        return float(sum(value for key, value in terms.items() if key != "retention"))

    before = measure()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=12,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        warmup_steps=0,
        save_strategy="no",
        report_to=[],
        logging_steps=4,
        seed=0,
        use_cpu=True,
        dataloader_drop_last=True,
    )
    trainer = SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=group_dataset, loss=loss)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "xp" in entry]
    assert logged and {"cross", "self", "mlm", "unif", "retention"} <= set(logged[0])
    assert measure() < before


def test_the_objective_summary_and_the_recipe_state_the_weights_the_loss_uses() -> None:
    # Issue #11.5: the summary and the recipe's comment gave L_self, L_MLM and L_unif unit weights; the code 0.1.
    import inspect
    from pathlib import Path

    from xprt_st.objectives import get_objective

    defaults = inspect.signature(XPRTLoss.__init__).parameters
    weights = {defaults[f"{term}_weight"].default for term in ("cross", "self", "mlm", "unif")}
    assert len(weights) == 1, "the shared statement below assumes one weight for the four auxiliary terms"
    stated = f"L_xp + {weights.pop():g} (L_cross + L_self + L_MLM + L_unif)"
    assert stated in get_objective("xprt").summary
    recipe = Path(__file__).resolve().parents[2] / "xprt_st" / "recipes" / "xprt.yaml"
    assert stated in recipe.read_text(encoding="utf-8")
