"""What the lexical candidates add and what shape the queries have: two measurements of a compare run's mining.

1. **Reach.** For each training group of the lexical data (``RUN/data/hard-negatives-2-lexical-2``), the rank the
   start gives each lexical candidate among all passages of other documents (by cosine of the start's vectors,
   mining's stored ones, the missing encoded): the share the start does not rank in its own top 30 (and top 100).
   The hard negatives are measured the same way (the start's nearest, filtered: they rank near 1 by construction).
2. **Query shape.** The test queries of the task against the training queries: the anchors (passages) and the
   inverse-cloze sentence each anchor would give (``xprt_st.mining.inverse_cloze.cloze_query``, seed 0). Per
   text: words, BM25 terms (the ``bm25`` reference's tokenizer: stopwords out, Snowball stems) and the share of those
   terms that are rare in the mined passages (in at most 0.1% of them) or absent from them.

::

    python benchmarks/lexical_candidate_reach.py runs/lexical-candidates-nfcorpus nfcorpus \\
        --data-dir ../shared/data --json benchmarks/results/lexical-candidates-nfcorpus/reach.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

LEXICAL_DATA = "hard-negatives-2-lexical-2"
RARE_SHARE = 0.001
"""A term is rare when at most this share of the mined passages hold it."""
DEPTHS = (30, 100)
CHUNK = 512


def _passages(mined: Path) -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(mined / "passages.parquet", columns=["doc_id", "text"])
    return table.column("text").to_pylist(), np.asarray(table.column("doc_id").to_pylist())


def _vectors(mined: Path, texts: list[str]) -> np.ndarray:
    from xprt_st.mining.passage_vectors import fill_passage_vectors
    from xprt_st.models import load_model

    out = np.zeros((len(texts), 384), dtype=np.float32)
    fill_passage_vectors(mined, texts, np.arange(len(texts)), load_model(None), out, batch_size=64)
    return out


def _ranks(vectors: np.ndarray, docs: np.ndarray, anchors: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The start's rank (1 = nearest) of each ``candidates[i, j]`` passage for anchor ``anchors[i]``, among the
    passages of other documents."""
    ranks = np.zeros(candidates.shape, dtype=np.int64)
    for start in range(0, len(anchors), CHUNK):
        rows = anchors[start : start + CHUNK]
        sims = vectors[rows] @ vectors.T
        sims[docs[rows][:, None] == docs[None, :]] = -np.inf
        chosen = np.take_along_axis(sims, candidates[start : start + CHUNK], axis=1)
        ranks[start : start + CHUNK] = (sims[:, None, :] > chosen[:, :, None]).sum(axis=2) + 1
    return ranks


def _reach(run: Path) -> dict[str, Any]:
    import datasets

    mined = run / "mined"
    texts, docs = _passages(mined)
    row_of = {text: row for row, text in reversed(list(enumerate(texts)))}
    groups = datasets.load_from_disk(str(run / "data" / LEXICAL_DATA))
    anchors = np.asarray([row_of[text] for text in groups["anchor"]])
    vectors = _vectors(mined, texts)
    result: dict[str, Any] = {"groups": len(anchors), "passages": len(texts)}
    for kind in ("lexical", "negative"):
        columns = sorted(name for name in groups.column_names if name.startswith(f"{kind}_"))
        candidates = np.asarray([[row_of[text] for text in groups[name]] for name in columns]).T
        ranks = _ranks(vectors, docs, anchors, candidates).ravel()
        result[kind] = {
            "candidates": int(ranks.size),
            "median_rank": float(np.median(ranks)),
            **{f"outside_top_{depth}": round(float((ranks > depth).mean()), 4) for depth in DEPTHS},
        }
    return result


def _queries(data_dir: Path, task: str) -> list[str]:
    folder = data_dir / task
    with gzip.open(folder / "queries.jsonl.gz", "rt", encoding="utf-8") as handle:
        queries = {row["_id"]: row["text"] for row in map(json.loads, handle)}
    tested = {line.split("\t")[0] for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    return [queries[query] for query in sorted(tested) if query in queries]


def _shape(texts: list[str], frequency: Counter[str], passages: int) -> dict[str, Any]:
    import bm25s
    import Stemmer

    from xprt_st.evaluation.lexical import BM25_SETTINGS

    stemmer = Stemmer.Stemmer(BM25_SETTINGS["stemmer_language"])
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    terms = [len(row) for row in tokens]
    rare = [sum(frequency[t] <= RARE_SHARE * passages for t in row) / len(row) for row in tokens if row]
    absent = [sum(frequency[t] == 0 for t in row) / len(row) for row in tokens if row]
    return {
        "texts": len(texts),
        "median_words": statistics.median(len(text.split()) for text in texts),
        "median_terms": statistics.median(terms),
        "rare_term_share": round(statistics.fmean(rare), 4),
        "absent_term_share": round(statistics.fmean(absent), 4),
    }


def _query_shape(run: Path, data_dir: Path, task: str) -> dict[str, Any]:
    import bm25s
    import datasets
    import Stemmer

    from xprt_st.evaluation.lexical import BM25_SETTINGS
    from xprt_st.mining.inverse_cloze import cloze_query

    texts, _ = _passages(run / "mined")
    stemmer = Stemmer.Stemmer(BM25_SETTINGS["stemmer_language"])
    frequency: Counter[str] = Counter()
    for row in bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False):
        frequency.update(set(row))
    anchors = datasets.load_from_disk(str(run / "data" / LEXICAL_DATA))["anchor"]
    rng = np.random.default_rng(0)
    cloze = [cloze_query(anchor, rng)[0] for anchor in anchors]
    return {
        "test queries": _shape(_queries(data_dir, task), frequency, len(texts)),
        "anchors (passages)": _shape(anchors, frequency, len(texts)),
        "inverse-cloze sentences": _shape(cloze, frequency, len(texts)),
        "rare": f"a term in at most {RARE_SHARE:.1%} of the {len(texts):,} mined passages",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a compare run folder with mined/ and data/" + LEXICAL_DATA)
    parser.add_argument("task", help="the BEIR folder name of its test queries under --data-dir")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args()
    record = {"run": str(args.run), "task": args.task, "reach": _reach(args.run)}
    record["query_shape"] = _query_shape(args.run, args.data_dir, args.task)
    text = json.dumps(record, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
