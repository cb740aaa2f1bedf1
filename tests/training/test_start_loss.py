"""The objective's loss at the first logged step is logged, with a warning when the run has no signal."""

from __future__ import annotations

import logging

import pytest
from transformers import TrainerState

from xprt_st.training.progress import LogLinesCallback, RichProgressCallback, objective_loss


def _state(step: int) -> TrainerState:
    state = TrainerState()
    state.global_step, state.max_steps = step, 30
    return state


def test_objective_loss_prefers_the_objectives_own_term() -> None:
    assert objective_loss({"loss": 0.5, "base": 0.01, "retention": 0.49}) == ("base", 0.01)
    assert objective_loss({"loss": 0.5, "xp": 0.2, "cross": 3.0}) == ("xp", 0.2)
    assert objective_loss({"loss": 1.25, "learning_rate": 1e-5}) == ("loss", 1.25)
    assert objective_loss({"learning_rate": 1e-5}) is None


@pytest.mark.parametrize("callback_class", [LogLinesCallback, RichProgressCallback])
def test_a_near_zero_start_loss_warns_once(callback_class, caplog) -> None:
    callback = callback_class()
    with caplog.at_level(logging.INFO, logger="xprt_st.training.progress"):
        callback.on_log(None, _state(5), None, logs={"loss": 0.074, "base": 0.0069, "retention": 0.067})
        callback.on_log(None, _state(10), None, logs={"loss": 0.11, "base": 0.0077, "retention": 0.10})
    starts = [r for r in caplog.records if "start of training" in r.getMessage()]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(starts) == 1 and "base=0.0069 at step 5" in starts[0].getMessage()
    assert len(warnings) == 1 and "no training signal" in warnings[0].getMessage()


def test_a_loss_with_signal_is_logged_without_a_warning(caplog) -> None:
    callback = LogLinesCallback()
    with caplog.at_level(logging.INFO, logger="xprt_st.training.progress"):
        callback.on_log(None, _state(5), None, logs={"loss": 1.9, "base": 1.2, "retention": 0.7})
    assert any("base=1.2000 at step 5" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_the_advice_of_a_near_zero_start_depends_on_the_recipe_that_runs(caplog) -> None:
    # the quickstart's default recipe is change-only-positive-hard: advising it there advised the run going on
    logs = {"loss": 0.074, "base": 0.0069, "retention": 0.067}
    advice = {}
    for hard_negatives in (0, 2):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="xprt_st.training.progress"):
            LogLinesCallback(hard_negatives=hard_negatives).on_log(None, _state(5), None, logs=logs)
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        advice[hard_negatives] = warning
    assert "try hard negatives (recipe change-only-positive-hard" in advice[0]
    assert "change-only-positive-hard" not in advice[2] and "already scores 2 hard negative(s)" in advice[2]
    assert "--batch-size" in advice[2]


def test_the_trainer_setup_tells_the_progress_callback_how_many_hard_negatives_it_scores(tmp_path, tiny_model_path):
    from tests.training.training_helpers import write_mined
    from xprt_st.recipe import load_recipe
    from xprt_st.training.recipe_setup import trainer_setup

    mined = write_mined(tmp_path / "mined", stats={"settings": {"hard_negatives": 2}}, negatives=2)
    recipe = load_recipe("change-only-positive-hard", overrides={"training.batch_size": 2, "training.max_steps": 1})
    setup = trainer_setup(recipe, mined, tmp_path / "run", model=str(tiny_model_path))
    (callback,) = [c for c in setup.callbacks if isinstance(c, LogLinesCallback)]
    assert callback.hard_negatives == 2
