"""``xprt-st evaluate --tasks mined:DIR``: the label-free task in the catalog, with the drift line."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from typer.testing import CliRunner

from tests.heldout_helpers import write_heldout
from xprt_st.cli import app
from xprt_st.evaluation.catalog import resolve_tasks
from xprt_st.evaluation.label_free import HeldOutError


@pytest.fixture
def folders(tmp_path, tiny_model):
    texts = {label: [f"chapter {label} line {i} about thing {label * 4 + i}" for i in range(4)] for label in range(3)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2]), (1, 3, [2, 1]), (2, 1, [0, 2])])
    start, trained = tmp_path / "start", tmp_path / "trained"
    tiny_model.save(str(start))
    moved = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(3)))
    moved.save(str(trained))
    return mined, start, trained


def _run(*args):
    result = CliRunner().invoke(app, ["evaluate", *map(str, args), "--no-cache"])
    return result, " ".join(result.output.split())


def test_two_models_on_the_mined_task_get_the_table_json_and_drift_line(tmp_path, folders):
    mined, start, trained = folders
    out = tmp_path / "eval"
    result, text = _run(start, trained, "--tasks", f"mined:{mined}", "--output", out)
    assert result.exit_code == 0, result.output
    scores = json.loads((out / "scores.json").read_text())
    assert scores["tasks"] == {"mined:mined": "ndcg_at_10"}
    drift = json.loads((out / "label_free.json").read_text())
    assert [(row["reference_label"], row["model_label"]) for row in drift] == [("start", "trained")]
    row = drift[0]
    by_model = {entry["model"]: entry["score"] for entry in scores["scores"]}
    assert row["start"] == pytest.approx(by_model["start"], abs=1e-5)  # mteb's number and ours agree
    assert row["model"] == pytest.approx(by_model["trained"], abs=1e-5)
    assert row["ci_low"] <= row["difference"] <= row["ci_high"]
    assert f"mined:{mined}: start {row['start']:.4f}, trained {row['model']:.4f}" in text
    assert "10-NN overlap with the start" in text


def test_one_trained_model_is_compared_with_its_recorded_start(tmp_path, folders):
    mined, start, trained = folders
    (trained / "training_state").mkdir()
    (trained / "training_state" / "config.json").write_text(json.dumps({"starting_model": str(start)}))
    out = tmp_path / "eval"
    result, text = _run(trained, "--tasks", f"mined:{mined}", "--output", out)
    assert result.exit_code == 0, result.output
    drift = json.loads((out / "label_free.json").read_text())
    assert drift[0]["reference_label"] == f"start {start}"
    assert "10-NN overlap with the start" in text


def test_a_folder_without_heldout_part_is_a_clear_error(tmp_path, folders):
    _, start, _ = folders
    (tmp_path / "plain").mkdir()
    with pytest.raises(HeldOutError, match="no held-out part"):
        resolve_tasks([f"mined:{tmp_path / 'plain'}"])
    result, text = _run(start, "--tasks", f"mined:{tmp_path / 'plain'}", "--output", tmp_path / "e")
    assert result.exit_code == 2
    assert "has no held-out part" in text
