"""``bm25`` and ``hybrid:MODEL`` in evaluation: their rankings, per-query scores, intervals and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import pytest
import Stemmer
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.evaluation.lexical import (
    BM25_SETTINGS,
    RRF_K,
    BM25Search,
    LexicalSpecError,
    bm25_revision,
    check_lexical_spec,
    hybrid_search,
)
from xprt_st.evaluation.readers import BEIRData
from xprt_st.evaluation.run import evaluate_models, run_mteb
from xprt_st.evaluation.tasks import make_retrieval_task

runner = CliRunner()

CORPUS = {
    "dog": {"title": "Dogs", "text": "Dogs need a long walk every morning before breakfast."},
    "sleep": {"title": "Cats", "text": "Cats sleep through most of the afternoon on the sofa."},
    "tea": {"title": "Tea", "text": "Green tea leaves are steeped in water below boiling point."},
    "rain": {"title": "Weather", "text": "Raindrops fall once droplets inside clouds grow heavy."},
    "bread": {"title": "Baking", "text": "Bread dough rises while yeast ferments the sugars slowly."},
}
QUERIES = {
    "q-walked": "walked",  # only its stem "walk" is in a document
    "q-steeping": "steeping leaves",
    "q-baking": "how does yeast make dough rise",
}
QRELS = [("q-walked", "dog", 1), ("q-steeping", "tea", 1), ("q-baking", "bread", 1)]


def _bm25_scores(corpus: dict[str, dict[str, str]], query: str) -> dict[str, float]:
    """BM25 of every document for ``query``, by bm25s directly with the settings the reference states."""
    stemmer = Stemmer.Stemmer(BM25_SETTINGS["stemmer_language"])
    ids = list(corpus)
    texts = [f"{corpus[i]['title']}\n{corpus[i]['text']}" for i in ids]
    retriever = bm25s.BM25(k1=BM25_SETTINGS["k1"], b=BM25_SETTINGS["b"], method=BM25_SETTINGS["method"])
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
    return dict(zip(ids, (float(s) for s in retriever.get_scores(tokens)), strict=True))


def _ranks(scores: dict[str, float]) -> dict[str, int]:
    """1-based ranks, ties ordered by descending id (trec_eval's and mteb's rule)."""
    ordered = sorted(scores, key=lambda doc: (scores[doc], doc), reverse=True)
    return {doc: rank for rank, doc in enumerate(ordered, start=1)}


def test_bm25_finds_each_document_by_its_stemmed_words(beir_writer, tmp_path: Path) -> None:
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    report = evaluate_models(["bm25"], [str(folder)])
    assert report.models == ["bm25"]
    # "walked" shares no surface word with any document: only the stemmer's "walk" finds it at rank 1 (without it
    # every score ties at 0, and the tie's order by descending id puts "dog" fourth)
    assert report.per_query["lexical"]["bm25"] == {"q-walked": 1.0, "q-steeping": 1.0, "q-baking": 1.0}
    assert report.score("bm25", "lexical") == 1.0
    assert report.scores[0].model_key == f"xprt-st/bm25@{bm25_revision()}"
    # without the stemmer "walked" matches no document, and BM25 returns none for it
    task = report.task_objects["lexical"]
    unstemmed = BM25Search({"stemmer_language": None})
    scores, per_query = run_mteb(unstemmed, [task], label="unstemmed")
    assert per_query["lexical"]["q-walked"] == 0.0 and per_query["lexical"]["q-steeping"] == 1.0
    assert scores[0].model_key != report.scores[0].model_key  # another setting, another cache key
    with pytest.raises(ValueError, match="unknown BM25 settings"):
        BM25Search({"k3": 8})


def test_hybrid_search_is_the_reciprocal_rank_fusion_of_bm25_and_cosine(minilm) -> None:
    queries = {**QUERIES, "q-nap": "where do kittens doze"}  # no word in common with any document: BM25 finds none
    task = make_retrieval_task(BEIRData(corpus=CORPUS, queries=queries, qrels={}), "lexical")
    task.load_data()
    split = task.dataset["default"]["test"]
    where = {"task_metadata": task.metadata, "hf_split": "test", "hf_subset": "default", "encode_kwargs": {}}
    search = hybrid_search(minilm, key_name="xprt-st/hybrid-test", dense_revision="r")
    search.index(split["corpus"], **where)
    fused = search.search(split["queries"], top_k=len(CORPUS), **where)
    ids = list(CORPUS)
    documents = minilm.encode([f"{CORPUS[i]['title']} {CORPUS[i]['text']}" for i in ids], normalize_embeddings=True)
    for query, text in queries.items():
        cosine = dict(
            zip(ids, (float(v) for v in documents @ minilm.encode(text, normalize_embeddings=True)), strict=True)
        )
        matching = {doc: score for doc, score in _bm25_scores(CORPUS, text).items() if score > 0}
        expected = {doc: 0.0 for doc in ids}
        for ranks in (_ranks(matching), _ranks(cosine)):  # a document BM25 does not return gets nothing from it
            for doc, rank in ranks.items():
                expected[doc] += 0.5 / (RRF_K + rank)
        assert fused[query] == pytest.approx(expected), query
    # where BM25 finds nothing, the dense ranking alone decides the fusion
    assert max(fused["q-nap"], key=fused["q-nap"].get) == "sleep"
    assert search.lexical.search(split["queries"], top_k=5, encode_kwargs={})["q-nap"] == {}


def test_hybrid_scores_feed_the_paired_intervals_like_a_dense_model(tiny_model, beir_writer, tmp_path: Path) -> None:
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    report = evaluate_models([tiny_model, "bm25", "hybrid:default"], [str(folder)], labels=["tiny", "bm25", "hy"])
    assert report.models == ["tiny", "bm25", "hy"]
    assert set(report.per_query["lexical"]) == {"tiny", "bm25", "hy"}
    rows = {row["model"]: row for row in report.differences()}
    assert set(rows) == {"bm25", "hy"} and rows["hy"]["reference"] == "tiny" and rows["hy"]["items"] == 3
    hybrid_key = next(row.model_key for row in report.scores if row.model == "hy")
    assert hybrid_key.startswith("xprt-st/hy@") and bm25_revision() not in hybrid_key


def test_evaluate_bm25_default_prints_both_and_their_interval(beir_writer, tmp_path: Path) -> None:
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["evaluate", "bm25", "default", "--tasks", str(folder), "-o", str(out), "--no-cache", "--no-hybrids"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Difference from bm25" in text and "all-MiniLM-L6-v2" in text
    payload = json.loads((out / "scores.json").read_text())
    assert payload["models"] == ["bm25", "all-MiniLM-L6-v2"]
    (difference,) = payload["differences"]
    assert difference["reference"] == "bm25" and difference["items"] == 3
    assert difference["ci_low"] <= difference["difference"] <= difference["ci_high"]


def test_evaluate_with_bm25_adds_each_dense_models_hybrid_and_compares_the_hybrids(
    tiny_model_path: Path, beir_writer, tmp_path: Path
) -> None:
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    out = tmp_path / "out"
    args = ["evaluate", "default", str(tiny_model_path), "bm25", "--label", "start", "--label", "trained"]
    result = runner.invoke(
        app, [*args, "--label", "bm25", "--tasks", str(folder), "-o", str(out), "--no-cache"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "scores.json").read_text())
    assert payload["models"] == ["start", "trained", "bm25", "hybrid:start", "hybrid:trained"]
    text = " ".join(result.output.split())
    assert "Difference from hybrid:start" in text
    scores = {(row["model"], row["task"]): row["score"] for row in payload["scores"]}
    direct = evaluate_models(["hybrid:default"], [str(folder)], labels=["fused"])
    assert scores[("hybrid:start", "lexical")] == pytest.approx(direct.score("fused", "lexical"))


def test_a_hybrid_is_served_only_where_it_is_ahead_of_every_single_model_beyond_its_interval() -> None:
    from xprt_st.evaluation.hybrid_lines import serve_hybrid, serve_hybrid_lines, with_hybrids
    from xprt_st.evaluation.run import EvaluationReport, TaskScore

    queries = [f"q{i}" for i in range(40)]
    per_query = {
        "start": dict.fromkeys(queries, 0.5),
        "bm25": {q: 0.4 + 0.2 * (i % 2) for i, q in enumerate(queries)},  # as good as the start on average
        "hybrid:start": {q: 0.7 + 0.1 * (i % 3) for i, q in enumerate(queries)},  # ahead of both on every query
    }
    report = EvaluationReport(models=list(per_query), tasks=["faq"], per_query={"faq": per_query})
    report.scores = [
        TaskScore(model, "faq", "ndcg_at_10", sum(values.values()) / len(values), model, "faq")
        for model, values in per_query.items()
    ]
    assert serve_hybrid(report, "faq") == "hybrid:start"
    assert serve_hybrid_lines(report) == [
        "faq: serve hybrid:start (BM25 fused with start by reciprocal ranks): it is ahead of every single model, BM25 "
        "included, each beyond its 95% interval"
    ]
    # BM25 alone as good as the hybrid on every query: the hybrid is not ahead of every single model, so no line
    per_query["bm25"] = dict(per_query["hybrid:start"])
    assert serve_hybrid(report, "faq") is None and serve_hybrid_lines(report) == []
    assert with_hybrids(["default", "runs/a"]) == (("default", "runs/a"), ())


@pytest.mark.parametrize(
    ("models", "tasks", "message"),
    [
        (["hybrid:"], None, "names no dense model; write hybrid:MODEL"),
        (["hybrid:bm25"], None, "must be a dense model"),
        (["hybrid:/no/such/model"], None, "MODELS (hybrid:/no/such/model): model folder /no/such/model does not"),
        (["bm25"], "mined:/some/folder", "bm25 scores retrieval tasks with labels only; mined:/some/folder is a"),
    ],
)
def test_evaluate_refuses_a_lexical_name_it_cannot_run_before_work(
    models: list[str], tasks: str | None, message: str, beir_writer, tmp_path: Path, no_work
) -> None:
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    out = tmp_path / "out"
    args = ["evaluate", *models, "--tasks", tasks or str(folder), "-o", str(out), "--no-cache"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_bm25_on_an_sts_task_is_refused_before_any_model_loads(stsb_writer, tmp_path: Path, no_work) -> None:
    sts = stsb_writer(tmp_path / "toy-sts.csv")
    with pytest.raises(ValueError, match=r"bm25 scores retrieval tasks with labels only; toy-sts\.csv is a STS task"):
        evaluate_models(["default", "bm25"], [str(sts)])


def test_a_missing_bm25s_is_named_with_its_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(LexicalSpecError, match=r"pip install 'bm25s>="):
        check_lexical_spec("bm25")


def test_bm25_on_a_corpus_without_a_term_finds_nothing_and_says_why(
    beir_writer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every document empty or stopwords only: bm25s cannot index it (it raised ``max() arg is an empty sequence``,
    which ``evaluate`` printed as its error). BM25 then finds no document for any query, scores 0 and warns why;
    a stopword-only query on an indexed corpus finds nothing too, with no error."""
    corpus = {"a": {"title": "", "text": "the of and"}, "b": {"title": "", "text": ""}}
    folder = beir_writer(tmp_path / "no-terms", corpus, {"q": "cat"}, [("q", "a", 1)])
    with caplog.at_level("WARNING", logger="xprt_st.evaluation.lexical"):
        report = evaluate_models(["bm25"], [str(folder)])
    assert report.per_query["no-terms"]["bm25"] == {"q": 0.0}
    assert "none of the 2 documents has a term BM25 indexes" in caplog.text
    folder = beir_writer(tmp_path / "stop-query", CORPUS, {"q-stop": "the of and", **QUERIES}, QRELS)
    per_query = evaluate_models(["bm25"], [str(folder)]).per_query["stop-query"]["bm25"]
    assert per_query["q-walked"] == 1.0


def test_a_corpus_whose_bm25_index_cannot_fit_is_one_line_before_indexing(
    beir_writer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100,000 documents ``evaluate bm25`` peaked at 1.6 GB; at a size the machine cannot hold, the kernel's
    out-of-memory kill ended it with no word. The index's need is now estimated from the corpus's characters and
    compared with the RAM still free before bm25s tokenizes anything."""
    import xprt_st.evaluation.lexical as lexical

    characters = sum(len(f"{doc['title']}\n{doc['text']}") for doc in CORPUS.values())
    folder = beir_writer(tmp_path / "lexical", CORPUS, QUERIES, QRELS)
    with pytest.MonkeyPatch.context() as refused:  # undone before the second half, even on a failure
        refused.setattr(lexical, "available_ram_bytes", lambda: lexical.BM25_BYTES_PER_CHARACTER * characters - 1)
        refused.setattr(bm25s.BM25, "index", lambda *args, **kwargs: pytest.fail("indexed despite the refusal"))
        result = runner.invoke(
            app, ["evaluate", "bm25", "--tasks", str(folder), "-o", str(tmp_path / "out"), "--no-cache"]
        )
        message = " ".join(result.output.split())
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert message.startswith(f"error: bm25: indexing 5 documents ({characters:,} characters) needs about"), message
        assert "--max-corpus" in message and "Traceback" not in message
    # with one byte more it fits, and indexes
    monkeypatch.setattr(lexical, "available_ram_bytes", lambda: lexical.BM25_BYTES_PER_CHARACTER * characters)
    assert evaluate_models(["bm25"], [str(folder)]).score("bm25", "lexical") > 0
