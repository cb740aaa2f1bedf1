"""Mining at growing corpus sizes: peak memory (RSS) and CPU-side throughput, for any version of the code.

    python benchmarks/bench_mining_scale.py --documents 2000 20000 --json benchmarks/results/x.json
    python benchmarks/bench_mining_scale.py --documents 2000 --code /work/main --label before   # another checkout
    python benchmarks/bench_mining_scale.py --documents 2000 --engine ray --workers 2
    python benchmarks/bench_mining_scale.py --documents 2000 --reference /tmp/before --repeats 3  # a ratio

The corpus is synthetic (5-10 paragraphs of 40-90 words per document, words drawn from the mining
tokenizer's whole-word vocabulary, seeded) and the mining model a 2-layer, 32-wide random BERT with
all-MiniLM-L6-v2's vocabulary, so encoding costs almost nothing, as on a GPU: what is measured is
the CPU-side work (reading, splitting, tokenizing, TF-IDF, ranking, writing, merging) and the memory
the pipeline holds. Each size runs in a fresh process under ``/usr/bin/time -f %M`` (peak resident
set size of that process, in KB, whatever the machine's load), with one torch thread. For
``--engine ray`` the driver's peak is that figure and the workers' peak is sampled every 0.2 s
(``psutil``) over every ``ray::`` process of the local cluster this run starts (its descendants).

``passages_per_cpu_second`` (passages / CPU seconds of the driver process inside ``mine()``, imports
and model loading left out) is the load-independent throughput per core of the local engine;
``passages_per_second`` is wall time and moves with the load.
``--code`` runs the same measurement against another checkout (its ``xprt_st`` is put first on
``PYTHONPATH``), so "before" and "after" come from the same script, corpus and model.
``--reference CHECKOUT --repeats N`` measures that checkout and ``--code`` in turns (reference, code,
reference, code, ...) in one run, so both see the same machine load, and reports the ratio of their
median ``passages_per_cpu_second``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]


def build_model(folder: Path) -> Path:
    """The tiny random BERT as a SentenceTransformer folder (mean pooling, max_seq_length 256)."""
    if (folder / "modules.json").is_file():
        return folder
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import AutoTokenizer, BertConfig, BertModel

    from xprt_st.models import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(None))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    raw = folder.with_name(folder.name + "-raw")
    BertModel(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    model = SentenceTransformer(modules=[Transformer(str(raw), max_seq_length=256), Pooling(32, "mean")], device="cpu")
    model.save(str(folder))
    return folder


def build_corpus(path: Path, documents: int, model_folder: Path) -> Path:
    """``documents`` synthetic documents as JSONL (seeded: the same file for every code version)."""
    if path.is_file():
        return path
    from transformers import AutoTokenizer

    from xprt_st.models import resolve_model_name

    vocab = AutoTokenizer.from_pretrained(resolve_model_name(None)).get_vocab()
    words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3)
    rng = random.Random(documents)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for i in range(documents):
            topic = rng.sample(words, 30)  # a document keeps to its topic words, with some general ones
            paragraphs = []
            for _ in range(rng.randint(5, 10)):
                n = rng.randint(40, 90)
                drawn = [rng.choice(topic) if rng.random() < 0.6 else rng.choice(words) for _ in range(n)]
                sentences, k = [], 0
                while k < n:
                    length = rng.randint(8, 20)
                    sentences.append(" ".join(drawn[k : k + length]).capitalize() + ".")
                    k += length
                paragraphs.append(" ".join(sentences))
            handle.write(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}) + "\n")
    tmp.rename(path)
    return path


def _ray_sampler(peak: dict[str, int], stop: threading.Event) -> None:
    """Peak RSS of every Ray worker of this process's own local cluster (its descendants named ``ray::``)."""
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        for process in me.children(recursive=True):
            try:
                if " ".join(process.cmdline()).startswith("ray::"):
                    key = str(process.pid)
                    peak[key] = max(peak.get(key, 0), process.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        stop.wait(0.2)


def child(args: argparse.Namespace) -> None:
    """One mining run in this process (run under /usr/bin/time by :func:`main`)."""
    import torch

    torch.set_num_threads(1)
    from sentence_transformers import SentenceTransformer

    import xprt_st.mining as mining

    model = SentenceTransformer(str(args.model), device="cpu")
    settings = {"model": model, "progress": False, "threshold_quantile": 0.5, "batch_size": 64}
    peak: dict[str, int] = {}
    stop = threading.Event()
    sampler = None
    if args.engine == "ray":
        import ray

        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        settings.update(engine="ray", num_workers=args.workers)
        sampler = threading.Thread(target=_ray_sampler, args=(peak, stop), daemon=True)
        sampler.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    stats = mining.mine([str(args.corpus)], str(args.out), **settings)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    stop.set()
    if sampler is not None:
        sampler.join()
    result = {
        "module": mining.__file__,
        "documents": stats["documents"],
        "passages": stats["passages"],
        "groups": stats["groups"],
        "mining_seconds": round(seconds, 2),
        "mining_cpu_seconds": round(cpu_seconds, 2),
        "encode_seconds": stats.get("encode_seconds"),
        "ray_worker_peak_rss_mb": round(max(peak.values()) / 2**20, 1) if peak else None,
        "ray_workers_sampled": len(peak),
    }
    Path(args.result).write_text(json.dumps(result))
    if args.engine == "ray":
        import ray

        ray.shutdown()


def measure(args: argparse.Namespace, documents: int, work: Path, model: Path) -> dict:
    corpus = build_corpus(work / f"corpus-{documents}.jsonl", documents, model)
    out = Path(tempfile.mkdtemp(prefix=f"out-{documents}-", dir=work))
    result = out.with_suffix(".json")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = str(args.code) + os.pathsep + env.get("PYTHONPATH", "")
    command = ["/usr/bin/time", "-f", "TIME %M %U %S %e", sys.executable, __file__, "--child"]
    command += ["--corpus", str(corpus), "--out", str(out / "mined"), "--model", str(model), "--result", str(result)]
    command += ["--engine", args.engine, "--workers", str(args.workers)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=work)
    line = [x for x in done.stderr.splitlines() if x.startswith("TIME ")]
    if done.returncode != 0 or not line:
        raise SystemExit(f"mining {documents} documents failed:\n{done.stderr[-4000:]}")
    rss_kb, user, system, wall = line[-1].split()[1:]
    figures = json.loads(result.read_text())
    cpu = float(user) + float(system)
    figures.update(
        {
            "peak_rss_mb": round(int(rss_kb) / 1024, 1),
            "cpu_seconds": round(cpu, 1),
            "wall_seconds": float(wall),
            "passages_per_cpu_second": round(figures["passages"] / figures["mining_cpu_seconds"], 1),
            "passages_per_second": round(figures["passages"] / figures["mining_seconds"], 1),
            "rss_kb_per_passage": round(int(rss_kb) / figures["passages"], 3),
            "corpus_mb": round(corpus.stat().st_size / 2**20, 1),
            "load_average": os.getloadavg(),
        }
    )
    subprocess.run(["rm", "-rf", str(out)], check=False)
    return figures


def compare(args: argparse.Namespace, model: Path) -> None:
    """``--reference`` and ``--code`` measured in turns at each size; the ratio of their median throughputs."""
    import statistics

    code = args.code
    sizes = []
    for documents in args.documents:
        runs: dict[str, list[dict]] = {"reference": [], "code": []}
        for _ in range(args.repeats):
            for name, checkout in (("reference", args.reference), ("code", code)):
                args.code = checkout
                figures = measure(args, documents, args.work, model)
                runs[name].append(figures)
                print(name, json.dumps(figures), flush=True)  # a script's progress, not library logging
        args.code = code
        median = {k: statistics.median(r["passages_per_cpu_second"] for r in v) for k, v in runs.items()}
        sizes.append(
            {
                "documents": documents,
                "reference_passages_per_cpu_second": median["reference"],
                "code_passages_per_cpu_second": median["code"],
                "ratio": round(median["code"] / median["reference"], 3),
                "runs": runs,
            }
        )
        print(json.dumps({k: v for k, v in sizes[-1].items() if k != "runs"}), flush=True)
    report = {
        "reference": str(args.reference),
        "code": str(code),
        "engine": args.engine,
        "repeats": args.repeats,
        "machine": f"{os.cpu_count()} CPU cores, no GPU, shared; one torch thread per process, nice {os.nice(0)}",
        "model": "random BERT, 2 layers, 32 wide, all-MiniLM-L6-v2 vocabulary, max_seq_length 256",
        "sizes": sizes,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose xprt_st is measured")
    parser.add_argument("--label", default="after", help="name of this code version in the JSON")
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-mining-scale")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--reference", type=Path, default=None, help="checkout measured in turns with --code")
    parser.add_argument("--repeats", type=int, default=1, help="turns per code version with --reference")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("corpus", "out", "model", "result"):
        parser.add_argument(f"--{name}", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    model = build_model(args.work / "tiny-bert-32")
    if args.reference is not None:
        compare(args, model)
        return
    runs = []
    for documents in args.documents:
        figures = measure(args, documents, args.work, model)
        runs.append(figures)
        print(json.dumps(figures), flush=True)  # a script's progress, not library logging
    report = {
        "label": args.label,
        "code": str(args.code),
        "engine": args.engine,
        "workers": args.workers if args.engine == "ray" else None,
        "machine": f"{os.cpu_count()} CPU cores, no GPU, shared; one torch thread per process",
        "model": "random BERT, 2 layers, 32 wide, all-MiniLM-L6-v2 vocabulary, max_seq_length 256",
        "runs": runs,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
