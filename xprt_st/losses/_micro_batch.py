"""A sum of per-row-block losses whose backward runs block by block inside the forward: one block's graph at a time.

The fill-in terms decode 10 passages per group through the one-layer decoder and score them over the vocabulary;
kept whole, the decoder's activations for backward are gigabytes at 64 groups. A term that is a sum over row
blocks, ``L = sum_b L_b(x[b], theta)``, needs no block's graph once that block's gradients are known, so
:func:`micro_batched_sum` computes each block's value and its gradients (to the rows' input ``x`` and to the
parameters ``theta``) right away, frees the block, and returns ``L`` as one autograd node whose backward hands
out the accumulated gradients times the incoming one, like the vocabulary losses of ``_vocab.py`` do. Nothing is
computed twice, so it costs no time; the value and the gradients are the whole batch's up to float summation
order (and, with dropout on, up to which random numbers each row draws).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


class _PrecomputedGradient(torch.autograd.Function):
    """``value`` as an autograd node of ``inputs`` whose gradients are already known (``grads``, one per input)."""

    @staticmethod
    def forward(ctx, value: Tensor, grads: list[Tensor | None], *inputs: Tensor) -> Tensor:
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        grads = [None if grad is None else grad * grad_output.to(grad.dtype) for grad in ctx.grads]
        ctx.grads = None
        return (None, None, *grads)


def unique_trainable(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The tensors that require a gradient, each once (tied weights appear under several owners)."""
    seen: set[int] = set()
    kept = []
    for tensor in tensors:
        if tensor.requires_grad and id(tensor) not in seen:
            seen.add(id(tensor))
            kept.append(tensor)
    return kept


def micro_batched_sum(blocks: Sequence[Callable[[Tensor], Tensor]], x: Tensor, parameters: Sequence[Tensor]) -> Tensor:
    """``sum_b blocks[b](x)`` where each block reads only its rows of ``x`` and the ``parameters``.

    Under ``torch.enable_grad`` each block runs, is differentiated at once (``torch.autograd.grad``, autocast off
    as in any backward) with respect to ``x`` and the trainable ``parameters``, and is freed before the next block;
    the result carries the summed gradients. Otherwise the blocks are simply summed.

    Args:
        blocks: functions of the (detached) ``x``, each returning a scalar: its share of the loss.
        x: ``(rows, ...)`` the rows' input (e.g. the sentence vectors conditioning the decoder); may need a gradient.
        parameters: every trainable tensor the blocks use besides ``x`` (decoder, head, shared embeddings).
    """
    weights = unique_trainable(parameters)
    if not (torch.is_grad_enabled() and (x.requires_grad or weights)):
        return torch.stack([block(x) for block in blocks]).sum()
    leaf = x.detach().requires_grad_(x.requires_grad)
    targets = ([leaf] if x.requires_grad else []) + weights
    total = None
    sums: list[Tensor | None] = [None] * len(targets)
    device_type = x.device.type
    for block in blocks:
        value = block(leaf).float()
        with torch.autocast(device_type, enabled=False):
            grads = torch.autograd.grad(value, targets, allow_unused=True)
        for index, grad in enumerate(grads):
            if grad is not None:
                sums[index] = grad if sums[index] is None else sums[index].add_(grad)
        total = value.detach() if total is None else total + value.detach()
    inputs = ([x] if x.requires_grad else []) + weights
    return _PrecomputedGradient.apply(total, sums, *inputs)
