"""The training-time label-free evaluator: scores the start, every eval_steps, the end; label_free.json."""

from __future__ import annotations

import copy
import json

import pytest
from datasets import Dataset
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.losses import MultipleNegativesRankingLoss
from training_helpers import DOCUMENTS

from tests.heldout_helpers import write_heldout
from xprt_st.evaluation.label_free import load_heldout_task, score_model
from xprt_st.training.label_free import RESULT_FILE, LabelFreeEvaluator, finish

HELDOUT_GROUPS = [(0, 0, [1, 2, 3, 4]), (1, 2, [0, 1, 4, 3]), (2, 4, [3, 2, 1, 0]), (3, 1, [0, 2, 2, 2])]


def heldout_folder(folder):
    return write_heldout(folder, {label: texts for label, (_, texts) in enumerate(DOCUMENTS)}, HELDOUT_GROUPS)


def test_the_evaluator_runs_in_the_trainer_and_writes_start_and_final(tmp_path, tiny_model):
    heldout = load_heldout_task(heldout_folder(tmp_path / "mined"))
    start = copy.deepcopy(tiny_model)
    evaluator = LabelFreeEvaluator(heldout)
    assert evaluator.score_start(tiny_model).score == pytest.approx(score_model(start, heldout).score, abs=1e-6)

    pairs = Dataset.from_dict(
        {"anchor": [t[0] for _, t in DOCUMENTS] * 2, "positive": [t[1] for _, t in DOCUMENTS] * 2}
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=tiny_model,
        args=args,
        train_dataset=pairs,
        loss=MultipleNegativesRankingLoss(tiny_model),
        evaluator=evaluator,
    )
    trainer.train()
    logged = [row for row in trainer.state.log_history if "eval_label-free_ndcg@10" in row]
    assert [row["step"] for row in logged] == [1, 2]
    assert all(0 <= row["eval_label-free_knn_overlap@10"] <= 1 for row in logged)
    final = score_model(tiny_model, heldout)
    assert logged[-1]["eval_label-free_ndcg@10"] == pytest.approx(final.score, abs=1e-6)

    out = tmp_path / "out"
    out.mkdir()
    record = finish(evaluator, tiny_model, out)
    stored = json.loads((out / RESULT_FILE).read_text())
    assert stored["start"] == pytest.approx(score_model(start, heldout).score, abs=1e-6)
    assert stored["model"] == pytest.approx(final.score, abs=1e-6)
    assert stored["difference"] == pytest.approx(final.score - stored["start"], abs=1e-9)
    assert stored["ci_low"] <= stored["difference"] <= stored["ci_high"]
    assert [row["step"] for row in stored["history"]] == [1, 2]
    assert record["knn_overlap_at_10"] < 1.0  # lr 1e-3 on a random tiny model moves its neighbourhoods
    card = (out / "README.md").read_text()
    assert "Label-free check" in card and f"{stored['start']:.4f}" in card


def test_finish_needs_the_start(tmp_path, tiny_model):
    evaluator = LabelFreeEvaluator(load_heldout_task(heldout_folder(tmp_path / "mined")))
    with pytest.raises(RuntimeError, match="score_start"):
        finish(evaluator, tiny_model, tmp_path)
