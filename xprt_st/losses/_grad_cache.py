"""GradCache for the encoder passes: the loss sees the whole batch, the encoder's graph one mini-batch at a time.

Gao et al. 2021 ("Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"), as
sentence-transformers' ``CachedMultipleNegativesRankingLoss`` does it: embed every mini-batch of rows without a
graph, compute the loss on the full batch from those outputs, and, when backward reaches them, re-run each
mini-batch WITH its graph and backpropagate the outputs' gradients into the encoder, one mini-batch at a time.

Here the cached outputs are both the sentence embeddings and the last-layer token states of every column (xPRT's
MLM term reads the token states with a gradient, and the self fill-in teacher without), and the re-run is hidden
inside one autograd node (:class:`_CachedEncoder`), so the caller's loss terms are plain functions of its outputs
and a trainer's single ``backward()`` of their sum drives everything (gradient accumulation and loss scaling
included: the re-run receives the scaled gradients). The candidates are generic: any list of feature columns,
each cut into the same row ranges and merged into one forward per mini-batch.

Each mini-batch's random state is recorded before its first pass and restored for the re-run, so dropout draws
the same masks in both: the gradient is exactly that of the loss the forward computed. Without dropout the loss
and its gradients equal the uncut batch's up to float summation order (``tests/losses/test_loss_memory.py``);
with dropout they are draws of the same distribution (a mini-batch consumes random numbers in another layout).

Cost: one extra encoder forward without graph per pass (the re-run), about a third of a forward-backward.

Why not sentence-transformers' own ``CachedLossMixin`` (``sentence_transformers/base/losses/gradcache.py``, 6.x):
it caches the sentence embeddings only and calls the loss as its ``calculate_loss`` method, backpropagating through
a hook it registers on that value. xPRT's MLM and self fill-in terms read the last-layer token states with a
gradient, so the cache must hold them too, and the terms here stay plain functions of the encoder's outputs that
:class:`~xprt_st.losses.xprt.XPRTLoss` and :class:`~xprt_st.losses.cross_passage.CrossPassageLoss` share: one
GradCache for both keeps one code path and its per-term equality tests. Under autocast the re-run replays the
first pass's autocast state, and the losses' similarity math runs in fp32 (:func:`~xprt_st.losses._common.in_fp32`),
what the mixin's fp32 surrogate gives it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from xprt_st.losses._common import EncodedColumns, forward_columns, mask_columns
from xprt_st.losses._distributed import distributed


def checked_mini_batch_size(name: str, value: int | None) -> int | None:
    """A loss's ``mini_batch_size``-style option as an int (None: GradCache off); a ValueError naming ``name``
    unless it is a whole number of at least 1 or None."""
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, or None; got {value!r}")
    return int(value)


def grad_cache_applies(mini_batch_size: int | None, rows: int) -> bool:
    """Whether a pass of ``rows`` rows runs under GradCache: a mini-batch size smaller than the batch, and one
    process (see :func:`~xprt_st.losses._distributed.distributed`)."""
    return mini_batch_size is not None and mini_batch_size < rows and not distributed()


def row_slices(rows: int, size: int) -> list[slice]:
    """``[0, size), [size, 2 size), ...`` covering ``rows`` (the last one shorter)."""
    if size < 1:
        raise ValueError(f"mini-batch size must be at least 1, got {size}")
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


def _take_rows(features: list[dict[str, Any]], rows: slice) -> list[dict[str, Any]]:
    """Every column's tensors cut to ``rows`` (copies of the dicts: the model writes its outputs into them)."""
    return [{key: value[rows] if torch.is_tensor(value) else value for key, value in f.items()} for f in features]


class _RandomState:
    """The CPU (and, when used, CUDA) random state at one point, to replay a mini-batch's dropout exactly."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


class _Runner:
    """What the autograd node needs to re-run the mini-batches: the model, the masked features, the states."""

    def __init__(self, model: nn.Module, features: list[dict[str, Any]], size: int, batched: bool) -> None:
        self.model = model
        self.features = features
        self.slices = row_slices(features[0]["input_ids"].size(0), size)
        self.batched = batched
        self.states: list[_RandomState] = []
        device = features[0]["input_ids"].device
        self.autocast = (
            torch.is_autocast_enabled(device.type),
            torch.get_autocast_dtype(device.type),
            device.type,
        )

    def _forward(self, rows: slice) -> tuple[list[Tensor], list[Tensor]]:
        enabled, dtype, device_type = self.autocast
        with torch.autocast(device_type, dtype=dtype, enabled=enabled):
            return forward_columns(self.model, _take_rows(self.features, rows), self.batched)

    def without_graph(self) -> list[Tensor]:
        """Per column the embeddings, then per column the token states, of the whole batch, with no graph kept."""
        embeddings: list[list[Tensor]] = [[] for _ in self.features]
        token_states: list[list[Tensor]] = [[] for _ in self.features]
        with torch.no_grad():
            for rows in self.slices:
                self.states.append(_RandomState(self.features[0]["input_ids"].device))
                part_embeddings, part_states = self._forward(rows)
                for column, (embedding, states) in enumerate(zip(part_embeddings, part_states, strict=True)):
                    embeddings[column].append(embedding)
                    token_states[column].append(states)
        return [torch.cat(parts) for parts in embeddings] + [torch.cat(parts) for parts in token_states]

    def backward(self, grads: tuple[Tensor, ...]) -> None:
        """Re-run each mini-batch with its graph, under its recorded random state, and backpropagate ``grads``."""
        columns = len(self.features)
        grad_embeddings, grad_states = grads[:columns], grads[columns:]
        devices = [self.features[0]["input_ids"].device] if self.features[0]["input_ids"].is_cuda else []
        with torch.random.fork_rng(devices=devices):  # the caller's random stream continues as if nothing ran
            for rows, state in zip(self.slices, self.states, strict=True):
                state.restore()
                with torch.enable_grad():
                    part_embeddings, part_states = self._forward(rows)
                outputs, weights = [], []
                for output, grad in zip(part_embeddings + part_states, grad_embeddings + grad_states, strict=True):
                    if grad is not None and output.requires_grad:
                        outputs.append(output)
                        weights.append(grad[rows].to(output.dtype))
                if outputs:
                    torch.autograd.backward(outputs, weights)


class _CachedEncoder(torch.autograd.Function):
    """Outputs: the cached per-column embeddings and token states; backward: the mini-batch re-runs."""

    @staticmethod
    def forward(ctx, runner: _Runner, trigger: Tensor) -> tuple[Tensor, ...]:
        ctx.runner = runner
        return tuple(runner.without_graph())

    @staticmethod
    def backward(ctx, *grads: Tensor) -> tuple[None, None]:
        ctx.runner.backward(grads)
        ctx.runner = None  # the features and random states go with the graph
        return None, None


def cached_encode_columns(
    model: nn.Module,
    features: list[dict[str, Any]],
    mini_batch_size: int,
    *,
    mask_ratio: float = 0.0,
    special_ids: Tensor | None = None,
    mask_token_id: int | None = None,
    batched: bool = True,
) -> EncodedColumns:
    """:func:`~xprt_st.losses._common.encode_columns` under GradCache: the same masks (drawn first, for the whole
    batch, from the same random numbers) and the same outputs, with the encoder's graph held for at most
    ``mini_batch_size`` rows of every column at a time, during backward.

    Outside ``torch.enable_grad`` (evaluation) there is nothing to cache: the mini-batches simply run without graph.
    """
    masked, masks = mask_columns(features, mask_ratio=mask_ratio, special_ids=special_ids, mask_token_id=mask_token_id)
    runner = _Runner(model, masked, mini_batch_size, batched)
    trainable = any(parameter.requires_grad for parameter in model.parameters())
    if torch.is_grad_enabled() and trainable:
        trigger = torch.empty(0, requires_grad=True)  # an input that needs a gradient, so backward runs the node
        outputs = _CachedEncoder.apply(runner, trigger)
    else:
        outputs = runner.without_graph()
    columns = len(features)
    return EncodedColumns(
        embeddings=list(outputs[:columns]),
        token_states=list(outputs[columns:]),
        input_ids=[column["input_ids"] for column in features],
        attention_mask=[column["attention_mask"] for column in features],
        masks=masks,
    )
