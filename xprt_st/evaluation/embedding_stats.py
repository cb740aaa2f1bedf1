"""Embedding-space statistics of held-out passages: alignment and uniformity (Wang and Isola, 2020).

Label-free candidates beside the retrieval tasks, computed from the embeddings of the held-out passages alone:

- **alignment**: the mean squared distance ``||f(x) - f(y)||^2`` of the unit-normalised embeddings of
  neighbouring passages of one document (passage ``i`` and ``i + 1``), the pairs that share a topic without any
  model choosing them; lower is better aligned (0: identical);
- **uniformity**: ``log mean_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)`` over every pair of held-out passages, with
  ``t = 2``; lower (more negative) is spread more evenly over the sphere.

Example:
    >>> import numpy as np
    >>> round(alignment(np.array([[1.0, 0.0], [0.0, 1.0]]), [(0, 1)]), 4)
    2.0
    >>> round(uniformity(np.array([[1.0, 0.0], [-1.0, 0.0]])), 4)
    -8.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_CHUNK = 1024


def _unit(embeddings: np.ndarray) -> np.ndarray:
    x = np.asarray(embeddings, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def neighbour_pairs(ids: Sequence[str]) -> list[tuple[int, int]]:
    """Rows ``(i, i + 1)`` whose ids ``"<label>-<passage>"`` are consecutive passages of one document."""
    parsed = [tuple(int(part) for part in pid.rsplit("-", 1)) for pid in ids]
    return [
        (i, i + 1)
        for i in range(len(parsed) - 1)
        if parsed[i][0] == parsed[i + 1][0] and parsed[i + 1][1] == parsed[i][1] + 1
    ]


def alignment(embeddings: np.ndarray, pairs: Sequence[tuple[int, int]], alpha: float = 2.0) -> float:
    """Mean ``||u - v||^alpha`` over ``pairs`` of rows of the unit-normalised ``embeddings``."""
    if not pairs:
        raise ValueError("alignment needs at least one pair")
    x = _unit(embeddings)
    a, b = np.asarray(pairs, dtype=np.int64).T
    return float(np.mean(np.linalg.norm(x[a] - x[b], axis=1) ** alpha))


def uniformity(embeddings: np.ndarray, t: float = 2.0) -> float:
    """``log`` of the mean of ``exp(-t ||u - v||^2)`` over every unordered pair of rows (unit-normalised)."""
    x = _unit(embeddings)
    n = len(x)
    if n < 2:
        raise ValueError("uniformity needs at least 2 embeddings")
    total = 0.0
    for start in range(0, n, _CHUNK):
        block = x[start : start + _CHUNK]
        squared = np.maximum(2.0 - 2.0 * (block @ x.T), 0.0)  # ||u - v||^2 of unit vectors
        rows = np.arange(start, start + len(block))[:, None]
        upper = np.arange(n)[None, :] > rows
        total += float(np.exp(-t * squared)[upper].sum())
    return float(np.log(total / (n * (n - 1) / 2)))
