"""Independent check of `xprt-st evaluate`'s ArguAna nDCG@10 and STS-B Spearman for one model.

Nothing here uses mteb or xprt_st's task loaders: the files are parsed by the few lines below,
embeddings come from SentenceTransformer.encode (L2-normalised), ranking is a brute-force numpy
cosine with the query's own id removed (ArguAna's rule), tied scores are ordered as trec_eval does
(document id descending), nDCG@10 is computed twice (the formula by hand, and pytrec_eval on the
same ranking), and Spearman is scipy's.

    HF_HUB_OFFLINE=1 python benchmarks/check_metrics.py --data-dir ../shared/data [--model PATH]

Prints one JSON object; see docs/evaluation.md for the recorded numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def ndcg10(ranking: list[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:10]))
    ideal = sum(rel / math.log2(i + 2) for i, rel in enumerate(sorted(relevant.values(), reverse=True)[:10]))
    return dcg / ideal if ideal else 0.0


def top10(scores: np.ndarray, doc_ids: list[str], own_id: str) -> list[str]:
    pool = np.argsort(-scores, kind="stable")[:200]
    threshold = scores[pool[-1]]
    pool = np.nonzero(scores >= threshold)[0].tolist()
    pool.sort(key=lambda i: doc_ids[i], reverse=True)  # trec_eval's tie order ...
    pool.sort(key=lambda i: -float(scores[i]))  # ... under the score order (stable sort)
    return [doc_ids[i] for i in pool if doc_ids[i] != own_id][:10]


def check_arguana(model, folder: Path, batch_size: int) -> dict:
    corpus = read_jsonl_gz(folder / "corpus.jsonl.gz")
    queries = {q["_id"]: q["text"] for q in read_jsonl_gz(folder / "queries.jsonl.gz")}
    doc_ids = [d["_id"] for d in corpus]
    known = set(doc_ids)
    qrels: dict[str, dict[str, int]] = {}
    absent = 0
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if did not in known:
            absent += 1
            continue
        qrels.setdefault(qid, {})[did] = int(score)
    texts = [f"{d.get('title') or ''} {d['text']}".strip() for d in corpus]
    query_ids = sorted(qrels)
    start = time.perf_counter()
    doc_emb = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    query_emb = model.encode(
        [queries[q] for q in query_ids], batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
    )
    encode_s = time.perf_counter() - start
    rankings = {}
    for i, qid in enumerate(query_ids):
        rankings[qid] = top10(doc_emb @ query_emb[i], doc_ids, qid)
    by_hand = [ndcg10(rankings[q], qrels[q]) for q in query_ids]
    result = {
        "queries": len(query_ids),
        "documents": len(doc_ids),
        "judgements_to_absent_documents_dropped": absent,
        "ndcg_at_10_by_hand": float(np.mean(by_hand)),
        "ndcg_at_10_if_the_absent_judgements_were_kept_as_zero": float(np.sum(by_hand) / (len(query_ids) + absent)),
        "encode_seconds": round(encode_s, 1),
    }
    try:
        import pytrec_eval

        run = {q: {d: 10.0 - r for r, d in enumerate(rankings[q])} for q in query_ids}
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        result["ndcg_at_10_pytrec_eval_same_ranking"] = float(np.mean([v["ndcg_cut_10"] for v in per_query.values()]))
    except ImportError:
        result["ndcg_at_10_pytrec_eval_same_ranking"] = None
    return result


def check_stsb(model, folder: Path, batch_size: int) -> dict:
    with gzip.open(folder / "sts-test.csv.gz", "rt", encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    gold = [float(r[4]) for r in rows]
    first = model.encode([r[5] for r in rows], batch_size=batch_size, normalize_embeddings=True)
    second = model.encode([r[6] for r in rows], batch_size=batch_size, normalize_embeddings=True)
    cosine = (first * second).sum(axis=1)
    return {"pairs": len(rows), "cosine_spearman": float(spearmanr(gold, cosine).statistic)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", default=None, help="model name or folder; default: the offline all-MiniLM-L6-v2")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from xprt_st.models import resolve_model_name  # only to find the packaged default's folder

    model = SentenceTransformer(resolve_model_name(args.model), device="cpu")
    report = {
        "model": args.model or "all-MiniLM-L6-v2 (offline default)",
        "stsb": check_stsb(model, args.data_dir / "stsbenchmark", args.batch_size),
        "arguana": check_arguana(model, args.data_dir / "arguana", args.batch_size),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
