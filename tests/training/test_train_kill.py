"""A ``hybrid-teacher-hard`` run killed (SIGKILL, in a real process) right after a checkpoint, killed in the
middle of writing one, and stopped by Ctrl-C (SIGINT) in the middle of a step: ``train --resume last`` ends on the
weights of a run that was never stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from tests.mining.test_mining_merge import _corpus
from xprt_st.cli import app
from xprt_st.cli.app import INTERRUPTED
from xprt_st.mining import mine
from xprt_st.mining.hard_negatives import add_hard_negatives
from xprt_st.training.checkpoints import checkpoint_problem

runner = CliRunner()

KILLED_TRAIN = """
import importlib, os, signal, sys
trainer = importlib.import_module("xprt_st.training.trainer")
real = trainer.XPRTTrainer._save_checkpoint
when = sys.argv.pop(1)
def save_then_die(self, model, trial):
    if when == "during" and self.state.global_step == 4:  # a checkpoint half written: its weights, not its state
        real_save = self._save
        def save_model_then_die(*args, **kwargs):
            real_save(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        self._save = save_model_then_die
    real(self, model, trial)
    if when == "after" and self.state.global_step == 2:
        os.kill(os.getpid(), signal.SIGKILL)
trainer.XPRTTrainer._save_checkpoint = save_then_die
real_step = trainer.XPRTTrainer.training_step
def step_then_interrupt(self, *args, **kwargs):
    if when == "ctrl-c" and self.state.global_step == 3:  # checkpoint-2 is written, step 4 is under way
        os.kill(os.getpid(), signal.SIGINT)
    return real_step(self, *args, **kwargs)
trainer.XPRTTrainer.training_step = step_then_interrupt
from xprt_st.cli import app
app(sys.argv[1:], prog_name="xprt-st")
"""


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory, _tiny_model_session) -> Path:
    base = tmp_path_factory.mktemp("killed-teacher")
    out = base / "mined"
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id"}
    mine(_corpus(base / "c.jsonl", 16), out, model=_tiny_model_session, progress=False, precision="fp32", **settings)
    add_hard_negatives(out, 2, model=_tiny_model_session, batch_size=16)
    return out


def _args(mined: Path, output: Path, model: Path) -> list[str]:
    return [
        "train", "--recipe", "hybrid-teacher-hard", "--mined", str(mined), "-o", str(output), "--model", str(model),
        "--max-steps", "6", "--save-steps", "2", "--batch-size", "4", "--learning-rate", "1e-3", "--seed", "3",
        "--precision", "fp32", "--max-seq-length", "64", "-q",
    ]  # fmt: skip


@pytest.mark.parametrize("when", ["after", "during", "ctrl-c"])
def test_a_killed_hybrid_teacher_run_resumes_to_the_weights_of_an_unstopped_one(
    mined: Path, tiny_model_path: Path, tmp_path: Path, when: str
) -> None:
    straight = tmp_path / "straight"
    result = runner.invoke(app, _args(mined, straight, tiny_model_path))
    assert result.exit_code == 0, result.output

    killed = tmp_path / "killed"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_TRAIN, when, *_args(mined, killed, tiny_model_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if when == "ctrl-c":  # one line, exit 130, no traceback
        assert child.returncode == 130, child.stderr[-2000:]
        assert "Traceback" not in child.stderr
        assert child.stderr.rstrip().splitlines()[-1] == f"xprt-st train: {INTERRUPTED}"
    else:
        assert child.returncode == -9, child.stderr[-2000:]
    assert not (killed / "modules.json").is_file()
    if when == "during":  # checkpoint-4 has its weights but not its trainer state: not a checkpoint to resume
        assert (killed / "checkpoint-4").is_dir() and checkpoint_problem(killed / "checkpoint-4") is not None
        assert checkpoint_problem(killed / "checkpoint-2") is None

    again = runner.invoke(app, _args(mined, killed, tiny_model_path))  # without --resume: refused, nothing lost
    assert again.exit_code != 0 and "--resume last" in again.output
    assert (killed / "checkpoint-2").is_dir()

    resumed = runner.invoke(app, [*_args(mined, killed, tiny_model_path), "--resume", "last"])
    assert resumed.exit_code == 0, resumed.output
    expected, got = load_file(straight / "model.safetensors"), load_file(killed / "model.safetensors")
    assert expected.keys() == got.keys()
    worst = max((expected[key] - got[key]).abs().max().item() for key in expected)
    assert worst < 1e-5, worst
    assert all(torch.isfinite(value).all() for value in got.values())
