"""The peak memory of one training step, estimated before the first step from the model's shape and the batch.

:func:`estimate_step_peak` is a pure function of the encoder's width, depth, heads and feed-forward width, its
parameter count, the batch, the sequence length and the loss's memory options; it counts what a step holds at
once: the process and the weights, gradients and AdamW state (and the frozen teacher), the encoder's activations
kept for backward, the decoder's, and the vocabulary projection's buffers. Its constants were fitted to, and are
checked against, the peaks ``benchmarks/bench_memory.py`` measured (``docs/losses.md``, "Memory"; the test
``tests/training/test_memory.py`` holds the measured points). :func:`check_step_memory` compares the estimate with
what the device has: on CPU it warns, on CUDA a batch that will not fit stops with one line naming the largest
batch that does, before anything is trained.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from datasets import Dataset
from torch import nn

from xprt_st.system_memory import available_ram_bytes
from xprt_st.training.trainer import TrainingStateError

logger = logging.getLogger(__name__)

GIB = 2**30
RUNTIME_BYTES = 0.6 * GIB
"""Python, torch, transformers and sentence-transformers loaded, before any model: about 0.45 GiB measured, plus
the trainer, the dataset and the data loader."""
HIDDEN_FLOATS = 11
"""Floats per token, per hidden unit and per layer that a BERT layer keeps for backward: the inputs of its six
linear maps, the attention output, two LayerNorms' inputs and outputs, the dropout masks."""
INTERMEDIATE_FLOATS = 2
"""Per token, per feed-forward unit and per layer: the GELU's input and output."""
ATTENTION_FLOATS = 2.25
"""Per token, per head, per attended position and per layer: the attention probabilities, their dropout output
and the dropout's byte mask (CPU attention with dropout is not fused, so the (seq x seq) scores exist)."""
BF16_ACTIVATIONS = 0.65
"""Share of the fp32 activations that bf16 autocast keeps (matrix products' outputs halve; softmax, LayerNorm and
the residual stream stay fp32)."""


@dataclass(frozen=True)
class EncoderShape:
    """What the estimate needs to know of an encoder."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    parameters: int
    vocab: int = 30522

    @classmethod
    def of(cls, model: nn.Module) -> EncoderShape:
        """The shape of a SentenceTransformer's (BERT-like) first module, from its config."""
        from xprt_st.models import transformer_module

        config = transformer_module(model).auto_model.config
        hidden = int(config.hidden_size)
        return cls(
            hidden=hidden,
            layers=int(config.num_hidden_layers),
            heads=int(config.num_attention_heads),
            intermediate=int(getattr(config, "intermediate_size", 4 * hidden)),
            parameters=sum(p.numel() for p in model.parameters()),
            vocab=int(getattr(config, "vocab_size", 30522)),
        )


@dataclass(frozen=True)
class StepPlan:
    """What one step runs, per group of the batch (see :func:`plan_of`).

    Attributes:
        columns: passages per group through the encoder with a graph (xPRT: 5 masked + 2 unmasked for retention).
        largest_pass: passages per group of the largest single encoder pass (xPRT's masked pass: 5).
        decoder_rows: one-layer decoder rows per group (xPRT: 8 cross + 2 self fill-ins).
        teacher: whether a frozen teacher copy is held.
        mini_batch_size: GradCache groups per mini-batch, or None (every pass's graph for the whole batch).
        decoder_mini_batch_size: decoder rows per block, or None (all at once).
        extra_parameters: trainable parameters outside the encoder (decoder, MLM head).
        grad_cache: whether the loss takes ``objective.args.mini_batch_size`` (XPRTLoss, CrossPassageLoss): the
            advice for a batch that does not fit names it.
        uncut_columns: passages per group (of ``columns``) that keep their graph for the whole batch even under
            GradCache: the retention student's (anchor, positive) when it cannot reuse the cached pass (the
            wrapped loss masks its input, or the retention text sits in its own columns).
    """

    columns: int
    largest_pass: int
    decoder_rows: int = 0
    teacher: bool = False
    mini_batch_size: int | None = None
    decoder_mini_batch_size: int | None = None
    extra_parameters: int = 0
    grad_cache: bool = False
    uncut_columns: int = 0


def layer_bytes_per_token(shape: EncoderShape, seq_len: int) -> float:
    """Bytes one layer keeps for backward per token in fp32 (see the constants above)."""
    floats = HIDDEN_FLOATS * shape.hidden + INTERMEDIATE_FLOATS * shape.intermediate
    return 4 * (floats + ATTENTION_FLOATS * shape.heads * seq_len)


def estimate_step_peak(
    shape: EncoderShape, plan: StepPlan, batch: int, seq_len: int, precision: str = "fp32"
) -> dict[str, float]:
    """Bytes of the step's peak, by component; ``sum(...)`` is the estimate of the process's peak RSS.

    Example:
        >>> shape = EncoderShape(hidden=384, layers=6, heads=12, intermediate=1536, parameters=22_713_216)
        >>> parts = estimate_step_peak(shape, StepPlan(columns=2, largest_pass=2), batch=16, seq_len=128)
        >>> round(sum(parts.values()) / 2**30, 2)
        1.92
    """
    activation_share = BF16_ACTIVATIONS if precision in ("bf16", "fp16") else 1.0
    per_row = seq_len * layer_bytes_per_token(shape, seq_len) * activation_share  # one passage, one layer
    trainable = shape.parameters + plan.extra_parameters
    parts = {
        "runtime": RUNTIME_BYTES,
        "weights, gradients, AdamW state": 4.0 * 4 * trainable + (4.0 * shape.parameters if plan.teacher else 0.0),
    }
    if plan.mini_batch_size is None or plan.mini_batch_size >= batch:
        held_rows = batch * plan.columns
        cached = 0.0
    else:  # one mini-batch of the largest pass at a time, plus every cut pass's outputs kept without graph
        held_rows = plan.mini_batch_size * plan.largest_pass + batch * plan.uncut_columns
        cached = 4.0 * batch * (plan.columns - plan.uncut_columns) * seq_len * shape.hidden
    parts["encoder activations"] = held_rows * shape.layers * per_row + cached
    if plan.decoder_rows:
        rows = batch * plan.decoder_rows
        if plan.decoder_mini_batch_size is not None:
            rows = min(rows, plan.decoder_mini_batch_size)
        decoder_seq = seq_len + 4
        parts["decoder activations"] = rows * decoder_seq * layer_bytes_per_token(shape, decoder_seq) * activation_share
        parts["vocabulary projection"] = 4.0 * (4 * 1024 * shape.vocab + 3 * shape.vocab * shape.hidden)
    return parts


def plan_of(loss: nn.Module, columns: int) -> StepPlan:
    """The :class:`StepPlan` of a built loss: XPRTLoss's terms and memory options, or ``columns`` passages."""
    from xprt_st.losses import CrossPassageLoss, XPRTLoss

    if not isinstance(loss, XPRTLoss):
        teacher = getattr(loss, "teacher", None) is not None
        inner = getattr(loss, "loss", loss)  # WithRetention wraps the contrastive loss
        if isinstance(inner, CrossPassageLoss):  # its one pass holds its columns; GradCache cuts it
            own_text = teacher and getattr(loss, "retention_columns", None) is not None  # counted in ``columns``
            own = columns - 2 if own_text else columns
            # unless WithRetention's student reuses the pass, its pair is one more pass, whole batch, with graph
            student = 2 if teacher and not loss.student_shares_base_pass else 0
            return StepPlan(
                columns=own + student, largest_pass=own, teacher=teacher, mini_batch_size=inner.mini_batch_size,
                grad_cache=True, uncut_columns=student,
            )  # fmt: skip
        return StepPlan(columns=columns, largest_pass=columns, teacher=teacher)
    masked = loss.needs_masked_pass
    retention = loss.retention is not None
    negatives = loss.hard_negatives if loss.cross_passage is not None else 0  # they join the encoder pass
    largest = (5 if masked else 2) + negatives
    passes = largest + (2 if masked and retention else 0)
    decoder_rows = (8 if loss.cross_fill_in is not None else 0) + (2 if loss.self_fill_in is not None else 0)
    extra = sum(p.numel() for name, p in loss.named_parameters() if not name.startswith(("model.", "teacher.")))
    return StepPlan(
        columns=passes,
        largest_pass=largest,
        decoder_rows=decoder_rows,
        teacher=retention,
        mini_batch_size=loss.mini_batch_size,
        decoder_mini_batch_size=loss.decoder_mini_batch_size,
        extra_parameters=extra,
        grad_cache=True,
    )


def largest_fitting_batch(
    shape: EncoderShape, plan: StepPlan, seq_len: int, available: float, precision: str = "fp32"
) -> int:
    """The largest batch (groups) whose estimated peak fits in ``available`` bytes; 0 when not even one does."""
    low, high = 0, 1
    while sum(estimate_step_peak(shape, plan, high, seq_len, precision).values()) <= available and high < 2**20:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if sum(estimate_step_peak(shape, plan, middle, seq_len, precision).values()) <= available:
            low = middle
        else:
            high = middle
    return low


def available_bytes(device: torch.device) -> float | None:
    """Free memory of ``device``: CUDA's free memory, or the RAM still free to this process (``MemAvailable``, bounded
    by a container's limit); None when unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    return available_ram_bytes()


def padded_length(model: nn.Module, dataset: Dataset, column: str, sample: int = 256) -> int:
    """The token length a batch of ``dataset[column]`` pads to: the longest of ``sample`` evenly spread rows, at
    most the model's ``max_seq_length`` (mined passages are often far shorter than the limit, and the estimate's
    attention term grows with the square of the length)."""
    limit = int(getattr(model, "max_seq_length", None) or 512)
    rows = len(dataset)
    if rows == 0:
        return limit
    texts = dataset.select(range(0, rows, max(1, rows // sample)))[column]
    lengths = [len(ids) for ids in model.tokenizer(list(texts), truncation=True, max_length=limit)["input_ids"]]
    return min(limit, max(lengths))


class StepMemoryError(TrainingStateError):
    """The step's estimated peak does not fit the GPU (raised before the first step).

    A :class:`~xprt_st.training.trainer.TrainingStateError`, so ``xprt-st train`` prints it as its one-line error.
    """


def check_step_memory(
    model: nn.Module, loss: nn.Module, columns: int, batch: int, seq_len: int, precision: str, device: torch.device
) -> dict[str, float] | None:
    """Estimate the step's peak, log it, and say so when it will not fit ``device``.

    On CPU a batch that will not fit is a warning (the kernel may still swap or the estimate may be high); on
    CUDA it is a :class:`StepMemoryError` whose one line names the batch that fits, instead of an out-of-memory
    traceback some minutes later. Returns the estimate (None when the model's shape is unknown).
    """
    try:
        shape = EncoderShape.of(model)
    except Exception as error:  # not a BERT-like config: nothing to estimate from
        logger.debug("no step-memory estimate: %s", error)
        return None
    plan = plan_of(loss, columns)
    parts = estimate_step_peak(shape, plan, batch, seq_len, precision)
    total = sum(parts.values())
    logger.info(
        "estimated peak of one step: %.1f GiB (%s) for %d groups x %d tokens",
        total / GIB,
        ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts.items()),
        batch,
        seq_len,
    )
    available = available_bytes(device)
    if available is None or total <= available:
        return parts
    fits = largest_fitting_batch(shape, plan, seq_len, available, precision)
    where = "GPU memory free" if device.type == "cuda" else "RAM available"
    gradcache = ", or objective.args.mini_batch_size: 8" if plan.grad_cache and plan.mini_batch_size is None else ""
    advice = (
        f"a batch of {fits} fits (--batch-size {fits}, or a smaller training.max_seq_length{gradcache})"
        if fits >= 2
        else f"not even 2 groups fit (try a smaller training.max_seq_length{gradcache})"
    )
    message = (
        f"training.batch_size {batch}: one step needs about {total / GIB:.1f} GiB, {available / GIB:.1f} GiB of "
        f"{where}; {advice}"
    )
    if device.type == "cuda":
        raise StepMemoryError(message)
    logger.warning(message)
    return parts
