"""Loss-owned state: find it, save it, and keep it identical across processes.

sentence-transformers optimizes the parameters a loss owns (a decoder, a projection, an MLM head) but
neither saves them with checkpoints nor synchronises their gradients across processes: only the
``SentenceTransformer`` is wrapped in ``DistributedDataParallel``. The helpers here fill that gap
without wrapping the loss, so its ``state_dict`` keys stay the plain attribute paths.

A tensor is *loss-owned* when it is registered on the loss but is not a tensor of a sentence-transformers
model anywhere in the loss (the trained model at ``model``, a frozen ``teacher``, or a model kept under
another name such as ``encoder``). Ownership is decided by tensor identity, so a decoder that shares
(ties) weights with the encoder never duplicates the encoder's weights.
"""

from __future__ import annotations

import atexit
import gc
import logging
from collections.abc import Iterator

import torch
import torch.distributed as dist
from sentence_transformers.base.model import BaseModel
from torch import Tensor, nn

logger = logging.getLogger(__name__)

EXCLUDED_ATTRIBUTES = ("model", "teacher")
"""Attribute names whose whole subtree belongs to the model or the frozen teacher (the loss contract)."""


def _excluded_tensor_ids(loss: nn.Module) -> set[int]:
    excluded: set[int] = set()
    for name, module in loss.named_modules():
        inner = getattr(module, "module", None)  # a DDP / compile wrapper around a model
        if (
            isinstance(module, BaseModel)
            or isinstance(inner, BaseModel)
            or name.rsplit(".", 1)[-1] in EXCLUDED_ATTRIBUTES
        ):
            excluded.update(id(tensor) for tensor in module.parameters())
            excluded.update(id(tensor) for tensor in module.buffers())
    return excluded


def loss_owned_state(loss: nn.Module) -> dict[str, Tensor]:
    """The loss-owned entries of ``loss.state_dict()``: one name per tensor, tensors not detached.

    Shared tensors (one decoder used by two terms) appear once, under their first name, so the result can
    be written with safetensors and loaded back by copying into the same tensors.
    """
    excluded = _excluded_tensor_ids(loss)
    seen: set[int] = set()
    state: dict[str, Tensor] = {}
    for name, tensor in loss.state_dict(keep_vars=True).items():
        if id(tensor) in excluded or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        state[name] = tensor
    return state


def loss_owned_parameters(loss: nn.Module) -> list[nn.Parameter]:
    """The trainable loss-owned parameters, in a fixed order (the same on every process)."""
    return [
        tensor
        for tensor in loss_owned_state(loss).values()
        if isinstance(tensor, nn.Parameter) and tensor.requires_grad
    ]


def world_size() -> int:
    """Number of processes in the default group; 1 when torch.distributed is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def broadcast_tensors(tensors: list[Tensor], src: int = 0) -> None:
    """Copy ``tensors`` from rank ``src`` to every other rank, in place (what DDP does for the model)."""
    if world_size() == 1:
        return
    with torch.no_grad():
        for tensor in tensors:
            dist.broadcast(tensor.data, src=src)


def all_gather_labels(labels: Tensor) -> Tensor:
    """``labels`` of every process concatenated in rank order (the batch the loss gathers negatives from).

    Processes train equal batches (``dataloader_drop_last``), so a plain ``all_gather`` fits.
    """
    size = world_size()
    if size == 1:
        return labels
    parts = [torch.empty_like(labels) for _ in range(size)]
    dist.all_gather(parts, labels.contiguous())
    return torch.cat(parts)


def all_reduce_gradients(parameters: list[nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over all processes, as DDP does for the model's own.

    A parameter without a gradient on this process (its term was skipped) takes part with zeros, so
    every process joins the same collectives in the same order.
    """
    size = world_size()
    if size == 1 or not parameters:
        return
    grads = []
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
        grads.append(parameter.grad)
    for bucket in _buckets(grads):
        flat = torch.cat([grad.reshape(-1) for grad in bucket])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= size
        offset = 0
        for grad in bucket:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()


def _buckets(grads: list[Tensor], max_elements: int = 25_000_000) -> Iterator[list[Tensor]]:
    """Group gradients of one dtype and device into flat all-reduce buckets (fewer, larger collectives)."""
    bucket: list[Tensor] = []
    count = 0
    for grad in grads:
        if bucket and (
            count + grad.numel() > max_elements or grad.dtype != bucket[0].dtype or grad.device != bucket[0].device
        ):
            yield bucket
            bucket, count = [], 0
        bucket.append(grad)
        count += grad.numel()
    if bucket:
        yield bucket


_EXIT_HOOK_REGISTERED = False


def release_process_group_at_exit() -> None:
    """Free the process group while the interpreter is still alive (registered once per process).

    A trainer that is kept alive by reference cycles holds its ``DistributedDataParallel`` wrapper, whose
    reducer holds the gloo process group and the tensors of its last collectives. Left to interpreter
    shutdown, the group's worker threads release those tensors after Python has begun finalising: taking
    the GIL then ends the thread inside C++ and the process aborts (``terminate called without an active
    exception``, SIGABRT), so ``torchrun`` reports a failed job after a finished run. The exit hook runs
    before finalisation: it collects the cycles and destroys the group (a no-op when the script already did).
    """
    global _EXIT_HOOK_REGISTERED
    if not _EXIT_HOOK_REGISTERED:
        atexit.register(_release_process_group)
        _EXIT_HOOK_REGISTERED = True


def _release_process_group() -> None:
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def any_process(flag: bool, device: torch.device | str = "cpu") -> bool:
    """True when ``flag`` is true on at least one process, so all processes can stop together."""
    if world_size() == 1:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)
