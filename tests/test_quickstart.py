"""`xprt-st quickstart` end to end through the CLI, on a slice of the shipped corpus with the real default model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from xprt_st.cli import app

pytestmark = pytest.mark.slow

MAX_DOCUMENTS = 12
MAX_STEPS = 2
BATCH_SIZE = 8


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One small quickstart run shared by the tests of this module: (run folder, CliRunner result)."""
    output = tmp_path_factory.mktemp("quickstart") / "run"
    result = CliRunner().invoke(
        app,
        [
            "quickstart",
            "--output",
            str(output),
            "--max-steps",
            str(MAX_STEPS),
            "--batch-size",
            str(BATCH_SIZE),
            "--max-documents",
            str(MAX_DOCUMENTS),
        ],
    )
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return output, result


def _summary(output: Path) -> dict[str, Any]:
    return json.loads((output / "summary.json").read_text(encoding="utf-8"))


def test_summary_has_mining_stats_two_scored_models_and_their_gain(quickstart_run: tuple[Path, Any]) -> None:
    output, result = quickstart_run
    summary = _summary(output)

    mining = summary["mining"]
    assert mining["documents"] == MAX_DOCUMENTS
    assert 0 < mining["documents_with_groups"] <= MAX_DOCUMENTS
    assert mining["groups"] >= BATCH_SIZE
    assert mining["anchors"] == mining["groups"]
    assert 0 < mining["passage_coverage"] <= 1
    assert mining["threshold_source"] == "quantile 0.3"

    assert summary["config"]["max_documents"] == MAX_DOCUMENTS
    assert summary["config"]["max_steps"] == MAX_STEPS
    scores = summary["scores"]
    assert list(scores) == ["starting model", "after hybrid-teacher-hard"]
    for model_scores in scores.values():
        assert set(model_scores) == {"python-faq"}
        assert 0.0 <= model_scores["python-faq"] <= 1.0
    before, after = (scores[name]["python-faq"] for name in scores)
    assert summary["gain"]["python-faq"] == pytest.approx(after - before, abs=1e-12)
    # Two CPU steps at lr 2e-5 move the weights (see the next test), but not the scores far.
    assert abs(summary["gain"]["python-faq"]) < 0.2

    assert "Retrieval before and after pre-training" in result.output
    assert f"{after:.4f}" in result.output and f"{summary['gain']['python-faq']:+.4f}" in result.output
    assert (output / "evaluation").is_dir() and any((output / "evaluation").iterdir())


def test_the_gain_has_its_interval_and_a_plain_note_when_it_is_not_a_gain(quickstart_run: tuple[Path, Any]) -> None:
    from xprt_st.quickstart import closing_note

    output, result = quickstart_run
    summary = _summary(output)
    interval = summary["interval"]["python-faq"]
    low, high = float(interval["ci_low"]), float(interval["ci_high"])
    # the percentile interval of a mean difference brackets the difference itself
    assert low <= summary["gain"]["python-faq"] <= high
    assert interval["verdict"] in {"gain", "loss", "no clear difference"}
    assert summary["gained"] == (interval["verdict"] == "gain")
    assert f"[{low:+.4f}, {high:+.4f}]" in result.output
    printed = " ".join(result.output.split())
    note = closing_note(summary)
    assert (note is None) == summary["gained"]
    assert note is None or " ".join(note.split()) in printed


def test_the_closing_table_shows_bm25_on_the_task_and_the_trained_models_difference(
    quickstart_run: tuple[Path, Any],
) -> None:
    from xprt_st.evaluation.run import evaluate_models

    output, result = quickstart_run
    summary = _summary(output)
    # BM25 scored alone on the same task gives the line the quickstart printed beside the two models
    alone = evaluate_models(["bm25"], ["python-faq"])
    bm25 = summary["bm25"]["scores"]["python-faq"]
    assert bm25 == pytest.approx(alone.score("bm25", "python-faq"))
    over = summary["bm25"]["after_minus_bm25"]["python-faq"]
    after = summary["scores"]["after hybrid-teacher-hard"]["python-faq"]
    assert over["difference"] == pytest.approx(after - bm25, abs=1e-4)  # mteb rounds its main score to 5 digits
    assert float(over["ci_low"]) <= over["difference"] <= float(over["ci_high"])
    printed = " ".join(result.output.split())
    assert f"BM25 (reference) │ {bm25:.4f}" in printed
    assert f"{over['difference']:+.4f} [{float(over['ci_low']):+.4f}, {float(over['ci_high']):+.4f}]" in printed


def test_the_closing_table_shows_the_hybrid_of_the_start_and_of_the_trained_model(
    quickstart_run: tuple[Path, Any],
) -> None:
    """A team that serves BM25 fused with its model asks whether pre-training still adds to the fusion: both hybrids
    are lines of the table, with the trained one's paired interval against the start's."""
    from xprt_st.evaluation.run import evaluate_models
    from xprt_st.quickstart import hybrid_note

    output, result = quickstart_run
    hybrid = _summary(output)["hybrid"]
    alone = evaluate_models(["hybrid:default", f"hybrid:{output / 'model'}"], ["python-faq"], labels=["s", "t"])
    start, trained = hybrid["scores"]["hybrid:start"]["python-faq"], hybrid["scores"]["hybrid:trained"]["python-faq"]
    assert start == pytest.approx(alone.score("s", "python-faq")) and trained == pytest.approx(
        alone.score("t", "python-faq")
    )
    over = hybrid["trained_minus_start"]["python-faq"]
    assert over["difference"] == pytest.approx(trained - start, abs=1e-4)
    assert float(over["ci_low"]) <= over["difference"] <= float(over["ci_high"])
    printed = " ".join(result.output.split())
    assert f"hybrid:start (BM25 + model) │ {start:.4f}" in printed
    assert f"hybrid:trained (BM25 + model) │ {trained:.4f}" in printed
    assert f"{over['difference']:+.4f} [{float(over['ci_low']):+.4f}, {float(over['ci_high']):+.4f}]" in printed
    note = hybrid_note(_summary(output))
    assert (note is None) == (hybrid["serve_hybrid"]["python-faq"] is None)
    assert note is None or " ".join(note.split()) in printed


def test_the_label_free_line_reports_the_held_out_pages_of_this_run(quickstart_run: tuple[Path, Any]) -> None:
    from xprt_st.quickstart import HOLDOUT, LABEL_FREE_NOTE
    from xprt_st.training.label_free import RESULT_FILE

    output, result = quickstart_run
    summary = _summary(output)
    held = json.loads((output / "mined" / "stats.json").read_text(encoding="utf-8"))["holdout"]
    # seed 42 holds out 2 of the first 12 pages (the draw hashes their ids: __main__ and appetite)
    assert held["fraction"] == HOLDOUT and held["documents"] == 2 and held["groups"] >= 2
    record = summary["label_free"]
    assert record["queries"] == held["groups"] and record["passages"] == held["passages"]
    # the training run's own record (start scored before step 1, the final model after the last)
    assert record == json.loads((output / "model" / RESULT_FILE).read_text(encoding="utf-8"))
    assert record["ci_low"] <= record["difference"] <= record["ci_high"]
    assert record["difference"] == pytest.approx(record["model"] - record["start"], abs=1e-9)
    assert 0 < record["knn_overlap_at_10"] <= 1
    printed = " ".join(result.output.split())
    line = (
        f"Label-free nDCG@10 on {held['groups']} held-out anchors: start {record['start']:.4f}, "
        f"trained {record['model']:.4f}, difference {record['difference']:+.4f} "
        f"[{record['ci_low']:+.4f}, {record['ci_high']:+.4f}]; "
        f"10-NN overlap with the start {record['knn_overlap_at_10']:.3f}"
    )
    assert line in printed
    assert " ".join(LABEL_FREE_NOTE.split()) in printed
    # printed after the python-faq table, before the closing line
    assert printed.index("gain, 95% CI") < printed.index(line) < printed.index("Everything is in")


def test_trained_model_loads_as_a_plain_sentence_transformer(quickstart_run: tuple[Path, Any], minilm) -> None:
    from sentence_transformers import SentenceTransformer

    output, _ = quickstart_run
    model = SentenceTransformer(str(output / "model"), device="cpu")
    trained = dict(model.named_parameters())
    starting = dict(minilm.named_parameters())
    # Exactly the starting model's weights by name and shape: no decoder, MLM head or other loss module.
    assert {name: tuple(p.shape) for name, p in trained.items()} == {
        name: tuple(p.shape) for name, p in starting.items()
    }
    assert not [name for name in trained if "decoder" in name or "mlm" in name.lower() or "cls." in name]
    changed = [name for name in trained if not np.allclose(trained[name].detach(), starting[name].detach())]
    assert changed, "training left every weight unchanged"

    vectors = model.encode(["How do I read a file line by line?", "Reading files in Python"])
    assert vectors.shape == (2, minilm.get_embedding_dimension())


BOILERPLATE = ("Quick search", "Navigation", "Previous topic", "Report a Bug", "Show Source", "Copyright")
"""Sidebar, navigation and footer strings of every shipped page (Sphinx's theme)."""


def test_mining_found_anchors_and_excluded_passages(quickstart_run: tuple[Path, Any]) -> None:
    import gzip

    from xprt_st.mining import load_heldout, load_passages
    from xprt_st.quickstart import QUICKSTART_CORPUS

    output, _ = quickstart_run
    mined = output / "mined"
    stats = json.loads((mined / "stats.json").read_text(encoding="utf-8"))
    passages = load_passages(mined).to_pydict()
    meta = [json.loads(line) for line in (mined / "groups_meta.jsonl").read_text(encoding="utf-8").splitlines()]
    anchors = {(m["label"], m["anchor_index"]) for m in meta}
    related = {(m["label"], j) for m in meta for j in m["related_indices"]}
    held_out = set(load_heldout(mined)[1]["label"])  # pages kept for the label-free check: in no training group
    keys = [key for key in zip(passages["label"], passages["passage_index"], strict=True) if key[0] not in held_out]
    assert len(keys) == stats["passages"] and len(keys) < len(passages["label"])
    every_key = zip(passages["label"], passages["passage_index"], strict=True)
    centrality = dict(zip(every_key, passages["centrality"], strict=True))
    excluded = [key for key in keys if key not in anchors and key not in related]
    scored_excluded = [key for key in excluded if np.isfinite(centrality[key])]  # one-passage pages have none

    assert len(anchors) == stats["anchors"] > 0
    assert scored_excluded, "every passage of the real pages landed in a group; the filter excluded nothing"
    assert stats["passage_coverage"] == pytest.approx(1 - len(excluded) / len(keys), abs=1e-4)
    threshold = stats["threshold"]
    assert all(centrality[key] >= threshold for key in anchors)
    assert all(centrality[key] < threshold for key in scored_excluded)
    assert np.mean([centrality[key] for key in scored_excluded]) < np.mean([centrality[key] for key in anchors])

    # Navigation and footers never reach the passages: the main-text extraction drops them before any
    # centrality is computed, so what the threshold excludes is the periphery of the body text.
    with gzip.open(QUICKSTART_CORPUS, "rt", encoding="utf-8") as handle:
        pages = [json.loads(line)["html"] for _, line in zip(range(MAX_DOCUMENTS), handle, strict=False)]
    for marker in BOILERPLATE:
        assert all(marker in page for page in pages), marker
        assert not [text for text in passages["text"] if marker in text], marker


def test_max_documents_is_hidden_and_validated(tmp_path: Path) -> None:
    runner = CliRunner()
    assert "--max-documents" not in runner.invoke(app, ["quickstart", "--help"]).output
    result = runner.invoke(app, ["quickstart", "--output", str(tmp_path / "run"), "--max-documents", "0"])
    assert result.exit_code == 2
    assert not (tmp_path / "run").exists()
    # a fraction of 1 would hold out every page and leave nothing to train on: refused before any work
    result = runner.invoke(app, ["quickstart", "--output", str(tmp_path / "run"), "--holdout", "1"])
    assert result.exit_code == 2 and "--holdout" in result.output
    assert not (tmp_path / "run").exists()


def test_the_terminal_shows_no_library_warning_and_the_run_log_keeps_them(quickstart_run: tuple[Path, Any]) -> None:
    output, result = quickstart_run
    for noise in ("Warning", "pin_memory", "FutureWarning", "it/s]", "Computing widget examples"):
        assert noise not in result.output, noise
    log = (output / "xprt-st.log").read_text(encoding="utf-8")
    assert "xprt-st quickstart" in log.splitlines()[0]
    import torch

    precision = json.loads((output / "summary.json").read_text(encoding="utf-8"))["config"]["precision"]
    if not torch.cuda.is_available() and precision == "fp32":
        # the DataLoader warns that pin_memory has no accelerator to pin for (bf16 on a CPU trains with use_cpu)
        assert "UserWarning: 'pin_memory'" in log
