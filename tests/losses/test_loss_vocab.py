"""The chunked vocabulary losses equal the plain ones (value and gradients), with chunks smaller than the batch."""

from __future__ import annotations

import pytest
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


def _previous_fused_loss(head, states, targets, teacher_states, chunk):
    """The implementation before the step-cost work (per-chunk allocations and scaling), kept as the reference
    that the reorganised one must equal in value and gradients."""
    hidden = head.transform(states)
    teacher_hidden = None if teacher_states is None else head.transform(teacher_states).detach()
    weight, bias = head.embeddings.weight, head.bias
    rows, pieces = hidden.size(0), []
    for start in range(0, rows, chunk):
        x = hidden[start : start + chunk]
        log_probs = F.log_softmax(torch.addmm(bias, x, weight.T).float(), dim=-1)
        if teacher_hidden is None:
            pieces.append(-log_probs.gather(1, targets[start : start + chunk, None]).sum())
        else:
            teacher_logits = torch.addmm(bias, teacher_hidden[start : start + chunk], weight.T)
            teacher_log = F.log_softmax(teacher_logits, dim=-1).detach()  # a target: no gradient
            pieces.append((teacher_log.exp() * (teacher_log - log_probs)).sum())
    return sum(pieces) / rows


def test_the_reorganised_chunks_equal_the_previous_path_with_a_ragged_last_chunk(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr(_vocab, "CHUNK", 8)
    head = attach_mlm_head(tiny_model)
    torch.manual_seed(1)
    states = torch.randn(29, 32, requires_grad=True)  # 3 full chunks and one of 5
    teacher_states = torch.randn(29, 32)
    targets = torch.randint(0, 30522, (29,))
    params = [states, head.dense.weight, head.bias, head.embeddings.weight]
    for teacher in (None, teacher_states):
        reference = _previous_fused_loss(head, states, targets, teacher, chunk=8)
        reference.backward()
        expected = _grads(params)
        for p in params:
            p.grad = None
        value = (
            _vocab.vocab_cross_entropy(head, states, targets)
            if teacher is None
            else _vocab.vocab_kl_divergence(head, states, teacher)
        )
        value.backward()
        torch.testing.assert_close(value, reference)
        for got, want in zip(_grads(params), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        for p in params:
            p.grad = None


def test_bf16_autocast_runs_the_products_in_bf16_and_keeps_fp32_accumulators(tiny_model, monkeypatch) -> None:
    """Under autocast the value equals the loss of bf16-rounded logits (so the products ran in bf16), the
    gradients stay close to fp32's, and every gradient keeps its parameter's dtype."""
    monkeypatch.setattr(_vocab, "CHUNK", 4)  # 2 * 4 = 8 positions per chunk in bf16: 3 chunks
    head = attach_mlm_head(tiny_model)
    torch.manual_seed(2)
    states = torch.randn(20, 32, requires_grad=True)
    targets = torch.randint(0, 30522, (20,))
    params = [states, head.dense.weight, head.bias, head.embeddings.weight]
    F.cross_entropy(head(states), targets).backward()
    fp32_grads = _grads(params)
    for p in params:
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = _vocab.vocab_cross_entropy(head, states, targets)
        hidden = head.transform(states).to(torch.bfloat16)
    bf16_logits = torch.addmm(head.bias.bfloat16(), hidden, head.embeddings.weight.bfloat16().T).float()
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, F.cross_entropy(bf16_logits, targets), rtol=1e-5, atol=1e-5)
    value.backward()
    for got, want, param in zip(_grads(params), fp32_grads, params, strict=True):
        assert got.dtype == param.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0.05, atol=2e-3)


def test_the_fused_kernel_is_used_only_on_cuda_when_installed(monkeypatch) -> None:
    installed = {"liger_kernel"}
    monkeypatch.setattr(_vocab.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    assert _vocab.fused_kernel(torch.device("cpu")) is None  # Triton kernels: never on the CPU
    assert _vocab.fused_kernel(torch.device("cuda")) == "liger"
    installed = {"cut_cross_entropy"}
    assert _vocab.fused_kernel(torch.device("cuda")) == "cut-cross-entropy"
    installed = set()
    assert _vocab.fused_kernel(torch.device("cuda")) is None  # the chunked path
    installed = {"liger_kernel"}
    monkeypatch.setenv(_vocab.FUSED_KERNEL_ENV, "0")
    assert _vocab.fused_kernel(torch.device("cuda")) is None


def test_the_chunked_path_on_cpu_even_with_a_fused_kernel_package(tiny_model, monkeypatch) -> None:
    monkeypatch.setattr(_vocab.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(_vocab, "_fused_cross_entropy", lambda kernel: pytest.fail(f"{kernel} used on the CPU"))
    head = attach_mlm_head(tiny_model)
    value = _vocab.vocab_cross_entropy(head, torch.randn(5, 32), torch.tensor([1, 2, 3, 4, 5]))
    assert torch.isfinite(value)
