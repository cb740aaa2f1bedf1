"""Two CPU processes under torchrun (gloo): loss-owned weights stay identical, negatives are global."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from datasets import load_from_disk
from sentence_transformers import SentenceTransformerTrainingArguments

from xprt_st.training.trainer import LOSS_STATE_FILE, TRAINING_STATE_DIR, XPRTTrainer

WORKER = Path(__file__).with_name("ddp_worker.py")


def test_two_process_run_keeps_loss_modules_in_sync(tiny_model_path, mined_dir, tmp_path):
    output = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(WORKER), "--model", str(tiny_model_path), "--data", str(mined_dir), "--output", str(output),
    ]  # fmt: skip
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    if completed.returncode != 0:
        pytest.fail(
            f"torchrun failed ({completed.returncode}):\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}"
        )
    result = json.loads((output / "result.json").read_text())

    assert result["world_size"] == 2 and result["backend"] == "gloo"
    # the projection started different on each rank and was trained: broadcast + all-reduced gradients
    assert result["projection_max_diff"] == 0.0
    assert result["encoder_max_diff"] == 0.0
    # rank 1's group of document 0 is not a negative for rank 0's: equals the single-process whole batch
    assert result["distributed_loss"] == pytest.approx(result["whole_batch_loss"], rel=1e-5)
    assert abs(result["unmasked_loss"] - result["whole_batch_loss"]) > 1e-3
    assert (output / TRAINING_STATE_DIR / LOSS_STATE_FILE).is_file()
    assert "checkpoint-2" in result["saved"]


def test_a_finished_trainer_is_freed_without_the_garbage_collector(tiny_model, toy_loss_class, mined_dir, tmp_path):
    # A trainer kept alive by a reference cycle keeps its DDP wrapper and gloo process group until interpreter
    # shutdown, where releasing them aborted torchrun workers ("terminate called without an active exception").
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=4,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    data = load_from_disk(str(mined_dir))
    trainer = XPRTTrainer(model=tiny_model, args=args, train_dataset=data, loss=toy_loss_class(tiny_model))
    trainer.train()
    freed = weakref.ref(trainer)
    gc.disable()
    try:
        del trainer
        assert freed() is None, [type(referrer).__name__ for referrer in gc.get_referrers(freed())]
    finally:
        gc.enable()
