"""How often each ranking of related passages picks a positive other than the start's own nearest passage.

Issue 52's diagnostic, on a sample of a BEIR corpus (default: the first 1,000 NFCorpus documents, titles
prepended, mined with the in-domain comparison's settings): one mining run with the offline default model, then,
from its stored vectors and passages (nothing encoded again), each anchor's related passages ranked under every
``--rank-by`` (fused, embedding, tfidf, bm25) with the library's own functions, and the share of anchors whose
positive (``related[0]``) is not the passage the cosine ranks first. Also the passages per document, since a
document of two passages leaves no ranking anything to choose.

Run:  python benchmarks/lexical_positives.py [--documents 1000] [--corpus ../shared/data/nfcorpus]
Writes benchmarks/results/lexical-positives-nfcorpus.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from xprt_st.mining import load_passages, mine
from xprt_st.mining.bm25 import bm25_idf, bm25_matrix
from xprt_st.mining.groups import RANK_BY, rank_every_anchor
from xprt_st.mining.layout.embeddings import EMBEDDINGS_FILE
from xprt_st.mining.scoring import TfidfScorer, cosine_matrix, tfidf_cosine

RESULTS = Path(__file__).resolve().parent / "results"
SETTINGS = {"threshold_quantile": 0.5, "max_tokens": 64, "min_tokens": 16, "max_passages": 32, "batch_size": 32}
"""compare-in-domain-nfcorpus.yaml's mining settings (no holdout: every anchor is counted)."""


def _sample(corpus: Path, documents: int, target: Path) -> Path:
    """The first ``documents`` records of ``corpus/corpus.jsonl.gz``, title prepended to the text."""
    with gzip.open(corpus / "corpus.jsonl.gz", "rt", encoding="utf-8") as reader, target.open("w") as writer:
        for _, line in zip(range(documents), reader, strict=False):
            record = json.loads(line)
            text = f"{record.get('title', '')}\n{record['text']}".strip()
            writer.write(json.dumps({"id": record["_id"], "text": text}) + "\n")
    return target


def positives_not_nearest(mined: Path, threshold: float, top_k: int = 4) -> dict[str, object]:
    """Per ranking, the share of the mined anchors (centrality >= ``threshold``) whose positive is not the cosine's
    first passage; the fused rankings recomputed here are checked against the ones mining stored."""
    table = load_passages(mined).to_pandas()
    vectors = np.load(mined / EMBEDDINGS_FILE)
    if len(vectors) != len(table):
        raise ValueError(f"{len(vectors)} stored vectors for {len(table)} passages in {mined}")
    table["row"] = np.arange(len(table))
    scorer = TfidfScorer().fit(table["text"].tolist())
    idf = bm25_idf(scorer.document_frequencies, scorer.passages)
    differ = dict.fromkeys(RANK_BY, 0)
    anchors = mismatches = 0
    sizes = []
    for _, doc in table.groupby("label", sort=False):
        doc = doc.sort_values("passage_index")
        sizes.append(len(doc))
        mask = doc["centrality"].to_numpy() >= threshold
        if not mask.any():
            continue
        texts = doc["text"].tolist()
        emb = cosine_matrix(vectors[doc["row"].to_numpy()].astype(np.float64))
        tfidf = tfidf_cosine(scorer.transform(texts))
        lexical = bm25_matrix(scorer.counts(texts), idf)
        anchors += int(mask.sum())
        for rank_by in RANK_BY:
            rankings = rank_every_anchor(emb, tfidf, top_k, rank_by, lexical=lexical)
            if rank_by == "fused":
                stored = doc["related"].tolist()
                mismatches += sum(
                    list(r.related) != list(s) for r, s, keep in zip(rankings, stored, mask, strict=True) if keep
                )
            differ[rank_by] += sum(r.related[0] != r.nearest for r, keep in zip(rankings, mask, strict=True) if keep)
    return {
        "anchors": anchors,
        "positives_not_nearest": {name: round(count / anchors, 4) for name, count in differ.items()},
        "fused_rankings_unlike_the_stored_ones": mismatches,
        "passages_per_document_median": statistics.median(sizes),
        "documents_with_two_passages": sum(size == 2 for size in sizes),
    }


def main() -> None:
    """Mine the sample once and write the shares of every ranking."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/nfcorpus")
    parser.add_argument("--documents", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sample = _sample(args.corpus, args.documents, Path(scratch) / "sample.jsonl")
        started = time.perf_counter()
        stats = mine([sample], Path(scratch) / "mined", id_field="id", progress=False, **SETTINGS)
        seconds = time.perf_counter() - started
        result = {
            "corpus": args.corpus.name,
            "documents": args.documents,
            "settings": SETTINGS,
            "groups": stats["groups"],
            "stats_positives_not_nearest (fused, as mined)": stats["positives_not_nearest"],
            "mining_seconds": round(seconds, 1),
            **positives_not_nearest(Path(scratch) / "mined", stats["threshold"]),
        }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"lexical-positives-{args.corpus.name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
