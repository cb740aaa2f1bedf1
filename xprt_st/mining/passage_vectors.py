"""Vectors of a merged mining folder's passages: mining's stored ones where they fit, the model's for the rest.

The hard-negative pass needs every training passage's vector from the mining model; mining already
computed those of every document it scored (:mod:`xprt_st.mining.layout.embeddings`). Where the stored
vectors were made by the same weights, maximum length and (empty) prompt from the same texts, they are
copied; only the passages mining did not encode (documents of one passage) go through ``model.encode``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.mining.layout.embeddings import encoder_identity, stored_vectors, texts_sha256
from xprt_st.stage_timing import advance, mark_reused

logger = logging.getLogger(__name__)

ENCODE_STEP = 4096
"""Passages per ``model.encode`` call (each call sorts by length)."""


def fill_passage_vectors(
    folder: Path,
    texts: list[str],
    rows: np.ndarray,
    model: Any,
    out: np.ndarray,
    batch_size: int,
    reuse: bool = True,
) -> int:
    """Write the L2-normalised vector of passage ``rows[i]`` of ``texts`` into ``out[i]``; returns how many were reused.

    ``texts`` are every passage of ``folder`` in ``passages.parquet``'s order. With ``reuse`` false
    (or stored vectors that do not fit) every passage is encoded.
    """
    stored = stored_vectors(folder, encoder_identity(model, ""), texts_sha256(texts), len(texts)) if reuse else None
    todo = np.arange(len(rows))
    if stored is not None:
        for start in range(0, len(rows), ENCODE_STEP):
            out[start : start + ENCODE_STEP] = stored[rows[start : start + ENCODE_STEP]]
        todo = np.flatnonzero(np.isnan(out[: len(rows), 0])) if out.shape[1] else todo[:0]
    for start in range(0, len(todo), ENCODE_STEP):
        advance(start, len(todo))
        positions = todo[start : start + ENCODE_STEP]
        out[positions] = model.encode(
            [texts[int(r)] for r in rows[positions]],
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    reused = len(rows) - len(todo)
    if reused:
        mark_reused()
    logger.info("passage vectors: %d reused from mining, %d encoded", reused, len(todo))
    return reused
