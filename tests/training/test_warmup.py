"""The recipe's warm-up ratio reaches the learning-rate schedule as a ratio of the steps, not as a step count.

``train_recipe`` passes ``warmup_steps=training.warmup_ratio``: transformers reads a float below 1 there as a
ratio of the total steps from version 5 on; with 4.x a 50% warm-up silently became 0.5 steps (the rate
starts near its peak). ``pyproject.toml`` now requires ``transformers>=5`` (``test_dependency_bounds.py``);
this test reads the rate the scheduler gave the first optimizer step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from training_helpers import write_mined
from transformers import TrainerCallback

from xprt_st.recipe import load_recipe
from xprt_st.training.run import train_recipe


class RecordRates(TrainerCallback):
    """The scheduler's learning rate after each optimizer step, by global step."""

    def __init__(self) -> None:
        self.rates: dict[int, float] = {}

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs) -> None:
        self.rates[state.global_step] = lr_scheduler.get_last_lr()[0]


@pytest.mark.parametrize(("ratio", "scheduler"), [(0.5, "linear"), (0.25, "constant_with_warmup"), (0.0, "linear")])
def test_warmup_ratio_is_a_share_of_the_steps(
    ratio: float, scheduler: str, tiny_model_path: Path, tmp_path: Path
) -> None:
    steps, peak = 4, 1e-3
    recipe = load_recipe(
        "xprt",
        overrides={
            "training.model": str(tiny_model_path),
            "training.max_steps": steps,
            "training.batch_size": 4,
            "training.learning_rate": peak,
            "training.warmup_ratio": ratio,
            "training.lr_scheduler": scheduler,
            "training.save_steps": steps,
            "training.max_seq_length": 32,
            "retention.enabled": False,
        },
    )
    record = RecordRates()
    train_recipe(
        recipe, write_mined(tmp_path / "mined", n_groups=16), tmp_path / "run", progress=False, callbacks=[record]
    )
    warmup = -(-steps * ratio // 1)  # ceil(steps * ratio): transformers' get_warmup_steps for a ratio
    # By hand: linear warm-up to the peak over `warmup` steps, then linear decay to 0 at step 4 (or constant).
    if warmup == 0:
        expected = peak * (steps - 1) / steps if scheduler == "linear" else peak
    else:
        expected = peak * 1 / warmup
    assert record.rates[1] == pytest.approx(expected, rel=1e-6)
    assert sorted(record.rates) == [1, 2, 3, 4]
