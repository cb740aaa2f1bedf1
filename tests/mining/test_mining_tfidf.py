"""One TF-IDF for the whole corpus: summed hashed document frequencies, independent of how the corpus is split."""

from __future__ import annotations

import json
import math

import datasets
import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.mining import GroupBuilder, MiningConfig, MiningConfigError
from xprt_st.mining.layout import CONFIG_FILE, DF_FILE
from xprt_st.mining.scoring import tfidf_cosine
from xprt_st.mining.tfidf import TfidfScorer

PASSAGES = [
    "The river floods the valley every spring.",
    "Sediment from the river builds a delta.",
    "A violin concerto opens the season.",
    "The orchestra tunes to the violin's A.",
    "Glaciers carve valleys; rivers fill them.",
    "!!!",
]


def test_partial_fits_in_any_split_and_order_equal_one_fit_exactly():
    whole = TfidfScorer().fit(PASSAGES)
    for parts in ([PASSAGES[:2], PASSAGES[2:]], [PASSAGES[5:], PASSAGES[1:5], PASSAGES[:1]], [[p] for p in PASSAGES]):
        summed = TfidfScorer()
        for part in parts:
            summed.update(TfidfScorer().partial_fit(part))
        assert summed.passages == whole.passages == len(PASSAGES)
        assert np.array_equal(summed.document_frequencies, whole.document_frequencies)
        # Rows depend on their passage alone: transforming in other batches gives the same bits.
        rows = [summed.transform([p]).toarray() for p in PASSAGES]
        assert np.array_equal(np.vstack(rows), whole.transform(PASSAGES).toarray())


def test_hashed_tfidf_matches_scikit_learns_vocabulary_tfidf():
    expected = TfidfVectorizer().fit(PASSAGES).transform(PASSAGES)
    got = TfidfScorer().fit(PASSAGES).transform(PASSAGES)
    assert np.allclose(tfidf_cosine(got), tfidf_cosine(expected), atol=1e-12)
    scorer = TfidfScorer().fit(PASSAGES)
    assert scorer.idf["river"] == pytest.approx(math.log(7 / 3) + 1)  # in 2 of 6 passages ("rivers" is another word)
    with pytest.raises(KeyError, match="one word"):
        scorer.idf["two words"]


def test_counts_survive_save_and_load(tmp_path):
    scorer = TfidfScorer().fit(PASSAGES)
    scorer.save(tmp_path / "df.npz")
    loaded = TfidfScorer.load(tmp_path / "df.npz")
    assert loaded.passages == scorer.passages
    assert np.array_equal(loaded.document_frequencies, scorer.document_frequencies)
    assert list(tmp_path.iterdir()) == [tmp_path / "df.npz"]  # no temporary file left
    with pytest.raises(ValueError, match="hash columns"):
        TfidfScorer(2**10).update(scorer)


def _corpus(path, documents: int = 9):
    topics = ["river", "violin", "glacier"]
    rows = []
    for i in range(documents):
        topic = topics[i % 3]
        paragraphs = [
            f"Part {j} about the {topic} of document {i}: {topics[(i + j) % 3]} notes and figure {i * 7 + j}."
            for j in range(3 + i % 3)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs)}))
    path.write_text("\n".join(rows) + "\n")
    return path


def _rows(folder):
    dataset = datasets.load_from_disk(str(folder))
    return sorted(tuple(row[c] for c in [*GROUP_COLUMNS, LABEL]) for row in dataset)


def test_shard_jobs_score_with_the_corpus_idf_and_give_the_single_run_groups(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl")
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 8, "rank_by": "tfidf", "threshold_quantile": 0.3}
    single = tmp_path / "single"
    GroupBuilder([corpus], single, MiningConfig(**settings), model=tiny_model, progress=False).run()

    sharded = tmp_path / "sharded"
    config = MiningConfig(num_shards=3, **settings)
    # Shard 2's job runs first: it splits shards 0 and 1 to count the corpus's document frequencies.
    GroupBuilder([corpus], sharded, config, model=tiny_model, progress=False).run(shard_index=2)
    for shard in range(3):
        assert (sharded / "shards" / f"shard-{shard:05d}-of-00003" / DF_FILE).is_file()
    for shard in (0, 1):
        GroupBuilder([corpus], sharded, config, model=tiny_model, progress=False).run(shard_index=shard)
    assert _rows(sharded) == _rows(single)


def test_a_run_scored_with_another_tfidf_is_not_resumed(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl", documents=3)
    out = tmp_path / "out"
    config = MiningConfig(max_tokens=32, min_tokens=8, threshold_quantile=0.3)
    GroupBuilder([corpus], out, config, model=tiny_model, progress=False).run()
    stored = json.loads((out / CONFIG_FILE).read_text())
    stored.pop("tfidf")  # as written before the corpus-wide TF-IDF (IDF per shard)
    (out / CONFIG_FILE).write_text(json.dumps(stored))
    with pytest.raises(MiningConfigError, match="tfidf: stored None, now 'corpus-hashed-1048576'"):
        GroupBuilder([corpus], out, config, model=tiny_model, progress=False).run()
