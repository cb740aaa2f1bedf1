"""L_xp with gather_across_devices under two real processes (torchrun, gloo): values and gradients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("gather_worker.py")


def test_gathered_loss_and_gradients_equal_the_whole_batch(tmp_path: Path) -> None:
    output = tmp_path / "result.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER)]
    completed = subprocess.run([*command, str(output)], env=env, capture_output=True, text=True, timeout=120)
    if completed.returncode != 0:
        pytest.fail(f"torchrun failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    result = json.loads(output.read_text())
    # the mean of the ranks' losses is the whole batch's, with the cross-rank same-document group masked
    assert result["mean_rank_loss"] == pytest.approx(result["whole_batch_loss"], rel=1e-5)
    # gradients reach the local rows from every rank's loss, not only from the local one
    assert result["gradient_scale"] > 1e-3
    assert result["max_gradient_error"] < 1e-5 * max(1.0, result["gradient_scale"])
