"""Issue 20: half-written, cut or pickled checkpoints, a full disk, --output inside --mined, a dangling auto_map."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from datasets import load_from_disk
from safetensors import SafetensorError
from sentence_transformers import SentenceTransformer
from training_helpers import ToyProjectionLoss, cpu_training_args, write_mined
from typer.testing import CliRunner

import xprt_st.training.checkpoints as checkpoints
import xprt_st.training.trainer as trainer_module
from xprt_st.cli import app
from xprt_st.models import drop_dangling_auto_map
from xprt_st.training.checkpoints import (
    CHECKPOINT_MARGIN_BYTES,
    LOSS_STATE_FILE,
    TRAINING_STATE_DIR,
    CheckpointSpaceError,
    CheckpointWriteError,
    checkpoint_problem,
)
from xprt_st.training.run import OutputFolderError, _check_fresh_output, check_output_outside_data, resolve_checkpoint
from xprt_st.training.trainer import TrainingStateError, XPRTTrainer

runner = CliRunner(env={"COLUMNS": "250"})


def _trainer(model, data, output: Path, **overrides) -> XPRTTrainer:
    loss = ToyProjectionLoss(model)
    return XPRTTrainer(
        model=model,
        args=cpu_training_args(output, **overrides),
        train_dataset=data,
        loss=loss,
        starting_model="tiny-start",
    )


@pytest.fixture(scope="module")
def _trained_run(_tiny_model_session, tmp_path_factory) -> Path:
    """Trained once per module: a run folder with checkpoint-2 and checkpoint-4, both complete."""
    import copy

    base = tmp_path_factory.mktemp("reliability")
    data = load_from_disk(str(write_mined(base / "mined")))
    output = base / "run"
    _trainer(copy.deepcopy(_tiny_model_session), data, output).train()
    assert checkpoint_problem(output / "checkpoint-2") is None and checkpoint_problem(output / "checkpoint-4") is None
    return output


@pytest.fixture
def two_checkpoints(_trained_run, tmp_path) -> Path:
    """A fresh copy of the trained run folder (checkpoint-2 and checkpoint-4), for a test to damage."""
    return Path(shutil.copytree(_trained_run, tmp_path / "run"))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _pickle_of_an_object(path: Path) -> None:
    torch.save({"state": argparse.Namespace(lr=1.0)}, path)  # a pickled class instance, as a tampered file holds


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda c: (c / "trainer_state.json").unlink(), "no trainer_state.json"),
        (lambda c: _truncate(c / "model.safetensors"), "model.safetensors is cut short"),
        (
            lambda c: _truncate(c / TRAINING_STATE_DIR / LOSS_STATE_FILE),
            f"{TRAINING_STATE_DIR}/{LOSS_STATE_FILE} is cut short",
        ),
        (lambda c: _truncate(c / "optimizer.pt", 0.9), "optimizer.pt cannot be loaded"),
        (lambda c: _pickle_of_an_object(c / "optimizer.pt"), "optimizer.pt holds pickled objects"),
        (lambda c: _pickle_of_an_object(c / "rng_state.pth"), "rng_state.pth holds pickled objects"),
        # before: resumed with AdamW and the schedule restarted without a word
        (lambda c: (c / "optimizer.pt").unlink(), "no optimizer.pt"),
        # before: resumed at the step the copied trainer_state.json names, not the weights' own
        (
            lambda c: shutil.copy(c.parent / "checkpoint-2" / "trainer_state.json", c),
            "trainer_state.json says step 2, not 4",
        ),
    ],
)
def test_resume_last_skips_a_broken_newest_checkpoint_and_names_it(two_checkpoints, damage, named, caplog):
    damage(two_checkpoints / "checkpoint-4")
    assert named in checkpoint_problem(two_checkpoints / "checkpoint-4")
    with caplog.at_level(logging.WARNING):
        chosen = resolve_checkpoint(two_checkpoints, "last")
    assert chosen == two_checkpoints / "checkpoint-2"
    assert f"skipping checkpoint {two_checkpoints / 'checkpoint-4'}: {named}" in caplog.text
    with pytest.raises(TrainingStateError, match=rf"--resume .*checkpoint-4: .*{named}"):
        resolve_checkpoint(two_checkpoints, two_checkpoints / "checkpoint-4")  # named explicitly: refused, not swapped


def test_with_no_usable_checkpoint_a_rerun_and_resume_last_say_the_same_fix(two_checkpoints):
    (two_checkpoints / "checkpoint-4" / "trainer_state.json").unlink()  # killed while being written
    _pickle_of_an_object(two_checkpoints / "checkpoint-2" / "optimizer.pt")
    with pytest.raises(TrainingStateError) as resumed:
        resolve_checkpoint(two_checkpoints, "last")
    with pytest.raises(OutputFolderError) as rerun:
        _check_fresh_output(two_checkpoints)
    for message in (str(resumed.value), str(rerun.value)):
        assert "holds no complete checkpoint" in message
        assert (
            "checkpoint-4: no trainer_state.json" in message and "checkpoint-2: optimizer.pt holds pickled" in message
        )
        assert f"rm -r {two_checkpoints / 'checkpoint-4'} {two_checkpoints / 'checkpoint-2'}" in message
        assert "without --resume" in message
    assert str(rerun.value) in str(resumed.value)


def test_a_resume_from_the_previous_checkpoint_trains_on_past_the_broken_one(two_checkpoints, tiny_model, mined_dir):
    _truncate(two_checkpoints / "checkpoint-4" / "model.safetensors")
    checkpoint = resolve_checkpoint(two_checkpoints, "last")
    trainer = _trainer(tiny_model, load_from_disk(str(mined_dir)), two_checkpoints, max_steps=6)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert trainer.state.global_step == 6
    assert checkpoint_problem(two_checkpoints / "checkpoint-4") is None  # rewritten when the run reached step 4


def test_the_checkpoint_size_estimate_covers_what_a_checkpoint_writes(two_checkpoints, tiny_model, mined_dir):
    trainer = _trainer(tiny_model, load_from_disk(str(mined_dir)), two_checkpoints / "unused")
    estimate = trainer.checkpoint_bytes()
    folder = two_checkpoints / "checkpoint-2"
    measured = ["model.safetensors", f"{TRAINING_STATE_DIR}/{LOSS_STATE_FILE}", "optimizer.pt"]
    measured += [path.name for path in folder.glob("tokenizer*")] + [p.name for p in folder.glob("vocab*")]
    big_files = sum((folder / name).stat().st_size for name in measured)
    everything = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    # model + loss-owned tensors + two AdamW moments + tokenizer, within 2% of those files' bytes; the margin
    # covers the rest, and is not so large that a disk with room for a checkpoint is refused
    assert abs((estimate - CHECKPOINT_MARGIN_BYTES) - big_files) < 0.02 * big_files
    assert everything < estimate < everything + CHECKPOINT_MARGIN_BYTES


_Usage = namedtuple("_Usage", "total used free")


def test_too_little_free_space_is_refused_before_the_first_step(tiny_model, mined_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints.shutil, "disk_usage", lambda path: _Usage(20_000_000, 19_999_000, 1_000))
    output = tmp_path / "run"
    trainer = _trainer(tiny_model, load_from_disk(str(mined_dir)), output)
    with pytest.raises(CheckpointSpaceError) as refused:
        trainer.train()
    message = str(refused.value)
    assert trainer.state.global_step == 0 and trainer.loss.calls == 0  # nothing trained, nothing lost
    assert f"{output} is on the disk mounted at /" in message and "(1000 bytes) free" in message
    assert f"({trainer.checkpoint_bytes()} bytes: model, loss modules and optimizer state)" in message
    assert not list(output.glob("checkpoint-*"))


def test_room_for_a_few_checkpoints_only_warns(tiny_model, mined_dir, tmp_path, monkeypatch, caplog):
    trainer = _trainer(tiny_model, load_from_disk(str(mined_dir)), tmp_path / "run")
    free = trainer.checkpoint_bytes() + 1
    monkeypatch.setattr(checkpoints.shutil, "disk_usage", lambda path: _Usage(10 * free, 9 * free, free))
    with caplog.at_level(logging.WARNING):
        trainer.check_checkpoint_space(max_steps=4)
    assert "this run's checkpoints and final model need about" in caplog.text


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos"),
        OSError(28, "No space left on device"),
        SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
    ],
)
def test_a_failed_checkpoint_write_names_the_folder_and_the_disk(tiny_model, mined_dir, tmp_path, monkeypatch, failure):
    output = tmp_path / "run"
    trainer = _trainer(tiny_model, load_from_disk(str(mined_dir)), output)
    original_save = torch.save

    def failing_save(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            raise failure
        return original_save(obj, f, *args, **kwargs)

    def failing_save_file(*args, **kwargs):
        raise failure

    if isinstance(failure, SafetensorError):  # as safetensors reports a full disk while writing the loss state
        monkeypatch.setattr(trainer_module, "save_file", failing_save_file)
    else:
        monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(CheckpointWriteError) as failed:
        trainer.train()
    message = str(failed.value)
    assert f"could not write {output / 'checkpoint-2'} on the disk mounted at /" in message
    assert " free of " in message and "a checkpoint needs about" in message
    assert type(failure).__name__ in message and "--resume last" in message
    assert "no trainer_state.json" in checkpoint_problem(output / "checkpoint-2")  # and resume will skip it


def test_output_equal_to_or_inside_data_is_refused(mined_dir, tmp_path):
    for output in (mined_dir, mined_dir / "run", mined_dir / "." / "run" / ".."):
        with pytest.raises(OutputFolderError, match=r"the --mined folder .*Choose an --output outside it"):
            check_output_outside_data(output, mined_dir)
    check_output_outside_data(tmp_path / "run", mined_dir)
    check_output_outside_data(tmp_path, mined_dir)  # data inside the run folder writes nothing into the data


def test_train_cli_refuses_output_in_data_and_keeps_the_data(tiny_model_path, tmp_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    before = sorted(p.name for p in data.iterdir())
    result = runner.invoke(
        app,
        ["train", "--recipe", "self-only", "--mined", str(data), "--output", str(data), "--model", str(tiny_model_path),
         "--max-steps", "1", "--batch-size", "4", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "is the --mined folder" in " ".join(result.output.split())
    assert sorted(p.name for p in data.iterdir()) == before


def _train_cli(*extra: str):
    return runner.invoke(app, ["train", "--max-seq-length", "32", "--quiet", *extra])


def test_train_cli_resumes_past_a_truncated_checkpoint_and_refuses_pickles_in_one_line(tiny_model_path, tmp_path):
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    common = ["--recipe", "self-only", "--mined", str(data), "--output", str(output), "--batch-size", "4"]
    common += ["--save-steps", "1", "--learning-rate", "1e-4"]
    assert _train_cli(*common, "--model", str(tiny_model_path), "--max-steps", "2").exit_code == 0
    _truncate(output / "checkpoint-2" / "model.safetensors")
    resumed = _train_cli(*common, "--max-steps", "3", "--resume", "last")
    assert resumed.exit_code == 0, resumed.output
    log = (output / "xprt-st.log").read_text()
    assert "skipping checkpoint" in log and "checkpoint-2: model.safetensors is cut short" in log
    assert json.loads((output / TRAINING_STATE_DIR / "config.json").read_text())["global_step"] == 3

    for folder in output.glob("checkpoint-*"):
        _pickle_of_an_object(folder / "rng_state.pth")
    refused = _train_cli(*common, "--max-steps", "4", "--resume", "last")
    assert refused.exit_code == 2, refused.output
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    text = " ".join(refused.output.split())
    assert "rng_state.pth holds pickled objects that a weights-only load refuses" in text and "rm -r" in text
    assert "Traceback" not in refused.output and "UnpicklingError:" not in refused.output


def test_a_trained_model_drops_the_starts_auto_map_without_its_code(tiny_model_path, mined_dir, tmp_path):
    start = tmp_path / "custom-start"
    shutil.copytree(tiny_model_path, start)
    config_path = start / "config.json"
    config = json.loads(config_path.read_text())
    config["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig", "AutoModel": "modeling_custom.CustomModel"}
    config_path.write_text(json.dumps(config))
    model = SentenceTransformer(str(start), device="cpu")  # standard BERT; the custom code is never run
    output = tmp_path / "run"
    trainer = _trainer(model, load_from_disk(str(mined_dir)), output, max_steps=2)
    trainer.train()
    trainer.save_model(str(output))
    for folder in (output, output / "checkpoint-2"):
        saved = json.loads((folder / "config.json").read_text())
        assert "auto_map" not in saved and saved["model_type"] == "bert"
    assert SentenceTransformer(str(output), device="cpu").encode(["a passage"]).shape == (1, 32)


def test_auto_map_entries_whose_code_is_shipped_are_kept(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"auto_map": {"AutoModel": "modeling_mine.Mine", "AutoConfig": "other--configuration_x.X"}})
    )
    (tmp_path / "modeling_mine.py").write_text("class Mine: ...\n")
    assert drop_dangling_auto_map(tmp_path) == ["config.json: AutoConfig"]
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == {"AutoModel": "modeling_mine.Mine"}
    assert drop_dangling_auto_map(tmp_path) == []


def test_train_cli_reports_a_failed_write_in_one_line_with_the_libraries_words_intact(
    tiny_model_path, tmp_path, monkeypatch
):
    data = write_mined(tmp_path / "mined", n_groups=8)
    original_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 14400 vs 14292")
        return original_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    output = tmp_path / "run"
    result = _train_cli(
        "--recipe", "self-only", "--mined", str(data), "--output", str(output), "--model", str(tiny_model_path),
        "--max-steps", "2", "--save-steps", "1", "--batch-size", "4",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = " ".join(result.output.split())
    assert f"could not write {output / 'checkpoint-1'} on the disk mounted at" in text
    assert "[enforce fail at inline_container.cc:672] . unexpected pos" in text  # not eaten as rich markup
