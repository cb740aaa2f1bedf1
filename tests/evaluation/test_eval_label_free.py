"""The label-free task on hand-made held-out folders: scores computed by hand, mteb agreement, drift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.heldout_helpers import write_heldout
from xprt_st.evaluation.label_free import (
    HeldOutError,
    drift,
    graded_relevance,
    knn_overlap,
    label_free_task,
    load_heldout_task,
    ndcg_at_k,
    read_heldout,
    score_embeddings,
    score_model,
)

PASSAGES = {0: ["a0", "a1", "a2"], 1: ["b0", "b1", "b2"]}
GROUPS = [(0, 0, [1, 2]), (1, 1, [0, 2])]
ANGLES = {"0-0": 0, "0-1": 10, "0-2": 50, "1-0": 30, "1-1": 90, "1-2": 100}
"""Each passage a unit vector at this angle (degrees): cosine order is angular distance order."""


def _embeddings(heldout) -> np.ndarray:
    radians = np.deg2rad([ANGLES[pid] for pid in heldout.ids])
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_grades_follow_the_rank_and_padding_counts_once():
    assert graded_relevance([5, 3, 8, 1]) == {5: 4, 3: 3, 8: 2, 1: 1}
    assert graded_relevance([5, 3, 3, 3]) == {5: 4, 3: 3}  # a short document padded with its last passage


def test_the_task_score_on_a_hand_made_folder(tmp_path):
    heldout = load_heldout_task(write_heldout(tmp_path, PASSAGES, GROUPS))
    assert heldout.query_ids == ["0-0", "1-1"]
    assert heldout.qrels() == {"0-0": {"0-1": 2, "0-2": 1}, "1-1": {"1-0": 2, "1-2": 1}}
    per_query = score_embeddings(heldout, _embeddings(heldout))
    # query 0-0 (0 deg), itself left out: 0-1 (10, grade 2), 1-0 (30, 0), 0-2 (50, grade 1), ...
    ideal = 2 + 1 / math.log2(3)
    assert per_query["0-0"] == pytest.approx((2 / 1 + 0 + 1 / math.log2(4)) / ideal, abs=1e-12)
    # query 1-1 (90 deg): 1-2 (100, grade 1), 0-2 (50, 0), 1-0 (30, grade 2), ...
    assert per_query["1-1"] == pytest.approx((1 / 1 + 0 + 2 / math.log2(4)) / ideal, abs=1e-12)
    assert per_query["0-0"] == pytest.approx(0.950234, abs=1e-6)
    assert per_query["1-1"] == pytest.approx(0.760187, abs=1e-6)


def test_ndcg_agrees_with_trec_eval_on_random_graded_data():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(0)
    n, q = 40, 12
    scores = rng.normal(size=(q, n))
    queries = rng.choice(n, size=q, replace=False)
    relevance = []
    for row in range(q):
        others = [c for c in rng.choice(n, size=5, replace=False) if c != queries[row]]
        relevance.append({int(c): int(g) for c, g in zip(others, rng.integers(1, 5, size=len(others)), strict=False)})
    ours = ndcg_at_k(scores, queries, relevance)
    qrels = {str(r): {str(c): g for c, g in rel.items()} for r, rel in enumerate(relevance)}
    run = {str(r): {str(c): float(scores[r, c]) for c in range(n) if c != queries[r]} for r in range(q)}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert ours == pytest.approx([theirs[str(r)]["ndcg_cut_10"] for r in range(q)], abs=1e-9)


def test_knn_overlap_by_hand():
    # directions at atan(y): 0, 5.7, 11.3, 16.7 and 78.7 degrees; k=2 neighbours by cosine, itself excluded
    start = np.array([[1.0, 0], [1, 0.1], [1, 0.2], [1, 0.3], [1, 5]])
    assert knn_overlap(start, start, k=2) == pytest.approx([1.0] * 5)
    moved = start[[0, 1, 2, 4, 3]]  # passages 3 and 4 swap places
    # start: 0->{1,2} 1->{0,2} 2->{1,3} 3->{2,1} 4->{3,2}; moved: 0->{1,2} 1->{0,2} 2->{4,1} 3->{4,2} 4->{2,1}
    assert knn_overlap(moved, start, k=2) == pytest.approx([1, 1, 0.5, 0.5, 0.5])


def test_the_mteb_task_and_the_evaluator_math_give_the_same_scores(tmp_path, tiny_model):
    texts = {
        label: [f"document {label} passage {i} about topic {label * 3 + i} words {i * label}" for i in range(4)]
        for label in range(3)
    }
    groups = [(0, 0, [1, 2, 3]), (0, 2, [3, 1, 1]), (1, 1, [0, 3, 2]), (2, 3, [2, 1, 0])]
    folder = write_heldout(tmp_path / "mined", texts, groups)
    ours = score_model(tiny_model, load_heldout_task(folder))

    from xprt_st.evaluation.run import evaluate_models

    report = evaluate_models([tiny_model], [label_free_task(folder)], labels=["tiny"])
    task = report.tasks[0]
    assert task == "mined:mined"
    assert report.per_query[task]["tiny"] == pytest.approx(ours.per_query, abs=1e-5)
    assert report.score("tiny", task) == pytest.approx(ours.score, abs=1e-5)
    assert drift(ours, ours).overlap == 1.0


def test_missing_or_broken_heldout_parts_are_named(tmp_path):
    (tmp_path / "plain").mkdir()
    assert read_heldout(tmp_path / "plain") is None
    with pytest.raises(HeldOutError, match=r"has no held-out part.*--holdout"):
        load_heldout_task(tmp_path / "plain")
    folder = write_heldout(tmp_path / "bad", PASSAGES, [(0, 0, [1, 7]), (1, 1, [0])])
    with pytest.raises(HeldOutError, match="row 0: document 0 has no passage 7"):
        load_heldout_task(folder)
    one = write_heldout(tmp_path / "one", PASSAGES, [(0, 0, [1])])
    with pytest.raises(HeldOutError, match=r"1 anchor.*at least 2"):
        load_heldout_task(one)


def test_a_folder_whose_stats_settings_is_no_object_still_loads_its_task(tmp_path):
    """Before, a hand-edited stats.json whose ``settings`` was a list ended ``evaluate --tasks mined:DIR`` in an
    AttributeError from the derived-folder check; it holds no derived folder, so its task loads as the folder's own."""
    import json

    folder = write_heldout(tmp_path / "mined", PASSAGES, GROUPS)
    (folder / "stats.json").write_text(json.dumps({"groups": 0, "settings": ["edited", "by", "hand"]}))
    assert load_heldout_task(folder).query_ids == ["0-0", "1-1"]
