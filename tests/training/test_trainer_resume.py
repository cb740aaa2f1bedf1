"""XPRTTrainer: loss-owned modules survive save -> kill -> resume, and stay out of the exported model."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from datasets import load_from_disk
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments
from training_helpers import cpu_training_args
from transformers import TrainerCallback

from xprt_st.training.schedules import RETENTION_SCHEDULE, TermScheduleCallback
from xprt_st.training.trainer import (
    LOSS_STATE_FILE,
    TRAINING_STATE_DIR,
    NonFiniteLossError,
    TrainingStateError,
    XPRTTrainer,
    last_complete_checkpoint,
    read_training_config,
)


class _Killed(Exception):
    """Stands in for a crash right after a checkpoint was written."""


class _KillAfterSave(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise _Killed


class _RecordTerms(TrainerCallback):
    """Record the loss terms and the retention weight of every optimizer step."""

    def __init__(self) -> None:
        self.trainer: XPRTTrainer | None = None
        self.steps: dict[int, dict[str, float]] = {}

    def on_step_end(self, args, state, control, **kwargs):
        self.steps[state.global_step] = {**self.trainer._last_terms, "w": self.trainer.loss.retention_weight}


def _args(output: Path, **overrides) -> SentenceTransformerTrainingArguments:
    return cpu_training_args(output, **overrides)


def _trainer(model, loss, data, output: Path, extra_callbacks=(), **overrides):
    recorder = _RecordTerms()
    trainer = XPRTTrainer(
        model=model,
        args=_args(output, **overrides),
        train_dataset=data,
        loss=loss,
        callbacks=[TermScheduleCallback(loss, {"retention_weight": RETENTION_SCHEDULE}), recorder, *extra_callbacks],
        starting_model="tiny-start",
        training_metadata={"recipe": {"name": "toy"}, "mining_stats": {"groups": 16}},
    )
    recorder.trainer = trainer
    return trainer, recorder


def test_resume_restores_decoder_and_reproduces_next_loss(tiny_model, toy_loss_class, mined_dir, tmp_path):
    data = load_from_disk(str(mined_dir))
    torch.manual_seed(0)
    straight_model = copy.deepcopy(tiny_model)
    straight_loss = toy_loss_class(straight_model)
    start_projection = copy.deepcopy(straight_loss.projection.state_dict())
    straight, straight_log = _trainer(straight_model, straight_loss, data, tmp_path / "straight")
    straight.train()

    killed_model = copy.deepcopy(tiny_model)
    killed_loss = toy_loss_class(killed_model)
    killed_loss.projection.load_state_dict(start_projection)
    killed, _ = _trainer(killed_model, killed_loss, data, tmp_path / "killed", extra_callbacks=[_KillAfterSave()])
    with pytest.raises(_Killed):
        killed.train()
    checkpoint = last_complete_checkpoint(tmp_path / "killed")
    assert checkpoint is not None and checkpoint.name == "checkpoint-2"
    assert (checkpoint / TRAINING_STATE_DIR / LOSS_STATE_FILE).is_file()
    assert read_training_config(checkpoint)["starting_model"] == "tiny-start"

    # A new process: fresh model and a differently initialised projection, then resume.
    torch.manual_seed(123)
    resumed_model = copy.deepcopy(tiny_model)
    resumed_loss = toy_loss_class(resumed_model)
    assert not torch.equal(resumed_loss.projection.weight, straight_loss.projection.weight)
    resumed, resumed_log = _trainer(resumed_model, resumed_loss, data, tmp_path / "killed")
    resumed.train(resume_from_checkpoint=str(checkpoint))

    assert resumed_log.steps[3] == pytest.approx(straight_log.steps[3], rel=1e-5)
    assert resumed_log.steps[4] == pytest.approx(straight_log.steps[4], rel=1e-5)
    # the retention weight continues the schedule: 40 * (1 - step / 4) before steps 3 and 4
    assert resumed_log.steps[3]["w"] == pytest.approx(20.0) and resumed_log.steps[4]["w"] == pytest.approx(10.0)
    for name, tensor in straight_loss.projection.state_dict().items():
        torch.testing.assert_close(resumed_loss.projection.state_dict()[name], tensor)
    for name, tensor in straight_model.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], tensor, rtol=1e-5, atol=1e-6)


def test_export_is_plain_sentence_transformer_without_loss_modules(tiny_model, toy_loss_class, mined_dir, tmp_path):
    data = load_from_disk(str(mined_dir))
    start_keys = set(tiny_model.state_dict())
    loss = toy_loss_class(tiny_model)
    trainer, _ = _trainer(tiny_model, loss, data, tmp_path / "run", max_steps=2, save_steps=100)
    trainer.train()
    trainer.save_model(str(tmp_path / "run"))

    exported = SentenceTransformer(str(tmp_path / "run"), device="cpu")
    assert set(exported.state_dict()) == start_keys
    assert not any("projection" in key for key in exported.state_dict())
    assert sum(p.numel() for p in exported.parameters()) == sum(p.numel() for p in tiny_model.parameters())
    embeddings = exported.encode(["a perfect game"], convert_to_tensor=True)
    torch.testing.assert_close(embeddings, tiny_model.encode(["a perfect game"], convert_to_tensor=True))

    saved = load_file(str(tmp_path / "run" / TRAINING_STATE_DIR / LOSS_STATE_FILE))
    assert set(saved) == {"projection.weight", "projection.bias"}
    torch.testing.assert_close(saved["projection.weight"], loss.projection.weight.detach())
    config = read_training_config(tmp_path / "run")
    assert config["starting_model"] == "tiny-start" and config["recipe"] == {"name": "toy"}
    card = (tmp_path / "run" / "README.md").read_text()
    assert "## xPRT pre-training" in card and "@misc{toy" in card and "| groups | 16 |" in card


def test_only_the_process_that_saves_writes_the_model(tiny_model, toy_loss_class, mined_dir, tmp_path, monkeypatch):
    """Under DDP, transformers 5 calls ``_save`` on every rank; a rank with ``should_save`` False writes nothing.

    Before the fix every rank wrote the model and ``training_state/`` into the same folder, and the two-process
    test failed now and then with one rank's ``.config.json.tmp`` renamed away by the other.
    """
    trainer, _ = _trainer(tiny_model, toy_loss_class(tiny_model), load_from_disk(str(mined_dir)), tmp_path / "run")
    monkeypatch.setattr(type(trainer.args), "should_save", property(lambda self: False))
    trainer.save_model(str(tmp_path / "other-rank"))
    assert not (tmp_path / "other-rank").exists() or not any((tmp_path / "other-rank").iterdir())
    monkeypatch.undo()
    trainer.save_model(str(tmp_path / "rank-0"))
    assert (tmp_path / "rank-0" / TRAINING_STATE_DIR / LOSS_STATE_FILE).is_file()


def test_nan_loss_stops_without_writing_a_checkpoint(tiny_model, toy_loss_class, mined_dir, tmp_path):
    data = load_from_disk(str(mined_dir))
    loss = toy_loss_class(tiny_model, nan_at_call=3)
    trainer, _ = _trainer(tiny_model, loss, data, tmp_path / "run", max_steps=4, save_steps=2)
    with pytest.raises(NonFiniteLossError, match=r"not finite at step 3 .*xp=nan.*checkpoint-2"):
        trainer.train()
    assert last_complete_checkpoint(tmp_path / "run").name == "checkpoint-2"
    assert not (tmp_path / "run" / "checkpoint-4").exists()


def test_resume_with_a_different_loss_is_refused(tiny_model, toy_loss_class, mined_dir, tmp_path):
    data = load_from_disk(str(mined_dir))
    trainer, _ = _trainer(tiny_model, toy_loss_class(tiny_model), data, tmp_path / "run", max_steps=2)
    trainer.train()
    other = toy_loss_class(tiny_model)
    other.extra = torch.nn.Linear(2, 2)
    resumed, _ = _trainer(tiny_model, other, data, tmp_path / "run", max_steps=3)
    with pytest.raises(TrainingStateError, match=r"missing \['extra.bias', 'extra.weight'\]"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))


def test_batch_of_one_group_is_refused(tiny_model, toy_loss_class, mined_dir, tmp_path):
    data = load_from_disk(str(mined_dir))
    with pytest.raises(ValueError, match="at least 2 groups"):
        _trainer(tiny_model, toy_loss_class(tiny_model), data, tmp_path / "run", per_device_train_batch_size=1)


def test_model_without_tokenizer_is_refused(tiny_model, toy_loss_class, mined_dir, tmp_path, monkeypatch):
    data = load_from_disk(str(mined_dir))
    loss = toy_loss_class(tiny_model)
    monkeypatch.setattr(type(tiny_model), "tokenizer", property(lambda self: None))
    with pytest.raises(ValueError, match="has no tokenizer"):
        _trainer(tiny_model, loss, data, tmp_path / "run")
