"""Cross-device gathering shared by every loss term that uses in-batch negatives (one place, not one per loss)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from sentence_transformers.util import all_gather, all_gather_with_grad, get_rank, get_world_size
from torch import Tensor


def distributed() -> bool:
    """Whether several processes train. Under DDP a GradCache re-run would hand DDP's reducer each parameter's
    gradient once per mini-batch in one backward, which it refuses; GradCache then stays off (each device holds
    its whole per-device batch)."""
    return dist.is_available() and dist.is_initialized() and get_world_size() > 1


def gather_across_devices(embeddings: list[Tensor], labels: Tensor | None) -> tuple[list[Tensor], Tensor | None, int]:
    """Gather per-device embeddings (with gradients to the local part) and their document ids.

    Every tensor in ``embeddings`` has this device's ``batch_size`` rows; the result holds the rows of
    all devices in rank order, so this device's rows start at ``offset = rank * batch_size``.
    Gradients flow back to the local rows only (``sentence_transformers.util.all_gather_with_grad``);
    the labels are integers and travel with a plain ``all_gather``. Without an initialised process
    group this returns the inputs unchanged and ``offset = 0``.

    Args:
        embeddings: tensors of shape ``(batch_size, dim)``.
        labels: ``(batch_size,)`` int64 document ids, or None.

    Returns:
        ``(gathered_embeddings, gathered_labels, offset)``.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return list(embeddings), labels, 0
    gathered = [all_gather_with_grad(embedding) for embedding in embeddings]  # each (world * batch, dim)
    gathered_labels = None if labels is None else all_gather(labels.contiguous())  # (world * batch,)
    return gathered, gathered_labels, get_rank() * embeddings[0].size(0)


def local_rows(batch_size: int, offset: int, device: torch.device) -> Tensor:
    """Indices of this device's rows inside a gathered batch: ``offset, ..., offset + batch_size - 1``."""
    return torch.arange(offset, offset + batch_size, device=device)
