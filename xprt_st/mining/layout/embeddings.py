"""The passage embeddings mining computed, kept so that no later stage encodes the same text again.

Each scored chunk stores its rows' vectors beside its passages (``chunk-CCCCC/embeddings.npy``, one row
per passage row, NaN where the passage was not encoded: documents of one passage) and the identity of
the encoder that made them (``chunk-CCCCC/embeddings.json``: :func:`encoder_identity`). The merge
concatenates them, chunk by chunk into a memory map, in the order of ``passages.parquet``
(``DIR/embeddings.npy``) and records the identity with the count and hash of the passage texts
(``DIR/embeddings.json``). A re-merge reads the same chunks, so it keeps the same vectors without
encoding.

A stage that needs passage vectors (the hard-negative pass) calls :func:`stored_vectors`: it gets the
memory map only when the model's weights, its maximum length, the prompt, the encode backend and the texts
are those the vectors were made of; otherwise None, and it encodes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

EMBEDDINGS_FILE = "embeddings.npy"
EMBEDDINGS_RECORD = "embeddings.json"
STORED_DTYPE = np.float32
"""float32, not float16. On the tests' topic corpus (40 documents, MiniLM, 70 groups x 3 hard negatives)
float16 storage gave the same 210 hard negatives as a fresh encoding, but it moves cosines by up to ~1e-4,
above the 1e-6 to which a reused score must equal a fresh one; float32 differs from a fresh encoding only
by batch padding (< 1e-5)."""


def encoder_identity(model: Any, prompt: str) -> dict[str, Any]:
    """What decides a passage's vector besides its text: a hash of the weights, the maximum length, the prompt
    the encode backend that ran the model (:mod:`xprt_st.encode_backend`: its vectors are not torch's bits) and
    the precision of its matrix products (:mod:`xprt_st.precision`: a bf16 vector never stands for an fp32 one).

    Hashing the weights (not the name) lets a loaded model, a path and a name be compared alike; it
    takes well under a second for a MiniLM-sized model.
    """
    import torch

    from xprt_st.encode_backend import backend_of
    from xprt_st.precision import precision_of

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        # the raw bytes of any dtype: numpy has no bfloat16, which a bf16 mining model's weights are
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return {
        "weights_sha256": digest.hexdigest(),
        "max_seq_length": model.max_seq_length,
        "prompt": prompt,
        "encode_backend": backend_of(model),
        "precision": precision_of(model),
    }


def stored_precision(stats: dict[str, Any]) -> str:
    """The precision of a mined folder's stored vectors (its ``stats.json``), or ``auto`` where it stored none."""
    return (stats.get("embeddings") or {}).get("precision", "auto")


def texts_sha256(texts: Iterable[str]) -> str:
    """A hash of passage texts in order (each ended by a NUL), to check vectors belong to these texts."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def write_chunk_embeddings(directory: Path, vectors: np.ndarray, identity: dict[str, Any]) -> None:
    """Store a chunk's vectors and their encoder's identity in ``directory`` (a chunk's temporary folder)."""
    np.save(directory / EMBEDDINGS_FILE, vectors.astype(STORED_DTYPE, copy=False))
    (directory / EMBEDDINGS_RECORD).write_text(json.dumps(identity), encoding="utf-8")


def publish_embeddings(chunk_dirs: list[Path], texts: Iterable[str], output_dir: Path) -> dict[str, Any] | None:
    """Concatenate the chunks' vectors into ``output_dir/embeddings.npy`` (streamed) and write its record.

    ``texts`` are the passage texts in the same order. Returns the record, or None (and removes an old
    file) when some chunk has no vectors or they come from different encoders (nothing to reuse).
    """
    stale = [output_dir / EMBEDDINGS_FILE, output_dir / EMBEDDINGS_RECORD]
    identities = [_read_json(d / EMBEDDINGS_RECORD) for d in chunk_dirs]
    if not chunk_dirs or any(i is None or i != identities[0] for i in identities):
        for path in stale:
            path.unlink(missing_ok=True)
        return None
    parts = [np.load(d / EMBEDDINGS_FILE, mmap_mode="r") for d in chunk_dirs]
    dims = {p.shape[1] for p in parts if p.shape[0] and p.shape[1]}
    if len(dims) > 1:
        for path in stale:
            path.unlink(missing_ok=True)
        return None
    dim = dims.pop() if dims else 0
    rows = sum(p.shape[0] for p in parts)
    tmp = output_dir / f"{EMBEDDINGS_FILE}.tmp-{os.getpid()}.npy"
    merged = np.lib.format.open_memmap(tmp, mode="w+", dtype=STORED_DTYPE, shape=(rows, dim))
    start = 0
    for part in parts:
        n = part.shape[0]
        merged[start : start + n] = part if part.shape[1] == dim else np.nan
        start += n
    merged.flush()
    del merged
    os.replace(tmp, output_dir / EMBEDDINGS_FILE)
    record = {**identities[0], "rows": rows, "dimension": dim, "dtype": np.dtype(STORED_DTYPE).name}
    record["texts_sha256"] = texts_sha256(texts)
    (output_dir / EMBEDDINGS_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return record


def stored_vectors(folder: Path, identity: dict[str, Any], texts_hash: str, rows: int) -> np.ndarray | None:
    """``folder``'s stored vectors (a read-only memory map), when made by ``identity`` of these texts; else None."""
    record = _read_json(folder / EMBEDDINGS_RECORD)
    if record is None or not (folder / EMBEDDINGS_FILE).is_file():
        return None
    if any(record.get(key) != value for key, value in identity.items()):
        return None
    if record.get("rows") != rows or record.get("texts_sha256") != texts_hash:
        return None
    return np.load(folder / EMBEDDINGS_FILE, mmap_mode="r")


def stored_max_seq_length(folder: Path) -> int | None:
    """The token limit ``folder``'s stored vectors were made at, or None where it records none."""
    record = _read_json(folder / EMBEDDINGS_RECORD)
    limit = None if record is None else record.get("max_seq_length")
    return limit if isinstance(limit, int) else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
