"""notebooks/adoption.ipynb: the committed copy carries its outputs, and it runs end to end (nbclient, real model)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "adoption.ipynb"
XPRT_TERMS = ["xp", "cross", "self", "mlm", "unif", "retention"]
PYTHON_FAQ_QUERIES = 171
LIBRARY_NOISE = ("deprecated", "Warning", "warmup_ratio", "Note: embedding", "{'loss':", "{'train_runtime':")
"""What library warnings, notes and raw trainer log dicts look like in a cell's output."""


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_notebook", REPO / "notebooks" / "run_notebook.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outputs(nb: nbformat.NotebookNode) -> list[dict[str, Any]]:
    return [output for cell in nb.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]


def _check_outputs(nb: nbformat.NotebookNode) -> None:
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code_cells), "some code cells were never executed"
    outputs = _outputs(nb)
    assert not [output for output in outputs if output.get("output_type") == "error"]
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(images) >= 2, "expected the centrality histogram / threshold sweep and the loss-term plot"
    tables = [output for output in outputs if "text/html" in output.get("data", {})]
    assert len(tables) >= 5, "expected pandas tables for mining, scores, the sample page, the comparison, the losses"
    _runner().check_output_sizes(nb)
    for output in outputs:
        if output.get("output_type") == "stream":
            text = "".join(output.get("text", ""))
            noise = [marker for marker in LIBRARY_NOISE if marker in text]
            assert not noise, f"library output {noise} in the notebook: {text[:200]!r}"


def _first_cell(nb: nbformat.NotebookNode, needle: str, kind: str = "code") -> int:
    return next(i for i, cell in enumerate(nb.cells) if cell.cell_type == kind and needle in cell.source)


def test_committed_notebook_is_executed_and_small() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    _check_outputs(nb)
    assert NOTEBOOK.stat().st_size < 400_000
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    for step in ("Step 1", "Step 2", "Step 3", "Step 4"):
        assert step in text
    assert "fold split" in text and "demonstration, not a result" in text
    assert "holdout=HOLDOUT" in "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    flat = " ".join(text.split())
    assert "drift and sanity signal" in flat and "--select mined:DIR" in flat and "not as a verdict" in flat
    # the filter is checked (step 2) before anything trains on the groups
    assert (
        _first_cell(nb, "## Step 2", "markdown")
        < _first_cell(nb, "train_recipe(")
        < _first_cell(nb, "## Step 3", "markdown")
    )
    assert _first_cell(nb, "load_passages(mined)") < _first_cell(nb, "train_recipe(")
    # the retention text describes its own table (the weight falls, the weighted term may rise) and the cost
    # of the decoder is the measured figure (docs/losses.md), not a guess
    assert "follows its weight down to 0" not in flat and "can rise while its weight falls" in flat
    assert "threefold" not in flat and "about 3x" not in flat and "7.8x" in flat


@pytest.mark.slow
def test_notebook_runs_end_to_end(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    nb = _runner().execute(NOTEBOOK, workdir, timeout=3600)
    _check_outputs(nb)
    check_summary(workdir)
    assert not (REPO / "notebooks" / "mined").exists()


def check_summary(workdir: Path) -> None:
    """The facts the notebook's ``summary.json`` must state after a run into ``workdir``."""
    summary = json.loads((workdir / "summary.json").read_text(encoding="utf-8"))
    settings = summary["settings"]

    mining = summary["mining"]
    assert mining["documents"] == settings["pages"]
    assert 0 < mining["documents_with_groups"] <= mining["documents"]
    assert 0 < mining["anchors"] == mining["groups"] < mining["passages"]
    assert 0 < mining["passage_coverage"] < 1

    heldout = summary["heldout"]
    assert heldout["fraction"] == settings["holdout"] and 1 <= heldout["documents"] < mining["documents"]
    assert summary["held_out_rows"] == heldout["passages"] > 0  # the notebook's own count of held-out rows

    counts = summary["filter"]
    assert counts["anchor"] == mining["anchors"]
    assert counts["excluded"] > 0 and counts["related"] >= 0
    # The notebook's counts are of passages with a centrality; single-passage pages have none.
    assert sum(counts.values()) <= mining["passages"]
    covered = counts["anchor"] + counts["related"]
    assert covered / mining["passages"] == pytest.approx(mining["passage_coverage"], abs=1e-4)
    sample = summary["sample_document"]
    assert sample.get("anchor", 0) > 0 and sample.get("excluded", 0) > 0

    report = Path(summary["report"]["path"])
    assert report.parent == workdir and report.is_file()
    assert "xPRT mining report" in report.read_text(encoding="utf-8")

    step1 = summary["step1"]
    assert 0 <= step1["before"] <= 1 and 0 <= step1["after"] <= 1
    assert step1["gain"] == pytest.approx(step1["after"] - step1["before"], abs=1e-12)

    label_free = summary["step3_label_free"]
    assert label_free["task"].startswith("mined:")
    assert label_free["queries"] == heldout["groups"] >= 2 and label_free["passages"] == heldout["passages"]
    assert label_free["difference"] == pytest.approx(label_free["model"] - label_free["start"], abs=1e-9)
    assert label_free["ci_low"] <= label_free["difference"] <= label_free["ci_high"]
    assert 0 < label_free["knn_overlap_at_10"] <= 1
    # the same scores three ways: evaluate's mteb task, the pure functions, the training run's label_free.json
    mteb, during = label_free["mteb"], label_free["training_run"]
    assert mteb["starting model"] == pytest.approx(label_free["start"], abs=1e-4)
    assert mteb["after step 1"] == pytest.approx(label_free["model"], abs=1e-4)
    assert during == pytest.approx({"start": label_free["start"], "trained": label_free["model"]}, abs=1e-4)

    step3 = summary["step3"]
    assert step3["split"] == "split of the task's queries"
    assert step3["train_queries"] + step3["test_queries"] == PYTHON_FAQ_QUERIES
    assert step3["train_pairs"] >= step3["train_queries"]
    for role in ("base", "pretrained", "base_ft", "pretrained_ft"):
        assert 0 <= step3[role] <= 1
    assert step3["gain_before"] == pytest.approx(step3["pretrained"] - step3["base"], abs=1e-12)
    assert step3["gain_after"] == pytest.approx(step3["pretrained_ft"] - step3["base_ft"], abs=1e-12)
    assert step3["base_ft"] != step3["base"]

    step4 = summary["step4"]
    assert step4["terms"] == XPRT_TERMS
    assert [row["step"] for row in step4["losses"]] == list(range(1, settings["step4_steps"] + 1))
    for row in step4["losses"]:
        assert all(math.isfinite(row[term]) for term in XPRT_TERMS)
        assert row["loss"] == pytest.approx(sum(row[term] for term in XPRT_TERMS), rel=1e-3, abs=1e-3)
    assert step4["decoder_in_model"] is False
    evaluation = step4["evaluation"]  # step 4 is scored like step 1, with the interval against the start
    assert evaluation["starting model"]["ndcg_at_10"] == pytest.approx(step1["before"], abs=1e-12)
    assert evaluation["after step 1"]["ndcg_at_10"] == pytest.approx(step1["after"], abs=1e-12)
    for label in ("after step 1", "after step 4"):
        row = evaluation[label]
        assert 0 <= row["ndcg_at_10"] <= 1 and row["ci_low"] <= row["difference"] <= row["ci_high"]
        # the paired difference is over per-question scores, the table's score their mean (mteb rounds it)
        assert row["difference"] == pytest.approx(
            row["ndcg_at_10"] - evaluation["starting model"]["ndcg_at_10"], abs=1e-4
        )

    assert set(summary["timings_seconds"]) >= {
        "mine",
        "step1_train",
        "step3_label_free",
        "step3_finetune_compare",
        "step4_train",
    }


def test_finetune_prints_no_deprecation_and_no_log_dicts(
    tiny_model, tmp_path: Path, capsys, caplog, monkeypatch
) -> None:
    """The cause of the notebook's step-3 noise: fine-tuning warned about ``warmup_ratio`` and printed log dicts."""
    import logging

    from sentence_transformers import SentenceTransformerTrainer

    from xprt_st.finetune import FinetuneSettings
    from xprt_st.finetune.folds import LabelledPair
    from xprt_st.finetune.run import finetune

    seen = {}
    train = SentenceTransformerTrainer.train

    def recording_train(self, *args, **kwargs):
        seen["warmup"] = self.args.get_warmup_steps(10)
        seen["callbacks"] = [type(callback).__name__ for callback in self.callback_handler.callbacks]
        return train(self, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "train", recording_train)
    pairs = [
        LabelledPair(f"question {i} about topic {i}", f"the answer to question {i} on topic {i}") for i in range(8)
    ]
    settings = FinetuneSettings(epochs=1, batch_size=4, warmup_ratio=0.5, seed=0)
    with caplog.at_level(logging.WARNING):
        finetune(tiny_model, pairs, settings, tmp_path / "ft")
    assert "warmup_ratio" not in caplog.text
    assert capsys.readouterr().out == ""
    assert "PrinterCallback" not in seen["callbacks"]
    assert seen["warmup"] == 5  # half of 10 steps: the share is still applied
