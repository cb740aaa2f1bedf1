"""Fixtures for the training tests: a tiny mined folder and a toy loss that owns a module."""

from __future__ import annotations

from pathlib import Path

import pytest
from training_helpers import ToyProjectionLoss, write_mined


@pytest.fixture
def mined_dir(tmp_path: Path) -> Path:
    """A 16-group mined folder (4 documents) with stats.json, as ``xprt-st mine`` writes it."""
    return write_mined(tmp_path / "mined")


@pytest.fixture
def toy_loss_class() -> type[ToyProjectionLoss]:
    return ToyProjectionLoss
