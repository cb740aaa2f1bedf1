"""Mining keeps its passage vectors; the hard-negative pass reuses them and encodes no passage mining encoded."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq

from tests.mining.test_mining_merge import _corpus
from xprt_st.mining import mine
from xprt_st.mining.hard_negatives import add_hard_negatives
from xprt_st.mining.merge import merge

SETTINGS = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.25}


def _negatives(folder: Path) -> dict[str, list[str]]:
    groups = datasets.load_from_disk(str(folder))
    return {c: groups[c] for c in groups.column_names if c.startswith("negative_")}


def test_hard_negatives_reuse_mining_vectors_and_match_a_fresh_encoding(tmp_path: Path, tiny_model, counted) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 16)
    out = tmp_path / "mined"
    # fp32: the stored vectors are compared below with the model's own (fp32) encode
    mine(corpus, out, model=tiny_model, progress=False, precision="fp32", **SETTINGS)
    record = json.loads((out / "embeddings.json").read_text())
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    stored = np.load(out / "embeddings.npy")
    assert record["rows"] == len(passages) == stored.shape[0]
    # a row is NaN exactly where its document has one passage (mining does not encode those)
    sizes: dict[int, int] = {}
    for row in passages:
        sizes[row["label"]] = sizes.get(row["label"], 0) + 1
    single = np.array([sizes[row["label"]] == 1 for row in passages])
    assert single.any() or np.isfinite(stored).all()
    assert (np.isnan(stored[:, 0]) == single).all()
    # the stored vectors are those the model gives these texts
    encoded = ~single
    fresh = tiny_model.encode([r["text"] for r in passages], normalize_embeddings=True, convert_to_numpy=True)
    assert np.abs(stored[encoded] - fresh[encoded]).max() < 1e-5

    already = len(counted)
    summary = add_hard_negatives(out, 2, model=tiny_model, batch_size=16)
    seen = [text for _, text in counted[already:]]
    mined_texts = {r["text"] for r, e in zip(passages, encoded, strict=True) if e}
    training_single = {r["text"] for r, s in zip(passages, single, strict=True) if s and not r["held_out"]}
    assert not set(seen) & mined_texts, "the hard-negative pass encoded a passage mining had encoded"
    assert set(seen) == training_single
    assert summary["reused_vectors"] == int((encoded & ~np.array([r["held_out"] for r in passages])).sum()) > 0
    reused = _negatives(out)

    already = len(counted)
    add_hard_negatives(out, 2, model=tiny_model, batch_size=16, reuse_embeddings=False)
    assert len(counted) - already == sum(not r["held_out"] for r in passages)  # every training passage again
    assert _negatives(out) == reused  # the same hard negatives as a fresh encoding

    # a re-merge changes nothing about passages: the same vectors, nothing encoded
    already = len(counted)
    merge(out)
    assert np.array_equal(np.load(out / "embeddings.npy"), stored, equal_nan=True)
    assert len(counted) == already


def test_stored_vectors_are_not_reused_for_another_model(tmp_path: Path, tiny_model, minilm) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 12)
    out = tmp_path / "mined"
    mine(corpus, out, model=tiny_model, progress=False, **SETTINGS)
    summary = add_hard_negatives(out, 1, model=minilm, batch_size=16)
    assert summary["reused_vectors"] == 0


def test_the_encoder_identity_hashes_bfloat16_weights(tiny_model) -> None:
    # a bf16 mining model (the GPU check mines with one): numpy has no bfloat16, the hash reads the raw bytes
    import copy

    import torch

    from xprt_st.mining.layout.embeddings import encoder_identity

    full = encoder_identity(tiny_model, "")
    half = encoder_identity(copy.deepcopy(tiny_model).to(torch.bfloat16), "")
    assert half["weights_sha256"] != full["weights_sha256"]
    assert encoder_identity(tiny_model, "")["weights_sha256"] == full["weights_sha256"]


def test_vectors_of_one_precision_never_stand_for_another(tmp_path: Path, tiny_model, counted) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 12)
    out = tmp_path / "mined"
    stats = mine(corpus, out, model=tiny_model, progress=False, precision="bf16", **SETTINGS)
    assert stats["embeddings"]["precision"] == "bf16"
    assert json.loads((out / "embeddings.json").read_text())["precision"] == "bf16"
    # the default follows the stored vectors' precision: mining's vectors are reused
    assert add_hard_negatives(out, 1, model=tiny_model, batch_size=16)["reused_vectors"] > 0
    already = len(counted)
    summary = add_hard_negatives(out, 1, model=tiny_model, batch_size=16, precision="fp32")
    assert summary["reused_vectors"] == 0  # fp32 asked: every training passage encoded again, in fp32
    assert len(counted) > already
