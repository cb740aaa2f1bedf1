"""Exact quantiles of a column too large to hold: selection by histogram passes, bounded memory.

The threshold of a run is a quantile of every passage's centrality. It must be *exact* (the value
``numpy.quantile`` gives over the whole column), not a sketch's estimate: the passages just above
and below it decide which passages are anchors, and the groups must be the same whatever the
engine, sharding or version of the code. Exactness costs passes over one stored float column, not
memory: each pass reads the column chunk by chunk and counts the values in :data:`BINS` equal bins
of the range still holding the wanted order statistic; once that range holds at most
:data:`GATHER` values they are read and partitioned. Centralities are cosines spread over
[-1, 1], so two or three passes suffice for hundreds of millions of values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

BINS = 1 << 16
GATHER = 1 << 20
MAX_PASSES = 12

Column = Callable[[], Iterable[np.ndarray]]
"""A function that reads the column again, part by part (a fresh iterator per call)."""


def _finite(part: np.ndarray) -> np.ndarray:
    values = np.asarray(part, dtype=np.float64)
    return values[np.isfinite(values)]


def order_statistic(column: Column, k: int, low: float, high: float) -> float:
    """The ``k``-th smallest (0-based) finite value of ``column``, all of which lie in ``[low, high]``."""
    below = 0  # values smaller than ``low`` (already ranked out)
    closed = True  # whether ``high`` itself belongs to the range
    for _ in range(MAX_PASSES):
        if low == high:
            return low
        edges = np.linspace(low, high, BINS + 1)
        counts = np.zeros(BINS, dtype=np.int64)
        inside = 0
        for part in column():
            values = _finite(part)
            values = values[(values >= low) & ((values <= high) if closed else (values < high))]
            inside += len(values)
            if len(values):
                index = np.minimum(np.searchsorted(edges, values, side="right") - 1, BINS - 1)
                counts += np.bincount(index, minlength=BINS)
        if inside <= GATHER:
            break
        cumulative = np.cumsum(counts)
        b = int(np.searchsorted(cumulative, k - below, side="right"))
        below += int(cumulative[b - 1]) if b else 0
        new_low, new_high = float(edges[b]), float(edges[b + 1])
        closed = closed and b == BINS - 1
        if (new_low, new_high) == (low, high):
            break
        low, high = new_low, new_high
    gathered = [v[(v >= low) & ((v <= high) if closed else (v < high))] for v in map(_finite, column())]
    values = np.concatenate(gathered) if gathered else np.zeros(0)
    return float(np.partition(values, k - below)[k - below])


def _lerp(a: float, b: float, t: np.float64) -> float:
    """numpy's own linear interpolation (``numpy.lib._function_base_impl._lerp``), so values match bit for bit."""
    a64, b64 = np.float64(a), np.float64(b)
    diff = b64 - a64
    return float(b64 - diff * (1 - t)) if t >= 0.5 else float(a64 + diff * t)


def exact_quantiles(column: Column, quantiles: Iterable[float]) -> dict[float, float | None]:
    """``numpy.quantile`` (linear method) of the finite values of ``column`` at each quantile, bit for bit.

    None for every quantile when the column holds no finite value.
    """
    n, low, high = 0, np.inf, -np.inf
    for part in column():
        values = _finite(part)
        if len(values):
            n += len(values)
            low, high = min(low, float(values.min())), max(high, float(values.max()))
    result: dict[float, float | None] = {}
    cache: dict[int, float] = {}
    for q in quantiles:
        if n == 0:
            result[q] = None
            continue
        virtual = np.float64(n - 1) * np.float64(q)
        k0 = int(np.floor(virtual))
        if virtual >= n - 1:
            k0 = n - 1
        k1 = min(k0 + 1, n - 1)
        for k in (k0, k1):
            if k not in cache:
                cache[k] = order_statistic(column, k, low, high)
        result[q] = _lerp(cache[k0], cache[k1], virtual - np.float64(k0))
    return result
