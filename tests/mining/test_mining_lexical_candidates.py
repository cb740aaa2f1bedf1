"""Lexical candidates: BM25's top passages of other documents for each anchor, checked against bm25s by hand."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import Stemmer
from typer.testing import CliRunner

from tests.mining.test_mining_merge import _corpus  # the same topic corpus as the merge tests
from xprt_st.cli import app
from xprt_st.evaluation.lexical import BM25_SETTINGS
from xprt_st.mining import mine
from xprt_st.mining.lexical_candidates import LexicalCandidatesError, add_lexical_candidates

SETTINGS = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.25}


def _bm25_scores(pool: list[str], query: str) -> np.ndarray:
    """BM25 of every pool passage for ``query`` (bm25s directly, the reference's settings)."""
    stemmer = Stemmer.Stemmer(BM25_SETTINGS["stemmer_language"])
    retriever = bm25s.BM25(k1=BM25_SETTINGS["k1"], b=BM25_SETTINGS["b"], method=BM25_SETTINGS["method"])
    retriever.index(bm25s.tokenize(pool, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
    return retriever.get_scores([token for token in tokens if token in retriever.vocab_dict])


def test_each_anchor_gets_bm25s_best_passages_of_other_training_documents(tmp_path: Path, tiny_model) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 16)
    out = tmp_path / "mined"
    stats = mine(corpus, out, model=tiny_model, progress=False, lexical_candidates=2, **SETTINGS)
    assert stats["settings"]["lexical_candidates"] == 2 and stats["lexical_candidates"]["groups"] == stats["groups"]
    groups = datasets.load_from_disk(str(out))
    assert [c for c in groups.column_names if c.startswith("lexical_")] == ["lexical_1", "lexical_2"]
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    assert any(row["held_out"] for row in passages), "the test means something only with held-out documents"
    pool = [row for row in passages if not row["held_out"]]
    texts = [row["text"] for row in pool]
    padded = 0
    for group in groups:
        scores = _bm25_scores(texts, group["anchor"])
        others = [i for i in range(len(pool)) if pool[i]["label"] != group["label"] and scores[i] > 0]
        best = sorted((scores[i] for i in others), reverse=True)[:2]  # ties may be taken in any order
        found = [texts.index(group[column]) for column in ("lexical_1", "lexical_2")]
        # never the anchor's own document, never a held-out one (pool holds the training passages only)
        assert all(pool[i]["label"] != group["label"] for i in found)
        assert [scores[i] for i in found[: len(best)]] == pytest.approx(best)
        padded += len(best) < 2
    assert stats["lexical_candidates"]["groups_padded"] == padded
    # the mined columns are untouched, and a second pass replaces the columns instead of adding more
    plain = tmp_path / "plain"
    mine(corpus, plain, model=tiny_model, progress=False, **SETTINGS)
    assert datasets.load_from_disk(str(plain))["positive"] == groups["positive"]
    add_lexical_candidates(out, 1)
    again = datasets.load_from_disk(str(out))
    assert [c for c in again.column_names if c.startswith("lexical_")] == ["lexical_1"]
    assert again["lexical_1"] == groups["lexical_1"]
    assert json.loads((out / "stats.json").read_text())["settings"]["lexical_candidates"] == 1


def test_a_one_document_corpus_is_one_line_and_keeps_its_groups(tmp_path: Path, tiny_model) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 1)
    out = tmp_path / "mined"
    mine(corpus, out, model=tiny_model, progress=False, **{**SETTINGS, "holdout": 0.0})
    with pytest.raises(LexicalCandidatesError, match="1 training document"):
        add_lexical_candidates(out, 2)
    assert len(datasets.load_from_disk(str(out))) > 0


def test_mine_and_a_re_merge_keep_the_lexical_candidates_and_train_names_the_pass(
    tmp_path: Path, tiny_model_path
) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 10)
    out = tmp_path / "mined"
    common = ["--model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    runner = CliRunner()
    plain = runner.invoke(
        app, ["mine", str(corpus), "-o", str(out), "--id-field", "id", "--hard-negatives", "2", *common]
    )
    assert plain.exit_code == 0, plain.output
    # a recipe that reads them refuses the folder without them, naming the pass that adds them
    refused = runner.invoke(
        app, ["train", "--recipe", "hybrid-teacher-lexical", "--mined", str(out), "-o", str(tmp_path / "run")]
    )
    assert refused.exit_code != 0
    assert f"xprt-stmine--merge{out}--lexical-candidates2" in "".join(refused.output.split())  # wrapped lines
    added = runner.invoke(app, ["mine", "--merge", str(out), "--lexical-candidates", "2", *common])
    assert added.exit_code == 0, added.output
    columns = datasets.load_from_disk(str(out)).column_names
    assert {"negative_1", "negative_2", "lexical_1", "lexical_2"} <= set(columns)
    kept = runner.invoke(app, ["mine", "--merge", str(out), "--threshold-quantile", "0.3", *common])
    assert kept.exit_code == 0, kept.output
    assert "keeping the 2 lexical candidates per group" in kept.output
    assert "lexical_2" in datasets.load_from_disk(str(out)).column_names
    bad = runner.invoke(app, ["mine", "--merge", str(out), "--lexical-candidates", "-1", *common])
    assert bad.exit_code == 2 and "--lexical-candidates must be >= 0" in bad.output


def test_a_corpus_of_stopwords_only_pads_every_group_and_says_so(tmp_path: Path, tiny_model) -> None:
    """bm25s cannot index a corpus without a term (a hostile corpus): no traceback, random stand-ins, a note."""
    words = "an and are as at be but by for if in into is it no not of on or such that the their then there these"
    rows = [
        # a one-digit number tells the documents apart and is no term (BM25 indexes words of 2+ characters)
        {
            "id": f"d{i}",
            "text": "\n\n".join(" ".join(words.split()[j:] + words.split()[:j]) + f" {i}" for j in range(4)),
        }
        for i in range(6)
    ]
    corpus = tmp_path / "stop.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    settings = {**SETTINGS, "holdout": 0.0, "threshold_quantile": 0.0}
    stats = mine(corpus, tmp_path / "mined", model=tiny_model, progress=False, lexical_candidates=2, **settings)
    summary = stats["lexical_candidates"]
    assert summary["groups"] > 0 and summary["groups_padded"] == summary["groups_none_found"] == summary["groups"]
    assert "random passages of other documents" in summary["note"]
    groups = datasets.load_from_disk(str(tmp_path / "mined"))
    texts = pq.read_table(tmp_path / "mined" / "passages.parquet").to_pylist()
    label_of = {row["text"]: row["label"] for row in texts}
    assert all(label_of[group["lexical_1"]] != group["label"] for group in groups)
