"""Losses over the vocabulary without materialising the (positions, vocab) logits.

xPRT predicts tens of thousands of masked positions per batch (60% of 8 decoded passages per group),
and a (positions, 30522) float logits tensor plus its log-softmax is gigabytes. The functions here run
the MLM head's output projection chunk by chunk and compute the gradient of each chunk right away (the
"fused linear cross-entropy" trick), so the peak memory is one chunk's logits and nothing is recomputed.
Results equal the plain ``F.cross_entropy(head(states), targets)`` up to float summation order.

Cost (see ``docs/losses.md``, "Step cost"): per position the projection is three (hidden x vocab) matrix
products (logits, gradient to the states, gradient to the tied embeddings) and a few passes over the
(chunk, vocab) block. So that those passes stay few and allocate nothing per chunk, each call allocates
its (chunk, vocab) buffers once and reuses them; the 1/positions scaling is applied once to the (small)
accumulated gradients rather than to every block.

Precision follows autocast: under ``torch.autocast(dtype=torch.bfloat16)`` (the trainer's ``bf16=True``,
``xprt-st train --precision bf16``) the three products run in bf16 (on a CPU with AVX512-BF16 or AMX,
about 3x faster than fp32), while the softmax, the loss and the gradient accumulators stay fp32. Without
autocast everything is fp32, as before. On CUDA, when ``liger-kernel`` or ``cut-cross-entropy`` is
installed, the hard-target cross-entropy goes through its fused Triton kernel instead (see
:func:`fused_kernel`); the soft-target KL always takes the chunked path.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable

import torch
from torch import Tensor

from xprt_st.models import MLMHead

logger = logging.getLogger(__name__)

CHUNK = 512
"""Positions per chunk in fp32: (512, 30522) float32 logits are 62 MB; a call holds two to four such buffers.
Under bf16 autocast a chunk is twice as long: each chunk adds its bf16 (vocab, hidden) gradient product into
the fp32 accumulator, a pass over the whole table that longer chunks make rarer."""

FUSED_KERNEL_ENV = "XPRT_FUSED_CE"
"""Set to ``0`` to keep the chunked path on CUDA even when a fused kernel package is installed."""


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """The dtype of the projection's matrix products: the autocast dtype when autocast is on, else the input's."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return hidden.dtype


class _FusedVocabLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, teacher_hidden, need_grad: bool, chunk: int, dtype):
        # the casts are explicit (once per call, not per chunk), so autocast must not recast inside
        with torch.autocast(hidden.device.type, enabled=False):
            return _FusedVocabLoss._forward(ctx, hidden, weight, bias, targets, teacher_hidden, need_grad, chunk, dtype)

    @staticmethod
    def _forward(ctx, hidden, weight, bias, targets, teacher_hidden, need_grad: bool, chunk: int, dtype):
        rows, vocab = hidden.size(0), weight.size(0)
        low = dtype != torch.float32
        x_all, w, b = hidden.to(dtype), weight.to(dtype), bias.to(dtype)  # no copy in fp32
        t_all = teacher_hidden.to(dtype) if teacher_hidden is not None else None
        size = min(chunk, rows)

        def buffer(dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.empty(size, vocab, dtype=dtype, device=hidden.device)

        # (chunk, vocab) buffers, reused by every chunk: a fresh 62 MB tensor per chunk costs page faults
        logits_buf = buffer(dtype)  # the chunk's logits; in bf16, then the gradient cast for the products
        upcast_buf = buffer() if low else None  # bf16 logits in fp32: log_softmax is 2x slower reading bf16
        log_probs_buf = buffer()  # log-softmax, then the gradient
        teacher_buf = buffer() if t_all is not None else None
        teacher_probs_buf = buffer() if t_all is not None else None

        def log_softmax_of(x: Tensor, out: Tensor) -> Tensor:
            """(c, hidden) -> fp32 (c, vocab) log-softmax of the logits, written into ``out``."""
            logits = torch.addmm(b, x, w.T, out=logits_buf[: x.size(0)])
            source = upcast_buf[: x.size(0)].copy_(logits) if low else logits
            return torch.log_softmax(source, 1, out=out)

        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        if need_grad:
            grad_hidden = torch.empty(rows, hidden.size(1), dtype=torch.float32, device=hidden.device)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=hidden.device)
            grad_bias = torch.zeros(vocab, dtype=torch.float32, device=hidden.device)
        for start in range(0, rows, chunk):
            end = min(start + chunk, rows)
            c = end - start
            x = x_all[start:end]  # (c, hidden)
            if t_all is None:
                log_probs = log_softmax_of(x, log_probs_buf[:c])  # (c, vocab)
                index = targets[start:end, None]  # (c, 1)
                total -= log_probs.gather(1, index).sum()
                if need_grad:
                    grad = log_probs.exp_()  # softmax, in place
                    grad.scatter_add_(1, index, torch.full_like(index, -1, dtype=grad.dtype))
            else:
                teacher_log = log_softmax_of(t_all[start:end], teacher_buf[:c])  # (c, vocab)
                teacher_probs = torch.exp(teacher_log, out=teacher_probs_buf[:c])
                log_probs = log_softmax_of(x, log_probs_buf[:c])
                # KL = sum p_t (log p_t - log p), as one dot product of p_t with the difference, written over the
                # teacher's log-probabilities (no (c, vocab) temporary). Not the difference of two dot products:
                # each is about the entropy (~log vocab) per position, the KL thousands of times smaller, and fp32
                # rounding of that cancellation moved a 0.0033 KL by 5e-5 of itself with the grouping of positions
                # into decoder blocks.
                difference = teacher_log.sub_(log_probs)
                total += torch.dot(teacher_probs.view(-1), difference.view(-1))
                if need_grad:
                    grad = log_probs.exp_().sub_(teacher_probs)
            if need_grad:
                if low:  # bf16 products, fp32 accumulators
                    grad_low = logits_buf[:c].copy_(grad)  # the logits are no longer needed
                    grad_hidden[start:end] = torch.mm(grad_low, w)
                    grad_weight += torch.mm(grad_low.T, x)
                else:
                    torch.mm(grad, w, out=grad_hidden[start:end])
                    grad_weight.addmm_(grad.T, x)
                grad_bias += grad.sum(0)
        if need_grad:
            scale = 1.0 / rows  # the mean over positions, applied once to the accumulated gradients
            ctx.save_for_backward(
                grad_hidden.mul_(scale).to(hidden.dtype),
                grad_weight.mul_(scale).to(weight.dtype),
                grad_bias.mul_(scale).to(bias.dtype),
            )
        return total / rows

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return (
            grad_hidden * grad_output,
            grad_weight * grad_output,
            grad_bias * grad_output,
            None,
            None,
            None,
            None,
            None,
        )


def fused_kernel(device: torch.device) -> str | None:
    """The fused linear-cross-entropy package the hard-target loss uses on ``device``, or None (chunked path).

    ``"liger"`` (``liger-kernel``) or ``"cut-cross-entropy"`` when one is installed and ``device`` is CUDA
    (both are Triton kernels); None on CPU, when neither is installed, or when ``XPRT_FUSED_CE=0``.
    """
    if device.type != "cuda" or os.environ.get(FUSED_KERNEL_ENV, "1") == "0":
        return None
    if importlib.util.find_spec("liger_kernel") is not None:
        return "liger"
    if importlib.util.find_spec("cut_cross_entropy") is not None:
        return "cut-cross-entropy"
    return None


def _fused_cross_entropy(kernel: str) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """``(hidden, weight, bias, targets) -> mean cross-entropy`` through the named fused kernel."""
    if kernel == "liger":
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        def liger(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor) -> Tensor:
            out = liger_fused_linear_cross_entropy(hidden, weight, targets, bias=bias, reduction="mean")
            return out[0] if isinstance(out, tuple) else out  # some versions also return the z-loss

        return liger
    from cut_cross_entropy import linear_cross_entropy

    def cce(hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor) -> Tensor:
        dtype = hidden.dtype if hidden.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        return linear_cross_entropy(hidden.to(dtype), weight.to(dtype), targets, bias=bias.to(dtype)).float()

    return cce


def _apply(head: MLMHead, hidden: Tensor, targets: Tensor | None, teacher_hidden: Tensor | None) -> Tensor:
    weight, bias = head.embeddings.weight, head.bias
    dtype = _compute_dtype(hidden)
    kernel = fused_kernel(hidden.device) if teacher_hidden is None else None
    if kernel is not None:
        logger.debug("vocabulary cross-entropy through the fused %s kernel", kernel)
        return _fused_cross_entropy(kernel)(hidden.to(dtype), weight.to(dtype), bias.to(dtype), targets).float()
    need_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (hidden, weight, bias))
    chunk = CHUNK if dtype == torch.float32 else 2 * CHUNK
    return _FusedVocabLoss.apply(hidden, weight, bias, targets, teacher_hidden, need_grad, chunk, dtype)


def vocab_cross_entropy(head: MLMHead, states: Tensor, targets: Tensor) -> Tensor:
    """``F.cross_entropy(head(states), targets)`` (mean over positions) without the full logits.

    ``states``: (positions, hidden) token states; ``targets``: (positions,) token ids.
    """
    if targets.numel() == 0:
        return states.sum() * 0.0
    return _apply(head, head.transform(states), targets, None)


def vocab_kl_divergence(head: MLMHead, states: Tensor, teacher_states: Tensor) -> Tensor:
    """Mean over positions of ``KL(softmax(head(teacher_states)) || softmax(head(states)))``.

    The teacher side is detached: its distribution is a target, not something to move.
    """
    if states.size(0) == 0:
        return states.sum() * 0.0
    with torch.no_grad():
        teacher_hidden = head.transform(teacher_states)
    return _apply(head, head.transform(states), None, teacher_hidden)
