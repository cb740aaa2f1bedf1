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
    import torch
    from sentence_transformers import SentenceTransformer

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

    # a model folder trained again in place: the same path, other weights, another cache key
    model = tmp_path / "model"
    loaded = SentenceTransformer(str(tiny_model_path), device="cpu")
    loaded.save(str(model))
    keys = []
    for _ in range(2):
        result = CliRunner().invoke(app, ["evaluate", str(model), "--tasks", str(beir_folder), *common])
        assert result.exit_code == 0, result.output
        keys.append(_rows(out / "scores.csv")[0]["model_key"])
        with torch.no_grad():
            next(loaded.parameters()).add_(0.5)
        loaded.save(str(model))
    assert keys[0] != keys[1]
