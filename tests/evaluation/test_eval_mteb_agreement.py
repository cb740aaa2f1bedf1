"""mteb's scores (through evaluate_model) against the independent brute-force computation, tiny model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_data
from xprt_st.evaluation.catalog import beir_task, load_local_task
from xprt_st.evaluation.independent import independent_ndcg_at_10, independent_sts_spearman, rank_documents
from xprt_st.evaluation.readers import read_beir_folder, read_sts_file, subsample_beir
from xprt_st.evaluation.run import evaluate_model, model_fingerprint


def _agree(model, task, ignore_identical_ids: bool) -> None:
    scores, per_query = evaluate_model(model, [task], label="tiny", cache_dir=None)
    label = type(task).label
    mine_mean, mine = independent_ndcg_at_10(model, type(task).beir, ignore_identical_ids=ignore_identical_ids)
    assert set(mine) == set(per_query[label])
    for qid, value in mine.items():
        assert per_query[label][qid] == pytest.approx(value, abs=1e-6), qid
    assert scores[0].score == pytest.approx(mine_mean, abs=1e-5)  # mteb rounds main scores to 5 decimals


def test_rank_documents_orders_ties_like_trec_eval() -> None:
    scores = np.array([0.5, 0.9, 0.9, 0.1], dtype=np.float32)
    ids = ["a", "b", "c", "d"]
    assert rank_documents(scores, ids, k=3) == ["c", "b", "a"]
    assert rank_documents(scores, ids, k=3, ties="ascending") == ["b", "c", "a"]
    assert rank_documents(scores, ids, k=3, exclude="c") == ["b", "a", "d"]


def test_tiny_folder_mteb_equals_independent(tiny_model, beir_folder: Path) -> None:
    _agree(tiny_model, beir_task(beir_folder), ignore_identical_ids=True)


def test_packaged_task_subsample_mteb_equals_independent(tiny_model) -> None:
    _agree(tiny_model, load_local_task("python-faq", max_queries=30, max_corpus=60), ignore_identical_ids=False)


def test_arguana_subsample_mteb_equals_independent(tiny_model) -> None:
    folder = shared_data("arguana")
    task = beir_task(folder, max_queries=25, max_corpus=150, seed=0)
    assert task.ignore_identical_ids
    _agree(tiny_model, task, ignore_identical_ids=True)


def test_sts_spearman_mteb_equals_scipy(tiny_model, tmp_path: Path, stsb_writer) -> None:
    from xprt_st.evaluation.tasks import make_sts_task

    data = read_sts_file(stsb_writer(tmp_path / "sts.csv"))
    scores, _ = evaluate_model(tiny_model, [make_sts_task(data, "toy-sts")], label="tiny", cache_dir=None)
    assert scores[0].metric == "cosine_spearman"
    assert scores[0].score == pytest.approx(independent_sts_spearman(tiny_model, data), abs=1e-5)


def test_result_key_follows_the_weights(tiny_model, beir_folder: Path, tmp_path: Path) -> None:
    import torch

    before = model_fingerprint(tiny_model)
    task = beir_task(beir_folder)
    first, _ = evaluate_model(tiny_model, [task], label="same-label", cache_dir=tmp_path / "cache")
    with torch.no_grad():
        next(tiny_model.parameters()).add_(0.5)
    assert model_fingerprint(tiny_model) != before
    second, _ = evaluate_model(tiny_model, [task], label="same-label", cache_dir=tmp_path / "cache")
    assert first[0].model_key != second[0].model_key  # same label, new weights: never the cached score
    subset = subsample_beir(read_beir_folder(beir_folder), max_queries=2)
    assert len(subset.queries) == 2
