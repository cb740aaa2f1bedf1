"""BM25's settings one at a time on NFCorpus and ArguAna, and ArguAna with its self-hits counted.

What moves the ``bm25`` reference (:mod:`xprt_st.evaluation.lexical`) against BEIR's published BM25 (NFCorpus 32.5,
ArguAna 31.5, Elasticsearch): each variant changes one of the stated settings; the last line scores ArguAna with a
query's own argument allowed as a result (BEIR-era evaluation; MTEB and xprt-st drop it). BM25 only: seconds a set.

Run:  python benchmarks/bm25_settings.py [--data-dir ../shared/data]
Writes benchmarks/results/bm25-settings.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xprt_st.evaluation.catalog import resolve_beir
from xprt_st.evaluation.lexical import BM25_SETTINGS, BM25Search
from xprt_st.evaluation.run import run_mteb
from xprt_st.evaluation.tasks import make_retrieval_task

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS: dict[str, dict[str, object]] = {
    "as stated": {},
    "no stemmer": {"stemmer_language": None},
    "no stopwords": {"stopwords": None},
    "k1 1.5 (bm25s default)": {"k1": 1.5},
    "k1 0.9, b 0.4 (Anserini default)": {"k1": 0.9, "b": 0.4},
}


def main() -> None:
    """Score every variant on both sets and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data")
    args = parser.parse_args()
    sets = {name: resolve_beir(str(args.data_dir / name), None) for name in ("nfcorpus", "arguana")}
    tasks = {
        name: make_retrieval_task(data, name, ignore_identical_ids=name == "arguana")
        for name, (data, _, _) in sets.items()
    }
    table: dict[str, dict[str, float]] = {}
    for variant, change in VARIANTS.items():
        scores, _ = run_mteb(BM25Search(change), list(tasks.values()), label="bm25")
        table[variant] = {row.task: round(100 * row.score, 2) for row in scores}
        print(variant, table[variant], flush=True)
    selfhit = make_retrieval_task(sets["arguana"][0], "arguana-with-self-hits", ignore_identical_ids=False)
    scores, _ = run_mteb(BM25Search(), [selfhit], label="bm25")
    table["as stated, ArguAna with self-hits counted"] = {"arguana": round(100 * scores[0].score, 2)}
    print(table)
    RESULTS.mkdir(exist_ok=True)
    payload = {"settings": BM25_SETTINGS, "ndcg_at_10_x100": table}
    (RESULTS / "bm25-settings.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
