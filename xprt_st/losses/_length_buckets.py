"""One forward over a step's columns, run in chunks of rows of like length so that little of it is padding.

A step's columns merge into one batch padded to its longest row (sentence-transformers' ``embed_columns``): mined
passages run from a few to ``max_seq_length`` tokens, so most of that batch's positions are padding the encoder
computes and throws away. :func:`embed_by_length` sorts the merged rows by length, runs each chunk of
:data:`ROWS_PER_CHUNK` neighbours cut to its own longest row, and puts the vectors back in the batch's order.

Only the forward is chunked: every row keeps its place, so the loss sees the same batch, the same in-batch
negatives and the same same-document mask as before, and each vector equals the merged forward's up to float
rounding (a padded position is masked out of attention and pooling either way). Dropout draws differ, as they
do between any two runs of another batch shape. sentence-transformers' own chunked forward (GradCache's
mini-batches) cuts contiguous rows; a mined batch's rows are in random order, so without the sort each chunk
would still hold its longest passage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sentence_transformers.base.losses.merged_forward import embed_columns, merge_feature_batches
from torch import Tensor, nn

ROWS_PER_CHUNK = 16
"""Rows per chunk: few enough that a chunk's rows are alike in length, enough that each matrix product stays
wide (the step it gives: docs/results/19-step-pace.md)."""


def embed_by_length(model: nn.Module, features: Sequence[dict[str, Any]], rows: int | None = None) -> list[Tensor]:
    """Each column's ``sentence_embedding``, the columns' rows run in length-sorted chunks of ``rows``
    (:data:`ROWS_PER_CHUNK` when None).

    Falls back to ``embed_columns`` (one merged forward) where chunks would not help or could not be cut: a batch
    of at most ``rows`` rows, columns that do not merge, or a batch padded on the left.
    """
    features = list(features)
    rows = ROWS_PER_CHUNK if rows is None else rows
    merged = merge_feature_batches(features) if len(features) > 1 else features[0]
    mask = None if merged is None else merged.get("attention_mask")
    if mask is None or mask.dim() != 2 or mask.size(0) <= rows or not _right_padded(mask):
        return list(embed_columns(model, features, separate_first=False))
    order = torch.argsort(mask.sum(dim=1), stable=True)
    pieces = [
        model(rows_of(merged, order[start : start + rows]))["sentence_embedding"]
        for start in range(0, order.numel(), rows)
    ]
    embeddings = torch.cat(pieces)[torch.argsort(order)]  # back in the merged batch's order
    return list(embeddings.split(features[0]["attention_mask"].size(0), dim=0))


def rows_of(features: dict[str, Any], index: Tensor | Sequence[int]) -> dict[str, Any]:
    """The ``index`` rows of a tokenised (right-padded) batch, cut to the longest of them; other entries as they are."""
    ids = features["input_ids"]
    index = torch.as_tensor(index, device=ids.device)
    width = max(int(features["attention_mask"][index].sum(dim=1).max()), 1)
    picked: dict[str, Any] = {}
    for key, value in features.items():
        if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) == ids.size(0) and key != "prompt_length":
            value = value[index]
            picked[key] = value[:, :width] if value.dim() == 2 else value
        else:
            picked[key] = value
    return picked


def _right_padded(mask: Tensor) -> bool:
    """Whether every row's real tokens come first (then cutting a row to its length keeps them all)."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all())
