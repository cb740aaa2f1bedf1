"""`xprt-st train` end to end on tiny models: every packaged recipe trains, exports and resumes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from training_helpers import write_mined
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.recipe import available_recipes
from xprt_st.training.trainer import LOSS_STATE_FILE, TRAINING_STATE_DIR

runner = CliRunner()

DATA_SETTINGS = {
    "random-positive": {"positive": "random", "pairs": "mined"},
    "random-span-contrastive": {"positive": "mined", "pairs": "random-span"},
}


def _train(*extra: str) -> object:
    return runner.invoke(app, ["train", "--max-seq-length", "32", "--no-progress", *extra], catch_exceptions=False)


@pytest.mark.parametrize("recipe", available_recipes())
def test_every_recipe_trains_a_few_steps(recipe, tiny_model_path, tmp_path):
    settings = DATA_SETTINGS.get(recipe, {"positive": "mined", "pairs": "mined"})
    data = write_mined(tmp_path / "mined", n_groups=8, stats={"settings": settings})
    output = tmp_path / "run"
    result = _train(
        "--recipe", recipe, "--data", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--batch-size", "4", "--save-steps", "2", "--learning-rate", "1e-4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    model = SentenceTransformer(str(output), device="cpu")
    assert model.encode(["a test passage"]).shape == (1, 32)
    config = json.loads((output / TRAINING_STATE_DIR / "config.json").read_text())
    assert config["starting_model"] == str(tiny_model_path) and config["recipe"]["name"] == recipe
    assert config["global_step"] == 2
    card = (output / "README.md").read_text()
    assert "## xPRT pre-training" in card and "### Mining statistics" in card and f"name: {recipe}" in card


def test_xprt_checkpoint_holds_the_decoder_and_resume_keeps_the_original_teacher(
    tiny_model_path, tmp_path, monkeypatch
):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = ["--recipe", "xprt", "--data", str(data), "--output", str(output), "--batch-size", "4"]
    common += ["--save-steps", "1", "--learning-rate", "1e-3"]
    first = _train(*common, "--model", str(tiny_model_path), "--max-steps", "2")
    assert first.exit_code == 0, first.output
    saved = load_file(str(output / "checkpoint-2" / TRAINING_STATE_DIR / LOSS_STATE_FILE))
    assert any(key.startswith("decoder.") for key in saved) and any(key.startswith("mlm_head.") for key in saved)
    assert not any(key.startswith(("model.", "teacher.")) for key in saved)
    exported = SentenceTransformer(str(output), device="cpu")
    start = SentenceTransformer(str(tiny_model_path), device="cpu")
    assert set(exported.state_dict()) == set(start.state_dict())  # no decoder, same architecture

    refused = _train(*common, "--max-steps", "3")
    assert refused.exit_code == 2 and "--resume last" in refused.output

    import xprt_st.training.run as run_module

    teachers = []
    original_frozen_copy = run_module.frozen_copy
    monkeypatch.setattr(
        run_module, "frozen_copy", lambda model: teachers.append(original_frozen_copy(model)) or teachers[-1]
    )
    resumed = _train(*common, "--max-steps", "3", "--resume", "last")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((output / TRAINING_STATE_DIR / "config.json").read_text())["global_step"] == 3
    trained = SentenceTransformer(str(output / "checkpoint-2"), device="cpu").state_dict()
    teacher_state = teachers[0].state_dict()
    name = next(key for key in teacher_state if key.endswith("word_embeddings.weight"))
    torch.testing.assert_close(teacher_state[name], start.state_dict()[name])  # the starting model ...
    assert not torch.equal(teacher_state[name], trained[name])  # ... not the checkpoint

    other = _train(*common, "--max-steps", "4", "--resume", "last", "--model", "some-other-model")
    assert other.exit_code == 2 and "drop --model" in other.output


def test_bad_inputs_fail_with_a_clear_message(tiny_model_path, tmp_path):
    not_mined = tmp_path / "not-mined"
    not_mined.mkdir()
    result = _train("--recipe", "xprt", "--data", str(not_mined), "--output", str(tmp_path / "o"))
    assert result.exit_code == 2 and "not a mined dataset" in result.output

    data = write_mined(tmp_path / "mined", n_groups=8)
    result = _train("--recipe", "xprt", "--data", str(data), "--output", str(tmp_path / "o3"), "--batch-size", "1")
    assert result.exit_code == 2 and "at least 2" in result.output

    result = _train(
        "--recipe", "random-positive", "--data", str(data), "--output", str(tmp_path / "o4"), "--batch-size", "4"
    )
    assert result.exit_code == 2 and "positive='random'" in result.output


def test_print_recipe_shows_the_resolved_values():
    result = runner.invoke(app, ["train", "--recipe", "xprt", "--setting", "from-bert", "--print-recipe"])
    assert result.exit_code == 0, result.output
    assert "learning_rate: 0.0001" in result.output and "enabled: false" in result.output


def test_the_hint_for_a_folder_that_is_not_mined_is_a_command_that_exists(tmp_path):
    import re

    import typer.main

    not_mined = tmp_path / "not-mined"
    not_mined.mkdir()
    result = _train("--recipe", "xprt", "--data", str(not_mined), "--output", str(tmp_path / "o"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "`xprt-st mine CORPUS... --output DIR`" in flat
    hint = re.search(r"`(xprt-st mine [^`]*)`", flat).group(1)
    mine = typer.main.get_command(app).commands["mine"]
    known = {name for param in mine.params for name in [*param.opts, *param.secondary_opts]}
    assert [option for option in re.findall(r"--[a-z-]+", hint) if option not in known] == []


def test_no_progress_draws_no_bar_and_logs_terms_and_warnings_to_the_run_log(tiny_model_path, tmp_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    result = _train(
        "--recipe", "xprt", "--data", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--batch-size", "4", "--logging-steps", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for bar in ("it/s]", "%|", "Computing widget examples", "Loading weights"):
        assert bar not in result.output, bar
    assert "Warning" not in result.output and "{'loss'" not in result.output
    log = (output / "xprt-st.log").read_text(encoding="utf-8")
    assert "step 1/2: loss=" in log and "step 2/2: loss=" in log and " xp=" in log
    if not torch.cuda.is_available():  # the DataLoader warns that pin_memory has no accelerator to pin for
        assert "UserWarning: 'pin_memory'" in log
