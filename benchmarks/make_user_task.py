"""Build a user's corpus and BEIR folder from a BEIR task, to run ``xprt-st quickstart --corpus`` as a user would.

Writes ``OUT/my.jsonl`` (fields ``id``, ``title``, ``text``) and ``OUT/my-beir/`` (``corpus.jsonl``,
``queries.jsonl``, ``qrels/test.tsv``) holding the same documents. Test queries are taken in a seeded order while
every document they judge still fits under ``--documents``; the rest of the documents are a seeded sample of the
task's others, so every judged document of a kept query is in the corpus::

    python benchmarks/make_user_task.py ../shared/data/nfcorpus /tmp/user --queries 40 --documents 600
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any


def _read_jsonl(folder: Path, stem: str) -> list[dict[str, Any]]:
    for name, opener in ((f"{stem}.jsonl", open), (f"{stem}.jsonl.gz", gzip.open)):
        if (folder / name).is_file():
            with opener(folder / name, "rt", encoding="utf-8") as handle:
                return [json.loads(line) for line in handle if line.strip()]
    raise FileNotFoundError(f"{folder} has no {stem}.jsonl or {stem}.jsonl.gz")


def build(task: Path, out: Path, n_queries: int, n_documents: int, seed: int) -> dict[str, int]:
    """Write the user's files; returns how many documents, queries and judgements they hold."""
    corpus = {str(row["_id"]): row for row in _read_jsonl(task, "corpus")}
    queries = {str(row["_id"]): row for row in _read_jsonl(task, "queries")}
    judged: dict[str, dict[str, int]] = defaultdict(dict)
    with open(task / "qrels" / "test.tsv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0 and row["corpus-id"] in corpus:
                judged[row["query-id"]][row["corpus-id"]] = int(row["score"])
    rng = random.Random(seed)
    order = sorted(query for query in judged if query in queries)
    rng.shuffle(order)
    kept_queries: list[str] = []
    documents: set[str] = set()
    for query in order:
        if len(kept_queries) == n_queries:
            break
        if len(documents | judged[query].keys()) <= n_documents:
            kept_queries.append(query)
            documents |= judged[query].keys()
    others = sorted(set(corpus) - documents)
    documents |= set(rng.sample(others, min(len(others), n_documents - len(documents))))
    kept = sorted(documents)

    beir = out / "my-beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "my.jsonl", "w", encoding="utf-8") as mine, open(beir / "corpus.jsonl", "w", encoding="utf-8") as c:
        for doc in kept:
            row = corpus[doc]
            mine.write(json.dumps({"id": doc, "title": row.get("title", ""), "text": row["text"]}) + "\n")
            c.write(json.dumps({"_id": doc, "title": row.get("title", ""), "text": row["text"]}) + "\n")
    with open(beir / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query in kept_queries:
            handle.write(json.dumps({"_id": query, "text": queries[query]["text"]}) + "\n")
    pairs = 0
    with open(beir / "qrels" / "test.tsv", "w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for query in kept_queries:
            for doc, score in sorted(judged[query].items()):
                handle.write(f"{query}\t{doc}\t{score}\n")
                pairs += 1
    return {"documents": len(kept), "queries": len(kept_queries), "judgements": pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path, help="BEIR folder (corpus, queries, qrels/test.tsv)")
    parser.add_argument("output", type=Path)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.task, args.output, args.queries, args.documents, args.seed)))


if __name__ == "__main__":
    main()
