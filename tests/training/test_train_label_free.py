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
    calls = []
    evaluator._score = lambda model: calls.append(model) or final  # the last evaluation was at step 2
    again = tmp_path / "again"
    again.mkdir()
    assert finish(evaluator, tiny_model, again, step=2)["model"] == record["model"] and calls == []
    assert finish(evaluator, tiny_model, again, step=3)["model"] == record["model"] and len(calls) == 1
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


def _train(*extra: str):
    from typer.testing import CliRunner

    from xprt_st.cli import app

    return CliRunner().invoke(app, ["train", "--max-seq-length", "32", "--quiet", *extra], catch_exceptions=False)


def test_train_on_a_folder_with_heldout_documents_scores_them_and_keeps_the_best(tmp_path, tiny_model_path):
    from sentence_transformers import SentenceTransformer
    from training_helpers import write_mined

    data = heldout_folder(write_mined(tmp_path / "mined", n_groups=8))
    output = tmp_path / "run"
    result = _train(
        "--recipe", "change-only-positive", "--mined", str(data), "--output", str(output),
        "--model", str(tiny_model_path), "--max-steps", "4", "--batch-size", "4", "--save-steps", "2",
        "--eval-steps", "1", "--keep-best", "--learning-rate", "1e-3",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads((output / RESULT_FILE).read_text())
    heldout = load_heldout_task(data)
    start = score_model(SentenceTransformer(str(tiny_model_path), device="cpu"), heldout)
    final = score_model(SentenceTransformer(str(output), device="cpu"), heldout)
    assert record["start"] == pytest.approx(start.score, abs=1e-6)
    assert record["model"] == pytest.approx(final.score, abs=1e-6)
    assert [row["step"] for row in record["history"]] == [1, 2, 3, 4]
    # the best of the saved checkpoints (2 and 4) by the label-free score is the final model
    saved = {row["step"]: row["label-free_ndcg@10"] for row in record["history"] if row["step"] in (2, 4)}
    best_step = max(saved, key=lambda step: (saved[step], -step))
    assert record["best_checkpoint"].endswith(f"checkpoint-{best_step}")
    assert record["model"] == pytest.approx(saved[best_step], abs=1e-6)
    assert "## Label-free check" in (output / "README.md").read_text()


def test_keep_best_without_heldout_documents_fails_before_training(tmp_path, tiny_model_path):
    from training_helpers import write_mined

    data = write_mined(tmp_path / "mined", n_groups=8)
    result = _train(
        "--recipe", "change-only-positive", "--mined", str(data), "--output", str(tmp_path / "run"),
        "--model", str(tiny_model_path), "--max-steps", "2", "--batch-size", "4", "--keep-best",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no held-out documents" in " ".join(result.output.split())
    assert not (tmp_path / "run" / "checkpoint-1").exists()


def test_train_goes_on_without_the_check_when_too_few_anchors_are_held_out(tmp_path, tiny_model_path, caplog):
    from training_helpers import write_mined

    data = write_heldout(
        write_mined(tmp_path / "mined", n_groups=8),
        {label: texts for label, (_, texts) in enumerate(DOCUMENTS)},
        HELDOUT_GROUPS[:1],
    )
    common = ["--recipe", "change-only-positive", "--mined", str(data), "--model", str(tiny_model_path)]
    common += ["--max-steps", "1", "--batch-size", "4"]
    with caplog.at_level("WARNING", logger="xprt_st.training.label_free"):
        result = _train(*common, "--output", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "modules.json").is_file() and not (tmp_path / "run" / RESULT_FILE).exists()
    assert "no label-free check during this run" in caplog.text and "1 anchor(s)" in caplog.text

    # keep_best cannot keep the best by a check that is not there: refused before any step
    result = _train(*common, "--output", str(tmp_path / "best"), "--keep-best")
    assert result.exit_code != 0 and "keep_best" in result.output and "1 anchor(s)" in result.output
    assert not (tmp_path / "best" / "modules.json").exists()


def test_a_broken_heldout_part_or_keep_best_without_one_is_refused_before_the_start_loads(
    tmp_path, tiny_model_path, monkeypatch
):
    """Before, both were found by the trainer setup, after the starting model had loaded."""
    import shutil

    from training_helpers import write_mined

    import xprt_st.training.recipe_setup

    def loaded(*args, **kwargs):
        raise AssertionError("the starting model loaded before the held-out part was checked")

    monkeypatch.setattr(xprt_st.training.recipe_setup, "load_model", loaded)
    common = ["--recipe", "change-only-positive", "--model", str(tiny_model_path), "--max-steps", "2"]
    common += ["--batch-size", "4"]
    plain = write_mined(tmp_path / "plain", n_groups=8)
    result = _train(*common, "--mined", str(plain), "--output", str(tmp_path / "best"), "--keep-best")
    assert result.exit_code == 2 and "no held-out documents" in " ".join(result.output.split()), result.output

    broken = heldout_folder(write_mined(tmp_path / "broken", n_groups=8))
    shutil.rmtree(broken / "heldout" / "groups")
    result = _train(*common, "--mined", str(broken), "--output", str(tmp_path / "run"))
    joined = "".join(result.output.split())  # a long path wraps anywhere on the console
    assert result.exit_code == 2 and "heldout/groupsismissing" in joined and "Traceback" not in joined, result.output
    assert not (tmp_path / "run" / "modules.json").exists()


def test_a_script_s_trainer_setup_reads_the_heldout_part_before_the_start_loads(tmp_path, tiny_model_path, monkeypatch):
    """trainer_setup given a folder (a Python script, not train's checks) reads the held-out part before it loads the
    start: before, a broken part was found after the model had loaded."""
    import shutil

    from training_helpers import write_mined

    import xprt_st.training.recipe_setup
    from xprt_st.recipe import load_recipe
    from xprt_st.training import trainer_setup
    from xprt_st.training.data import MinedDataError

    def loaded(*args, **kwargs):
        raise AssertionError("the starting model loaded before the held-out part was read")

    monkeypatch.setattr(xprt_st.training.recipe_setup, "load_model", loaded)
    broken = heldout_folder(write_mined(tmp_path / "broken", n_groups=8))
    shutil.rmtree(broken / "heldout" / "groups")
    overrides = {"training.model": str(tiny_model_path), "training.batch_size": 4}
    recipe = load_recipe("change-only-positive", overrides=overrides)
    with pytest.raises(MinedDataError, match="heldout/groups"):
        trainer_setup(recipe, broken, tmp_path / "run")
