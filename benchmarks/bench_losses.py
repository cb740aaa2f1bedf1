"""Time and peak memory of one training step per loss, as ratios to a plain MultipleNegativesRankingLoss step.

Run:  python benchmarks/bench_losses.py [--groups 32] [--tokens 128] [--reps 5] [--rounds 1] [--device cpu|cuda]
      [--configs mnrl,positive_only,xprt,xprt_sampled,retromae] [--prediction-ratio 0.25] [--mini-batch 8]
      [--json out.json]

The recipes' own losses: ``cross_passage`` (change-only-positive, random-span-contrastive), ``cross_passage_hard``
(change-only-positive-hard), ``cross_passage_cached`` (the same under GradCache, ``objective.args.mini_batch_size``),
``xprt`` and ``xprt_hard``; ``positive_only`` is L_xp inside XPRTLoss (GradCache on above 16 groups).

A configuration ``NAME:bf16`` runs the step's forward under bf16 autocast (as ``--precision bf16`` trains);
ratios are to the first configuration of the same precision. ``xprt_floor`` is xPRT with the vocabulary
projection replaced by a free stand-in: the measured pass floor. Each step's process CPU time is reported
next to its wall time: on a shared machine the CPU-time ratio does not depend on the other jobs' load.

All steps use the same batch (real Python-docs passages shipped with the package, cut into windows that
fill ``--tokens``) and the real offline model (``xprt_st.models.load_model(None)``, all-MiniLM-L6-v2).
A step is forward + backward + AdamW step. Each configuration runs in its own subprocess (so one
configuration's allocations never inflate another's, and the machine holds one at a time): ``--warmup``
steps, then the median of ``--reps`` timed steps. Peak memory over the timed steps: CUDA uses
``torch.cuda.max_memory_allocated`` minus the memory held before them (``process_peak_mib``: without the
subtraction, the whole peak; on CPU the process's peak RSS); CPU uses the resident-set peak
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
from torch.profiler import record_function

from xprt_st.columns import GROUP_COLUMNS
from xprt_st.losses import CrossPassageLoss, HybridTeacherLoss, RetroMAELoss, WithRetention, XPRTLoss, _vocab
from xprt_st.losses.hybrid_teacher import corpus_lexicon
from xprt_st.models import load_model

CONFIGS = (
    "mnrl",
    "positive_only",
    "positive_only_retention",
    "xprt",
    "xprt_sampled",
    "xprt_no_retention",
    "retromae",
    "xprt_floor",
    "xprt_uncut",
    "cross_passage",
    "cross_passage_hard",
    "cross_passage_hard_retention",
    "cross_passage_cached",
    "xprt_hard",
    "hybrid_teacher_hard",
    "hybrid_teacher_lexical",
)
PRECISIONS = ("fp32", "bf16")
DESCRIPTIONS = {
    "mnrl": "MultipleNegativesRankingLoss on (anchor, positive): the reference",
    "positive_only": "XPRTLoss, L_xp only: change only the positive",
    "positive_only_retention": "XPRTLoss, L_xp + L_ret (one extra frozen-teacher pass)",
    "xprt": "XPRTLoss, all terms, retention on (paper's continued pre-training)",
    "xprt_sampled": "XPRTLoss, all terms, retention on, a sample of the fill-in positions scored (--prediction-ratio)",
    "xprt_no_retention": "XPRTLoss, all terms, no retention (paper's from-BERT setting)",
    "retromae": "RetroMAELoss on the anchor column (enhanced decoding + encoder MLM)",
    "xprt_floor": "XPRTLoss, all terms, retention on, the vocabulary projection replaced by a free stand-in: "
    "the pass floor, measured",
    "xprt_uncut": "XPRTLoss, all terms, retention on, no GradCache and the decoder in one block (before issue 28)",
    "cross_passage": "CrossPassageLoss: the change-only-positive recipe's loss (retention off)",
    "cross_passage_hard": "CrossPassageLoss, 2 hard negatives per anchor: change-only-positive-hard's loss",
    "cross_passage_hard_retention": "CrossPassageLoss, 2 hard negatives, with L_ret: change-only-positive-hard as "
    "every recipe trains it (the frozen start's pass over anchors and positives included)",
    "cross_passage_cached": "CrossPassageLoss, 2 hard negatives, GradCache in mini-batches of --mini-batch groups",
    "xprt_hard": "XPRTLoss, all terms, retention on, 2 hard negatives in L_xp: the xprt-hard recipe's loss",
    "hybrid_teacher_hard": "HybridTeacherLoss, 2 hard negatives, retention on: the hybrid-teacher-hard recipe's loss "
    "(the start's pass over every column, BM25 of each anchor against the batch's candidates)",
    "hybrid_teacher_lexical": "HybridTeacherLoss, 2 hard negatives and 2 lexical candidates, retention on: the "
    "hybrid-teacher-lexical recipe's loss (96 texts a step at 16 groups, not 64)",
}
HARD_NEGATIVES = 2
"""Hard-negative columns of the ``*_hard`` and ``*_cached`` configurations, as the recipes mine them."""
LEXICAL_CANDIDATES = 2
"""Lexical-candidate columns of ``hybrid_teacher_lexical``, as its recipe mines them."""


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


def build(name: str, model, prediction_ratio: float, mini_batch: int = 8) -> torch.nn.Module:
    if name == "mnrl":
        return MultipleNegativesRankingLoss(model)
    if name == "cross_passage":
        return CrossPassageLoss(model)
    if name == "cross_passage_hard":
        return CrossPassageLoss(model, hard_negatives=HARD_NEGATIVES)
    if name == "cross_passage_hard_retention":
        return WithRetention(CrossPassageLoss(model, hard_negatives=HARD_NEGATIVES))
    if name == "cross_passage_cached":
        return CrossPassageLoss(model, hard_negatives=HARD_NEGATIVES, mini_batch_size=mini_batch)
    if name == "xprt_hard":
        return XPRTLoss(model, hard_negatives=HARD_NEGATIVES)
    if name == "hybrid_teacher_hard":
        lexicon = corpus_lexicon(passages(1024, words=64), model)  # the counts of a small corpus
        return HybridTeacherLoss(model, lexicon, hard_negatives=HARD_NEGATIVES, hybrid_weight=40.0)
    if name == "hybrid_teacher_lexical":
        lexicon = corpus_lexicon(passages(1024, words=64), model)
        return HybridTeacherLoss(
            model, lexicon, hard_negatives=HARD_NEGATIVES, lexical_candidates=LEXICAL_CANDIDATES, hybrid_weight=40.0
        )
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
    if name == "xprt_uncut":
        return XPRTLoss(model, mini_batch_size=None, decoder_mini_batch_size=None)
    if name == "xprt_floor":
        _vocab._apply = _no_vocabulary_projection  # this child process only
        return XPRTLoss(model)
    raise ValueError(f"unknown configuration {name!r}; valid: {', '.join(CONFIGS)}")


def _no_vocabulary_projection(head, hidden: torch.Tensor, targets, teacher_hidden) -> torch.Tensor:
    """A stand-in for ``_vocab._apply`` that costs nothing but keeps the decoder's and head transform's backward."""
    return hidden.float().square().mean()


def make_step(
    name: str,
    base_model,
    groups: int,
    tokens: int,
    device: str,
    prediction_ratio: float,
    precision: str = "fp32",
    mini_batch: int = 8,
) -> Callable[[], None]:
    model = copy.deepcopy(base_model)
    model.max_seq_length = tokens
    model.train()
    loss = build(name, model, prediction_ratio, mini_batch).to(device)
    count = len(GROUP_COLUMNS) + HARD_NEGATIVES + (LEXICAL_CANDIDATES if name == "hybrid_teacher_lexical" else 0)
    texts = passages(groups * count, words=tokens)  # ~1.3 tokens per word: every row is full
    columns = [texts[i * groups : (i + 1) * groups] for i in range(count)]
    negatives = columns[len(GROUP_COLUMNS) :]
    columns = columns[: len(GROUP_COLUMNS)]
    if name in ("mnrl", "cross_passage"):
        columns = columns[:2]
    elif name in ("cross_passage_hard", "cross_passage_hard_retention", "cross_passage_cached", "hybrid_teacher_hard"):
        columns = columns[:2] + negatives
    elif name == "hybrid_teacher_lexical":  # the lexical columns after the hard negatives, as the recipe reads them
        columns = columns[:2] + negatives
    elif name == "xprt_hard":
        columns = columns + negatives
    elif name == "retromae":
        columns = columns[:1]
    features = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in model.preprocess(c).items()} for c in columns]
    labels = torch.arange(groups, device=device)
    optimizer = torch.optim.AdamW([p for p in loss.parameters() if p.requires_grad], lr=1e-5)

    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")

    def step() -> None:
        with autocast:  # as the trainer's bf16=True: the forward under autocast, backward and step outside
            value = loss([dict(f) for f in features], labels)
            value = torch.stack(list(value.values())).sum() if isinstance(value, dict) else value
        optimizer.zero_grad(set_to_none=True)
        with record_function("backward"):
            value.backward()
        with record_function("optimizer step"):
            optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def current_rss_kib() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() // 1024


def split_config(spec: str) -> tuple[str, str]:
    """``"xprt"`` -> ("xprt", "fp32"); ``"xprt:bf16"`` -> ("xprt", "bf16")."""
    name, _, precision = spec.partition(":")
    return name, precision or "fp32"


def machine() -> str:
    """The CPU model, core count and load average, printed next to the figures (ratios move with the hardware)."""
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "unknown"
    )
    text = f"cpu={model!r} cores={os.cpu_count()} threads={torch.get_num_threads()} load={os.getloadavg()}"
    if torch.cuda.is_available():
        text += f" gpu={torch.cuda.get_device_name()!r}"
    return text


def run_child(
    spec: str, groups: int, tokens: int, warmup: int, reps: int, device: str, prediction_ratio: float, mini_batch: int
) -> None:
    """Subprocess entry: time ``reps`` steps after ``warmup`` and print JSON with the median and peak memory."""
    torch.manual_seed(0)
    name, precision = split_config(spec)
    model = load_model(None, device=device)
    step = make_step(name, model, groups, tokens, device, prediction_ratio, precision, mini_batch)
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = current_rss_kib()
    times, cpu_times = [], []
    for _ in range(reps):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    if device == "cuda":
        process_peak_mib = torch.cuda.max_memory_allocated() / 2**20  # since the warmup: the step's whole peak
        peak_mib = process_peak_mib - baseline / 2**20
    else:
        process_peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the process's peak RSS
        peak_mib = process_peak_mib - baseline / 1024
    print(
        json.dumps({"times": times, "cpu_times": cpu_times, "peak_mib": peak_mib, "process_peak_mib": process_peak_mib})
    )


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
        help=f"comma-separated, each NAME or NAME:bf16 (the step's forward under bf16 autocast; default fp32); "
        f"ratios are to the first configuration of the same precision, else the first; available: {','.join(CONFIGS)}",
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
    parser.add_argument(
        "--mini-batch", type=int, default=8, help="CrossPassageLoss.mini_batch_size of cross_passage_cached"
    )
    parser.add_argument("--json", help="also write the results (and the machine) to this JSON file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(
            args.child, args.groups, args.tokens, args.warmup, args.reps, args.device, args.prediction_ratio,
            args.mini_batch,
        )  # fmt: skip
        return
    specs = args.configs.split(",")
    bad = sorted(
        spec for spec in specs if split_config(spec)[0] not in CONFIGS or split_config(spec)[1] not in PRECISIONS
    )
    if bad:
        parser.error(
            f"unknown configuration(s) {', '.join(bad)}; valid: {', '.join(CONFIGS)}, "
            f"optionally with :{' or :'.join(PRECISIONS)}"
        )
    machine_before = machine()
    times: dict[str, list[float]] = {spec: [] for spec in specs}
    cpu_times: dict[str, list[float]] = {spec: [] for spec in specs}
    peaks: dict[str, float] = {spec: 0.0 for spec in specs}
    process_peaks: dict[str, float] = {spec: 0.0 for spec in specs}
    for _ in range(args.rounds):
        for spec in specs:
            child = subprocess.run(
                [sys.executable, __file__, "--child", spec, "--groups", str(args.groups), "--tokens", str(args.tokens),
                 "--warmup", str(args.warmup), "--reps", str(args.reps), "--device", args.device,
                 "--prediction-ratio", str(args.prediction_ratio), "--mini-batch", str(args.mini_batch)],
                capture_output=True, text=True, check=True, env=CHILD_ENV,
            )  # fmt: skip
            result = json.loads(child.stdout.strip().splitlines()[-1])
            times[spec] += result["times"]
            cpu_times[spec] += result["cpu_times"]
            peaks[spec] = max(peaks[spec], result["peak_mib"])
            process_peaks[spec] = max(process_peaks[spec], result["process_peak_mib"])
            logging.getLogger(__name__).info("%s: %s", spec, result)
    results = {
        spec: {
            "median_s": statistics.median(times[spec]),
            "median_cpu_s": statistics.median(cpu_times[spec]),
            "peak_mib": peaks[spec],
            "process_peak_mib": process_peaks[spec],
        }
        for spec in specs
    }

    def reference(spec: str) -> str:
        precision = split_config(spec)[1]
        return next((other for other in specs if split_config(other)[1] == precision), specs[0])

    for spec, result in results.items():
        ref = results[reference(spec)]
        result["reference"] = reference(spec)
        result["time_ratio"] = result["median_s"] / ref["median_s"]
        result["cpu_ratio"] = result["median_cpu_s"] / ref["median_cpu_s"] if ref["median_cpu_s"] > 0 else float("nan")
        result["memory_ratio"] = result["peak_mib"] / ref["peak_mib"] if ref["peak_mib"] > 0 else float("nan")
    print(f"before: {machine_before}")
    print(f"after:  {machine()}")
    print(
        f"device={args.device} groups={args.groups} tokens={args.tokens} reps={args.reps} warmup={args.warmup} "
        f"rounds={args.rounds} prediction_ratio={args.prediction_ratio} mini_batch={args.mini_batch}"
    )
    print(
        f"{'configuration':26} {'step s':>8} {'x ref':>6} {'cpu s':>8} {'x ref':>6} {'peak MiB':>9} {'x ref':>6}"
        "  description"
    )
    for spec, result in results.items():
        print(
            f"{spec:26} {result['median_s']:8.3f} {result['time_ratio']:6.2f} {result['median_cpu_s']:8.3f} "
            f"{result['cpu_ratio']:6.2f} {result['peak_mib']:9.0f} {result['memory_ratio']:6.2f}"
            f"  {DESCRIPTIONS[split_config(spec)[0]]}"
        )
    if args.json:
        summary = {"machine_before": machine_before, "machine_after": machine(), "args": vars(args), "results": results}
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)


if __name__ == "__main__":
    main()
