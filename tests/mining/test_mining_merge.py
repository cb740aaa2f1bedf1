"""The streaming merge: exact quantiles in bounded memory, Arrow shards per chunk, and held-out documents."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

import xprt_st.mining.quantiles as quantiles
from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.mining import GroupBuilder, MiningConfig, is_held_out, load_heldout, load_passages, merge

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano", "orchid", "railway"]


def _corpus(path: Path, documents: int, least: int = 3, spread: int = 4, titles: bool = False) -> Path:
    """``documents`` JSONL documents of ``least + i % spread`` paragraphs each (with a ``title`` when ``titles``)."""
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history. "
            f"Experts on the {topic} add detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
            for j in range(least + i % spread)
        ]
        row = {"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}
        rows.append(json.dumps(row | ({"title": f"{topic} report {i}"} if titles else {})))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    return MiningConfig(**(settings | overrides))


@pytest.mark.parametrize("seed", range(40))
def test_exact_quantiles_are_numpys_bit_for_bit_with_tiny_bins(monkeypatch, seed):
    """Few bins and a small gather limit force several selection passes; the value must still be numpy's."""
    monkeypatch.setattr(quantiles, "BINS", 8)
    monkeypatch.setattr(quantiles, "GATHER", 16)
    rng = np.random.default_rng(seed)
    values = rng.normal(size=int(rng.integers(1, 2000))) * [1.0, 1e-9, 50.0][seed % 3]
    if seed % 4 == 0:
        values = np.round(values, 1)  # many ties
    values[rng.random(len(values)) < 0.2] = np.nan  # single-passage documents have no centrality
    parts = np.array_split(values, int(rng.integers(1, 7)))
    wanted = [0.0, 0.1, 0.5, 0.9, 1.0, float(rng.random())]
    found = quantiles.exact_quantiles(lambda: iter(parts), wanted)
    finite = values[np.isfinite(values)]
    for q in wanted:
        assert found[q] == (float(np.quantile(finite, q)) if len(finite) else None)


def test_groups_are_arrow_shards_per_chunk_opened_memory_mapped(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl", 10)
    out = tmp_path / "out"
    stats = GroupBuilder([corpus], out, _config(chunk_size=3), model=tiny_model, progress=False).run()
    dataset = datasets.load_from_disk(str(out))
    files = sorted(p.name for p in out.glob("data-*.arrow"))
    assert len(files) == 4 and len(dataset) == stats["groups"] > 0  # 10 documents in chunks of 3
    assert [f["filename"] for f in dataset.cache_files] and all(
        Path(f["filename"]).parent == out for f in dataset.cache_files
    )
    blocks = [block for row in dataset.data.blocks for block in row]
    assert len(blocks) == 4 and all(type(block).__name__ == "MemoryMappedTable" for block in blocks)
    assert dataset.column_names == [*GROUP_COLUMNS, LABEL]
    passages = pq.read_table(out / "passages.parquet").to_pandas()
    assert passages["label"].tolist() == load_passages(out).column("label").to_pylist()  # parts in chunk order
    # A re-merge with fewer groups replaces every shard and leaves no stale one behind.
    fewer = merge(out, _config(threshold_quantile=0.9, chunk_size=3))
    assert len(datasets.load_from_disk(str(out))) == fewer["groups"] < stats["groups"]
    assert not list(out.glob(".merge.tmp*"))


def test_heldout_documents_are_never_in_the_training_rows(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl", 24)
    out = tmp_path / "out"
    stats = GroupBuilder([corpus], out, _config(chunk_size=5, holdout=0.3), model=tiny_model, progress=False).run()
    held_ids = {f"doc-{i}" for i in range(24) if is_held_out(f"doc-{i}", 0.3, 0)}
    assert 0 < len(held_ids) < 24
    stored = load_passages(out).to_pandas()
    held_labels = set(stored.loc[stored["doc_id"].isin(held_ids), "label"])
    train = datasets.load_from_disk(str(out))
    assert not set(train[LABEL]) & held_labels and len(train) == stats["groups"] > 0
    meta = [json.loads(line) for line in (out / "groups_meta.jsonl").open()]
    assert not {m["doc_id"] for m in meta} & held_ids

    groups, passages = load_heldout(out)
    assert groups.column_names == [*GROUP_COLUMNS, LABEL, "anchor_index", "related_index"]
    assert groups.features["anchor_index"].dtype == "int64" and passages.column_names == ["label", "passage", "text"]
    assert set(groups[LABEL]) <= held_labels and set(passages["label"]) == held_labels
    held_rows = stored[stored["label"].isin(held_labels)]
    assert sorted(zip(passages["label"], passages["passage"], passages["text"], strict=True)) == sorted(
        zip(held_rows["label"], held_rows["passage_index"], held_rows["text"], strict=True)
    )
    text_of = {(r.label, r.passage_index): r.text for r in held_rows.itertuples()}
    for row in groups:
        assert row["anchor"] == text_of[(row[LABEL], row["anchor_index"])]
        assert row["positive"] == text_of[(row[LABEL], row["related_index"][0])]
        assert row["anchor_index"] not in row["related_index"]
    assert stats["holdout"] == {
        "fraction": 0.3,
        "documents": len(held_ids),
        "groups": len(groups),
        "passages": len(passages),
        "contamination": {"documents": 0, "passages": 0, "examples": []},  # no text repeats across the parts
        "drawn_by": "ids (--id-field id)",
    }
    # coverage is of the documents that could be trained on: the held-out ones never have a training group
    trainable = stats["documents"] - len(held_ids)
    assert stats["document_coverage"] == pytest.approx(stats["documents_with_groups"] / trainable, abs=1e-4)
    assert stats["groups_per_input_document"] == pytest.approx(stats["groups"] / trainable, abs=1e-3)

    # The same documents are held out whatever the sharding; a merge without --holdout trains on all again.
    sharded = tmp_path / "sharded"
    GroupBuilder([corpus], sharded, _config(num_shards=3, holdout=0.3), model=tiny_model, progress=False).run()
    assert sorted(map(tuple, load_heldout(sharded)[0].to_pandas().astype(str).values)) == sorted(
        map(tuple, groups.to_pandas().astype(str).values)
    )
    everything = merge(out, _config(chunk_size=5))
    assert load_heldout(out) is None and "holdout" not in everything
    assert everything["groups"] > stats["groups"]


def test_holdout_is_a_stable_hash_of_seed_and_id():
    ids = [f"page-{i}" for i in range(4000)]
    chosen = [i for i in ids if is_held_out(i, 0.1, 7)]
    assert chosen == [i for i in ids if is_held_out(i, 0.1, 7)]
    assert 300 < len(chosen) < 500 and chosen != [i for i in ids if is_held_out(i, 0.1, 8)]
    assert set(chosen) <= {i for i in ids if is_held_out(i, 0.2, 7)}  # a larger fraction holds out more
    assert not any(is_held_out(i, 0.0, 7) for i in ids)
    assert is_held_out("page-0", 0.5, 0) is (
        int.from_bytes(__import__("hashlib").sha256(b"0:page-0").digest()[:8], "big") < 2**63
    )
    with pytest.raises(ValueError, match=r"holdout=1\.0 is not a fraction"):
        MiningConfig(holdout=1.0)
