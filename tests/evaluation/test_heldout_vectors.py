"""The held-out passages are encoded once per model for mined:DIR and titles:DIR; the start reuses mining's vectors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from tests.mining.test_mining_merge import _corpus as merge_corpus
from xprt_st.evaluation import label_free, titles
from xprt_st.mining import mine

SETTINGS = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.4}


def _corpus(path: Path, documents: int) -> Path:
    """Documents of 1 to 6 paragraphs (the one-paragraph ones are not encoded by mining), each with a title."""
    return merge_corpus(path, documents, least=1, spread=6, titles=True)


def _fresh(model, texts: list[str]) -> np.ndarray:
    """A plain encoding in other batches than the scored one's (the reference of a fresh encoding)."""
    return np.asarray(model.encode(texts, batch_size=7, convert_to_numpy=True))


def test_both_label_free_tasks_share_one_encoding_per_model_and_the_start_reuses_mining(
    tmp_path: Path, tiny_model, counted
) -> None:
    out = tmp_path / "mined"
    corpus = _corpus(tmp_path / "c.jsonl", 30)
    # fp32, the precision the start is scored in below: vectors of one precision never stand for another's
    mine(corpus, out, model=tiny_model, title_field="title", progress=False, precision="fp32", **SETTINGS)
    heldout, task = label_free.load_heldout_task(out), titles.load_titles_task(out)
    assert task.texts == heldout.texts and task.ids == heldout.ids
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    stored = np.load(out / "embeddings.npy")
    unencoded = {r["text"] for r, v in zip(passages, stored, strict=True) if r["held_out"] and np.isnan(v[0])}
    assert unencoded and len(unencoded) < len(heldout.texts)  # some held-out documents have one passage
    fresh_start, fresh_queries = _fresh(tiny_model, heldout.texts), _fresh(tiny_model, task.queries)
    counted.clear()

    start = label_free.score_model(tiny_model, heldout)
    assert {text for _, text in counted} == unencoded  # mining's vectors serve the rest
    titles_start = titles.score_model(tiny_model, task)
    assert {text for _, text in counted} == unencoded | set(task.queries)  # the titles, not the passages again
    expected = label_free.score_embeddings(heldout, fresh_start)
    assert max(abs(start.per_query[q] - expected[q]) for q in expected) < 1e-6
    expected = titles.score_embeddings(task, fresh_queries, fresh_start)
    assert max(abs(titles_start.per_query[q] - expected[q]) for q in expected) < 1e-6

    # another model (a trained one) encodes the held-out passages once, for both tasks
    moved = copy.deepcopy(tiny_model)
    with torch.no_grad():
        next(moved.parameters()).mul_(1.5)
    fresh_trained, fresh_queries = _fresh(moved, heldout.texts), _fresh(moved, task.queries)
    counted.clear()
    trained = label_free.score_model(moved, heldout)
    titles_trained = titles.score_model(moved, task)
    assert sorted(text for _, text in counted) == sorted(heldout.texts + task.queries)
    expected = label_free.score_embeddings(heldout, fresh_trained)
    assert max(abs(trained.per_query[q] - expected[q]) for q in expected) < 1e-6
    expected = titles.score_embeddings(task, fresh_queries, fresh_trained)
    assert max(abs(titles_trained.per_query[q] - expected[q]) for q in expected) < 1e-6

    # the same weights read at another maximum length are another encoder: encoded again
    counted.clear()
    moved.max_seq_length = 16
    label_free.score_model(moved, heldout)
    assert sorted(text for _, text in counted) == sorted(heldout.texts)


def test_mining_vectors_are_not_used_when_the_texts_changed(tmp_path: Path, tiny_model, counted) -> None:
    out = tmp_path / "mined"
    mine(_corpus(tmp_path / "c.jsonl", 24), out, model=tiny_model, progress=False, **SETTINGS)
    heldout = label_free.load_heldout_task(out)
    record = json.loads((out / "embeddings.json").read_text())
    (out / "embeddings.json").write_text(json.dumps({**record, "texts_sha256": "0" * 64}))
    label_free.score_model(tiny_model, heldout)
    assert sorted(text for _, text in counted) == sorted(heldout.texts)
