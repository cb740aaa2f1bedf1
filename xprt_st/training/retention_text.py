"""One retention text for every recipe of a comparison: the mined (anchor, positive), in two extra columns.

The paper gives every method the same retention term. A recipe whose own pair is another one (random
positives, random spans) would otherwise compute it on its own pair, so the comparison's retention terms
would read different text. ``train_recipe(..., retention_data=MINED)`` (what ``xprt-st compare`` passes)
appends the mined folder's anchor and positive to the recipe's dataset as :data:`RETENTION_ANCHOR` and
:data:`RETENTION_POSITIVE`, and the loss reads the retention term from those columns
(``retention_columns`` of :class:`~xprt_st.losses.WithRetention` and :class:`~xprt_st.losses.XPRTLoss`).
The rows must be the same groups in the same order (the same documents, one row per mined anchor, as the
ablations re-merged from a scored mining run are), so under one seed every recipe's batch of step ``t``
holds the same retention text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset

from xprt_st.columns import ANCHOR, LABEL, POSITIVE
from xprt_st.training.data import MinedDataError, load_mined

RETENTION_ANCHOR = "retention_anchor"
RETENTION_POSITIVE = "retention_positive"


def retention_positions(columns: Sequence[str]) -> tuple[int, int]:
    """Positions of the two retention columns, appended after the objective's ``columns``."""
    return len(columns), len(columns) + 1


def add_retention_text(dataset: Dataset, retention_data: str | Path) -> Dataset:
    """``dataset`` with the mined anchor and positive of ``retention_data`` appended, row by row.

    Raises:
        MinedDataError: the two folders do not hold the same groups in the same order (row count or document ids
            differ), so the retention text of a row would belong to another group.
    """
    reference = load_mined(retention_data, columns=(ANCHOR, POSITIVE)).dataset
    if len(reference) != len(dataset) or reference[LABEL] != dataset[LABEL]:
        raise MinedDataError(
            f"{retention_data}: its {len(reference)} groups are not the training data's {len(dataset)} groups in the "
            "same order (document ids differ), so its (anchor, positive) cannot be this run's retention text; re-merge "
            "the ablation from the same mining run (xprt-st compare does)"
        )
    return dataset.add_column(RETENTION_ANCHOR, reference[ANCHOR]).add_column(RETENTION_POSITIVE, reference[POSITIVE])
