"""Batches that spread documents: no two groups of one document in a batch, where the data allows.

xPRT's contrastive terms mask every candidate from the anchor's own document (``label``), so two groups of
one document in a batch are not negatives for each other: with a random batch order a small corpus loses
many of its negatives, and a batch of one document has none at all (loss 0, no gradient).
:class:`DocumentSpreadBatchSampler` is sentence-transformers' ``NoDuplicatesBatchSampler`` with the
document id as the only value compared: a group whose document is already in the batch waits for a later
batch. The order is a pure function of the seed and the epoch, so a resumed run sees the same batches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset
from sentence_transformers.base.sampler import NoDuplicatesBatchSampler

from xprt_st.columns import LABEL

logger = logging.getLogger(__name__)


class _DocumentIds:
    """The rows as ``{label: id}`` mappings, read from memory (what ``NoDuplicatesBatchSampler`` compares)."""

    def __init__(self, ids: Sequence[Any]) -> None:
        self.ids = list(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {LABEL: self.ids[index]}


class DocumentSpreadBatchSampler(NoDuplicatesBatchSampler):
    """``NoDuplicatesBatchSampler`` keyed on the document id: each batch holds groups of distinct documents.

    Takes the arguments sentence-transformers passes to every batch sampler. When the data cannot fill a
    batch with distinct documents (fewer documents than the batch size, or one document holding most
    groups), the parent sampler's extra shuffled passes fill the epoch and it logs a warning.

    Example::

        args = SentenceTransformerTrainingArguments(..., batch_sampler=DocumentSpreadBatchSampler)
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> None:
        if LABEL not in dataset.column_names:
            raise ValueError(
                f"DocumentSpreadBatchSampler needs the {LABEL!r} column (document ids); "
                f"the dataset has {', '.join(dataset.column_names)}"
            )
        super().__init__(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
            # Without its own generator the order would follow the global RNG and differ after a resume.
            generator=generator if generator is not None else torch.Generator(),
            seed=seed,
        )
        self.dataset = _DocumentIds(dataset[LABEL])


def documents_fill_a_batch(dataset: Dataset, batch_size: int) -> bool:
    """Whether ``dataset`` has at least ``batch_size`` distinct documents (``label`` values)."""
    return len(set(dataset[LABEL])) >= batch_size
