"""``benchmarks/gpu_check.sh --smoke``: the prepared GPU check runs end to end on the CPU, so it does not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def test_gpu_check_smoke_mode_runs_every_stage_and_writes_the_figures(tmp_path) -> None:
    out = tmp_path / "check"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_TIMEOUT": "900"}
    result = subprocess.run(
        [str(SCRIPT), "--smoke", str(out)], capture_output=True, text=True, env=env, timeout=960, check=False
    )
    summary = json.loads((out / "summary.json").read_text())
    assert result.returncode == 0 and not summary["errors"], result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["mode"] == "smoke" and summary["machine"]["fused_cross_entropy_kernel"] is None

    mining = summary["stages"]["mining"]
    assert mining["precision"] == "bf16" and mining["passages_encoded"] > 0 and mining["ratio"] > 0

    losses = summary["stages"]["losses"]["results"]
    names = ("mnrl", "positive_only", "xprt", "xprt_sampled", "retromae", "xprt_floor", "xprt_uncut")
    assert set(losses) == {f"{name}:bf16" for name in names}
    assert losses["mnrl:bf16"]["time_ratio"] == pytest.approx(1.0)
    for figures in losses.values():
        assert figures["median_s"] > 0 and figures["groups_per_second"] > 0 and figures["reference"] == "mnrl:bf16"
        # the whole step's peak (torch.cuda.max_memory_allocated on a GPU, the peak RSS here) beside its times
        assert figures["process_peak_mib"] >= figures["peak_mib"] and figures["process_peak_mib"] > 100

    train = summary["stages"]["train"]
    assert train["loads_with_sentence_transformer"] and train["finite"] and train["embedding_dimension"] == 384
    assert "| xprt:bf16 |" in (out / "summary.md").read_text()


def test_gpu_check_refuses_to_run_without_a_gpu_unless_smoke(tmp_path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the full check would run")
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        [str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert result.returncode == 2 and "--smoke" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
