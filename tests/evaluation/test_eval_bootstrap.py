"""Paired bootstrap intervals checked against hand computations on the same random draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from xprt_st.evaluation.bootstrap import (
    DISAGREE,
    GAIN,
    LOSS,
    UNCLEAR,
    Interval,
    PairedItems,
    paired_interval,
    paired_items,
    pooled_interval,
    retrieval_items,
    seeds_verdict,
    spearman,
    sts_items,
)
from xprt_st.evaluation.tasks import make_retrieval_task

# At most one scipy batch, so scipy draws all indices in one call that the hand computation repeats.
B = 200


def _hand_percentile(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])  # linear interpolation, as scipy's quantile
    return float(low), float(high)


def test_retrieval_interval_equals_a_numpy_resampling_of_the_same_queries() -> None:
    model = {"q1": 0.9, "q2": 0.4, "q3": 0.7, "q4": 0.0, "q5": 1.0}
    reference = {"q1": 0.6, "q2": 0.5, "q3": 0.7, "q4": 0.2, "q5": 0.5}
    interval = paired_interval(retrieval_items(model, reference), n_resamples=B, seed=7)

    differences = np.array([0.3, -0.1, 0.0, -0.2, 0.5])  # sorted query ids q1..q5, model - reference
    index = np.random.default_rng(7).integers(0, 5, (B, 5))  # what scipy's paired bootstrap draws
    low, high = _hand_percentile(differences[index].mean(axis=1))
    assert interval.estimate == pytest.approx(0.1)
    assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high))
    assert interval.low < interval.estimate < interval.high
    assert interval.n_items == 5 and interval.method == "percentile" and interval.confidence == 0.95


def test_constant_difference_gives_the_exact_degenerate_interval() -> None:
    items = retrieval_items({"a": 0.5, "b": 0.7, "c": 0.2}, {"a": 0.3, "b": 0.5, "c": 0.0})
    interval = paired_interval(items, n_resamples=B)
    assert interval.low == pytest.approx(0.2) and interval.high == pytest.approx(0.2)
    assert interval.verdict == GAIN
    same = paired_interval(retrieval_items({"a": 0.5, "b": 0.1}, {"a": 0.5, "b": 0.1}), n_resamples=B)
    assert (same.low, same.high, same.verdict) == (0.0, 0.0, UNCLEAR)  # identical models: no gain claimed


def test_sts_interval_recomputes_spearman_of_both_models_on_each_resample() -> None:
    rng = np.random.default_rng(0)
    gold = np.round(rng.uniform(0, 5, 12), 1)
    model = gold + rng.normal(0, 1.0, 12)
    reference = gold + rng.normal(0, 2.0, 12)
    interval = paired_interval(sts_items(gold, model, reference), n_resamples=B, seed=3)

    full = stats.spearmanr(gold, model).statistic - stats.spearmanr(gold, reference).statistic
    index = np.random.default_rng(3).integers(0, 12, (B, 12))
    draws = [
        stats.spearmanr(gold[i], model[i]).statistic - stats.spearmanr(gold[i], reference[i]).statistic for i in index
    ]
    low, high = _hand_percentile(np.array(draws))
    assert interval.estimate == pytest.approx(full)
    assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high))


def test_vectorized_spearman_matches_scipy_with_ties_and_takes_zero_without_a_ranking() -> None:
    x = np.array([[1.0, 2.0, 2.0, 3.0, 5.0], [4.0, 1.0, 1.0, 1.0, 0.0]])
    y = np.array([[0.1, 0.3, 0.2, 0.9, 0.4], [0.5, 0.5, 0.1, 0.2, 0.3]])
    for row in range(2):
        assert spearman(x[row], y[row]) == pytest.approx(stats.spearmanr(x[row], y[row]).statistic)
    assert spearman(x, y) == pytest.approx([stats.spearmanr(a, b).statistic for a, b in zip(x, y, strict=True)])
    assert spearman(np.ones(4), np.arange(4.0)) == 0.0


def test_pooled_interval_resamples_each_task_within_itself() -> None:
    retrieval = PairedItems("mean", np.array([0.5, 0.9, 0.2, 0.4]), np.array([0.4, 0.6, 0.2, 0.5]))
    gold = np.array([0.0, 1.0, 2.5, 4.0, 5.0, 3.0])
    sts = sts_items(gold, gold + np.array([0.1, -0.3, 0.4, 0.0, 0.2, -1.5]), gold[::-1])
    pooled = pooled_interval([retrieval, sts], n_resamples=B, seed=11)

    rng = np.random.default_rng(11)  # scipy draws the tasks one after the other, each within its own items
    first, second = rng.integers(0, 4, (B, 4)), rng.integers(0, 6, (B, 6))
    draws = (retrieval.difference(first) + sts.difference(second)) / 2
    low, high = _hand_percentile(draws)
    assert pooled.estimate == pytest.approx((retrieval.difference() + sts.difference()) / 2)
    assert (pooled.low, pooled.high) == (pytest.approx(low), pytest.approx(high))
    assert pooled.n_items == 10
    # one task alone: the same draws as the task's own paired interval
    alone = pooled_interval([retrieval], n_resamples=B, seed=5)
    paired = paired_interval(retrieval, n_resamples=B, seed=5)
    assert (alone.low, alone.high) == (pytest.approx(paired.low), pytest.approx(paired.high))


def _interval(low: float, high: float) -> Interval:
    return Interval((low + high) / 2, low, high, 0.95, 10, B, "percentile")


def test_verdicts_never_call_a_gain_when_an_interval_includes_zero_or_seeds_disagree() -> None:
    assert _interval(0.01, 0.03).verdict == GAIN
    assert _interval(-0.03, -0.01).verdict == LOSS
    assert _interval(-0.01, 0.03).verdict == UNCLEAR
    assert seeds_verdict([_interval(0.01, 0.03), _interval(0.02, 0.05)]) == GAIN
    assert seeds_verdict([_interval(0.01, 0.03), _interval(-0.01, 0.05)]) == DISAGREE
    assert seeds_verdict([_interval(0.01, 0.03), _interval(-0.05, -0.01)]) == DISAGREE
    assert seeds_verdict([None, _interval(-0.05, -0.01)]) == LOSS
    assert seeds_verdict([None]) == "n/a"
    assert _interval(-0.0012, 0.0345).format() == "+1.67 [-0.12, +3.45]"


def test_misaligned_or_too_small_inputs_are_refused_before_resampling() -> None:
    with pytest.raises(ValueError, match="different queries"):
        retrieval_items({"q1": 0.1, "q2": 0.2}, {"q1": 0.1, "q3": 0.2})
    with pytest.raises(ValueError, match="at least 2 items"):
        retrieval_items({"q1": 0.1}, {"q1": 0.2})
    with pytest.raises(ValueError, match="differ in length"):
        sts_items([1.0, 2.0, 3.0], [0.1, 0.2], [0.3, 0.1, 0.2])
    with pytest.raises(ValueError, match="method"):
        paired_interval(retrieval_items({"a": 0.1, "b": 0.2}, {"a": 0.0, "b": 0.1}), method="studentized")


def test_stored_records_pair_across_mtebs_six_decimal_cache_rounding() -> None:
    fresh = {"kind": "sts", "gold": [0.8400000000000001, 0.2, 0.5], "cosine": [0.9, 0.1, 0.4]}
    cached = {"kind": "sts", "gold": [0.84, 0.2, 0.5], "cosine": [0.5, 0.3, 0.2]}
    items = paired_items(fresh, cached)
    assert items.difference() == pytest.approx(1.0 - 0.5)
    with pytest.raises(ValueError, match="different STS pairs"):
        paired_items(fresh, {**cached, "gold": [0.84, 0.2, 0.6]})
    with pytest.raises(ValueError, match="kinds"):
        paired_items(fresh, {"kind": "retrieval", "ndcg_at_10": {"q": 0.1}})
    queries = paired_items(
        {"kind": "retrieval", "ndcg_at_10": {"q1": 0.5, "q2": 0.25}},
        {"kind": "retrieval", "ndcg_at_10": {"q1": 0.25, "q2": 0.25}},
    )
    assert queries.difference() == pytest.approx(0.125)


def test_stored_per_item_scores_reproduce_mtebs_scores(tiny_model, tmp_path, stsb_writer, beir_folder) -> None:
    from xprt_st.evaluation.readers import read_beir_folder, read_sts_file
    from xprt_st.evaluation.run import evaluate_model
    from xprt_st.evaluation.tasks import make_sts_task

    sts = make_sts_task(read_sts_file(stsb_writer(tmp_path / "sts.csv")), "toy-sts")
    beir = make_retrieval_task(read_beir_folder(beir_folder), "toy-beir")
    pairs: dict = {}
    scores, per_query = evaluate_model(tiny_model, [sts, beir], label="tiny", cache_dir=None, per_pair=pairs)
    assert set(pairs) == {"toy-sts"} and set(per_query) == {"toy-beir"}
    stored = pairs["toy-sts"]
    assert len(stored["cosine"]) == len(stored["gold"]) == len(sts.sts)
    # Spearman of the kept pairs is mteb's main score; the mean of the kept queries is its nDCG@10
    assert float(spearman(np.array(stored["gold"]), np.array(stored["cosine"]))) == pytest.approx(scores[0].score)
    assert np.mean(list(per_query["toy-beir"].values())) == pytest.approx(scores[1].score, abs=1e-5)  # mteb rounds


def test_a_bound_within_1e_9_of_zero_reads_the_same_in_every_copy() -> None:
    """Round 5: one model in two copies of a folder gave [-0.0799, +0.0000] ("no measurable gain") and
    [-0.0799, -0.0000] ("a measurable loss"): the bound was -1e-17 in one copy, +1e-17 in the other."""
    from xprt_st.evaluation.bootstrap import LOSS, UNCLEAR, Interval

    copies = [Interval(-0.04, -0.0799, high, 0.95, 50, 1000, "percentile") for high in (1e-17, -1e-17, 0.0)]
    assert {copy.verdict for copy in copies} == {UNCLEAR}
    assert {copy.format_bounds(1.0, 4).replace("-0.0000", "+0.0000") for copy in copies} == {"[-0.0799, +0.0000]"}
    assert Interval(-0.04, -0.0799, -1e-6, 0.95, 50, 1000, "percentile").verdict == LOSS  # a real bound still counts
