"""One quickstart run encodes each held-out passage at most once per model, and reports its stages' times."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sentence_transformers import SentenceTransformer
from typer.testing import CliRunner

from tests.heldout_helpers import seed_leaving_both
from tests.test_quickstart_corpus import _documents
from xprt_st.cli import app
from xprt_st.evaluation import label_free, titles
from xprt_st.mining.layout.embeddings import encoder_identity
from xprt_st.mining.reader import iter_corpus


def _pages(folder: Path) -> Path:
    """The help-desk pages as Markdown files, each titled by its "# heading"."""
    for document in _documents():
        (folder / f"{document['doc_id']}.md").parent.mkdir(parents=True, exist_ok=True)
        text = f"# {document['heading'].title()}\n\n{document['body']}\n"
        (folder / f"{document['doc_id']}.md").write_text(text, encoding="utf-8")
    return folder


def test_one_quickstart_encodes_held_out_passages_once_per_model_and_times_its_stages(
    tmp_path: Path, tiny_model_path: Path, counted: list[tuple[str, str]]
) -> None:
    out = tmp_path / "out"
    pages = _pages(tmp_path / "pages")
    # the pages' ids are their paths, which move with pytest's folder: a seed whose draw holds some out and keeps most
    seed = seed_leaving_both([[record.doc_id for record in iter_corpus([pages])]], 0.3, held=3, kept=12)
    args = ["quickstart", "--corpus", str(pages), "-o", str(out), "--seed", str(seed)]
    args += ["--model", str(tiny_model_path), "--max-steps", "2", "--batch-size", "4", "--holdout", "0.3"]
    # fp32 as the fresh encodings below: under auto a bf16 CPU scores the run's vectors in bf16, and a random tiny
    # model's near-ties then rank otherwise now and then, so an exact score check would hold on some machines only
    result = CliRunner().invoke(app, [*args, "--precision", "fp32"])
    seen = Counter(counted)  # what the run encoded, before this test encodes anything
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"

    mined = out / "mined"
    heldout, task = label_free.load_heldout_task(mined), titles.load_titles_task(mined)
    start, trained = SentenceTransformer(str(tiny_model_path)), SentenceTransformer(str(out / "model"))
    start_weights = encoder_identity(start, "")["weights_sha256"]
    trained_weights = encoder_identity(trained, "")["weights_sha256"]
    assert start_weights != trained_weights
    passages = pq.read_table(mined / "passages.parquet").to_pylist()
    stored = np.load(mined / "embeddings.npy")
    unencoded = {r["text"] for r, v in zip(passages, stored, strict=True) if r["held_out"] and np.isnan(v[0])}
    # the start: mining's vectors serve every held-out passage mining encoded; the trained model: one encoding
    assert {text for text in heldout.texts if seen[(start_weights, text)]} == unencoded
    assert all(seen[(weights, text)] <= 1 for weights in (start_weights, trained_weights) for text in heldout.texts)
    assert all(seen[(trained_weights, text)] == 1 for text in heldout.texts)

    summary = json.loads((out / "summary.json").read_text())
    fresh = {name: model.encode(heldout.texts, batch_size=5) for name, model in (("start", start), ("model", trained))}
    for name, model in (("start", start), ("model", trained)):
        expected = label_free.score_embeddings(heldout, fresh[name])
        assert summary["label_free"][name] == pytest.approx(np.mean(list(expected.values())), abs=1e-6)
        expected = titles.score_embeddings(task, model.encode(task.queries), fresh[name])
        assert summary["titles"][name] == pytest.approx(np.mean(list(expected.values())), abs=1e-6)

    rows = {row["stage"]: row for row in summary["stages"]}
    for name in ("read corpus", "encode for mining", "mine", "train", "label-free: start", "titles: trained"):
        assert rows[name]["wall_s"] > 0 and rows[name]["cpu_s"] >= 0, name
    assert rows["label-free: start"]["reused"] and rows["titles: start"]["reused"] and rows["titles: trained"]["reused"]
    assert not rows["encode for mining"]["reused"] and not rows["train"]["reused"]
    output = " ".join(result.output.split())
    assert "Time by stage (seconds)" in output and "encode for mining" in output and "total" in output
