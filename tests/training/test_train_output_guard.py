"""Issue 29 for train: the output folder guarded (other files, a second run, --overwrite), idempotent resume, the
label-free history across resumes, forks that would train nothing, --eval-steps without a held-out part."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from training_helpers import DOCUMENTS, write_mined
from transformers import TrainerCallback
from typer.testing import CliRunner

import xprt_st.training.recipe_setup as recipe_setup
from tests.heldout_helpers import write_heldout
from xprt_st.cli import app
from xprt_st.output_folder import LOCK_FILE, MANIFEST_FILE
from xprt_st.recipe import load_recipe
from xprt_st.training import train_recipe
from xprt_st.training.label_free import RESULT_FILE
from xprt_st.training.trainer import TrainingStateError

runner = CliRunner(env={"COLUMNS": "250"})


def _train(*extra: str):
    return runner.invoke(app, ["train", "--max-seq-length", "32", "--no-progress", *extra])


def _args(data: Path, output: Path, model: Path, *extra: str) -> list[str]:
    return ["--recipe", "self-only", "--data", str(data), "--output", str(output), "--model", str(model),
            "--batch-size", "4", "--learning-rate", "1e-4", *extra]  # fmt: skip


def _text(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if train loads a model: refusals must come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output folder was refused")

    monkeypatch.setattr(recipe_setup, "load_model", refuse)  # where train_recipe loads its models


def test_a_folder_with_the_users_readme_and_config_is_refused_before_any_model_loads(
    tmp_path, tiny_model_path, no_model_load
):
    data = write_mined(tmp_path / "mined", n_groups=8)
    user = tmp_path / "u"
    user.mkdir()
    (user / "README.md").write_text("# my notes\n")
    (user / "config.json").write_text('{"mine": true}')
    result = _train(*_args(data, user, tiny_model_path, "--max-steps", "1"))
    assert result.exit_code == 2, result.output
    assert "holds files that xprt-st train did not write: README.md, config.json" in _text(result)
    assert "Traceback" not in result.output
    assert (user / "README.md").read_text() == "# my notes\n" and (user / "config.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in user.iterdir()) == ["README.md", "config.json"]

    # a mined folder given as --output (with other --data) is refused the same way
    other = write_mined(tmp_path / "other-mined", n_groups=8)
    before = sorted(p.name for p in other.iterdir())
    refused = _train(*_args(data, other, tiny_model_path, "--max-steps", "1"))
    assert refused.exit_code == 2 and "did not write: " in _text(refused) and "stats.json" in _text(refused)
    assert sorted(p.name for p in other.iterdir()) == before


def test_a_second_train_into_a_folder_being_trained_is_refused_naming_the_holder(
    tmp_path, tiny_model_path, no_model_load
):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    output.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"pid": holder.pid, "host": socket.gethostname(), "command": "train", "started": "2026-12-01 10:00:00"}
        (output / LOCK_FILE).write_text(json.dumps(record))
        result = _train(*_args(data, output, tiny_model_path, "--max-steps", "1"))
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 2, result.output
    text = _text(result)
    assert f"is being written by another run (pid {holder.pid} on host {socket.gethostname()} (xprt-st train)" in text
    assert "Traceback" not in result.output
    assert not list(output.glob("checkpoint-*")) and not (output / "modules.json").exists()


def test_overwrite_deletes_only_what_train_wrote_and_trains_again(tmp_path, tiny_model_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    assert _train(*_args(data, output, tiny_model_path, "--max-steps", "2", "--save-steps", "1")).exit_code == 0
    (output / "notes.md").write_text("the user's")
    again = _train(*_args(data, output, tiny_model_path, "--max-steps", "1"))
    assert again.exit_code == 2 and "--overwrite" in _text(again)
    fresh = _train(*_args(data, output, tiny_model_path, "--max-steps", "1", "--overwrite"))
    assert fresh.exit_code == 0, fresh.output
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-1"]  # checkpoint-2 of the old run gone
    assert json.loads((output / "training_state" / "config.json").read_text())["global_step"] == 1
    assert (output / "notes.md").read_text() == "the user's"


def test_resume_last_of_a_finished_run_trains_nothing_and_says_so(tmp_path, tiny_model_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = _args(data, output, tiny_model_path, "--max-steps", "2", "--save-steps", "1")
    assert _train(*common).exit_code == 0
    weights = (output / "model.safetensors").read_bytes()
    stamp = (output / "model.safetensors").stat().st_mtime_ns
    resumed = _train(*[a for a in common if a not in ("--model", str(tiny_model_path))], "--resume", "last")
    assert resumed.exit_code == 0, resumed.output
    assert "is finished: checkpoint-2 is at step 2 of 2" in _text(resumed) and "nothing was trained" in _text(resumed)
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (output / "model.safetensors").stat().st_mtime_ns == stamp and (
        output / "model.safetensors"
    ).read_bytes() == weights
    assert json.loads((output / "training_state" / "config.json").read_text())["global_step"] == 2


HELDOUT_GROUPS = [(0, 0, [1, 2, 3, 4]), (1, 2, [0, 1, 4, 3]), (2, 4, [3, 2, 1, 0]), (3, 1, [0, 2, 2, 2])]


class _Interrupt(TrainerCallback):
    """Ctrl-C after ``step`` (after its checkpoint is written)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_the_label_free_history_survives_an_interrupt_and_resume(tmp_path, tiny_model_path):
    data = write_heldout(
        write_mined(tmp_path / "mined", n_groups=8),
        {label: texts for label, (_, texts) in enumerate(DOCUMENTS)},
        HELDOUT_GROUPS,
    )
    recipe = load_recipe(
        "self-only",
        overrides={
            "training.model": str(tiny_model_path),
            "training.max_steps": 4,
            "training.batch_size": 4,
            "training.save_steps": 2,
            "training.eval_steps": 2,
            "training.keep_best": True,
            "training.learning_rate": 1e-3,
            "training.max_seq_length": 32,
        },
    )
    output = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_recipe(recipe, data, output, progress=False, callbacks=[_Interrupt(2)])
    assert not (output / LOCK_FILE).exists()  # released on the interrupt
    train_recipe(recipe, data, output, resume="last", progress=False)
    record = json.loads((output / RESULT_FILE).read_text())
    steps = [row["step"] for row in record["history"]]
    assert steps == [2, 4]
    best = int(record["best_checkpoint"].rsplit("-", 1)[1])
    assert best in steps


def _fork_recipe(name: str, model: Path):
    return load_recipe(
        name,
        overrides={
            "training.model": str(model),
            "training.max_steps": 4,
            "training.batch_size": 4,
            "training.save_steps": 2,
            "training.save_total_limit": None,
            "training.learning_rate": 1e-3,
            "training.max_seq_length": 32,
        },
        setting="from-bert",
    )


def test_a_fork_from_the_trunks_last_checkpoint_is_refused_with_the_reason(tmp_path, tiny_model_path):
    data = write_mined(tmp_path / "mined", n_groups=16)
    trunk = tmp_path / "trunk"
    train_recipe(_fork_recipe("self-only", tiny_model_path), data, trunk, progress=False)
    with pytest.raises(TrainingStateError) as error:
        train_recipe(
            _fork_recipe("self-only", tiny_model_path), data, tmp_path / "branch", fork_from=trunk / "checkpoint-4"
        )
    message = str(error.value)
    assert "is at step 4 of the trunk's 4, so the branch would train 0 steps" in message
    assert "fork from an earlier checkpoint" in message
    assert not (tmp_path / "branch" / "modules.json").exists()


def test_eval_steps_without_a_heldout_part_is_named_not_ignored_silently(tmp_path, tiny_model_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    result = _train(*_args(data, tmp_path / "run", tiny_model_path, "--max-steps", "1", "--eval-steps", "1"))
    assert result.exit_code == 0, result.output
    assert "--eval-steps 1 is ignored" in _text(result) and "no held-out documents" in _text(result)
    assert "".join(f"{data} has no held-out".split()) in "".join(result.output.split())  # the folder is named


@pytest.mark.parametrize(
    "command",
    [
        lambda data, out, model: ["train", *_args(data, out, model, "--max-steps", "1")],
        lambda data, out, model: ["evaluate", str(model), "--tasks", "stsb", "--output-dir", str(out)],
        lambda data, out, model: ["interpolate", str(model), str(model), "--alpha", "0.5", "--output", str(out)],
        lambda data, out, model: ["mine", str(data), "--model", str(model), "--output", str(out)],
    ],
    ids=["train", "evaluate", "interpolate", "mine"],
)
def test_a_256_character_output_name_is_one_line_naming_the_flag(tmp_path, tiny_model_path, command):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "A document about boats and rivers."}\n')
    data = write_mined(tmp_path / "mined", n_groups=8)
    out = tmp_path / ("x" * 256)
    args = command(corpus if command(corpus, out, tiny_model_path)[0] == "mine" else data, out, tiny_model_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = _text(result)
    assert "is 256 bytes long" in text and "at most 255 bytes per name" in text
    assert "--output" in text and "Traceback" not in result.output and "Errno 36" not in text


KILLED_TRAIN = """
import os, sys
from transformers import TrainerCallback
from xprt_st.recipe import load_recipe
from xprt_st.training import train_recipe

class Kill(TrainerCallback):  # kill -9 once checkpoint-1 is written: no finally block, no manifest, the lock stays
    def on_save(self, args, state, control, **kwargs):
        os._exit(137)

data, output, model = sys.argv[1:]
overrides = {"training.model": model, "training.max_steps": 3, "training.batch_size": 4, "training.save_steps": 1,
             "training.max_seq_length": 32}
train_recipe(load_recipe("self-only", overrides=overrides), data, output, progress=False, callbacks=[Kill()])
"""


def test_overwrite_after_a_killed_run_keeps_the_files_the_user_added_since(tmp_path, tiny_model_path):
    """Round 5: the run taking a killed run's stale lock over adopted every name that appeared after the killed run
    started, so ``--overwrite`` deleted the user's notes.md and my_analysis/; a refused ``--resume last`` wrote them
    into the manifest too."""
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_TRAIN, str(data), str(output), str(tiny_model_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert killed.returncode == 137, killed.stderr
    assert (output / LOCK_FILE).exists() and (output / "checkpoint-1").is_dir()
    (output / "notes.md").write_text("the user's")
    (output / "my_analysis").mkdir()
    (output / "my_analysis" / "plot.csv").write_text("step,loss\n")
    refused = _train(*_args(data, output, tiny_model_path, "--max-steps", "3", "--seed", "7", "--resume", "last"))
    assert refused.exit_code != 0 and "training.seed was 42" in _text(refused), refused.output  # another seed
    manifest = json.loads((output / MANIFEST_FILE).read_text()) if (output / MANIFEST_FILE).exists() else None
    assert manifest is None or not {"notes.md", "my_analysis"} & set(manifest["files"]), manifest
    fresh = _train(*_args(data, output, tiny_model_path, "--max-steps", "1", "--overwrite"))
    assert fresh.exit_code == 0, fresh.output
    assert "notes.md" not in _text(fresh) and "my_analysis" not in _text(fresh)
    assert (output / "notes.md").read_text() == "the user's"
    assert (output / "my_analysis" / "plot.csv").read_text() == "step,loss\n"
    assert (output / "modules.json").is_file()


def test_resume_last_with_more_epochs_trains_them(tmp_path, tiny_model_path):
    """Before: `--resume last --max-steps -1 --epochs 3` after a one-epoch run said the run was finished (its step
    target was the first run's) and trained nothing."""
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = _args(data, output, tiny_model_path, "--max-steps", "-1", "--save-steps", "1")
    assert _train(*common, "--epochs", "1").exit_code == 0
    one_epoch = json.loads((output / "training_state" / "config.json").read_text())["global_step"]
    resumed = _train(
        *[a for a in common if a not in ("--model", str(tiny_model_path))], "--epochs", "3", "--resume", "last"
    )
    assert resumed.exit_code == 0, resumed.output
    assert "is finished" not in _text(resumed)
    assert json.loads((output / "training_state" / "config.json").read_text())["global_step"] == 3 * one_epoch
