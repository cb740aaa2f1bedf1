"""Losses over the vocabulary without materialising the (positions, vocab) logits.

xPRT predicts tens of thousands of masked positions per batch (60% of 8 decoded passages per group),
and a (positions, 30522) float logits tensor plus its log-softmax is gigabytes. The functions here run
the MLM head's output projection chunk by chunk and compute the gradient of each chunk right away (the
"fused linear cross-entropy" trick), so the peak memory is one chunk's logits and nothing is recomputed.
Results equal the plain ``F.cross_entropy(head(states), targets)`` up to float summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from xprt_st.models import MLMHead

CHUNK = 512
"""Positions per chunk: (512, 30522) float32 logits are 62 MB; a chunk needs about four such tensors."""


class _FusedVocabLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, teacher_hidden, need_grad: bool, chunk: int):
        rows = hidden.size(0)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_grad else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_grad else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if need_grad else None
        for start in range(0, rows, chunk):
            end = min(start + chunk, rows)
            x = hidden[start:end]  # (c, hidden)
            log_probs = F.log_softmax(torch.addmm(bias, x, weight.T).float(), dim=-1)  # (c, vocab)
            if teacher_hidden is None:
                index = targets[start:end, None]  # (c, 1)
                total -= log_probs.gather(1, index).sum()
                if need_grad:
                    grad = log_probs.exp_()  # softmax, in place: (c, vocab)
                    grad.scatter_add_(1, index, torch.full_like(index, -1, dtype=grad.dtype))
            else:
                teacher_log = F.log_softmax(torch.addmm(bias, teacher_hidden[start:end], weight.T).float(), dim=-1)
                teacher_probs = teacher_log.exp()  # (c, vocab)
                total += (teacher_probs * (teacher_log - log_probs)).sum()
                if need_grad:
                    grad = log_probs.exp_().sub_(teacher_probs)  # (c, vocab)
            if need_grad:
                grad = grad.div_(rows).to(hidden.dtype)
                grad_hidden[start:end] = grad @ weight  # (c, hidden)
                grad_weight.addmm_(grad.T.float(), x.float())  # (vocab, hidden)
                grad_bias += grad.sum(0).float()
        if need_grad:
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype), grad_bias.to(bias.dtype))
        return total / rows

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return grad_hidden * grad_output, grad_weight * grad_output, grad_bias * grad_output, None, None, None, None


def _apply(head: MLMHead, hidden: Tensor, targets: Tensor | None, teacher_hidden: Tensor | None) -> Tensor:
    weight, bias = head.embeddings.weight, head.bias
    need_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (hidden, weight, bias))
    return _FusedVocabLoss.apply(hidden, weight, bias, targets, teacher_hidden, need_grad, CHUNK)


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
