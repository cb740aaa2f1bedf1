"""bf16 against fp32 on real data, in one run: what mining picks and what evaluation scores (issue 50's evidence).

    python benchmarks/precision_agreement.py mining --json benchmarks/results/precision-mining-nfcorpus-cpu.json
    python benchmarks/precision_agreement.py evaluation --tasks nfcorpus,arguana,stsb,sickr,sts12,sts13,sts14,sts15 \\
        --json benchmarks/results/precision-evaluation-cpu.json

``mining`` mines NFCorpus's abstracts (``$XPRT_DATA_DIR`` or ``../shared/data``; titles prepended, the
in-domain configs' settings: 64-token passages, median threshold, 10% held out, 2 hard negatives) once per
precision with the offline default model, then reports the share of passages whose anchor flag is the same,
of anchors whose positive (and each related passage, and each hard negative) is the same text, and each run's
seconds. ``evaluation`` scores the default model on every task in both precisions and reports the largest
absolute difference. The CPU model and what torch reports of its bf16 support are written beside the figures;
compare figures only within one run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MINING = {
    "max_tokens": 64,
    "min_tokens": 16,
    "max_passages": 32,
    "batch_size": 32,
    "threshold_quantile": 0.5,
    "holdout": 0.1,
    "id_field": "id",
    "hard_negatives": 2,
    "seed": 0,
}


def data_dir() -> Path:
    return Path(os.environ.get("XPRT_DATA_DIR", REPO.parent / "shared" / "data"))


def machine() -> dict[str, Any]:
    """The CPU model name and torch's answer on bf16 (what ``auto`` follows), and the threads used."""
    import torch

    from xprt_st.precision import native_bf16

    name = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    native, why = native_bf16("cpu")
    return {"cpu": name, "native_bf16": native, "bf16_support": why, "torch_threads": torch.get_num_threads()}


def nfcorpus_jsonl(limit: int | None, target: Path) -> Path:
    """NFCorpus's abstracts as a JSONL with ``id`` and ``text`` (the title prepended), the first ``limit``."""
    with (
        gzip.open(data_dir() / "nfcorpus" / "corpus.jsonl.gz", "rt", encoding="utf-8") as source,
        target.open("w", encoding="utf-8") as out,
    ):
        for index, line in enumerate(source):
            if limit is not None and index >= limit:
                break
            record = json.loads(line)
            text = f"{record.get('title', '')}\n\n{record['text']}".strip()
            out.write(json.dumps({"id": record["_id"], "text": text}) + "\n")
    return target


def _share(same: int, total: int) -> float:
    return round(same / total, 6) if total else 1.0


def compare_minings(fp32: Path, bf16: Path) -> dict[str, Any]:
    """Shares of the anchors, positives, related passages and hard negatives that two minings agree on."""
    import datasets
    import pyarrow.parquet as pq

    def passages(folder: Path) -> dict[tuple[str, int], bool]:
        table = pq.read_table(folder / "passages.parquet", columns=["doc_id", "passage_index", "is_anchor"])
        return {(d, i): a for d, i, a in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)}

    def groups(folder: Path) -> dict[str, dict[str, Any]]:
        rows = datasets.load_from_disk(str(folder))
        return {row["anchor"]: row for row in rows}

    a, b = passages(fp32), passages(bf16)
    shared = a.keys() & b.keys()
    anchors_a = {k for k in shared if a[k]}
    anchors_b = {k for k in shared if b[k]}
    ga, gb = groups(fp32), groups(bf16)
    both = ga.keys() & gb.keys()
    columns = [c for c in next(iter(ga.values())) if c not in ("anchor", "label")] if ga else []
    same = {column: sum(ga[k][column] == gb[k][column] for k in both) for column in columns}
    return {
        "passages": len(shared),
        "anchor_flags_same": _share(sum(a[k] == b[k] for k in shared), len(shared)),
        "anchors_fp32": len(anchors_a),
        "anchors_bf16": len(anchors_b),
        "anchors_same": _share(len(anchors_a & anchors_b), len(anchors_a | anchors_b)),
        "groups_fp32": len(ga),
        "groups_bf16": len(gb),
        "groups_with_the_same_anchor": len(both),
        "same_given_the_anchor": {column: _share(count, len(both)) for column, count in same.items()},
    }


def run_mining(args: argparse.Namespace) -> dict[str, Any]:
    from xprt_st.mining import mine

    work = Path(args.work or tempfile.mkdtemp(prefix="precision-mining-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = nfcorpus_jsonl(args.documents, work / "nfcorpus.jsonl")
    seconds, stats = {}, {}
    for precision in ("fp32", "bf16"):
        started = time.perf_counter()
        stats[precision] = mine([corpus], work / precision, precision=precision, progress=False, **MINING)
        seconds[precision] = round(time.perf_counter() - started, 1)
    return {
        "kind": "mining",
        "corpus": f"nfcorpus (first {args.documents} abstracts)" if args.documents else "nfcorpus (every abstract)",
        "settings": MINING,
        "machine": machine(),
        "seconds": seconds,
        "speedup": round(seconds["fp32"] / seconds["bf16"], 3),
        "groups": {p: stats[p]["groups"] for p in stats},
        "agreement": compare_minings(work / "fp32", work / "bf16"),
    }


def run_evaluation(args: argparse.Namespace) -> dict[str, Any]:
    from xprt_st.evaluation.run import evaluate_models

    tasks = [t if t in LOCAL else str(data_dir() / t) for t in args.tasks.split(",")]
    scores, seconds = {}, {}
    for precision in ("fp32", "bf16"):
        started = time.perf_counter()
        report = evaluate_models(
            [None], tasks, data_dir=data_dir(), cache_dir=None, precision=precision, batch_size=args.batch_size
        )
        seconds[precision] = round(time.perf_counter() - started, 1)
        scores[precision] = {task: report.score(report.models[0], task) for task in report.tasks}
    differences = {task: round(scores["bf16"][task] - scores["fp32"][task], 6) for task in scores["fp32"]}
    return {
        "kind": "evaluation",
        "model": "all-MiniLM-L6-v2",
        "machine": machine(),
        "seconds": seconds,
        "speedup": round(seconds["fp32"] / seconds["bf16"], 3),
        "scores": scores,
        "bf16_minus_fp32": differences,
        "largest_abs_difference": max(abs(v) for v in differences.values()),
    }


LOCAL = {"arguana", "stsb", "sickr", "sts12", "sts13", "sts14", "sts15", "python-faq"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("mining", "evaluation"))
    parser.add_argument("--documents", type=int, default=None, help="mining: the first N abstracts (default: all)")
    parser.add_argument("--tasks", default="nfcorpus,arguana,stsb,sickr,sts12,sts13,sts14,sts15")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = run_mining(args) if args.kind == "mining" else run_evaluation(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
