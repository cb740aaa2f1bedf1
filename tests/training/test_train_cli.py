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
    "change-only-positive-hard": {"positive": "mined", "pairs": "mined", "hard_negatives": 2},
    "xprt-hard": {"positive": "mined", "pairs": "mined", "hard_negatives": 2},
    "structure-positive": {"pairs": "structure", "hard_negatives": 2},
    "hybrid-teacher-hard": {"positive": "mined", "pairs": "mined", "hard_negatives": 2},
    "hybrid-teacher-lexical": {"positive": "mined", "pairs": "mined", "hard_negatives": 2, "lexical_candidates": 2},
    "hybrid-teacher-cloze": {
        "positive": "mined",
        "pairs": "inverse-cloze",
        "hard_negatives": 2,
        "lexical_candidates": 2,
    },
    "lexical-positive-hard": {"positive": "mined", "pairs": "mined", "rank_by": "bm25", "hard_negatives": 2},
    "inverse-cloze-hard": {"positive": "mined", "pairs": "inverse-cloze", "hard_negatives": 2},
    "structure-mixed": {"pairs": "structure-mixed", "hard_negatives": 2, "structure_mix": 0.5},
}


def _train(*extra: str) -> object:
    return runner.invoke(app, ["train", "--max-seq-length", "32", "--quiet", *extra], catch_exceptions=False)


@pytest.mark.parametrize("recipe", available_recipes())
def test_every_recipe_trains_a_few_steps(recipe, tiny_model_path, tmp_path):
    settings = DATA_SETTINGS.get(recipe, {"positive": "mined", "pairs": "mined"})
    negatives = settings.get("hard_negatives", 0)
    lexical = settings.get("lexical_candidates", 0)
    data = write_mined(
        tmp_path / "mined", n_groups=8, stats={"settings": settings}, negatives=negatives, lexical=lexical
    )
    output = tmp_path / "run"
    result = _train(
        "--recipe", recipe, "--mined", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--batch-size", "4", "--save-steps", "2", "--learning-rate", "1e-4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    model = SentenceTransformer(str(output), device="cpu")
    assert model.encode(["a test passage"]).shape == (1, 32)
    # --max-seq-length 32 cut the training passages; the saved model reads texts as long as its start did
    start_length = SentenceTransformer(str(tiny_model_path), device="cpu").max_seq_length
    assert start_length != 32 and model.max_seq_length == start_length
    config = json.loads((output / TRAINING_STATE_DIR / "config.json").read_text())
    assert config["starting_model"] == str(tiny_model_path) and config["recipe"]["name"] == recipe
    assert config["global_step"] == 2
    card = (output / "README.md").read_text()
    assert "## xPRT pre-training" in card and "### Mining statistics" in card and f"name: {recipe}" in card


def test_a_contrastive_recipe_with_gradcache_trains_from_a_users_yaml(tiny_model_path, tmp_path):
    """docs/losses.md's recipe: change-only-positive-hard with objective.args.mini_batch_size, 8 groups a step in
    mini-batches of 3; the run's config keeps the option and the step-memory estimate counts the cut."""
    recipe = tmp_path / "cop-hard-cached.yaml"
    recipe.write_text(
        "name: cop-hard-cached\n"
        "objective:\n  name: cross-passage\n  args: {temperature: 0.05, hard_negatives: 2, mini_batch_size: 3}\n"
        'data:\n  requires: {positive: mined, pairs: mined, hard_negatives: "2"}\n',
        encoding="utf-8",
    )
    settings = {"positive": "mined", "pairs": "mined", "hard_negatives": 2}
    data = write_mined(tmp_path / "mined", n_groups=16, stats={"settings": settings}, negatives=2)
    output = tmp_path / "run"
    result = _train(
        "--recipe", str(recipe), "--mined", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--batch-size", "8", "--save-steps", "2", "--learning-rate", "1e-4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    config = json.loads((output / TRAINING_STATE_DIR / "config.json").read_text())
    assert config["recipe"]["objective"]["args"]["mini_batch_size"] == 3 and config["global_step"] == 2
    log = (output / "xprt-st.log").read_text()
    assert "estimated peak of one step" in log
    assert SentenceTransformer(str(output), device="cpu").encode(["a test passage"]).shape == (1, 32)


def test_xprt_checkpoint_holds_the_decoder_and_resume_keeps_the_original_teacher(
    tiny_model_path, tmp_path, monkeypatch
):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = ["--recipe", "xprt", "--mined", str(data), "--output", str(output), "--batch-size", "4"]
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

    import xprt_st.training.recipe_setup as run_module  # train_recipe builds its model and teacher there

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
    result = _train("--recipe", "xprt", "--mined", str(not_mined), "--output", str(tmp_path / "o"))
    assert result.exit_code == 2 and "not a mined dataset" in result.output

    data = write_mined(tmp_path / "mined", n_groups=8)
    result = _train("--recipe", "xprt", "--mined", str(data), "--output", str(tmp_path / "o3"), "--batch-size", "1")
    assert result.exit_code == 2 and "at least 2" in result.output

    result = _train(
        "--recipe", "random-positive", "--mined", str(data), "--output", str(tmp_path / "o4"), "--batch-size", "4"
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
    result = _train("--recipe", "xprt", "--mined", str(not_mined), "--output", str(tmp_path / "o"))
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
        "--recipe", "xprt", "--mined", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--batch-size", "4", "--logging-steps", "1",
        "--precision", "fp32",  # the fp32 trainer's DataLoader warns (pin_memory): a library warning to find in the log
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for bar in ("it/s]", "%|", "Computing widget examples", "Loading weights"):
        assert bar not in result.output, bar
    assert "Warning" not in result.output and "{'loss'" not in result.output
    log = (output / "xprt-st.log").read_text(encoding="utf-8")
    assert "step 1/2: loss=" in log and "step 2/2: loss=" in log and " xp=" in log
    if not torch.cuda.is_available():  # the DataLoader warns that pin_memory has no accelerator to pin for
        assert "UserWarning: 'pin_memory'" in log


def test_a_trained_folder_starts_another_recipe_with_fresh_modules(tiny_model_path, tmp_path, caplog):
    data = write_mined(tmp_path / "mined", n_groups=8)
    common = ["--mined", str(data), "--batch-size", "4", "--max-steps", "1", "--save-steps", "1"]
    step1 = tmp_path / "step1"
    first = _train("--recipe", "change-only-positive", "--output", str(step1), "--model", str(tiny_model_path), *common)
    assert first.exit_code == 0, first.output
    assert load_file(str(step1 / TRAINING_STATE_DIR / LOSS_STATE_FILE)) == {}  # L_xp alone owns no module

    # adoption step 4: the fill-in decoder is added to the step-1 model, built fresh (not "missing" state)
    step4 = tmp_path / "step4"
    with caplog.at_level("INFO", logger="xprt_st.training.trainer"):
        second = _train("--recipe", "xprt", "--output", str(step4), "--model", str(step1), *common)
    assert second.exit_code == 0, second.output
    (message,) = [r.getMessage() for r in caplog.records if "is a trained xprt-st model" in r.getMessage()]
    assert "starts from its encoder;" in message and "decoder" in message and "mlm_head" in message
    assert json.loads((step4 / TRAINING_STATE_DIR / "config.json").read_text())["starting_model"] == str(step1)

    # a third recipe from the xPRT model takes its trained MLM head, and its own objective's modules fresh
    from xprt_st.training import XPRTTrainer

    caplog.clear()
    step5 = tmp_path / "step5"
    taken = []
    original = XPRTTrainer.warm_start_loss_modules

    def record(self, folder):
        taken.extend(original(self, folder))
        trained = load_file(str(step4 / TRAINING_STATE_DIR / LOSS_STATE_FILE))
        current = self.loss_owned_state()
        for name in taken:
            torch.testing.assert_close(current[name], trained[name[name.index("mlm_head.") :]])
        return taken

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(XPRTTrainer, "warm_start_loss_modules", record)
        third = _train("--recipe", "self-only", "--output", str(step5), "--model", str(step4), *common)
    assert third.exit_code == 0, third.output
    assert taken and all("mlm_head." in name for name in taken)


def test_resume_refuses_other_data_or_batch_layout(tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # long paths stay on one line of the error
    data = write_mined(tmp_path / "mined", n_groups=8)
    other = write_mined(tmp_path / "other", n_groups=12)
    output = tmp_path / "run"
    common = ["--recipe", "change-only-positive", "--output", str(output), "--save-steps", "1"]
    first = _train(
        *common, "--mined", str(data), "--batch-size", "4", "--max-steps", "1", "--model", str(tiny_model_path)
    )
    assert first.exit_code == 0, first.output

    def resume(folder, batch_size="4"):
        result = _train(
            *common, "--mined", str(folder), "--batch-size", batch_size, "--max-steps", "2", "--resume", "last"
        )
        return result.exit_code, " ".join(result.output.split())  # rich wraps long messages

    code, said = resume(other)
    assert code == 2 and f"it was trained on --mined {data.resolve()}" in said, said
    code, said = resume(data, batch_size="2")
    assert code == 2 and "training.batch_size was 4 when it was written, now 2" in said, said
    (data / "stats.json").write_text(json.dumps({**json.loads((data / "stats.json").read_text()), "groups": 12}))
    code, said = resume(data)  # the same folder, mined again
    assert code == 2 and "changed since the checkpoint was written" in said and "groups 8 -> 12" in said, said
    assert not (output / "checkpoint-2").exists()  # refused before any step


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--learning-rate", "0.01", "training.learning_rate was 0.0001 when it was written, now 0.01"),
        ("--seed", "7", "training.seed was 42 when it was written, now 7"),
        ("--max-seq-length", "16", "training.max_seq_length was 32 when it was written, now 16"),
        ("--recipe", "self-only", "objective.name was"),
    ],
)
def test_a_resume_with_a_changed_recipe_value_is_refused_naming_it(tiny_model_path, tmp_path, option, value, named):
    """Before, --learning-rate (and the warm-up, weight decay, objective values...) on resume were taken without a
    word: the optimizer and scheduler came back from the checkpoint, so the new learning rate was ignored (the run
    went on at 5e-05 after --learning-rate 0.01), and another objective trained a mix."""
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    values = {"--recipe": "change-only-positive", "--learning-rate": "1e-4", "--seed": "42", "--max-seq-length": "32"}
    common = ["--output", str(output), "--save-steps", "1", "--mined", str(data), "--batch-size", "4"]
    first = _train(*common, *[p for pair in values.items() for p in pair], "--max-steps", "1", "--model",
                   str(tiny_model_path))  # fmt: skip
    assert first.exit_code == 0, first.output
    values[option] = value
    again = _train(*common, *[p for pair in values.items() for p in pair], "--max-steps", "2", "--resume", "last")
    said = " ".join(again.output.split())
    assert again.exit_code == 2 and f"cannot resume {output / 'checkpoint-1'}" in said, said
    assert named in said and "Traceback" not in said, said
    assert not (output / "checkpoint-2").exists()  # refused before any step


def test_a_resume_may_change_how_long_it_runs_and_what_it_saves_and_logs(tiny_model_path, tmp_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = ["--recipe", "change-only-positive", "--output", str(output), "--mined", str(data), "--batch-size", "4"]
    first = _train(*common, "--max-steps", "1", "--save-steps", "1", "--model", str(tiny_model_path))
    assert first.exit_code == 0, first.output
    again = _train(*common, "--max-steps", "3", "--save-steps", "2", "--logging-steps", "1", "--resume", "last")
    assert again.exit_code == 0, again.output
    assert (output / "checkpoint-3").is_dir() or (output / "modules.json").is_file()
