"""Reruns of evaluate and finetune-compare into the same output folder: nothing made with other settings is reused,
and no result of an earlier run is left beside this run's to read as its own."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from tests.evaluation.test_eval_titles import write_titles
from xprt_st.cli import app


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_an_evaluate_rerun_recomputes_what_changed_and_leaves_no_result_of_the_earlier_run(
    tmp_path, tiny_model_path, beir_folder
):
    """The result cache is keyed by the model's weights and the task's data (a subsample is other data), so a changed
    setting is scored again; results of the earlier run that this one does not rewrite are removed (before, a
    rerun without --overlap-thirds or a label-free task left the old overlap_thirds.csv and label_free.json)."""
    out, cache = tmp_path / "eval", tmp_path / "cache"
    common = ["--cache-dir", str(cache), "--output", str(out)]
    tasks = f"{beir_folder},titles:{write_titles(tmp_path / 'mined')}"
    first = CliRunner().invoke(
        app, ["evaluate", str(tiny_model_path), str(tiny_model_path), "--tasks", tasks, "--overlap-thirds", *common]
    )
    assert first.exit_code == 0, first.output
    assert (out / "overlap_thirds.csv").is_file() and (out / "label_free.json").is_file()
    (beir_first,) = [row for row in _rows(out / "scores.csv") if row["task"] == "tinybeir"][:1]

    second = CliRunner().invoke(app, ["evaluate", str(tiny_model_path), "--tasks", str(beir_folder), "--max-queries",
                                      "2", *common])  # fmt: skip
    assert second.exit_code == 0, second.output
    assert "removed label_free.json, overlap_thirds.csv from" in " ".join(second.output.split())
    assert not (out / "overlap_thirds.csv").exists() and not (out / "label_free.json").exists()
    (beir_second,) = _rows(out / "scores.csv")
    assert beir_second["mteb_task"] != beir_first["mteb_task"]  # 2 queries: another task key, scored again
    assert json.loads((out / "scores.json").read_text())["models"] == [tiny_model_path.name]


def test_the_result_key_follows_the_pooling_and_the_token_limit_not_only_the_weights(tiny_model):
    """Weights changed in place get a new key (tests/evaluation/test_eval_mteb_agreement.py); before, a folder whose
    pooling mode or max_seq_length was edited kept its key, and evaluate returned the cached score of the old one."""
    from xprt_st.evaluation.run import model_fingerprint

    before = model_fingerprint(tiny_model)
    tiny_model.max_seq_length = 16
    shorter = model_fingerprint(tiny_model)
    tiny_model[1].pooling_mode = "cls"
    assert len({before, shorter, model_fingerprint(tiny_model)}) == 3


def test_a_finetune_compare_rerun_reuses_its_pretrained_model_only_when_made_with_the_same_settings(
    tmp_path, tiny_model_path, beir_writer
):
    """Before, every rerun with --recipe stopped with train's "continue it with --resume last" (an option
    finetune-compare lacks), whatever changed; and fine-tuned models an earlier --save-models run wrote stayed beside
    the new tables."""
    from tests.training.training_helpers import write_mined
    from xprt_st.fingerprint import FINGERPRINT_FILE

    mined = write_mined(tmp_path / "mined")
    keys = [(topic, i) for topic in ("web", "med") for i in range(4)]
    corpus = {f"d-{t}-{i}": {"title": "", "text": f"{t} fact number {i} about {t}"} for t, i in keys}
    queries = {f"q-{t}-{i}": f"what about {t} {i}?" for t, i in keys}
    task = beir_writer(tmp_path / "ftbeir", corpus, queries, [(f"q-{t}-{i}", f"d-{t}-{i}", 1) for t, i in keys])
    out = tmp_path / "ft"
    weights = out / "pretrained" / "model.safetensors"

    def run(steps: int, *extra: str):
        args = ["finetune-compare", "--model", str(tiny_model_path), "--recipe", "change-only-positive", "--mined",
                str(mined), "--pretrain-set", f"training.max_steps={steps}", "--pretrain-set", "training.batch_size=4",
                "--task", str(task), "--batch-size", "2", "--output", str(out), *extra]  # fmt: skip
        result = CliRunner().invoke(app, args)
        return result, " ".join(result.output.split())

    result, _ = run(2, "--save-models")
    assert result.exit_code == 0, result.output
    assert (out / "base+ft" / "modules.json").is_file() and weights.is_file()
    trained = weights.read_bytes()
    stored = json.loads((out / FINGERPRINT_FILE).read_text())["pretrained"]
    assert stored["recipe_values"]["training"]["max_steps"] == 2 and stored["mined"] == str(mined.resolve())
    assert "source" not in stored["recipe_values"]  # where the recipe's YAML lives does not shape the model

    result, text = run(2)  # the same settings: the pre-trained model is reused, nothing is pre-trained again
    assert result.exit_code == 0, result.output
    assert f"reusing the model pre-trained in {out / 'pretrained'}" in text and weights.read_bytes() == trained
    assert "removed base+ft, pretrained+ft from" in text and not (out / "base+ft").exists()

    result, text = run(3)  # another override: stopped before any work, in one line naming it
    assert result.exit_code == 2 and "Traceback" not in text, result.output
    assert f"{out / 'pretrained'} was made with other settings (recipe_values.training.max_steps 2 -> 3)" in text
    assert "--overwrite" in text and "new --output folder" in text and "--resume" not in text
    assert weights.read_bytes() == trained

    result, _ = run(3, "--overwrite")
    assert result.exit_code == 0, result.output
    assert json.loads((out / FINGERPRINT_FILE).read_text())["pretrained"]["recipe_values"]["training"]["max_steps"] == 3
    assert weights.read_bytes() != trained


def test_a_killed_pretraining_with_the_same_settings_resumes_or_starts_again(tmp_path, tiny_model_path):
    """A pre-training killed after a checkpoint resumes from it; one killed before any is started again."""
    import shutil

    from tests.training.training_helpers import write_mined
    from xprt_st.finetune.pretrained import PretrainSettings, pretrained_stage
    from xprt_st.output_folder import command_folder
    from xprt_st.pipeline import Action, run_pipeline

    mined = write_mined(tmp_path / "mined")
    settings = PretrainSettings(
        "change-only-positive", mined, str(tiny_model_path), {"training.max_steps": 2, "training.batch_size": 4}
    )
    out = tmp_path / "ft"

    def rerun() -> str:
        """What the stage did: reused by the stage layer, or its own outcome (kept, resume, restart, train)."""
        with command_folder(out, "finetune-compare") as folder:
            stage = pretrained_stage(settings, folder)
            (row,) = run_pipeline([stage], folder.path)
            return "reused" if row.action is Action.REUSE else stage.outcome

    assert rerun() == "train" and rerun() == "reused"  # trained, then reused
    stage = out / "pretrained"
    (stage / "modules.json").unlink()  # killed after checkpoint-2, before the final save
    (out / ".xprt-st-stages.json").unlink()  # ... so the stage never recorded itself complete
    assert rerun() == "resume" and (stage / "modules.json").is_file() and rerun() == "reused"
    for path in stage.iterdir():  # killed before its first checkpoint: what train wrote is left
        if path.name not in (".xprt-st-manifest.json", "training_state"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (out / ".xprt-st-stages.json").unlink()
    assert rerun() == "restart" and (stage / "modules.json").is_file() and rerun() == "reused"
