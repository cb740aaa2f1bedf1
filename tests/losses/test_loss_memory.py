"""Issue 28's memory cuts change no loss: GradCache and the micro-batched decoder give the uncut values and gradients,
term by term, on a tiny model (fixed seeds, the same masks, dropout off)."""

from __future__ import annotations

import copy

import pytest
import torch

from xprt_st.losses import XPRTLoss
from xprt_st.losses._grad_cache import cached_encode_columns, row_slices
from xprt_st.losses._micro_batch import micro_batched_sum

TERMS = ("xp", "cross", "self", "mlm", "unif", "retention")


def _perturbed(model):
    """A copy of ``model`` whose weights moved a little, so the retention term and its gradient are not zero."""
    moved = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return moved


def _term_and_grads(model, teacher, features, labels, key: str, **options):
    """Term ``key``'s value and the gradient of that term alone, for one fresh loss with ``options``."""
    student = copy.deepcopy(model)
    torch.manual_seed(0)  # the same decoder and head initialisation for every path
    loss = XPRTLoss(student, teacher=teacher, **options)
    loss.eval()  # no dropout: every path sees the same network
    torch.manual_seed(42)  # the same masks
    terms = loss([dict(column) for column in features], labels)
    terms[key].backward()
    grads = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
    return {name: value.item() for name, value in terms.items()}, grads


@pytest.mark.parametrize("key", TERMS)
def test_every_term_and_its_gradient_equal_the_uncut_computation(tiny_model, group_batch, key) -> None:
    features, labels = group_batch(tiny_model)  # 4 groups
    teacher = copy.deepcopy(tiny_model).eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    student = _perturbed(tiny_model)
    uncut, uncut_grads = _term_and_grads(
        student, teacher, features, labels, key, mini_batch_size=None, decoder_mini_batch_size=None
    )
    # 3 groups then 1 per encoder mini-batch; decoder blocks of 5 rows (32 cross rows, 8 self rows: uneven ends)
    cut, cut_grads = _term_and_grads(
        student, teacher, features, labels, key, mini_batch_size=3, decoder_mini_batch_size=5
    )
    assert cut.keys() == uncut.keys() == set(TERMS)
    for name in TERMS:  # every term's value, while only ``key``'s gradient is taken
        assert cut[name] == pytest.approx(uncut[name], rel=1e-5, abs=1e-7), name
    assert uncut_grads, "the term has a gradient"
    assert cut_grads.keys() == uncut_grads.keys()
    assert any(name.startswith("model.") for name in cut_grads)  # it reaches the encoder
    for name in uncut_grads:
        torch.testing.assert_close(cut_grads[name], uncut_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_hard_negatives_under_gradcache_give_the_uncut_l_xp_and_gradient(tiny_model, group_batch) -> None:
    features, labels = group_batch(tiny_model)
    negatives = [tiny_model.preprocess(["rock salt", "trucks", "the umpire", "leaks"]) for _ in range(2)]
    teacher = copy.deepcopy(tiny_model).eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    options = {"hard_negatives": 2, "decoder_mini_batch_size": None}
    uncut, uncut_grads = _term_and_grads(
        tiny_model, teacher, features + negatives, labels, "xp", mini_batch_size=None, **options
    )
    cut, cut_grads = _term_and_grads(
        tiny_model, teacher, features + negatives, labels, "xp", mini_batch_size=3, **options
    )
    for name in TERMS:
        assert cut[name] == pytest.approx(uncut[name], rel=1e-5, abs=1e-7), name
    assert cut_grads.keys() == uncut_grads.keys() and any(name.startswith("model.") for name in cut_grads)
    for name in uncut_grads:
        torch.testing.assert_close(cut_grads[name], uncut_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_gradcache_holds_one_mini_batch_and_replays_its_dropout(tiny_model, group_batch) -> None:
    """Training mode: the re-run of a mini-batch draws the same dropout masks as its pass without graph, so the
    gradient is that of the value the forward computed; the encoder only ever sees mini-batches."""
    features, _ = group_batch(tiny_model)
    model = copy.deepcopy(tiny_model).train()
    seen = []
    handle = model.register_forward_hook(
        lambda module, args, output: seen.append((torch.is_grad_enabled(), output["sentence_embedding"].detach()))
    )
    torch.manual_seed(1)
    encoded = cached_encode_columns(model, features[:2], mini_batch_size=3)
    without_graph = [embedding for grad, embedding in seen]
    assert [grad for grad, _ in seen] == [False, False]  # two mini-batches (3 + 1 groups), no graph
    torch.rand(5)  # the random stream moves on between forward and backward (the decoder's masks, its dropout)
    torch.stack([embedding.sum() for embedding in encoded.embeddings]).sum().backward()
    rerun = [embedding for grad, embedding in seen[2:]]
    assert [grad for grad, _ in seen[2:]] == [True, True]
    for first, second in zip(without_graph, rerun, strict=True):
        torch.testing.assert_close(first, second, rtol=0, atol=0)  # the same dropout masks, bit for bit
    assert [row.size(0) for row in rerun] == [2 * 3, 2 * 1]  # both columns of 3 groups, then of 1
    handle.remove()


def test_micro_batched_sum_equals_the_whole_sum_and_its_gradient() -> None:
    """Hand-checkable: sum over blocks of (w . x_b)^2 has gradient 2 (w . x_b) w per row and sum 2 (w . x_b) x_b."""
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], requires_grad=True)
    w = torch.tensor([2.0, -1.0], requires_grad=True)
    blocks = [lambda leaf, rows=rows: ((leaf[rows] @ w) ** 2).sum() for rows in row_slices(3, 2)]
    value = micro_batched_sum(blocks, x, [w])
    # w . x = [0, 7, 0.5] -> 0 + 49 + 0.25
    assert value.item() == pytest.approx(49.25)
    (2 * value).backward()
    torch.testing.assert_close(x.grad, 2 * torch.tensor([[0.0, 0.0], [28.0, -14.0], [2.0, -1.0]]))
    torch.testing.assert_close(w.grad, 2 * torch.tensor([42.0 + 0.5, -14.0 + 0.5]))


def test_memory_options_are_checked(tiny_model) -> None:
    for name in ("mini_batch_size", "decoder_mini_batch_size"):
        for bad in (0, -2, 1.5):
            with pytest.raises(ValueError, match=name):
                XPRTLoss(tiny_model, retention_weight=None, **{name: bad})
    loss = XPRTLoss(tiny_model, retention_weight=None, mini_batch_size=8)
    assert loss.get_config_dict()["mini_batch_size"] == 8
    assert loss.get_config_dict()["decoder_mini_batch_size"] == loss.cross_fill_in.decoder_mini_batch_size == 64
    assert XPRTLoss(tiny_model, retention_weight=None).mini_batch_size == 16  # GradCache above 16 groups


def test_a_recipe_names_a_bad_memory_option_before_anything_loads() -> None:
    from xprt_st.objectives import bind_args

    _, problems = bind_args("xprt", {"mini_batch_size": 0, "decoder_mini_batch_size": 2.5})
    assert problems == [
        "objective.args.mini_batch_size: 0 is out of range; XPRTLoss accepts a number >= 1",
        "objective.args.decoder_mini_batch_size: must be an integer, found 2.5",
    ]
    assert bind_args("xprt", {"mini_batch_size": None, "decoder_mini_batch_size": 32}) == (
        {"mini_batch_size": None, "decoder_mini_batch_size": 32},
        [],
    )


def _contrastive_value_and_grads(model, features, labels, wrap_teacher=None, **options):
    """CrossPassageLoss's summed value and its encoder gradient (optionally inside WithRetention), dropout off."""
    from xprt_st.losses import CrossPassageLoss, WithRetention

    student = copy.deepcopy(model)
    loss = CrossPassageLoss(student, **options)
    if wrap_teacher is not None:
        loss = WithRetention(loss, teacher=wrap_teacher)
    loss.eval()
    torch.manual_seed(42)  # the same masks where encoder_mask_ratio > 0
    value = loss([dict(column) for column in features], labels)
    total = torch.stack(list(value.values())).sum() if isinstance(value, dict) else value
    total.backward()
    grads = {name: p.grad.clone() for name, p in student.named_parameters() if p.grad is not None}
    terms = {k: v.item() for k, v in value.items()} if isinstance(value, dict) else {"loss": value.item()}
    return terms, grads


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"hard_negatives": 2},
        {"encoder_mask_ratio": 0.15},
        {"retention": True},
        {"retention": True, "hard_negatives": 2},
    ],
    ids=["l_xp", "hard-negatives", "masked", "with-retention", "with-retention-hard"],
)
def test_cross_passage_gradcache_gives_the_uncut_loss_and_gradient(tiny_model, group_batch, options) -> None:
    """CrossPassageLoss(mini_batch_size=3) on 4 groups (mini-batches of 3 and 1): the value and every encoder
    gradient of the whole-batch step, alone and inside WithRetention (whose student reuses the cached pass)."""
    features, labels = group_batch(tiny_model)
    options = dict(options)
    teacher = None
    if options.pop("retention", False):
        teacher = copy.deepcopy(tiny_model).eval()
        for parameter in teacher.parameters():
            parameter.requires_grad_(False)
    student = _perturbed(tiny_model)  # so the retention term and its gradient are not zero
    columns = features[:2]
    if options.get("hard_negatives"):
        columns += [tiny_model.preprocess(["rock salt", "trucks", "the umpire", "leaks"]) for _ in range(2)]
    uncut, uncut_grads = _contrastive_value_and_grads(student, columns, labels, teacher, **options)
    cut, cut_grads = _contrastive_value_and_grads(student, columns, labels, teacher, mini_batch_size=3, **options)
    assert cut.keys() == uncut.keys()
    for name in uncut:
        assert cut[name] == pytest.approx(uncut[name], rel=1e-5, abs=1e-7), name
    if teacher is not None:
        assert uncut["retention"] > 0
    assert uncut_grads and cut_grads.keys() == uncut_grads.keys()
    for name, grad in uncut_grads.items():  # float summation order: tolerance relative to the tensor's scale
        scale = max(1.0, grad.abs().max().item())
        torch.testing.assert_close(cut_grads[name], grad, rtol=1e-4, atol=1e-6 * scale, msg=name)


def test_cross_passage_gradcache_runs_the_encoder_on_mini_batches_only(tiny_model, group_batch) -> None:
    """With retention around it, the student's every forward is a mini-batch of 3 or 1 groups x 2 columns: the
    retention term reuses the cached pass instead of embedding the whole batch once more."""
    from xprt_st.losses import CrossPassageLoss, WithRetention

    features, labels = group_batch(tiny_model)
    model = copy.deepcopy(tiny_model).train()
    loss = WithRetention(CrossPassageLoss(model, mini_batch_size=3))  # its teacher: a copy taken before the hook
    rows = []
    handle = model.register_forward_hook(lambda module, args, output: rows.append(output["sentence_embedding"].size(0)))
    terms = loss([dict(column) for column in features[:2]], labels)
    torch.stack(list(terms.values())).sum().backward()
    handle.remove()
    assert rows == [6, 2, 6, 2]  # two passes without graph, then the two re-runs; the teacher is another module


def test_masked_cross_passage_under_retention_runs_the_student_pair_whole(tiny_model, group_batch) -> None:
    """With encoder masking, the student must read unmasked text, so it cannot reuse the cached (masked) pass:
    after the mini-batches comes one whole-batch pass of (anchor, positive) with graph, which the step-memory plan
    counts (tests/training/test_memory.py)."""
    from xprt_st.losses import CrossPassageLoss, WithRetention

    features, labels = group_batch(tiny_model)
    model = copy.deepcopy(tiny_model).train()
    loss = WithRetention(CrossPassageLoss(model, encoder_mask_ratio=0.15, mini_batch_size=3))
    rows = []
    handle = model.register_forward_hook(lambda module, args, output: rows.append(output["sentence_embedding"].size(0)))
    terms = loss([dict(column) for column in features[:2]], labels)
    torch.stack(list(terms.values())).sum().backward()
    handle.remove()
    assert rows == [6, 2, 8, 6, 2]  # masked passes without graph, the student's whole pair, the masked re-runs


def test_cross_passage_mini_batch_size_is_checked(tiny_model) -> None:
    from xprt_st.losses import CrossPassageLoss
    from xprt_st.objectives import bind_args

    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="mini_batch_size"):
            CrossPassageLoss(tiny_model, mini_batch_size=bad)
    assert CrossPassageLoss(tiny_model).mini_batch_size is None  # off by default: the paper's step
    assert CrossPassageLoss(tiny_model, mini_batch_size=8).get_config_dict()["mini_batch_size"] == 8
    _, problems = bind_args("cross-passage", {"mini_batch_size": 0})
    assert problems == ["objective.args.mini_batch_size: 0 is out of range; CrossPassageLoss accepts a number >= 1"]
