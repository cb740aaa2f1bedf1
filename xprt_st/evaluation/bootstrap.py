"""Paired bootstrap intervals for the differences the reports state (model minus reference).

Every gain that ``xprt-st compare`` and ``xprt-st finetune-compare`` print comes with a 95% interval
from a paired bootstrap over the evaluation items, computed by :func:`scipy.stats.bootstrap` (a
maintained implementation) rather than a hand-written loop:

- **Retrieval** (:func:`retrieval_items`): the items are the queries; the statistic is the mean over
  queries of the per-query nDCG@10 difference. Both models are scored on the same resampled queries.
- **STS** (:func:`sts_items`): the items are the sentence pairs; the statistic is not a mean but the
  Spearman correlation of the whole set, so each resample of pairs recomputes Spearman(gold, model)
  and Spearman(gold, reference) on the same pairs and takes their difference.
- **Mean over tasks** (:func:`pooled_interval`): the gain averaged over tasks is resampled within each
  task jointly (a stratified bootstrap: each task's items are drawn from that task, independently
  across tasks, and the mean of the per-task differences is recomputed on every draw). Tasks of
  different sizes therefore keep their own size and weight 1/T, as in the point estimate.

The interval is the percentile interval (``method="percentile"``): the 2.5% and 97.5% quantiles
(linear interpolation) of the bootstrap distribution. It is exact on degenerate data (every item
with the same difference gives the interval [d, d]) and reproducible by hand from the same random
indices, which is what the tests check; ``method="BCa"`` is available for skewed statistics.

A difference is called a **gain** only when its interval lies above 0, a **loss** only when it lies
below 0; otherwise there is **no clear difference**. With several training seeds each seed has its
own interval, and :func:`seeds_verdict` says **seeds disagree** unless every seed gives the same
verdict, so a gain is never claimed when one seed's interval includes 0.

Example:
    >>> from xprt_st.evaluation.bootstrap import paired_interval, retrieval_items
    >>> items = retrieval_items({"q1": 0.6, "q2": 0.5, "q3": 0.9}, {"q1": 0.5, "q2": 0.4, "q3": 0.8})
    >>> interval = paired_interval(items, n_resamples=200)
    >>> round(interval.estimate, 6), round(interval.low, 6), round(interval.high, 6), interval.verdict
    (0.1, 0.1, 0.1, 'gain')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
"""Confidence level of every interval the reports print."""

N_RESAMPLES = 2000
"""Bootstrap resamples: enough for stable 2.5%/97.5% percentiles (about 50 draws beyond each end)."""

SEED = 0
"""Seed of the resampling, fixed so a report reads the same every time it is written."""

METHODS = ("percentile", "BCa", "basic")
"""Interval methods of :func:`scipy.stats.bootstrap`."""

GAIN, LOSS, UNCLEAR, DISAGREE = "gain", "loss", "no clear difference", "seeds disagree"
"""Verdicts: the interval lies above 0, below 0, or includes 0; seeds with different verdicts."""
ZERO_TOLERANCE = 1e-9
"""A bound within this of 0 counts as 0: ``[-0.0799, +0.0000]`` and ``[-0.0799, -0.0000]`` (one model scored in
two copies of a folder, the float sums taken in another order) give the same verdict, no clear difference."""


def interval_verdict(low: float, high: float) -> str:
    """:data:`GAIN` when the interval lies above 0, :data:`LOSS` below 0, else :data:`UNCLEAR`; a bound within
    :data:`ZERO_TOLERANCE` of 0 includes 0.

    Example:
        >>> interval_verdict(-0.0799, 1e-12) == interval_verdict(-0.0799, -1e-12) == UNCLEAR
        True
    """
    if low > ZERO_TOLERANCE:
        return GAIN
    if high < -ZERO_TOLERANCE:
        return LOSS
    return UNCLEAR


_BATCH = 250
"""Resamples evaluated at once: bounds memory to ``_BATCH * items`` values per array (STS sets hold 10k pairs)."""


@dataclass(frozen=True)
class Interval:
    """A difference (model minus reference), its bootstrap interval, and what was resampled."""

    estimate: float
    """The difference on the full data (the number the table states)."""
    low: float
    high: float
    confidence: float
    n_items: int
    """Items resampled (queries or pairs; summed over tasks for a pooled interval)."""
    n_resamples: int
    method: str

    @property
    def verdict(self) -> str:
        """:func:`interval_verdict` of the bounds."""
        return interval_verdict(self.low, self.high)

    def format(self, scale: float = 100.0, digits: int = 2) -> str:
        """``+1.23 [+0.40, +2.05]``: the estimate and interval, multiplied by ``scale``."""
        return f"{scale * self.estimate:+.{digits}f} {self.format_bounds(scale, digits)}"

    def format_bounds(self, scale: float = 100.0, digits: int = 2) -> str:
        """``[+0.40, +2.05]``: the interval alone, multiplied by ``scale``."""
        return f"[{scale * self.low:+.{digits}f}, {scale * self.high:+.{digits}f}]"


@dataclass(frozen=True)
class PairedItems:
    """One task's per-item scores for a model and its reference, aligned item by item.

    ``kind`` is ``"mean"`` (retrieval: the statistic is the mean of per-item differences) or
    ``"spearman"`` (STS: Spearman with ``gold`` of each, then the difference).
    """

    kind: str
    model: np.ndarray
    reference: np.ndarray
    gold: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in {"mean", "spearman"}:
            raise ValueError(f"kind must be 'mean' or 'spearman', got {self.kind!r}")
        sizes = {len(self.model), len(self.reference)} | ({len(self.gold)} if self.gold is not None else set())
        if len(sizes) != 1:
            raise ValueError(f"per-item arrays differ in length ({sorted(sizes)}); they must be aligned item by item")
        if self.kind == "spearman" and self.gold is None:
            raise ValueError("an STS (spearman) comparison needs the gold scores of its pairs")
        if len(self.model) < 2:
            raise ValueError(f"a bootstrap needs at least 2 items, got {len(self.model)}")

    def __len__(self) -> int:
        return len(self.model)

    def data(self) -> tuple[np.ndarray, ...]:
        """The aligned arrays the statistic reads, in the order of :meth:`statistic`'s arguments."""
        return (self.model, self.reference) if self.kind == "mean" else (self.gold, self.model, self.reference)

    def statistic(self, *arrays: np.ndarray, axis: int = -1) -> np.ndarray:
        """The difference, vectorized along ``axis`` (so scipy can evaluate many resamples at once)."""
        if self.kind == "mean":
            model, reference = arrays
            return np.mean(model - reference, axis=axis)
        gold, model, reference = (_centered_ranks(a, axis) for a in arrays)  # gold ranked once for both
        return _rank_correlation(gold, model, axis) - _rank_correlation(gold, reference, axis)

    def difference(self, index: np.ndarray | None = None) -> np.ndarray:
        """The difference on the items at ``index`` (any leading shape; the last axis picks items)."""
        arrays = self.data()
        return self.statistic(*(a if index is None else a[index] for a in arrays), axis=-1)


def spearman(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman correlation along ``axis``: Pearson of average ranks, as :func:`scipy.stats.spearmanr`.

    Vectorized so every bootstrap resample is scored in one call. A side whose values are all equal
    (possible in a resample of a tiny set) has no ranking: its correlation is taken as 0, not NaN,
    so one degenerate draw cannot turn the whole interval into NaN.
    """
    return _rank_correlation(_centered_ranks(x, axis), _centered_ranks(y, axis), axis)


def _centered_ranks(x: np.ndarray, axis: int) -> np.ndarray:
    ranks = stats.rankdata(x, axis=axis)
    return ranks - ranks.mean(axis=axis, keepdims=True)


def _rank_correlation(rx: np.ndarray, ry: np.ndarray, axis: int) -> np.ndarray:
    numerator = np.sum(rx * ry, axis=axis)
    denominator = np.sqrt(np.sum(rx * rx, axis=axis) * np.sum(ry * ry, axis=axis))
    return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), 0.0)


def retrieval_items(model: Mapping[str, float], reference: Mapping[str, float]) -> PairedItems:
    """Per-query nDCG@10 of two models on the same queries, aligned by query id.

    Raises:
        ValueError: the two models were scored on different queries (the pairing would be wrong).
    """
    if set(model) != set(reference):
        only = sorted(set(model) ^ set(reference))
        raise ValueError(
            f"the two models were scored on different queries ({len(only)} differ, e.g. {only[:3]}); "
            "evaluate both on the same task subsample"
        )
    ids = sorted(model)
    return PairedItems(
        "mean", np.array([model[q] for q in ids], dtype=float), np.array([reference[q] for q in ids], dtype=float)
    )


def sts_items(gold: Sequence[float], model: Sequence[float], reference: Sequence[float]) -> PairedItems:
    """Per-pair cosine similarities of two models on the same STS pairs, with the pairs' gold scores."""
    return PairedItems(
        "spearman",
        np.asarray(model, dtype=float),
        np.asarray(reference, dtype=float),
        np.asarray(gold, dtype=float),
    )


def _check(confidence: float, n_resamples: int, method: str) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def paired_interval(
    items: PairedItems,
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    method: str = "percentile",
    seed: int = SEED,
) -> Interval:
    """Bootstrap interval of one task's difference, resampling items with both models on the same draw.

    ``scipy.stats.bootstrap(..., paired=True)`` draws item indices ``rng.integers(0, n, (B, n))``
    with ``rng = numpy.random.default_rng(seed)`` and evaluates :meth:`PairedItems.statistic` on the
    aligned arrays at those indices.
    """
    _check(confidence, n_resamples, method)
    low, high = _scipy_interval(items.data(), items.statistic, True, confidence, n_resamples, method, seed)
    return Interval(float(items.difference()), low, high, confidence, len(items), n_resamples, method)


def pooled_interval(
    tasks: Sequence[PairedItems],
    *,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    method: str = "percentile",
    seed: int = SEED,
) -> Interval:
    """Bootstrap interval of the mean over tasks of each task's difference (stratified by task).

    Each task contributes an array of its item indices as a separate sample, so
    ``scipy.stats.bootstrap(..., paired=False)`` resamples every task's items within that task,
    independently of the other tasks; on each draw every task's difference is recomputed on its
    resampled items (both models on the same items) and the differences are averaged.
    With one task this is :func:`paired_interval` (the same draws for the same seed).
    """
    _check(confidence, n_resamples, method)
    if not tasks:
        raise ValueError("pooled_interval needs at least one task")
    indices = tuple(np.arange(len(items)) for items in tasks)

    def statistic(*drawn: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([items.difference(index) for items, index in zip(tasks, drawn, strict=True)], axis=0)

    low, high = _scipy_interval(indices, statistic, False, confidence, n_resamples, method, seed)
    estimate = float(np.mean([items.difference() for items in tasks]))
    n_items = sum(len(items) for items in tasks)
    return Interval(estimate, low, high, confidence, n_items, n_resamples, method)


def _scipy_interval(
    data: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    paired: bool,
    confidence: float,
    n_resamples: int,
    method: str,
    seed: int,
) -> tuple[float, float]:
    """``scipy.stats.bootstrap``'s interval with the settings every interval here shares (vectorized, seeded)."""
    result = stats.bootstrap(
        data,
        statistic,
        paired=paired,
        vectorized=True,
        n_resamples=n_resamples,
        batch=_BATCH,
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def seeds_verdict(intervals: Sequence[Interval | None]) -> str:
    """One verdict over training seeds: the seeds' common verdict, else :data:`DISAGREE`.

    Seeds without an interval (``None``) are ignored; with none at all the verdict is ``"n/a"``.
    """
    verdicts = {interval.verdict for interval in intervals if interval is not None}
    if not verdicts:
        return "n/a"
    return verdicts.pop() if len(verdicts) == 1 else DISAGREE


def interval_fields(interval: Interval | None, scale: float = 1.0) -> dict[str, Any]:
    """CSV columns of an interval (``ci_low``, ``ci_high``, ``verdict``); empty strings without one."""
    if interval is None:
        return {"ci_low": "", "ci_high": "", "verdict": ""}
    return {
        "ci_low": f"{scale * interval.low:.6f}",
        "ci_high": f"{scale * interval.high:.6f}",
        "verdict": interval.verdict,
    }


def paired_items(model: Mapping[str, Any], reference: Mapping[str, Any]) -> PairedItems:
    """Pair two stored per-item records of one task (see ``xprt_st.compare``'s scores files).

    A record is ``{"kind": "retrieval", "ndcg_at_10": {query id: value}}`` or
    ``{"kind": "sts", "cosine": [...], "gold": [...]}``.

    Raises:
        ValueError: the records are of different kinds or were computed on different items.
    """
    kinds = (model.get("kind"), reference.get("kind"))
    if kinds[0] != kinds[1] or kinds[0] not in {"retrieval", "sts"}:
        raise ValueError(f"cannot pair per-item records of kinds {kinds}; both must be 'retrieval' or both 'sts'")
    if kinds[0] == "retrieval":
        return retrieval_items(model["ndcg_at_10"], reference["ndcg_at_10"])
    # mteb's result cache rounds every stored score to 6 decimals, so a cached record and a fresh one
    # of the same pairs agree only to that precision; gold scores are compared and used at it.
    gold, other = np.round(np.asarray(model["gold"], dtype=float), 6), np.asarray(reference["gold"], dtype=float)
    if gold.shape != other.shape or not np.allclose(gold, other, rtol=0, atol=1e-6):
        raise ValueError("the two models were scored on different STS pairs (gold scores differ); re-evaluate both")
    return sts_items(gold, model["cosine"], reference["cosine"])
