"""Time and peak memory of one training step per loss, as ratios to a plain MultipleNegativesRankingLoss step.

Run:  python benchmarks/bench_losses.py [--groups 32] [--tokens 128] [--reps 5] [--rounds 1] [--device cpu|cuda]
      [--configs mnrl,positive_only,xprt,xprt_sampled,retromae] [--prediction-ratio 0.25]

All steps use the same batch (real Python-docs passages shipped with the package, cut into windows that
fill ``--tokens``) and the real offline model (``xprt_st.models.load_model(None)``, all-MiniLM-L6-v2).
A step is forward + backward + AdamW step. Each configuration runs in its own subprocess (so one
configuration's allocations never inflate another's, and the machine holds one at a time): ``--warmup``
steps, then the median of ``--reps`` timed steps. Peak memory over the timed steps: CUDA uses
``torch.cuda.max_memory_allocated`` minus the memory held before them; CPU uses the resident-set peak
(``ru_maxrss``) minus the RSS before them, which covers torch's allocator that ``tracemalloc`` cannot see;
the children run with a fixed glibc mmap threshold so that freed memory leaves the RSS.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import logging
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.resources import files

import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from xprt_st.columns import GROUP_COLUMNS
from xprt_st.losses import RetroMAELoss, XPRTLoss
from xprt_st.models import load_model

CONFIGS = (
    "mnrl",
    "positive_only",
    "positive_only_retention",
    "xprt",
    "xprt_sampled",
    "xprt_no_retention",
    "retromae",
)
DESCRIPTIONS = {
    "mnrl": "MultipleNegativesRankingLoss on (anchor, positive): the reference",
    "positive_only": "XPRTLoss, L_xp only: change only the positive",
    "positive_only_retention": "XPRTLoss, L_xp + L_ret (one extra frozen-teacher pass)",
    "xprt": "XPRTLoss, all terms, retention on (paper's continued pre-training)",
    "xprt_sampled": "XPRTLoss, all terms, retention on, a sample of the fill-in positions scored (--prediction-ratio)",
    "xprt_no_retention": "XPRTLoss, all terms, no retention (paper's from-BERT setting)",
    "retromae": "RetroMAELoss on the anchor column (enhanced decoding + encoder MLM)",
}


CHILD_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
"""A fixed glibc mmap threshold: freed tensors go back to the OS at once, so RSS follows live memory and the
peak is not hidden by memory kept from the warmup step (the dynamic threshold would keep it in the heap)."""


def passages(count: int, words: int) -> list[str]:
    """Real text: windows of ``words`` words from the Python docs pages shipped with xprt_st."""
    path = files("xprt_st").joinpath("data/python-docs-pages.jsonl.gz")
    out: list[str] = []
    with gzip.open(str(path), "rt") as handle:
        for line in handle:
            html = json.loads(line)["html"]
            text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<(script|style).*?</\1>", " ", html)))
            tokens = text.split()
            out += [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words, words)]
            if len(out) >= count:
                return out[:count]
    raise RuntimeError(f"only {len(out)} passages of {words} words in {path}")


def build(name: str, model, prediction_ratio: float) -> torch.nn.Module:
    if name == "mnrl":
        return MultipleNegativesRankingLoss(model)
    if name in ("positive_only", "positive_only_retention"):
        retention = 40.0 if name.endswith("retention") else None
        return XPRTLoss(model, cross_weight=0, self_weight=0, mlm_weight=0, unif_weight=0, retention_weight=retention)
    if name == "xprt":
        return XPRTLoss(model)
    if name == "xprt_sampled":
        return XPRTLoss(model, prediction_ratio=prediction_ratio)
    if name == "xprt_no_retention":
        return XPRTLoss(model, retention_weight=None)
    if name == "retromae":
        return RetroMAELoss(model, pooling="model")
    raise ValueError(f"unknown configuration {name!r}; valid: {', '.join(CONFIGS)}")


def make_step(
    name: str, base_model, groups: int, tokens: int, device: str, prediction_ratio: float
) -> Callable[[], None]:
    model = copy.deepcopy(base_model)
    model.max_seq_length = tokens
    model.train()
    loss = build(name, model, prediction_ratio).to(device)
    texts = passages(groups * len(GROUP_COLUMNS), words=tokens)  # ~1.3 tokens per word: every row is full
    columns = [texts[i * groups : (i + 1) * groups] for i in range(len(GROUP_COLUMNS))]
    if name == "mnrl":
        columns = columns[:2]
    elif name == "retromae":
        columns = columns[:1]
    features = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in model.preprocess(c).items()} for c in columns]
    labels = torch.arange(groups, device=device)
    optimizer = torch.optim.AdamW([p for p in loss.parameters() if p.requires_grad], lr=1e-5)

    def step() -> None:
        value = loss([dict(f) for f in features], labels)
        value = torch.stack(list(value.values())).sum() if isinstance(value, dict) else value
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def current_rss_kib() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() // 1024


def run_child(
    name: str, groups: int, tokens: int, warmup: int, reps: int, device: str, prediction_ratio: float
) -> None:
    """Subprocess entry: time ``reps`` steps after ``warmup`` and print JSON with the median and peak memory."""
    torch.manual_seed(0)
    step = make_step(name, load_model(None, device=device), groups, tokens, device, prediction_ratio)
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = current_rss_kib()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    if device == "cuda":
        peak_mib = (torch.cuda.max_memory_allocated() - baseline) / 2**20
    else:
        peak_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) / 1024
    print(json.dumps({"median_s": statistics.median(times), "times": times, "peak_mib": peak_mib}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--configs",
        default="mnrl,positive_only,xprt,xprt_sampled,retromae",
        help=f"comma-separated, the first is the reference; available: {','.join(CONFIGS)}",
    )
    parser.add_argument(
        "--prediction-ratio", type=float, default=0.25, help="XPRTLoss.prediction_ratio of xprt_sampled"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every configuration once per round, in turn, and pool the rounds' timed steps: load that drifts "
        "during the run then weighs on every configuration alike",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args.groups, args.tokens, args.warmup, args.reps, args.device, args.prediction_ratio)
        return
    names = args.configs.split(",")
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}; valid: {', '.join(CONFIGS)}")
    times: dict[str, list[float]] = {name: [] for name in names}
    peaks: dict[str, float] = {name: 0.0 for name in names}
    for _ in range(args.rounds):
        for name in names:
            child = subprocess.run(
                [sys.executable, __file__, "--child", name, "--groups", str(args.groups), "--tokens", str(args.tokens),
                 "--warmup", str(args.warmup), "--reps", str(args.reps), "--device", args.device,
                 "--prediction-ratio", str(args.prediction_ratio)],
                capture_output=True, text=True, check=True, env=CHILD_ENV,
            )  # fmt: skip
            result = json.loads(child.stdout.strip().splitlines()[-1])
            times[name] += result["times"]
            peaks[name] = max(peaks[name], result["peak_mib"])
            logging.getLogger(__name__).info("%s: %s", name, result)
    results = {name: {"median_s": statistics.median(times[name]), "peak_mib": peaks[name]} for name in names}

    reference = results[names[0]]
    print(
        f"device={args.device} groups={args.groups} tokens={args.tokens} reps={args.reps} warmup={args.warmup} "
        f"rounds={args.rounds} prediction_ratio={args.prediction_ratio}"
    )
    print(f"{'configuration':26} {'step s':>8} {'x ref':>6} {'peak MiB':>9} {'x ref':>6}  description")
    for name in names:
        result = results[name]
        time_ratio = result["median_s"] / reference["median_s"]
        memory_ratio = result["peak_mib"] / reference["peak_mib"] if reference["peak_mib"] > 0 else float("nan")
        print(
            f"{name:26} {result['median_s']:8.3f} {time_ratio:6.2f} {result['peak_mib']:9.0f} {memory_ratio:6.2f}"
            f"  {DESCRIPTIONS[name]}"
        )


if __name__ == "__main__":
    main()
