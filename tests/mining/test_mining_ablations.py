"""The selection ablations: random spans on the mined groups' documents, one group per mined anchor."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np

from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.mining import GroupBuilder, MiningConfig, load_passages, merge
from xprt_st.mining.ablations import span_group_count

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery"]


def _corpus(path: Path, documents: int = 8) -> Path:
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history, "
            f"with detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
            for j in range(3 + i % 4)
        ]
        paragraphs.append("Home | About | Contact | Privacy policy | Copyright 2024")
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    return MiningConfig(**{**settings, **overrides})


def test_span_group_count_is_the_documents_anchor_count_or_none_without_scores() -> None:
    assert span_group_count(np.array([0.9, 0.5, 0.8, np.nan]), 0.8) == 2
    assert span_group_count(np.array([0.1, 0.2]), 0.8) == 0
    assert span_group_count(np.array([np.nan, np.nan, np.nan]), None) is None  # nothing encoded


def test_random_spans_use_the_mined_groups_documents_and_group_count(tmp_path, tiny_model) -> None:
    # Issue #19.5: the random-span baseline "differs only in where positives come from": the same documents,
    # as many groups per document as mined anchors, in the same row order (the same batches under one seed).
    out = tmp_path / "out"
    mined = GroupBuilder([_corpus(tmp_path / "corpus.jsonl")], out, _config(), model=tiny_model, progress=False).run()
    mined_labels = datasets.load_from_disk(str(out))[LABEL]
    table = load_passages(out).to_pandas()
    assert mined["groups"] < len(table)  # fewer anchors than passages, so the old one-per-passage rule differs

    spans = merge(out, _config(pairs="random-span", seed=1))
    dataset = datasets.load_from_disk(str(out))
    assert spans["groups"] == mined["groups"] and dataset[LABEL] == mined_labels
    words_of = {label: " ".join(" ".join(g).split()) for label, g in table.groupby("label")["text"]}
    for row in dataset:
        assert all(row[c] and row[c] in words_of[row[LABEL]] for c in GROUP_COLUMNS)
