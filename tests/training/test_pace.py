"""A run's pace: texts a second, and step/forward against mining's encoding where that is like for like."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xprt_st.training.pace import TrainingPace, mining_forward_pace, recorded_pace


def _mined(folder: Path, precision: str = "fp32", encode_seconds: float = 4.0) -> Path:
    folder.mkdir()
    vectors = np.ones((10, 3), dtype=np.float32)
    vectors[[2, 7]] = np.nan  # two rows mining never encoded (one-passage documents)
    np.save(folder / "embeddings.npy", vectors)
    (folder / "embeddings.json").write_text(json.dumps({"precision": precision, "rows": 10}), encoding="utf-8")
    (folder / "stats.json").write_text(json.dumps({"encode_seconds": encode_seconds}), encoding="utf-8")
    return folder


def test_the_forward_reference_is_the_encoded_rows_over_mining_s_encode_seconds(tmp_path: Path) -> None:
    folder = _mined(tmp_path / "mined")
    assert mining_forward_pace(folder, "fp32") == pytest.approx(8 / 4.0)  # 8 encoded rows in 4 s
    assert mining_forward_pace(folder, "bf16") is None  # another precision is not like for like
    assert mining_forward_pace(_mined(tmp_path / "never", encode_seconds=0.0), "fp32") is None
    assert mining_forward_pace(tmp_path / "absent", "fp32") is None


def test_step_over_forward_is_the_seconds_per_text_ratio() -> None:
    pace = TrainingPace(texts=640, seconds=40.0, forward_texts_per_s=48.0)
    assert pace.texts_per_s == pytest.approx(16.0)
    assert pace.step_over_forward == pytest.approx((40.0 / 640) / (1 / 48.0))  # 3.0
    assert TrainingPace(640, 40.0).step_over_forward is None
    assert "step/forward" not in TrainingPace(640, 40.0).line()
    assert pace.to_dict()["step_over_forward"] == pytest.approx(3.0)


def test_a_folder_without_a_training_record_has_no_pace(tmp_path: Path) -> None:
    assert recorded_pace(tmp_path) is None  # no training_state/config.json: nothing to print, no error
