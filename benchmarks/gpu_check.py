"""The prepared GPU check: mining throughput, loss step cost and a short bf16 training run, in one results folder.

Run through ``benchmarks/gpu_check.sh`` (which sets the offline environment and the time limit):

    benchmarks/gpu_check.sh [OUT]          # on one GPU, under 8 minutes; OUT defaults to gpu-check/
    benchmarks/gpu_check.sh --smoke [OUT]  # the same stages at tiny sizes on the CPU (CI), 1-2 minutes

Stages, each writing its own JSON into OUT, then ``summary.json`` and ``summary.md`` over all of them:

1. ``mining.json``: ``bench_mining.py`` in bf16, mining throughput (passages/s) and its ratio to encoding the
   same passages once.
2. ``losses.json``: ``bench_losses.py`` at 64 groups x 128 tokens in bf16: one optimizer step of
   MultipleNegativesRankingLoss (the reference), "change only the positive", full xPRT paper-exact and with
   ``prediction_ratio=0.25``, RetroMAE, and xPRT with the vocabulary projection removed (the pass floor):
   step time, peak memory, both as ratios to the reference, the step's whole peak (``torch.cuda.max_memory_allocated``,
   ``max allocated MiB``; ``xprt_uncut`` is the step without issue 28's memory cuts), and groups per second.
3. ``train.json``: ``xprt-st mine`` on a BBC News sample (a synthetic corpus without the shared data), then
   ``xprt-st train --recipe xprt --precision bf16 --max-steps 100``; the result must load with plain
   ``SentenceTransformer`` and encode.

A stage that fails is recorded with its error and the check goes on; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "xprt_st.cli"]
"""``xprt-st`` from the checkout being tested (the script on PATH may belong to another install)."""

SIZES: dict[str, dict[str, Any]] = {
    "gpu": {
        "device": "cuda",
        "mining": ["--documents", "300", "--repeats", "2", "--batch-size", "256"],
        "losses": ["--groups", "64", "--tokens", "128", "--reps", "5", "--warmup", "2"],
        "train_documents": 600,
        "train": ["--max-steps", "100", "--batch-size", "32", "--max-seq-length", "128", "--save-steps", "100"],
        "stage_timeout": 240,  # seconds per command: the whole check must fit in 8 minutes
    },
    "smoke": {
        "device": "cpu",
        "mining": ["--documents", "6", "--repeats", "1", "--batch-size", "16"],
        "losses": ["--groups", "2", "--tokens", "16", "--reps", "1", "--warmup", "0"],
        "train_documents": 12,
        "train": ["--max-steps", "2", "--batch-size", "2", "--max-seq-length", "32", "--save-steps", "2"],
        "stage_timeout": None,  # a loaded CI machine is slow, not stuck: only gpu_check.sh's overall limit
    },
}
LOSS_CONFIGS = ("mnrl", "positive_only", "xprt", "xprt_sampled", "retromae", "xprt_floor", "xprt_uncut")


def _run(command: list[str], log: Path, timeout: float | None) -> None:
    """Run ``command``, its output into ``log``; raise with the log's tail when it fails."""
    with log.open("w") as handle:
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if result.returncode != 0:
        tail = log.read_text()[-2000:]
        raise RuntimeError(f"{' '.join(command[:4])} ... exited with {result.returncode}; log {log}:\n{tail}")


def machine(device: str) -> dict[str, Any]:
    """What the figures were measured on: ratios move with the hardware."""
    import torch

    from xprt_st.losses._vocab import fused_kernel

    info: dict[str, Any] = {
        "cpu": next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
            platform.processor(),
        ),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "device": device,
        "fused_cross_entropy_kernel": fused_kernel(torch.device(device)),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def stage_mining(out: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    path = out / "mining.json"
    command = [sys.executable, str(HERE / "bench_mining.py"), *sizes["mining"], "--precision", "bf16"]
    _run([*command, "--json", str(path)], out / "mining.log", sizes["stage_timeout"])
    return json.loads(path.read_text())


def stage_losses(out: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    path = out / "losses.json"
    configs = ",".join(f"{name}:bf16" for name in LOSS_CONFIGS)
    command = [sys.executable, str(HERE / "bench_losses.py"), *sizes["losses"], "--device", sizes["device"]]
    _run([*command, "--configs", configs, "--json", str(path)], out / "losses.log", sizes["stage_timeout"])
    figures = json.loads(path.read_text())
    groups = figures["args"]["groups"]
    for result in figures["results"].values():
        result["groups_per_second"] = groups / result["median_s"]
    path.write_text(json.dumps(figures, indent=2))
    return figures


def stage_train(out: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from bench_mining import _corpus

    corpus = _corpus(out, sizes["train_documents"])
    mined, run = out / "mined", out / "run"
    mine = [*CLI, "mine", str(corpus), "--output", str(mined), "--threshold-quantile", "0.5"]
    _run([*mine, "--device", sizes["device"], "--quiet"], out / "mine.log", sizes["stage_timeout"])
    train = [*CLI, "train", "--recipe", "xprt", "--mined", str(mined), "--output", str(run)]
    start = time.perf_counter()
    _run([*train, *sizes["train"], "--precision", "bf16", "--quiet"], out / "train.log", sizes["stage_timeout"])
    seconds = time.perf_counter() - start

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(run), device=sizes["device"])  # plain sentence-transformers, no xprt_st
    vectors = model.encode(["A perfect game allows no base runner.", "No batter reached base."])
    figures = {
        "train_seconds": round(seconds, 1),
        "arguments": sizes["train"],
        "loads_with_sentence_transformer": True,
        "embedding_dimension": int(vectors.shape[1]),
        "finite": bool((abs(vectors) < float("inf")).all()),
    }
    (out / "train.json").write_text(json.dumps(figures, indent=2))
    return figures


def summary_markdown(summary: dict[str, Any]) -> str:
    """The figures as the Markdown tables ``docs/`` records."""
    lines = [f"# GPU check ({summary['mode']})", "", f"Machine: `{json.dumps(summary['machine'])}`", ""]
    mining = summary["stages"].get("mining", {})
    if "ratio" in mining:
        lines += [
            "| mining passages/s | encode-only passages/s | ratio |",
            "|---|---|---|",
            f"| {mining['mining_passages_per_second']} | {mining['floor_passages_per_second']} | {mining['ratio']} |",
            "",
        ]
    losses = summary["stages"].get("losses", {})
    if "results" in losses:
        lines += [
            "| configuration | step s | x MNRL | peak MiB | x MNRL | max allocated MiB | groups/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for spec, r in losses["results"].items():
            lines.append(
                f"| {spec} | {r['median_s']:.3f} | {r['time_ratio']:.2f} | {r['peak_mib']:.0f} | "
                f"{r['memory_ratio']:.2f} | {r.get('process_peak_mib', float('nan')):.0f} | "
                f"{r['groups_per_second']:.1f} |"
            )
        lines.append("")
    train = summary["stages"].get("train", {})
    if "train_seconds" in train:
        lines += [f"Training: {train['arguments']} in {train['train_seconds']} s; loads with SentenceTransformer.", ""]
    for name, error in summary["errors"].items():
        lines += [f"**{name} failed:** {error.splitlines()[0]}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("gpu-check"), help="results folder")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, for CI")
    parser.add_argument("--stages", default="mining,losses,train", help="comma-separated subset to run")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "gpu"
    sizes = SIZES[mode]
    stages = {"mining": stage_mining, "losses": stage_losses, "train": stage_train}
    chosen = args.stages.split(",")
    unknown = sorted(set(chosen) - set(stages))
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; valid: {', '.join(stages)}")
    if mode == "gpu":
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device is visible; run on a GPU machine, or pass --smoke for the CPU smoke mode")
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"mode": mode, "machine": machine(sizes["device"]), "stages": {}, "errors": {}}
    start = time.perf_counter()
    for name in chosen:
        stage_start = time.perf_counter()
        try:
            summary["stages"][name] = stages[name](args.out, sizes)
        except Exception as error:  # record it and run the other stages: their figures stay useful
            summary["errors"][name] = f"{type(error).__name__}: {error}"
        summary.setdefault("stage_seconds", {})[name] = round(time.perf_counter() - stage_start, 1)
        summary["total_seconds"] = round(time.perf_counter() - start, 1)
        # after every stage: if the time limit stops the check, the finished stages' figures are kept
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
        (args.out / "summary.md").write_text(summary_markdown(summary))
    print(summary_markdown(summary))  # the script's result
    sys.exit(1 if summary["errors"] else 0)


if __name__ == "__main__":
    main()
