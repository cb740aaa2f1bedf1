"""Forking a run: a branch continues the trunk's optimizer state and learning-rate schedule with another objective."""

from __future__ import annotations

import json

import pytest
import torch
from training_helpers import write_mined
from transformers import TrainerCallback

from xprt_st.losses import XPRTLoss
from xprt_st.recipe import load_recipe
from xprt_st.training import train_recipe
from xprt_st.training.trainer import TrainingStateError


def _recipe(name: str, model, **training):
    overrides = {
        "training.model": str(model),
        "training.max_steps": 4,
        "training.batch_size": 4,
        "training.save_steps": 2,
        "training.save_total_limit": None,
        "training.learning_rate": 1e-3,
        "training.max_seq_length": 32,
        **{f"training.{key}": value for key, value in training.items()},
    }
    return load_recipe(name, overrides=overrides, setting="from-bert")  # warm-up then linear decay: lr moves


class _Snapshot(TrainerCallback):
    """Record the encoder's optimizer moments, weights and learning rate at one point of a run."""

    def __init__(self, at_step: int | None) -> None:
        self.at_step, self.seen = at_step, None

    def _take(self, state, model, optimizer, lr_scheduler, loss=None) -> None:
        named = dict(model.named_parameters())
        self.seen = {
            "step": state.global_step,
            "lr": lr_scheduler.get_last_lr()[0],
            "exp_avg": {n: optimizer.state[p]["exp_avg"].clone() for n, p in named.items() if p in optimizer.state},
            "weights": {n: p.detach().clone() for n, p in named.items()},
            "encoder": {id(p) for p in named.values()},
            "state_ids": {id(p) for p in optimizer.state},
        }

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        if self.at_step is None:
            self._take(state, model, optimizer, lr_scheduler)

    def on_step_end(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        if state.global_step == self.at_step:
            self._take(state, model, optimizer, lr_scheduler)


def test_a_fork_continues_the_trunks_optimizer_and_schedule_with_another_objective(tiny_model_path, tmp_path):
    spans = write_mined(
        tmp_path / "spans", n_groups=16, stats={"settings": {"positive": "mined", "pairs": "random-span"}}
    )
    mined = write_mined(tmp_path / "mined", n_groups=16)
    trunk_seen = _Snapshot(at_step=2)
    trunk = train_recipe(
        _recipe("random-span-contrastive", tiny_model_path), spans, tmp_path / "trunk", progress=False,
        callbacks=[trunk_seen],
    )  # fmt: skip
    assert (trunk / "checkpoint-2").is_dir()

    fork_seen = _Snapshot(at_step=None)
    branch = _recipe("xprt", tiny_model_path)
    out = train_recipe(
        branch, mined, tmp_path / "branch", progress=False, callbacks=[fork_seen],
        fork_from=trunk / "checkpoint-2",
    )  # fmt: skip
    at_fork, before = fork_seen.seen, trunk_seen.seen
    assert at_fork["step"] == before["step"] == 2
    assert at_fork["lr"] == pytest.approx(before["lr"], rel=1e-12) and at_fork["lr"] > 0
    assert set(at_fork["exp_avg"]) == set(before["exp_avg"]) and before["exp_avg"]  # every encoder parameter
    for name, moment in before["exp_avg"].items():
        torch.testing.assert_close(at_fork["exp_avg"][name], moment, rtol=0, atol=0)
    for name, weight in before["weights"].items():
        torch.testing.assert_close(at_fork["weights"][name], weight, rtol=0, atol=0)
    assert at_fork["state_ids"] <= at_fork["encoder"]  # the new decoder and MLM head start without moments

    config = json.loads((out / "training_state" / "config.json").read_text())
    assert config["recipe"]["name"] == "xprt" and config["global_step"] == 4
    assert config["loss"].endswith(XPRTLoss.__name__)
    assert "decoder.layer.query.weight" in config["tensors"]  # the objective did change


def test_a_fork_with_another_schedule_is_refused_before_anything_runs(tiny_model_path, tmp_path):
    spans = write_mined(
        tmp_path / "spans", n_groups=16, stats={"settings": {"positive": "mined", "pairs": "random-span"}}
    )
    trunk = train_recipe(_recipe("random-span-contrastive", tiny_model_path, max_steps=2), spans, tmp_path / "trunk",
                         progress=False)  # fmt: skip
    branch = _recipe("change-only-positive", tiny_model_path, max_steps=8, learning_rate=5e-4)
    with pytest.raises(TrainingStateError, match=r"training.max_steps is 8, the trunk's is 2.*learning_rate"):
        train_recipe(branch, spans, tmp_path / "branch", progress=False, fork_from=trunk / "checkpoint-2")
    assert not (tmp_path / "branch").exists()
