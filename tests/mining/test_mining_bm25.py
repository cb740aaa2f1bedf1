"""``--rank-by bm25``: BM25 between a document's passages against the formula by hand, the lexical positive, and
the share of positives that differ from the start's own nearest passage (``stats.json``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from xprt_st.mining import GroupBuilder, MiningConfig, load_passages
from xprt_st.mining.bm25 import BM25_B, BM25_K1, bm25_idf, bm25_matrices, bm25_matrix
from xprt_st.mining.groups import rank_every_anchor, rank_related
from xprt_st.mining.scoring import TfidfScorer


def _by_hand(query: list[str], passage: list[str], df: dict[str, int], n: int, average: float) -> float:
    total = 0.0
    for term in set(query):
        tf = passage.count(term)
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        total += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * len(passage) / average))
    return total


def test_bm25_matrix_is_the_formula_with_the_corpus_document_frequencies() -> None:
    document = ["river bank river flood", "the bank lends money", "flood water rises over the river bank"]
    corpus = [*document, "money money money", "water is wet", "the end of the story"]
    scorer = TfidfScorer(n_features=2**12).fit(corpus)
    matrix = bm25_matrix(scorer.counts(document), bm25_idf(scorer.document_frequencies, scorer.passages))
    words = [passage.split() for passage in document]
    df = {term: sum(term in passage.split() for passage in corpus) for passage in corpus for term in passage.split()}
    average = sum(len(w) for w in words) / len(words)  # the document's own passages
    expected = [[_by_hand(q, p, df, len(corpus), average) for p in words] for q in words]
    assert matrix == pytest.approx(np.array(expected))
    # the corpus decides which shared word counts: "the" (in 3 of 6 passages) weighs less than "flood" (in 2)
    assert bm25_idf(np.array([df["the"]]), 6)[0] < bm25_idf(np.array([df["flood"]]), 6)[0]


def test_bm25_matrices_split_a_run_of_documents() -> None:
    passages = ["a cat sat", "the cat ran", "dogs bark loud", "loud dogs", "a third one"]
    scorer = TfidfScorer(n_features=2**12).fit(passages)
    idf = bm25_idf(scorer.document_frequencies, scorer.passages)
    blocks = bm25_matrices(scorer.counts(passages), [2, 3], idf)
    assert [b.shape for b in blocks] == [(2, 2), (3, 3)]
    assert blocks[1] == pytest.approx(bm25_matrix(scorer.counts(passages[2:]), idf))
    with pytest.raises(ValueError, match="sizes add up to 4 rows"):
        bm25_matrices(scorer.counts(passages), [2, 2], idf)


def test_rank_by_bm25_orders_by_the_lexical_score_and_keeps_the_nearest_by_cosine() -> None:
    emb_cos = np.eye(4)
    emb_cos[0, 1:] = [0.9, 0.5, 0.1]  # the start's nearest passage for anchor 0 is passage 1
    lexical = np.zeros((4, 4))
    lexical[0, 1:] = [0.2, 3.0, 1.0]  # BM25 ranks passage 2 first, then 3
    ranking = rank_related(0, emb_cos, np.eye(4), top_k=3, rank_by="bm25", lexical=lexical)
    assert ranking.related == [2, 3, 1] and ranking.nearest == 1
    assert rank_related(0, emb_cos, np.eye(4), top_k=3, rank_by="embedding").related[0] == ranking.nearest
    with pytest.raises(ValueError, match="rank_by='bm25' needs lexical"):
        rank_related(0, emb_cos, np.eye(4), rank_by="bm25")


def test_ranking_every_anchor_at_once_equals_ranking_each_anchor_by_bm25() -> None:
    rng = np.random.default_rng(7)
    for n in [2, 3, 6, 11]:
        unit = rng.normal(size=(n, 8))
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        emb_cos, tfidf = unit @ unit.T, np.round(rng.random((n, n)), 1)
        lexical = np.round(rng.random((n, n)) * 3, 0)  # coarse: many ties, broken by the cosine
        for top_k in [1, 4]:
            together = rank_every_anchor(emb_cos, tfidf, top_k, "bm25", lexical=lexical)
            alone = [rank_related(i, emb_cos, tfidf, top_k, "bm25", lexical=lexical) for i in range(n)]
            assert together == alone


TOPICS = {
    "garden": "Tomatoes need sun. Water the tomato plants at dawn. Compost feeds the soil. Slugs eat young leaves.",
    "harbour": "Ships dock at the pier. Cranes unload containers. Tides set the schedule. Pilots guide ships in.",
    "kitchen": "Knead the dough slowly. Yeast makes dough rise. Bake bread at high heat. Cool the loaf on a rack.",
    "station": "Trains leave hourly. Buy a ticket at the machine. Platforms are numbered. Delays are announced.",
}


def _corpus(path: Path) -> Path:
    lines = []
    for index, (topic, text) in enumerate(TOPICS.items()):
        body = " ".join(f"{sentence} About the {topic}, part {part}." for part in range(3) for sentence in [text])
        lines.append(json.dumps({"id": f"doc-{index}", "text": body}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _mine(corpus: Path, out: Path, model, rank_by: str) -> dict:
    config = MiningConfig(
        max_tokens=24, min_tokens=4, batch_size=16, threshold_quantile=0.3, id_field="id", rank_by=rank_by
    )
    return GroupBuilder([corpus], out, config, model=model, progress=False).run()


def _positives(out: Path) -> dict[tuple[int, int], list[int]]:
    rows = [json.loads(line) for line in (out / "groups_meta.jsonl").open(encoding="utf-8")]
    return {(row["label"], row["anchor_index"]): row["related_indices"] for row in rows}


def test_mining_by_bm25_takes_the_top_bm25_passage_and_counts_positives_the_start_would_not_choose(
    tmp_path: Path, tiny_model
) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl")
    by_cosine = _mine(corpus, tmp_path / "embedding", tiny_model, "embedding")
    by_bm25 = _mine(corpus, tmp_path / "bm25", tiny_model, "bm25")
    # ranked by the cosine alone, the positive is the start's nearest passage by definition
    assert by_cosine["positives_not_nearest"] == 0.0
    nearest, lexical = _positives(tmp_path / "embedding"), _positives(tmp_path / "bm25")
    assert nearest.keys() == lexical.keys() and len(lexical) == by_bm25["groups"] > 0
    differ = sum(lexical[key][0] != nearest[key][0] for key in lexical)
    assert by_bm25["positives_not_nearest"] == round(differ / len(lexical), 4)
    # each positive is a passage of highest BM25 for its anchor, with the corpus's counts
    table = load_passages(tmp_path / "bm25").to_pandas()
    scorer = TfidfScorer().fit(table["text"].tolist())
    idf = bm25_idf(scorer.document_frequencies, scorer.passages)
    for (label, anchor), related in lexical.items():
        texts = table[table["label"] == label].sort_values("passage_index")["text"].tolist()
        scores = bm25_matrix(scorer.counts(texts), idf)[anchor]
        others = [j for j in range(len(texts)) if j != anchor]
        assert scores[related[0]] == pytest.approx(max(scores[j] for j in others))
