"""The vectors of a mined folder's held-out passages: encoded once per model for every label-free task.

``mined:DIR`` (:mod:`xprt_st.evaluation.label_free`) and ``titles:DIR`` (:mod:`xprt_st.evaluation.titles`)
rank the same candidates, every held-out passage ordered by (document, passage), and a quickstart scores
both on the start and on the trained model. :func:`heldout_passage_vectors` gives a model's vectors of
those passages, looked up in this order:

1. **this process's recent encodings** (the last :data:`RECENT` of them): the start's, made for the
   label-free score before training, serve the titles line; the trained model's, made for its final
   label-free score, serve it too;
2. **mining's stored vectors** (:mod:`xprt_st.mining.layout.embeddings`) when the model is the mining
   model: the same weights, maximum length, empty prompt, and the folder's passage texts unchanged; the
   held-out passages mining did not encode (documents of one passage) are encoded;
3. otherwise the model encodes them.

Every reuse compares the encoder's identity (a hash of its weights, its maximum length, the prompt) and a
hash of the texts; anything else encodes. Cosine scores do not depend on a vector's length, so mining's
L2-normalised vectors and a plain encoding score alike (to float rounding).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xprt_st.mining.layout import PASSAGES_FILE
from xprt_st.mining.layout.embeddings import EMBEDDINGS_RECORD, encoder_identity, stored_vectors, texts_sha256
from xprt_st.stage_timing import mark_reused

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

RECENT = 4
"""Encodings kept in memory (a few MB each: held-out passages x dimension, float32)."""
_recent: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()


def heldout_passage_vectors(
    model: SentenceTransformer, folder: str | Path, texts: Sequence[str], ids: Sequence[str], batch_size: int = 32
) -> np.ndarray:
    """``(len(texts), d)`` float32 vectors of the held-out passages ``texts`` (ids ``"<label>-<passage>"``).

    The model is read at its current ``max_seq_length``. The result is shared: do not write into it.
    """
    identity = encoder_identity(model, "")
    key = (json.dumps(identity, sort_keys=True), texts_sha256(texts))
    if key in _recent:
        _recent.move_to_end(key)
        mark_reused()
        logger.info("held-out passage vectors: %d reused from an earlier encoding by the same model", len(texts))
        return _recent[key]
    vectors = _mining_vectors(Path(folder), identity, texts, ids)
    if vectors is None:
        vectors = _encode(model, list(texts), batch_size)
    else:
        todo = np.flatnonzero(np.isnan(vectors).any(axis=1))
        if len(todo):
            vectors[todo] = _encode(model, [texts[int(i)] for i in todo], batch_size)
        mark_reused()
        logger.info("held-out passage vectors: %d reused from mining, %d encoded", len(texts) - len(todo), len(todo))
    _recent[key] = vectors
    while len(_recent) > RECENT:
        _recent.popitem(last=False)
    return vectors


def forget() -> None:
    """Drop this process's recent encodings (tests that count encoder calls start from none)."""
    _recent.clear()


def _encode(model: SentenceTransformer, texts: list[str], batch_size: int) -> np.ndarray:
    return np.asarray(
        model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False), dtype=np.float32
    )


def _mining_vectors(
    folder: Path, identity: dict[str, Any], texts: Sequence[str], ids: Sequence[str]
) -> np.ndarray | None:
    """Mining's stored vectors of these passages (NaN rows where mining encoded none), or None when they do not fit."""
    import pyarrow.parquet as pq

    path = folder / PASSAGES_FILE
    if not path.exists() or not texts:
        return None
    try:  # another model's vectors (every training step's model) are told apart before any passage is read
        record = json.loads((folder / EMBEDDINGS_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if any(record.get(key) != value for key, value in identity.items()):
        return None
    try:
        table = pq.read_table(path, columns=["label", "passage_index", "text"]).to_pydict()
    except (OSError, ValueError, KeyError):
        return None
    stored = stored_vectors(folder, identity, texts_sha256(table["text"]), len(table["text"]))
    if stored is None or not stored.shape[1]:
        return None
    row_of = {
        f"{label}-{index}": row
        for row, (label, index) in enumerate(zip(table["label"], table["passage_index"], strict=True))
    }
    rows = [row_of.get(passage_id) for passage_id in ids]
    if any(row is None or table["text"][row] != text for row, text in zip(rows, texts, strict=True)):
        return None  # the held-out part is not these passages any more (a folder changed by hand)
    return np.array(stored[np.asarray(rows, dtype=np.int64)], dtype=np.float32)
