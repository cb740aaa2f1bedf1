"""Query-shaped anchors (pairs inverse-cloze): the sentence, its BM25 positive in the document, the same anchors."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from xprt_st.columns import ANCHOR, LABEL, POSITIVE
from xprt_st.mining import GroupBuilder, MiningConfig, load_passages, merge
from xprt_st.mining.hard_negatives import add_hard_negatives
from xprt_st.mining.inverse_cloze import SPAN_WORDS, cloze_query, inverse_cloze_group, split_sentences
from xprt_st.mining.tfidf import N_FEATURES, TfidfScorer

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery"]


def test_sentences_split_after_end_marks_and_a_query_needs_words_and_a_context() -> None:
    assert split_sentences("One two. Three four!  Five? six") == ["One two.", "Three four!", "Five?", "six"]
    assert split_sentences("version 3.11 is out") == ["version 3.11 is out"]  # no space after the dot
    rng = np.random.default_rng(0)
    drawn = {
        cloze_query("Tea has much caffeine. Hot. Coffee has more caffeine.", np.random.default_rng(s))
        for s in range(20)
    }
    assert drawn == {
        ("Tea has much caffeine.", "Hot. Coffee has more caffeine.", True),
        ("Coffee has more caffeine.", "Tea has much caffeine. Hot.", True),
    }  # "Hot." is never the query
    # no sentence beside another: a run of words, the rest its context (one group per anchor, always)
    words = " ".join(f"w{i}" for i in range(40))  # one long sentence of 40 words: a third is over SPAN_WORDS
    query, context, sentence = cloze_query(words, rng)
    assert not sentence and len(query.split()) == SPAN_WORDS and query in words
    assert sorted(query.split() + context.split()) == sorted(words.split())
    query, context, sentence = cloze_query("Too short. Also short.", rng)  # 4 words: a query of 4, nothing left
    assert (query, context, sentence) == ("Too short. Also short.", "Too short. Also short.", False)


def test_the_positive_is_the_passage_bm25_ranks_first_with_hand_computed_scores() -> None:
    # passage 0's only query-shaped sentence shares every word with passage 1, none with its own context
    passages = ["alpha beta. gamma delta epsilon zeta.", "gamma delta epsilon zeta eta", "unrelated words only"]
    counts = TfidfScorer().counts
    group = inverse_cloze_group(passages, 0, 4, np.random.default_rng(0), counts, np.ones(N_FEATURES), 1.0)
    assert group.query == "gamma delta epsilon zeta." and group.sentence
    # idf 1; lengths 2, 5, 3, mean 10/3; each of the 4 terms in passage 1 once: 2.2 / (1 + 1.2 * L(5))
    weight = 2.2 / (1 + 1.2 * (0.25 + 0.75 * 5 / (10 / 3)))
    assert group.related[0] == 1 and group.scores[0] == pytest.approx(4 * weight)
    assert sorted(group.related) == [0, 1, 2] and group.scores[1:] == [0.0, 0.0]
    assert group.texts[group.related.index(0)] == "alpha beta."  # the context: the sentence removed
    assert group.removed
    kept = inverse_cloze_group(passages, 0, 4, np.random.default_rng(0), counts, np.ones(N_FEATURES), 0.0)
    assert not kept.removed and kept.texts[kept.related.index(0)] == passages[0]
    assert kept.related == group.related  # ranked on the context either way: what is shown does not rank
    assert inverse_cloze_group(passages, 0, 1, np.random.default_rng(0), counts, np.ones(N_FEATURES)).related == [1]


def test_the_own_context_wins_when_its_words_are_the_sentences() -> None:
    passages = ["The comet tail glows. The comet tail is dust and gas.", "A bakery sells bread and cakes daily."]
    group = inverse_cloze_group(passages, 0, 4, np.random.default_rng(1), TfidfScorer().counts, np.ones(N_FEATURES))
    assert group.related == [0, 1]


def _corpus(path: Path, documents: int = 8) -> Path:
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions facts. It tells of {topic} history in depth. "
            f"Detail number {i * 10 + j} is about {TOPICS[(i + j) % len(TOPICS)]} and more."
            for j in range(3 + i % 4)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 48, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    return MiningConfig(**{**settings, **overrides})


def test_a_re_merge_gives_query_shaped_groups_on_the_mined_anchors(tmp_path, tiny_model) -> None:
    out = tmp_path / "out"
    mined = GroupBuilder([_corpus(tmp_path / "corpus.jsonl")], out, _config(), model=tiny_model, progress=False).run()
    mined_meta = [json.loads(line) for line in (out / "groups_meta.jsonl").read_text().splitlines()]
    mined_copy = tmp_path / "mined-groups"
    datasets.load_from_disk(str(out)).save_to_disk(str(mined_copy))

    stats = merge(out, _config(pairs="inverse-cloze", seed=1))
    dataset = datasets.load_from_disk(str(out))
    meta = [json.loads(line) for line in (out / "groups_meta.jsonl").read_text().splitlines()]
    cloze = stats["inverse_cloze"]
    # one group per mined anchor in the mined order: a comparison's retention text (the mined pair) fits row by row
    assert stats["groups"] == mined["groups"] and dataset[LABEL] == datasets.load_from_disk(str(mined_copy))[LABEL]
    assert [(m["label"], m["anchor_index"]) for m in meta] == [(m["label"], m["anchor_index"]) for m in mined_meta]
    assert 0 < cloze["positives_own_passage"] < 1 and 0 < cloze["sentence_removed"] < 1  # both kinds of each
    assert cloze["queries_of_words"] == pytest.approx(
        round(sum(not m["query_is_sentence"] for m in meta) / len(meta), 4)
    )
    passages = load_passages(out).to_pandas()
    text_of = {(r.label, r.passage_index): r.text for r in passages.itertuples()}
    for row, m in zip(dataset, meta, strict=True):
        own = text_of[(m["label"], m["anchor_index"])]
        assert m["kind"] == "inverse-cloze" and row[LABEL] == m["label"]
        assert row[ANCHOR] in " ".join(own.split()) and len(row[ANCHOR].split()) >= 4  # a piece of its passage
        first = m["related_indices"][0]
        if first == m["anchor_index"]:
            assert (row[ANCHOR] not in row[POSITIVE]) == m["sentence_removed"]
        else:
            assert row[POSITIVE] == text_of[(m["label"], first)]
    shares = [m["related_indices"][0] == m["anchor_index"] for m in meta]
    assert cloze["positives_own_passage"] == pytest.approx(round(sum(shares) / len(shares), 4))
    assert cloze["sentence_removed"] == pytest.approx(round(sum(m["sentence_removed"] for m in meta) / len(meta), 4))
    assert stats["anchors"] == len(meta) and stats["settings"]["pairs"] == "inverse-cloze"

    again = merge(out, _config(pairs="inverse-cloze", seed=1))  # seeded by (seed, label): the same groups
    assert again == stats and datasets.load_from_disk(str(out))[ANCHOR] == dataset[ANCHOR]

    # the hard negatives are the anchor passage's, found from the query's passage row
    hard = add_hard_negatives(out, 1, model=tiny_model)
    assert hard["groups"] == stats["groups"]
    labels = dict(zip(passages["text"], passages["label"], strict=False))
    for row in datasets.load_from_disk(str(out)):
        assert labels.get(row["negative_1"], -1) != row[LABEL]


def test_inverse_cloze_needs_the_mined_anchors(tmp_path, tiny_model) -> None:
    from xprt_st.mining.config import MiningConfigError

    out = tmp_path / "spans"
    GroupBuilder([_corpus(tmp_path / "c.jsonl")], out, _config(pairs="random-span"), progress=False).run()
    with pytest.raises(MiningConfigError, match="pairs='inverse-cloze' needs the mined anchors"):
        merge(out, _config(pairs="inverse-cloze"))


def test_the_cli_re_merges_a_scored_run_into_query_shaped_groups_with_hard_negatives(tmp_path, tiny_model_path) -> None:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    out = tmp_path / "mined"
    runner = CliRunner()
    mine = ["mine", str(_corpus(tmp_path / "c.jsonl")), "--output", str(out), "--model", str(tiny_model_path)]
    result = runner.invoke(app, [*mine, "--id-field", "id", "--max-tokens", "48", "--min-tokens", "8", "-q"])
    assert result.exit_code == 0, result.output
    mined = json.loads((out / "stats.json").read_text())
    merge_args = ["mine", "--merge", str(out), "--pairs", "inverse-cloze", "--hard-negatives", "1"]
    result = runner.invoke(app, [*merge_args, "--model", str(tiny_model_path), "-q"])
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    assert stats["settings"]["pairs"] == "inverse-cloze" and stats["settings"]["hard_negatives"] == 1
    assert stats["groups"] == mined["groups"] and "inverse_cloze" in stats
    assert "negative_1" in datasets.load_from_disk(str(out)).column_names
    # the merge said that the folder's pairs changed, and so the recipes it serves (issue 61: it was silent)
    said = " ".join(result.output.split())
    assert (
        "re-merging" in said
        and "it now serves recipes made for --pairs inverse-cloze, no longer those for mined" in said
    )
    # merging back to mined says so too; a merge with the same settings says nothing
    back = runner.invoke(app, ["mine", "--merge", str(out), "--pairs", "mined", "--model", str(tiny_model_path), "-q"])
    assert back.exit_code == 0 and "no longer those for inverse-cloze" in " ".join(back.output.split())
    again = runner.invoke(app, ["mine", "--merge", str(out), "--pairs", "mined", "--model", str(tiny_model_path), "-q"])
    assert again.exit_code == 0 and "re-merging" not in again.output


def test_query_runs_across_line_breaks_still_get_their_passages_hard_negatives(tmp_path, tiny_model) -> None:
    # lines of 3 words and no sentence end: every query is a run of 4+ words across a line break, so it is no
    # substring of its passage as stored (the Python docs' passages keep their line breaks)
    rows = []
    for i in range(8):
        lines = [f"{TOPICS[(i + j) % len(TOPICS)]} word{j} doc{i}" for j in range(12)]
        rows.append(json.dumps({"text": "\n".join(lines), "id": f"doc-{i}"}))
    corpus = tmp_path / "lines.jsonl"
    corpus.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    GroupBuilder([corpus], out, _config(max_tokens=24), model=tiny_model, progress=False).run()
    merge(out, _config(pairs="inverse-cloze", max_tokens=24))
    first = datasets.load_from_disk(str(out))[0][ANCHOR]
    assert not any(first in text for text in load_passages(out).to_pandas()["text"])  # the case this test is for
    assert add_hard_negatives(out, 1, model=tiny_model)["groups"] > 0
