"""The Python path equals the command line: a script on ``trainer_setup`` trains what ``xprt-st train`` trains.

Both runs start from the tiny BERT with the xprt recipe (retention 40 -> 0, a fill-in decoder owned by the loss)
on a mined folder whose groups share documents, so each of the three things a plain trainer would miss (the
schedule, the document-spread batches, the loss-owned modules) changes the result if it is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from typer.testing import CliRunner

from tests.training.training_helpers import write_mined
from xprt_st.cli import app
from xprt_st.training.checkpoints import LOSS_STATE_FILE
from xprt_st.training.sampler import DocumentSpreadBatchSampler
from xprt_st.training.schedules import TermScheduleCallback, modules_with_attribute
from xprt_st.training.trainer import TRAINING_STATE_DIR

STEPS = 3
OVERRIDES = {
    "training.max_steps": STEPS,
    "training.batch_size": 4,
    "training.learning_rate": 1e-3,
    "training.max_seq_length": 32,
    "training.save_steps": STEPS,
    "training.seed": 7,
}


def _cli_run(data: Path, output: Path, model: Path) -> None:
    args = ["train", "--recipe", "xprt", "--mined", str(data), "-o", str(output), "--model", str(model), "-q"]
    args += ["--max-steps", str(STEPS), "--batch-size", "4", "--learning-rate", "1e-3", "--max-seq-length", "32"]
    args += ["--save-steps", str(STEPS), "--seed", "7"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _script_run(data: Path, output: Path, model: Path) -> TermScheduleCallback:
    """The documented script (docs/training.md, "From Python")."""
    from xprt_st import XPRTTrainer, load_recipe, trainer_setup

    setup = trainer_setup(load_recipe("xprt", overrides=OVERRIDES), data=data, output=output, model=str(model))
    trainer = XPRTTrainer(**setup.trainer_kwargs())
    assert isinstance(trainer.get_batch_sampler(setup.train_dataset, 4, True), DocumentSpreadBatchSampler)
    trainer.train()
    setup.save(trainer)
    (schedule,) = [callback for callback in setup.callbacks if isinstance(callback, TermScheduleCallback)]
    return schedule


def test_the_documented_script_trains_the_weights_the_cli_trains(tiny_model_path: Path, tmp_path: Path) -> None:
    data = write_mined(tmp_path / "mined", n_groups=12)
    _cli_run(data, tmp_path / "cli", tiny_model_path)
    schedule = _script_run(data, tmp_path / "script", tiny_model_path)

    # the retention schedule ran: 40 -> 0 linearly, set before each step, so the last step (2 of 3) trained at 40/3
    (retention,) = modules_with_attribute(schedule.loss, "retention_weight")
    assert retention.retention_weight == pytest.approx(40.0 / 3) == schedule.current["retention_weight"]

    cli = SentenceTransformer(str(tmp_path / "cli"), device="cpu").state_dict()
    script = SentenceTransformer(str(tmp_path / "script"), device="cpu").state_dict()
    start = SentenceTransformer(str(tiny_model_path), device="cpu").state_dict()
    assert cli.keys() == script.keys()
    for name in cli:
        assert torch.equal(cli[name], script[name]), name
    assert any(not torch.equal(cli[name], start[name]) for name in cli)  # training moved the weights

    folders = (tmp_path / "cli", tmp_path / "script")
    owned = [load_file(folder / TRAINING_STATE_DIR / LOSS_STATE_FILE) for folder in folders]
    assert owned[0] and owned[0].keys() == owned[1].keys()  # the decoder was saved both ways ...
    for name in owned[0]:
        assert torch.equal(owned[0][name], owned[1][name]), name  # ... with the same weights

    # the held-out contract's record: a script's model names the documents it trained on, as the command's does,
    # so evaluate and compare can refuse to score it on them
    from xprt_st.training.heldout_contract import model_record

    records = [model_record(folder) for folder in folders]
    assert records[0] is not None and records[1] is not None
    assert records[0]["trained"] == records[1]["trained"] > 0
    assert records[0]["trained_ids"] == records[1]["trained_ids"]
