"""Where one training step's time goes: ``torch.profiler`` over one step of a ``bench_losses`` configuration.

Run:  python benchmarks/profile_step.py [--config xprt] [--groups 8] [--tokens 128] [--precision fp32|bf16]
      [--device cpu|cuda] [--top 15] [--trace step.json]

The step is exactly ``bench_losses``'s (same batch, model, optimizer); one warmup step runs first. The
loss's stages are labelled with ``torch.profiler.record_function`` by wrapping, in this process only, the
functions that run them (nothing in ``xprt_st`` changes), so the report shows two tables:

- stages: the forward's encoder pass, frozen-teacher pass, decoder passes and vocabulary losses (whose
  gradient is computed in the forward, see ``xprt_st/losses/_vocab.py``), then the backward and the
  optimizer step, each as a share of the step;
- operators: the ``--top`` operators by self time, to tell matrix products from element-wise passes.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_losses

import xprt_st.losses.retromae as retromae_module
import xprt_st.losses.xprt as xprt_module
from xprt_st.losses import _vocab
from xprt_st.losses.decoder import DecoderLayer, FillInDecoder
from xprt_st.models import load_model

STAGES = (
    "forward: encoder pass",
    "forward: frozen teacher pass",
    "forward: decoder passes",
    "forward: vocabulary losses (with their gradient)",
    "backward",
    "optimizer step",
)


def _labelled(label: str, function: Callable) -> Callable:
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with record_function(label):
            return function(*args, **kwargs)

    return wrapper


def label_stages() -> None:
    """Wrap the functions each stage runs in a ``record_function`` of the stage's name (this process only)."""
    xprt_module.encode_columns = _labelled(STAGES[0], xprt_module.encode_columns)
    xprt_module.teacher_embeddings = _labelled(STAGES[1], xprt_module.teacher_embeddings)
    FillInDecoder.fill_in = _labelled(STAGES[2], FillInDecoder.fill_in)
    DecoderLayer.forward = _labelled(STAGES[2], DecoderLayer.forward)
    _vocab._apply = _labelled(STAGES[3], _vocab._apply)
    if hasattr(retromae_module, "encode_columns"):
        retromae_module.encode_columns = _labelled(STAGES[0], retromae_module.encode_columns)


def stage_table(events, step_s: float) -> list[tuple[str, float]]:
    """(stage, seconds) from the profiler's labelled ranges; nested duplicates (fill_in -> layer) count once."""
    totals: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    ends: dict[str, float] = dict.fromkeys(STAGES, -1.0)
    ranges = sorted(
        (e for e in events if e.name in totals and e.device_type == torch.autograd.DeviceType.CPU),
        key=lambda e: e.time_range.start,
    )
    for event in ranges:
        start, end = event.time_range.start, event.time_range.end
        if start >= ends[event.name]:  # not inside an already counted range of the same stage
            totals[event.name] += (end - start) / 1e6
            ends[event.name] = end
    rows = [(name, seconds) for name, seconds in totals.items() if seconds > 0]
    rows.append(("other (loss glue, masking, terms)", max(0.0, step_s - sum(s for _, s in rows))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="xprt", choices=bench_losses.CONFIGS)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--precision", default="fp32", choices=bench_losses.PRECISIONS)
    parser.add_argument("--prediction-ratio", type=float, default=0.25)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--top", type=int, default=15, help="operators listed by self time")
    parser.add_argument("--trace", help="also write a Chrome trace (open in chrome://tracing or Perfetto)")
    args = parser.parse_args()

    torch.manual_seed(0)
    label_stages()
    model = load_model(None, device=args.device)
    step = bench_losses.make_step(
        args.config, model, args.groups, args.tokens, args.device, args.prediction_ratio, args.precision
    )
    step()  # warmup: first-call allocations and kernel selection stay out of the profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        step_s = time.perf_counter() - start
    events = prof.events()
    print(
        f"config={args.config} groups={args.groups} tokens={args.tokens} precision={args.precision} "
        f"device={args.device} threads={torch.get_num_threads()} step={step_s:.2f} s (profiled)"
    )
    print(f"{'stage':52} {'s':>8} {'share':>6}")
    for name, seconds in stage_table(events, step_s):
        print(f"{name:52} {seconds:8.2f} {seconds / step_s:6.1%}")
    sort_key = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_key, row_limit=args.top))
    if args.trace:
        prof.export_chrome_trace(args.trace)


if __name__ == "__main__":
    main()
