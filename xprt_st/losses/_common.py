"""Helpers shared by the loss terms: token masking, the batched encoder pass, and module sharing.

Nothing here is a loss; each function is pure tensor code or a thin wrapper around one model call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.losses.merged_forward import merge_feature_batches
from torch import Tensor, nn

_Math = TypeVar("_Math", bound=Callable[..., Tensor])


def in_fp32(function: _Math) -> _Math:
    """Run a loss's similarity math in fp32, outside autocast, on fp32 copies of its half-precision tensor arguments.

    Under bf16 autocast a cosine matrix would be computed in bf16 (8 bits of mantissa): divided by a
    temperature of 0.05 its logits move by up to ~0.1, and near-equal similarities tie. The encoder's
    matrix products stay in bf16; only the (batch, batch) products, softmaxes and KL terms run here,
    a negligible share of a step. sentence-transformers does the same for half-precision embeddings.
    """

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Tensor:
        def full(value: Any) -> Any:
            return (
                value.float() if isinstance(value, Tensor) and value.dtype in (torch.bfloat16, torch.float16) else value
            )

        tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, Tensor)]
        device_type = tensors[0].device.type if tensors else "cpu"
        with torch.autocast(device_type, enabled=False):
            return function(*map(full, args), **{key: full(value) for key, value in kwargs.items()})

    return wrapper  # type: ignore[return-value]


def borrow(owner: nn.Module, name: str, module: Any) -> None:
    """Make ``owner.<name>`` point at ``module`` without registering it as a submodule.

    A composite loss owns the encoder, the teacher, the decoder and the MLM head once; the term
    objects it holds reach them through plain references, so ``state_dict()`` lists every tensor
    exactly once and the training engineer's "loss-owned = keys not under model./teacher." rule holds.
    """
    owner._modules.pop(name, None)
    object.__setattr__(owner, name, module)


def special_token_ids(model: SentenceTransformer) -> Tensor:
    """Ids that are never masked or predicted ([CLS], [SEP], [PAD], [UNK], [MASK], ...)."""
    tokenizer = model.tokenizer
    if tokenizer is None or tokenizer.mask_token_id is None:
        raise ValueError(
            "this loss masks tokens and needs a tokenizer with a mask token; "
            f"the model's tokenizer is {type(tokenizer).__name__}"
        )
    return torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)


def sample_token_mask(
    input_ids: Tensor,
    attention_mask: Tensor,
    special_ids: Tensor,
    ratio: float,
    generator: torch.Generator | None = None,
    include: Tensor | None = None,
) -> Tensor:
    """Choose ``round(ratio * n)`` of the ``n`` maskable tokens of each row, uniformly without replacement.

    Maskable means: inside the attention mask and not a special token. Rows with at least one maskable
    token get at least one masked token when ``ratio > 0``. An exact count per row (rather than a
    Bernoulli draw per token) keeps the prediction count, and so the loss scale, steady across batches.
    ``include`` (bool, like ``input_ids``) names maskable positions that must be in the sample: they are
    taken first and the rest of the row's count is drawn uniformly from the other maskable tokens
    (L_self's decoder must hide the positions whose encoder distribution it distils).

    Returns:
        bool tensor shaped like ``input_ids``.
    """
    eligible = attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(input_ids.device))  # (batch, seq)
    if ratio <= 0:
        return torch.zeros_like(eligible)
    count = eligible.sum(dim=1)  # (batch,)
    target = torch.clamp((count.float() * ratio).round().long(), min=1)
    target = torch.minimum(target, count)  # (batch,)
    scores = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # (batch, seq)
    if include is not None:
        include = include.bool() & eligible
        scores = scores.masked_fill(include, -1.0)  # ranked before every drawn token
        target = torch.maximum(target, include.sum(dim=1))
    scores = scores.masked_fill(~eligible, 2.0)
    rank = scores.argsort(dim=1).argsort(dim=1)  # (batch, seq): 0 for the smallest score
    return rank < target[:, None]


def continuation_pieces(model: SentenceTransformer) -> Tensor:
    """(vocab,) bool: the ids of WordPiece continuation pieces (``##...``), which belong to the word before them.

    Whole-word masking groups a word's pieces with this table. A tokenizer without ``##`` pieces (SentencePiece,
    byte-level BPE) yields no continuations, so every token counts as a word and the masking is per token.
    """
    tokenizer = model.tokenizer
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return torch.tensor([token is not None and token.startswith("##") for token in tokens], dtype=torch.bool)


def sample_whole_word_mask(
    input_ids: Tensor,
    attention_mask: Tensor,
    special_ids: Tensor,
    continuation: Tensor,
    ratio: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Mask whole words: about ``round(ratio * n)`` of the ``n`` maskable tokens, every piece of a chosen word.

    Words are a maskable token that is not a continuation piece plus the continuation pieces after it
    (``continuation``: (vocab,) bool, see :func:`continuation_pieces`). Words are visited in a uniformly random
    order; a word is taken when it still fits the row's budget of ``round(ratio * n)`` pieces and skipped
    otherwise, and the visit goes on until the budget is met or the words run out. This is BERT's whole-word
    masking as transformers' whole-word collator does it, which RetroMAE's official implementation uses for its
    encoder input: the collator also skips an overflowing word and goes on, so the realised share is the ratio
    up to rounding (stopping at the first overflowing word instead, as this function once did, realised 27%
    for a 30% target). One difference: when every word of a row is longer than its budget, the collator masks
    nothing, while here the first word of the random order is taken, so a row with a maskable token always has
    a masked one (an MLM target).

    Returns:
        bool tensor shaped like ``input_ids``.
    """
    eligible = attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(input_ids.device))  # (batch, seq)
    if ratio <= 0:
        return torch.zeros_like(eligible)
    batch, length = input_ids.shape
    starts = eligible & ~continuation.to(input_ids.device)[input_ids]  # (batch, seq)
    word = starts.long().cumsum(dim=1)  # (batch, seq): a piece belongs to the last word start at or before it
    word = word.masked_fill(~eligible, length + 1)  # one bucket for everything that is not maskable
    sizes = torch.zeros((batch, length + 2), dtype=torch.long, device=input_ids.device)
    sizes.scatter_add_(1, word, eligible.long())  # (batch, words): pieces per word
    present = sizes > 0
    scores = torch.rand(sizes.shape, generator=generator, device=input_ids.device).masked_fill(~present, 2.0)
    order = scores.argsort(dim=1)  # (batch, words): words in random order, absent ones last
    sizes_sorted = sizes.gather(1, order)  # (batch, words)
    present_sorted = present.gather(1, order)  # (batch, words)
    count = eligible.sum(dim=1)  # (batch,)
    budget = torch.minimum(torch.clamp((count.float() * ratio).round().long(), min=1), count)  # (batch,)
    chosen_sorted = torch.zeros_like(present_sorted)
    taken = torch.zeros_like(count)  # (batch,): pieces chosen so far
    for rank in range(int(present.sum(dim=1).max())):  # one step per word, in each row's random order
        fits = present_sorted[:, rank] & (taken + sizes_sorted[:, rank] <= budget)  # (batch,)
        chosen_sorted[:, rank] = fits
        taken = taken + fits.long() * sizes_sorted[:, rank]
    chosen_sorted[:, 0] |= present_sorted[:, 0] & (taken == 0)  # every word overflowed: take the first
    chosen = torch.zeros_like(present).scatter(1, order, chosen_sorted)  # (batch, words)
    return chosen.gather(1, word) & eligible


def apply_mask(input_ids: Tensor, mask: Tensor, mask_token_id: int) -> Tensor:
    """Replace the masked positions by ``mask_token_id`` (always [MASK]; no 80/10/10 split)."""
    return input_ids.masked_fill(mask, mask_token_id)


def apply_bert_corruption(
    input_ids: Tensor, mask: Tensor, mask_token_id: int, vocab_size: int, generator: torch.Generator | None = None
) -> Tensor:
    """BERT's 80/10/10 split of the masked positions: 80% [MASK], 10% a uniformly random id, 10% unchanged.

    Every masked position stays a prediction target; the random and unchanged ones make the MLM head learn
    to predict tokens the encoder can see (as BERT and RetroMAE's official implementation do).
    """
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # (batch, seq)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    corrupted = input_ids.masked_fill(mask & (draw < 0.8), mask_token_id)
    return torch.where(mask & (draw >= 0.8) & (draw < 0.9), random_ids, corrupted)


def pad_cat(tensors: list[Tensor], value: int | float = 0) -> Tensor:
    """Concatenate ``(rows_i, seq_i, ...)`` tensors along rows, right-padding the sequence axis to the widest."""
    width = max(tensor.size(1) for tensor in tensors)
    padded = [F.pad(t, [0, 0] * (t.dim() - 2) + [0, width - t.size(1)], value=value) for t in tensors]
    return torch.cat(padded, dim=0)


@dataclass
class EncodedColumns:
    """The encoder's outputs for several text columns, split back per column (each at its own width)."""

    embeddings: list[Tensor]
    """``(batch, dim)`` sentence embeddings per column."""
    token_states: list[Tensor]
    """``(batch, seq_c, hidden)`` last-layer token states per column."""
    input_ids: list[Tensor]
    """``(batch, seq_c)`` original (unmasked) token ids per column."""
    attention_mask: list[Tensor]
    """``(batch, seq_c)`` attention masks per column."""
    masks: list[Tensor]
    """``(batch, seq_c)`` bool: the masked positions, the MLM targets (all False when unmasked). With the 80/10/10
    split a tenth of them keep their token and a tenth hold a random one; otherwise all are [MASK]."""


def mask_columns(
    features: list[dict[str, Any]],
    *,
    mask_ratio: float = 0.0,
    special_ids: Tensor | None = None,
    mask_token_id: int | None = None,
    whole_words: Tensor | None = None,
    bert_corruption_vocab: int | None = None,
) -> tuple[list[dict[str, Any]], list[Tensor]]:
    """Each column's features with its tokens masked (drawn per column, in column order) and the masks.

    The first half of :func:`encode_columns`, shared with the GradCache pass (:mod:`xprt_st.losses._grad_cache`)
    so that both draw the same masks from the same random numbers. Every returned dict is a copy (the model
    writes its outputs into the dict it is given). Masks are ``(batch, seq)`` bool, all False when unmasked.
    """
    masked_features = []
    masks = []
    for column in features:
        input_ids = column["input_ids"]
        if mask_ratio > 0:
            if special_ids is None or mask_token_id is None:
                raise ValueError("masking needs special_ids and mask_token_id")
            if whole_words is None:
                mask = sample_token_mask(input_ids, column["attention_mask"], special_ids, mask_ratio)
            else:
                mask = sample_whole_word_mask(input_ids, column["attention_mask"], special_ids, whole_words, mask_ratio)
            if bert_corruption_vocab is None:
                corrupted = apply_mask(input_ids, mask, mask_token_id)
            else:
                corrupted = apply_bert_corruption(input_ids, mask, mask_token_id, bert_corruption_vocab)
            column = {**column, "input_ids": corrupted}
        else:
            mask = torch.zeros_like(input_ids, dtype=torch.bool)
            column = dict(column)  # the model writes its outputs into the dict it is given
        masked_features.append(column)
        masks.append(mask)
    return masked_features, masks


def forward_columns(model: nn.Module, features: list[dict[str, Any]], batched: bool = True) -> tuple[list, list]:
    """One encoder forward over all columns (or one per column): per column (batch, dim) sentence embeddings and
    (batch, seq_c, hidden) token states, each column's states cut back to its own width."""
    merged = merge_feature_batches(features) if batched and len(features) > 1 else None
    if merged is None:
        outputs = [model(column) for column in features]
        return [output["sentence_embedding"] for output in outputs], [output["token_embeddings"] for output in outputs]
    output = model(merged)
    rows = features[0]["input_ids"].size(0)
    embeddings = list(output["sentence_embedding"].split(rows, dim=0))  # each (batch, dim)
    states = output["token_embeddings"].split(rows, dim=0)  # each (batch, seq_max, hidden)
    token_states = [state[:, : column["input_ids"].size(1)] for state, column in zip(states, features, strict=True)]
    return embeddings, token_states


def encode_columns(
    model: nn.Module,
    features: list[dict[str, Any]],
    *,
    mask_ratio: float = 0.0,
    special_ids: Tensor | None = None,
    mask_token_id: int | None = None,
    batched: bool = True,
    whole_words: Tensor | None = None,
    bert_corruption_vocab: int | None = None,
) -> EncodedColumns:
    """Mask each column's tokens (independently), then run ONE encoder forward over all columns.

    Masks are drawn per column before merging so that the batched and per-column paths see the same
    random numbers and are comparable exactly (the equivalence test relies on it). With
    ``batched=False`` every column gets its own forward; results agree up to floating point.

    By default the masking is per token and every masked token becomes [MASK] (xPRT's encoder pass).
    ``whole_words`` (the :func:`continuation_pieces` table) masks whole words instead, and
    ``bert_corruption_vocab`` (the vocabulary size) applies BERT's 80/10/10 split (RetroMAE's encoder).
    """
    masked_features, masks = mask_columns(
        features,
        mask_ratio=mask_ratio,
        special_ids=special_ids,
        mask_token_id=mask_token_id,
        whole_words=whole_words,
        bert_corruption_vocab=bert_corruption_vocab,
    )
    embeddings, token_states = forward_columns(model, masked_features, batched)
    return EncodedColumns(
        embeddings=embeddings,
        token_states=token_states,
        input_ids=[column["input_ids"] for column in features],
        attention_mask=[column["attention_mask"] for column in features],
        masks=masks,
    )
