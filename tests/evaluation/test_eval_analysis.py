"""Per-query nDCG and the word-overlap thirds against hand-computed values."""

from __future__ import annotations

import math

import pytest

from xprt_st.evaluation.analysis import (
    ndcg_at_k,
    ndcg_by_third,
    overlap_thirds,
    query_overlaps,
    split_into_thirds,
    word_overlap,
    word_set,
)
from xprt_st.evaluation.readers import BEIRData


def test_word_overlap_is_jaccard_of_lower_cased_word_sets() -> None:
    assert word_set("Cats, cats! DOGS's") == {"cats", "dogs", "s"}
    assert word_overlap("a b", "a b") == 1.0
    assert word_overlap("a b c", "A d") == pytest.approx(1 / 4)
    assert word_overlap("Cats, cats!", "cats dogs") == pytest.approx(1 / 2)
    assert word_overlap("", "") == 0.0
    assert word_overlap("p", "q r") == 0.0


def _data() -> BEIRData:
    pairs = {
        "q1": ("a b", "a b"),  # 1
        "q2": ("a b", "c d"),  # 0
        "q3": ("a b c", "a d"),  # 1/4
        "q4": ("Cats, cats!", "cats dogs"),  # 1/2
        "q5": ("x y z", "x y"),  # 2/3
        "q6": ("p", "q r"),  # 0
        "q7": ("m n", "m o p"),  # 1/4
    }
    corpus = {f"d{qid}": {"title": "", "text": doc} for qid, (_, doc) in pairs.items()}
    corpus["dq5-title"] = {"title": "x", "text": "y z"}  # a second relevant doc of q5: overlap 1
    qrels = {qid: {f"d{qid}": 1} for qid in pairs}
    qrels["q5"]["dq5-title"] = 0  # judged non-relevant: must not count
    return BEIRData(corpus=corpus, queries={qid: q for qid, (q, _) in pairs.items()}, qrels=qrels)


def test_overlap_uses_the_best_positive_document_only() -> None:
    data = _data()
    overlaps = query_overlaps(data)
    assert overlaps["q5"] == pytest.approx(2 / 3)
    data.qrels["q5"]["dq5-title"] = 1
    assert query_overlaps(data)["q5"] == pytest.approx(1.0)  # title and text joined: "x y z"


def test_thirds_by_hand() -> None:
    # sorted by (overlap, id): q2 0, q6 0, q3 .25, q7 .25, q4 .5, q5 .667, q1 1 -> sizes 3, 2, 2
    thirds = overlap_thirds(_data())
    assert [t.name for t in thirds] == ["low", "middle", "high"]
    assert [t.query_ids for t in thirds] == [["q2", "q6", "q3"], ["q7", "q4"], ["q5", "q1"]]
    assert (thirds[0].min_overlap, thirds[0].max_overlap) == (0.0, 0.25)
    assert thirds[2].min_overlap == pytest.approx(2 / 3) and thirds[2].max_overlap == 1.0
    assert [len(part) for part in split_into_thirds({str(i): 0.0 for i in range(8)})] == [3, 3, 2]


def test_ndcg_by_third_and_gains_by_hand() -> None:
    thirds = overlap_thirds(_data())
    per_query = {
        "base": {"q1": 1.0, "q2": 0.0, "q3": 0.5, "q4": 1.0, "q5": 0.5, "q6": 0.0, "q7": 0.0},
        "xprt": {"q1": 1.0, "q2": 0.3, "q3": 0.6, "q4": 0.5, "q5": 1.0, "q6": 0.0, "q7": 0.2},
    }
    rows = ndcg_by_third(thirds, per_query, reference="base", task="toy")
    table = {(r.model, r.third): r for r in rows}
    assert table["base", "low"].ndcg_at_10 == pytest.approx(0.5 / 3)
    assert table["xprt", "low"].ndcg_at_10 == pytest.approx(0.9 / 3)
    assert table["xprt", "low"].gain == pytest.approx(0.4 / 3)
    assert table["xprt", "middle"].gain == pytest.approx((0.7 / 2) - (1.0 / 2))
    assert table["xprt", "high"].gain == pytest.approx(1.0 - 0.75)
    assert table["base", "high"].gain == 0.0 and table["base", "high"].n_queries == 2
    with pytest.raises(KeyError, match="no per-query score"):
        ndcg_by_third(thirds, {"m": {"q1": 1.0}})


def test_ndcg_at_k_by_hand() -> None:
    assert ndcg_at_k(["x", "a", "y"], {"a": 1}) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["b", "x", "a"], {"a": 1, "b": 2}) == pytest.approx(2.5 / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a": 1}) == 0.0  # outside the top 10
    assert ndcg_at_k(["a"], {"a": 0}) == 0.0
