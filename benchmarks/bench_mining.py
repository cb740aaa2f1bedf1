"""Mining throughput as a ratio against the floor: encoding the same passages once, same model and batch size.

    python benchmarks/bench_mining.py                       # BBC articles when ../shared/data is present
    python benchmarks/bench_mining.py --documents 300 --batch-size 64 --repeats 2 --json out.json

The full pipeline (read the zip, cut passages, fit corpus TF-IDF, encode, rank every passage, write
the checkpointed chunk, merge into the dataset and side files) is timed end to end; the floor is one
``model.encode`` call over exactly the passages the miner encoded, with the same batch size, measured
in the same process, alternating with the mining runs so machine load affects both alike.
``ratio = floor seconds / mining seconds`` (1.0 = no overhead beyond encoding; the goal is >= 0.87
on the CPU). Each figure is the best of ``--repeats`` runs. On a shared, loaded machine the two
timings drift apart by chance; ``encode_share_of_mining`` (time inside ``model.encode`` over the
whole mining run, both from the same run) and ``overhead_seconds`` do not depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED_BBC = Path(__file__).resolve().parents[2] / "shared" / "data" / "bbc-news" / "bbc-fulltext.zip"


def _corpus(folder: Path, documents: int) -> Path:
    """The first ``documents`` BBC articles as a zip (or a synthetic JSONL corpus without the shared data)."""
    if SHARED_BBC.is_file():
        path = folder / "bbc-sample.zip"
        with zipfile.ZipFile(SHARED_BBC) as source, zipfile.ZipFile(path, "w") as target:
            names = sorted(n for n in source.namelist() if n.endswith(".txt"))
            step = max(1, len(names) // documents)
            for name in names[::step][:documents]:
                target.writestr(name, source.read(name))
        return path
    path = folder / "synthetic.jsonl"
    words = "river valley erosion sediment flood meander bank delta rock stone water current".split()
    with path.open("w", encoding="utf-8") as handle:
        for i in range(documents):
            paragraphs = [
                " ".join(words[(i + j + k) % len(words)] for k in range(60)).capitalize() + "." for j in range(6)
            ]
            handle.write(json.dumps({"text": "\n\n".join(paragraphs)}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default=None, help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: the model's weights in bfloat16"
    )
    args = parser.parse_args()

    import pyarrow.parquet as pq

    from xprt_st.mining import GroupBuilder, MiningConfig, load_passages
    from xprt_st.models import load_model

    model = load_model(args.model, device=None)
    if args.precision == "bf16":
        import torch

        model = model.to(torch.bfloat16)  # mining and the encode-only floor alike
    model.encode(["warm up the model once"] * 4, batch_size=4)
    work = Path(tempfile.mkdtemp(prefix="bench-mining-"))
    corpus = _corpus(work, args.documents)
    config = MiningConfig(batch_size=args.batch_size, threshold_quantile=0.4)

    mining_times, floor_times, encode_times, passages = [], [], [], []
    try:
        for repeat in range(args.repeats):
            out = work / f"out-{repeat}"
            start = time.perf_counter()
            stats = GroupBuilder([corpus], out, config, model=model, progress=False).run()
            mining_times.append(time.perf_counter() - start)
            encode_times.append(float(stats["encode_seconds"]))
            table = load_passages(out).to_pandas()
            counts = table.groupby("label")["text"].transform("size")
            passages = table.loc[counts >= 2, "text"].tolist()  # exactly what the miner encoded
            assert len(pq.read_table(out / "passages.parquet")) == len(table)

            start = time.perf_counter()
            model.encode(passages, batch_size=args.batch_size, convert_to_numpy=True, normalize_embeddings=True)
            floor_times.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mining, floor = min(mining_times), min(floor_times)
    figures = {
        "corpus": "bbc-news sample" if SHARED_BBC.is_file() else "synthetic",
        "documents": args.documents,
        "passages_encoded": len(passages),
        "batch_size": args.batch_size,
        "device": str(model.device),
        "precision": args.precision,
        "mining_seconds": round(mining, 2),
        "floor_seconds": round(floor, 2),
        "mining_passages_per_second": round(len(passages) / mining, 1),
        "floor_passages_per_second": round(len(passages) / floor, 1),
        "ratio": round(floor / mining, 3),
        # Load-independent view: the share of the mining run spent inside model.encode.
        "encode_share_of_mining": round(min(e / m for e, m in zip(encode_times, mining_times, strict=True)), 3),
        "overhead_seconds": round(min(m - e for e, m in zip(encode_times, mining_times, strict=True)), 2),
        "mining_runs": [round(t, 2) for t in mining_times],
        "floor_runs": [round(t, 2) for t in floor_times],
    }
    text = json.dumps(figures, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)  # a script's result, not library logging


if __name__ == "__main__":
    main()
