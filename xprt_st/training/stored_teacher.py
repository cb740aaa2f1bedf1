"""The frozen start's vectors read from the mined folder, where mining already computed them.

Retention and the hybrid teacher need the frozen start's vector of every text of every step. Where the start is the
mining model (the same weights, prompt, encode backend and precision as
:func:`xprt_st.mining.layout.embeddings.encoder_identity` records), mining stored exactly those vectors in
``DIR/embeddings.npy``: :class:`StoredVectorTeacher` answers the teacher's forward from them and runs the frozen
model only for the rows it does not hold (texts that are no mined passage, passages of one-passage documents that
mining never encoded, a retention text from another folder). A row is found by its token ids (after the training
tokenizer's truncation), the very input the frozen model would read; a mined text is keyed by its ids at mining's
token limit, the input mining's model read. So a training limit other than mining's (the quickstart mines a corpus
at 256 tokens and trains at 128) still reads every row whose ids are the same at both limits, and a row that one
limit cuts and the other does not has other ids and is encoded.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn
from torch.nn import functional as F

from xprt_st.losses._length_buckets import rows_of
from xprt_st.mining.layout.embeddings import (
    EMBEDDINGS_FILE,
    encoder_identity,
    stored_max_seq_length,
    stored_vectors,
    texts_sha256,
)

logger = logging.getLogger(__name__)

TOKENIZE_STEP = 2048
"""Texts per tokenizer call when the training passages are keyed."""


def token_key(ids: Tensor | np.ndarray | list[int]) -> int:
    """A 64-bit key of one row's token ids (padding removed): two different rows share one with odds of 2^-64."""
    array = np.asarray(ids.cpu() if isinstance(ids, Tensor) else ids, dtype=np.int64)
    return int.from_bytes(hashlib.blake2b(array.tobytes(), digest_size=8).digest(), "little")


class StoredVectorTeacher(nn.Module):
    """The frozen start, whose forward reads the stored vector of each row it holds and encodes the others.

    Every row it returns is a unit vector (mining stores normalised vectors, and the rows it encodes are
    normalised alike): the frozen start's vector up to its length, which no consumer reads (the hybrid teacher,
    retention and the xPRT loss's retention term compare cosines only).

    Args:
        model: the frozen start (:func:`xprt_st.models.frozen_copy`); it runs for the rows not stored.
        rows: token key (:func:`token_key`) -> row of ``vectors``.
        vectors: the stored vectors (a read-only memory map of ``embeddings.npy``).
    """

    def __init__(self, model: SentenceTransformer, rows: dict[int, int], vectors: np.ndarray) -> None:
        super().__init__()
        self.model = model
        self.rows = rows
        self.vectors = vectors
        self.read = 0
        """Rows answered from the stored vectors so far."""
        self.encoded = 0
        """Rows the frozen model encoded so far."""

    def forward(self, features: dict[str, Any]) -> dict[str, Tensor]:
        """``{"sentence_embedding": (rows, dim)}`` of a tokenised batch, as the frozen start's forward gives it."""
        ids, mask = features["input_ids"], features["attention_mask"].bool()
        found = [self.rows.get(token_key(row[keep])) for row, keep in zip(ids, mask, strict=True)]
        missing = [i for i, row in enumerate(found) if row is None]
        self.read += len(found) - len(missing)
        self.encoded += len(missing)
        if len(missing) == len(found):
            return {"sentence_embedding": F.normalize(self.model(dict(features))["sentence_embedding"].float(), dim=-1)}
        stored = [row if row is not None else 0 for row in found]
        embeddings = torch.from_numpy(np.array(self.vectors[stored], dtype=np.float32)).to(ids.device)
        if missing:
            encoded = self.model(rows_of(features, missing))["sentence_embedding"].float()
            embeddings[missing] = F.normalize(encoded, dim=-1)
        return {"sentence_embedding": embeddings}


def stored_vector_teacher(
    teacher: SentenceTransformer, folder: str | Path, texts: Iterable[str]
) -> tuple[nn.Module, str]:
    """``teacher`` answering from ``folder``'s stored vectors for ``texts`` (the training columns' texts), and why.

    Returns ``(StoredVectorTeacher, note)`` where the folder's vectors were made by this teacher as it runs in
    training (its weights, the empty prompt, the encode backend and the precision applied to it; the token limit
    may differ, a row is read only where its token ids are those mining encoded), and ``(teacher, note)``
    otherwise: the note says which it is and why, for the training log.
    """
    import pyarrow.parquet as pq

    from xprt_st.mining.layout import PASSAGES_FILE

    folder = Path(folder)
    if not (folder / EMBEDDINGS_FILE).is_file() or not (folder / PASSAGES_FILE).exists():
        return teacher, f"the frozen start encodes every step's texts: {folder} stores no passage vectors"
    passages = pq.read_table(folder / PASSAGES_FILE, columns=["text"]).column("text").to_pylist()
    identity = encoder_identity(teacher, "")
    mined_limit = stored_max_seq_length(folder) or teacher.max_seq_length
    identity["max_seq_length"] = mined_limit  # the rows are matched by token ids: see the module docstring
    vectors = stored_vectors(folder, identity, texts_sha256(passages), len(passages))
    if vectors is None:
        return teacher, (
            f"the frozen start encodes every step's texts: {folder}'s stored vectors were made by another model, "
            "prompt, backend or precision than the start trains with"
        )
    wanted = set(texts)
    position = {text: row for row, text in enumerate(passages) if text in wanted and not np.isnan(vectors[row, 0])}
    keyed = list(position)
    rows: dict[int, int] = {}
    tokenizer = teacher.tokenizer
    for start in range(0, len(keyed), TOKENIZE_STEP):
        chunk = keyed[start : start + TOKENIZE_STEP]
        encoded = tokenizer(chunk, truncation=True, max_length=mined_limit)["input_ids"]
        for text, ids in zip(chunk, encoded, strict=True):
            rows[token_key(ids)] = position[text]
    note = (
        f"the frozen start reads {len(rows)} of {len(wanted)} training texts' vectors from {folder / EMBEDDINGS_FILE}"
        " (mining's, same model and precision) and encodes the rest"
    )
    return StoredVectorTeacher(teacher, rows, vectors), note
