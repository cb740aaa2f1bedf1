"""Which documents are held out of training: a pure function of the seed and the document id.

The choice depends on nothing else (not the order, shard, chunk or engine that meets the document),
so it streams, and every engine and every sharding holds out the same documents. A document id is
the ``--id-field`` value, or the reader's default id (its source and position) without one.
"""

from __future__ import annotations

import hashlib

_SCALE = float(2**64)


def holdout_score(document_id: str, seed: int) -> float:
    """A uniform number in [0, 1) from the first 8 bytes of SHA-256 of ``"{seed}:{document_id}"``."""
    digest = hashlib.sha256(f"{seed}:{document_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def is_held_out(document_id: str, fraction: float, seed: int) -> bool:
    """True for about ``fraction`` of all ids (0 holds none out); the same answer on every call and machine."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction={fraction} is not in [0, 1)")
    return fraction > 0.0 and holdout_score(str(document_id), seed) < fraction
