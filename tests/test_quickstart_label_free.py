"""The quickstart's label-free line: present when the mined folder has a held-out part, absent otherwise."""

from __future__ import annotations

import pytest
from sentence_transformers import SentenceTransformer

from tests.heldout_helpers import start_and_moved, write_heldout
from xprt_st.cli.quickstart import label_free_line
from xprt_st.evaluation.label_free import load_heldout_task, score_model
from xprt_st.quickstart import label_free_summary


def test_the_label_free_line_reports_start_trained_and_interval(tmp_path, tiny_model):
    texts = {label: [f"page {label} section {i} on item {label * 5 + i}" for i in range(4)] for label in range(3)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2]), (1, 3, [2, 1]), (2, 1, [0, 2])])
    start, trained = start_and_moved(tiny_model, tmp_path / "start", tmp_path / "model")

    record = label_free_summary(mined, str(start), trained)
    heldout = load_heldout_task(mined)
    assert record["start"] == pytest.approx(score_model(SentenceTransformer(str(start)), heldout).score, abs=1e-6)
    assert record["model"] == pytest.approx(score_model(SentenceTransformer(str(trained)), heldout).score, abs=1e-6)
    line = label_free_line(record)
    assert line.startswith("Label-free nDCG@10 on 3 held-out anchors: ")
    for value in (f"{record['start']:.4f}", f"{record['model']:.4f}", f"[{record['ci_low']:+.4f}, "):
        assert value in line

    (tmp_path / "plain").mkdir()
    assert label_free_summary(tmp_path / "plain", str(start), trained) is None


def test_fewer_than_two_held_out_anchors_give_a_reason_not_a_crash(tmp_path, tiny_model):
    texts = {label: [f"page {label} section {i}" for i in range(3)] for label in range(2)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2])])
    start = tmp_path / "start"
    tiny_model.save(str(start))

    record = label_free_summary(mined, str(start), start)
    assert record["queries"] == 1 and "start" not in record
    line = label_free_line(record)
    assert line.startswith("No label-free check: ")
    assert "holds 1 anchor(s)" in line and "at least 2" in line and "--holdout" in line


def test_the_training_runs_record_is_read_not_encoded_again(tmp_path, tiny_model, monkeypatch):
    import json

    import xprt_st.evaluation.label_free as label_free

    texts = {label: [f"page {label} section {i} on item {label * 5 + i}" for i in range(4)] for label in range(3)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2]), (1, 3, [2, 1]), (2, 1, [0, 2])])
    trained = tmp_path / "model"
    tiny_model.save(str(trained))
    written = {"data": str(mined), "queries": 3, "start": 0.5, "model": 0.25, "difference": -0.25}
    (trained / "label_free.json").write_text(json.dumps(written), encoding="utf-8")
    calls = []
    monkeypatch.setattr(label_free, "score_model", lambda *args: calls.append(args) or pytest.fail("re-encoded"))
    assert label_free_summary(mined, str(trained), trained) == written and not calls

    # a record of other data (another folder, or another held-out draw) is not this run's: scored afresh
    monkeypatch.undo()
    (trained / "label_free.json").write_text(json.dumps({**written, "queries": 2}), encoding="utf-8")
    record = label_free_summary(mined, str(trained), trained)
    assert record["queries"] == 3 and record["start"] == pytest.approx(record["model"], abs=1e-6)
