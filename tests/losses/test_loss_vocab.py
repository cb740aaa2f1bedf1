"""The chunked vocabulary losses equal the plain ones (value and gradients), with chunks smaller than the batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xprt_st.losses import _vocab
from xprt_st.models import attach_mlm_head


def _grads(tensors):
    return [t.grad.clone() for t in tensors]


def test_cross_entropy_matches_the_plain_head(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr(_vocab, "CHUNK", 7)
    head = attach_mlm_head(tiny_model)
    states = torch.randn(20, 32, requires_grad=True)
    targets = torch.randint(0, 30522, (20,))
    params = [states, head.dense.weight, head.bias, head.embeddings.weight]
    plain = F.cross_entropy(head(states), targets)
    plain.backward()
    expected = _grads(params)
    for p in params:
        p.grad = None
    fused = _vocab.vocab_cross_entropy(head, states, targets)
    (fused * 2).backward()  # the upstream gradient scales every saved gradient
    torch.testing.assert_close(fused, plain)
    for got, want in zip(_grads(params), expected, strict=True):
        torch.testing.assert_close(got, 2 * want, rtol=1e-4, atol=1e-6)


def test_kl_matches_the_plain_head_and_leaves_the_teacher_alone(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr(_vocab, "CHUNK", 6)
    head = attach_mlm_head(tiny_model)
    states = torch.randn(15, 32, requires_grad=True)
    teacher_states = torch.randn(15, 32, requires_grad=True)
    params = [states, head.dense.weight, head.bias, head.embeddings.weight]
    plain = F.kl_div(
        F.log_softmax(head(states), -1), F.log_softmax(head(teacher_states), -1).detach(), reduction="batchmean",
        log_target=True,
    )  # fmt: skip
    plain.backward()
    expected = _grads(params)
    for p in params:
        p.grad = None
    fused = _vocab.vocab_kl_divergence(head, states, teacher_states)
    fused.backward()
    torch.testing.assert_close(fused, plain)
    for got, want in zip(_grads(params), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert teacher_states.grad is None


def test_no_gradient_work_under_no_grad(tiny_model) -> None:
    head = attach_mlm_head(tiny_model)
    with torch.no_grad():
        value = _vocab.vocab_cross_entropy(head, torch.randn(4, 32), torch.tensor([1, 2, 3, 4]))
    assert not value.requires_grad
