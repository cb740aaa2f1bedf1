"""Peak memory of one optimizer step per recipe, as a ratio to a MultipleNegativesRankingLoss step, with a breakdown.

Run:  python benchmarks/bench_memory.py [--groups 16,32] [--tokens 128] [--models minilm,small-bert]
      [--precisions fp32,bf16] [--configs mnrl,xprt_uncut,xprt] [--steps 2] [--json out.json]

Every (configuration, groups, model, precision) runs in a FRESH subprocess, so its peak resident set
(``ru_maxrss`` of the child, the figure ``/usr/bin/time -f %M`` prints) is its own: the process peak,
model loading included, is what a user's ``train`` meets; ``step growth`` is that peak minus the RSS just
before the first step. Ratios are to the ``mnrl`` configuration of the same groups, model and precision,
measured in the same run. The children run with a fixed glibc mmap threshold so that freed tensors leave the
RSS (as in ``bench_losses.py``).

The batch is synthetic: random token ids (``[CLS] ids [SEP]``, every row exactly ``--tokens`` long), so the
memory does not depend on a corpus. Models: ``minilm`` is the offline default (all-MiniLM-L6-v2, 6 layers x 384);
``small-bert`` a random BERT of the from-scratch setting's size (4 layers x 256, 4 heads, 1024 feed-forward,
``xprt_st.training.pretrain_mlm.SmallBertConfig``) with MiniLM's vocabulary; random weights are fine for memory.

The breakdown comes from ``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd keeps for backward
is charged to the stage that saved it (encoder passes, retention teacher, decoder passes, vocabulary projections
and the MLM head's transform, other), deduplicated by storage, and counted while autograd holds it; the table
shows each stage's share at the moment the total was largest. Parameters, gradients and the AdamW state are
counted from their tensors; ``transient`` is what is left of the step growth (buffers that live inside one
operation, such as the vocabulary chunks, the allocator's slack).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

CONFIGS = {
    "mnrl": "MultipleNegativesRankingLoss on (anchor, positive): the reference",
    "xprt_uncut": "XPRTLoss defaults (all terms, retention), every memory cut off: the computation before issue 28",
    "xprt": "XPRTLoss defaults (all terms, retention): the default xprt recipe",
    "xprt_gradcache": "XPRTLoss defaults plus GradCache of the encoder passes (mini_batch_size=--mini-batch-size)",
    "xprt_checkpointing": "XPRTLoss defaults plus gradient checkpointing of the encoder layers",
}
MODELS = ("minilm", "small-bert")
PRECISIONS = ("fp32", "bf16")
STAGES = ("encoder", "retention teacher", "decoder", "vocabulary", "other")
CHILD_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def build_model(name: str, tokens: int):
    """The SentenceTransformer of ``name``: the offline default, or a random small BERT saved to a temp folder."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.models import load_model, resolve_model_name

    if name == "minilm":
        model = load_model(None, device="cpu")
    else:
        from transformers import AutoTokenizer, BertConfig, BertModel

        from xprt_st.training.pretrain_mlm import SmallBertConfig

        size = SmallBertConfig()
        folder = tempfile.mkdtemp(prefix="small-bert-")
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(None))
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=size.hidden,
            num_hidden_layers=size.layers,
            num_attention_heads=size.heads,
            intermediate_size=size.intermediate,
            max_position_embeddings=512,
        )
        BertModel(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        model = SentenceTransformer(folder, device="cpu")
    model.max_seq_length = tokens
    return model


def synthetic_features(model, columns: int, groups: int, tokens: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``columns`` feature dicts of ``groups`` rows: ``[CLS]`` + random ordinary ids + ``[SEP]``, ``tokens`` long."""
    tokenizer = model.tokenizer
    generator = torch.Generator().manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    low = max(special) + 1 if max(special) < 1000 else 1000
    features = []
    for _ in range(columns):
        ids = torch.randint(low, tokenizer.vocab_size, (groups, tokens), generator=generator)
        ids[:, 0] = tokenizer.cls_token_id
        ids[:, -1] = tokenizer.sep_token_id
        features.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return features


def build_loss(config: str, model, mini_batch_size: int):
    """The loss of configuration ``config`` (the memory options passed only when this XPRTLoss has them)."""
    import inspect

    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from xprt_st.losses import XPRTLoss

    if config == "mnrl":
        return MultipleNegativesRankingLoss(model)
    accepted = inspect.signature(XPRTLoss.__init__).parameters
    kwargs = {}
    if config == "xprt_uncut":
        kwargs = {key: None for key in ("mini_batch_size", "decoder_mini_batch_size") if key in accepted}
    elif config == "xprt_gradcache":
        kwargs = {"mini_batch_size": mini_batch_size}
    elif config == "xprt_checkpointing":
        model.gradient_checkpointing_enable()
    return XPRTLoss(model, **kwargs)


class SavedTensorLedger:
    """Bytes autograd keeps for backward, per stage, while it keeps them (deduplicated by storage)."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.live: dict[str, int] = defaultdict(int)
        self.storages: dict[int, list] = {}  # data_ptr -> [stage, bytes, holders]
        self.peak_total = 0
        self.at_peak: dict[str, int] = {}
        self.exclude: set[int] = set()  # parameters: in memory before the step, counted apart

    def stage(self) -> str:
        return self.stack[-1] if self.stack else "other"

    def pack(self, tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.exclude:
            return _Held(tensor, -1, self)
        entry = self.storages.get(key)
        if entry is None:
            entry = self.storages[key] = [self.stage(), storage.nbytes(), 0]
            self.live[entry[0]] += entry[1]
            total = sum(self.live.values())
            if total > self.peak_total:
                self.peak_total, self.at_peak = total, dict(self.live)
        entry[2] += 1
        return _Held(tensor, key, self)

    def release(self, key: int) -> None:
        entry = self.storages.get(key)
        if entry is None:
            return
        entry[2] -= 1
        if entry[2] == 0:
            self.live[entry[0]] -= entry[1]
            del self.storages[key]

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda held: held.tensor)

    def labelled(self, stage: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            self.stack.append(stage)
            try:
                return function(*args, **kwargs)
            finally:
                self.stack.pop()

        return wrapper


class _Held:
    """A saved tensor as autograd holds it; when autograd lets go, the ledger stops counting it."""

    __slots__ = ("key", "ledger", "tensor")

    def __init__(self, tensor: torch.Tensor, key: int, ledger: SavedTensorLedger) -> None:
        self.tensor, self.key, self.ledger = tensor, key, ledger

    def __del__(self) -> None:
        self.ledger.release(self.key)


def label_stages(ledger: SavedTensorLedger, loss) -> None:
    """Charge what each stage saves to it (this process only): module pre/post hooks and function wrappers."""
    from xprt_st.losses import _vocab
    from xprt_st.losses.decoder import FillInDecoder
    from xprt_st.models import MLMHead

    def by_module(module: torch.nn.Module, stage: str) -> None:
        def enter(*_) -> None:
            ledger.stack.append(stage)

        def leave(*_) -> None:  # a forward hook that returns a value would replace the module's output
            ledger.stack.pop()

        module.register_forward_pre_hook(enter)
        module.register_forward_hook(leave)

    ledger.exclude = {tensor.untyped_storage().data_ptr() for tensor in [*loss.parameters(), *loss.buffers()]}
    by_module(loss.model, "encoder")
    if getattr(loss, "teacher", None) is not None:
        by_module(loss.teacher, "retention teacher")
    FillInDecoder.fill_in = ledger.labelled("decoder", FillInDecoder.fill_in)
    MLMHead.transform = ledger.labelled("vocabulary", MLMHead.transform)
    _vocab._apply = ledger.labelled("vocabulary", _vocab._apply)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def current_rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def run_child(config: str, groups: int, tokens: int, model_name: str, precision: str, steps: int, mini: int) -> dict:
    """One configuration in this (fresh) process: ``steps`` optimizer steps; the peak RSS and the breakdown."""
    torch.manual_seed(0)
    model = build_model(model_name, tokens)
    model.train()
    loss = build_loss(config, model, mini)
    columns = 2 if config == "mnrl" else 5
    features = synthetic_features(model, columns, groups, tokens)
    labels = torch.arange(groups)
    optimizer = torch.optim.AdamW([p for p in loss.parameters() if p.requires_grad], lr=1e-5)
    ledger = SavedTensorLedger()
    label_stages(ledger, loss)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    rss_before = current_rss_mib()
    times, cpu_times, values = [], [], []
    for _ in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        with ledger.hooks():
            with autocast:  # as the trainer's bf16=True: the forward under autocast, backward outside
                value = loss([dict(f) for f in features], labels)
                terms = value if isinstance(value, dict) else {"loss": value}
                total = torch.stack([term.float() for term in terms.values()]).sum()
            optimizer.zero_grad(set_to_none=True)
            total.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        values.append({key: float(term) for key, term in terms.items()})
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    parameters = [p for p in loss.parameters() if p.requires_grad]
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    breakdown = {stage: ledger.at_peak.get(stage, 0) / 2**20 for stage in STAGES}
    breakdown["parameter gradients"] = tensor_bytes(p.grad for p in parameters) / 2**20
    breakdown["optimizer state"] = tensor_bytes(state) / 2**20
    growth = peak_mib - rss_before
    breakdown["transient"] = growth - sum(breakdown.values())
    return {
        "peak_mib": peak_mib,
        "rss_before_step_mib": rss_before,
        "step_growth_mib": growth,
        "saved_for_backward_peak_mib": ledger.peak_total / 2**20,
        "breakdown_mib": breakdown,
        "times_s": times,
        "cpu_times_s": cpu_times,
        "values": values,
    }


def machine() -> str:
    """The CPU model, core count, memory and load average, next to the figures."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory = next((line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")), "0")
    return f"cpu={cpu!r} cores={os.cpu_count()} memory={int(memory) / 2**20:.1f} GiB load={os.getloadavg()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", default="16,32", help="comma-separated batch sizes (groups per step)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--models", default="minilm", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--precisions", default="fp32", help=f"comma-separated, of {', '.join(PRECISIONS)}")
    parser.add_argument("--configs", default="mnrl,xprt_uncut,xprt", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps per child (the peak is over all)")
    parser.add_argument("--mini-batch-size", type=int, default=8, help="GradCache groups of xprt_gradcache")
    parser.add_argument("--json", help="append each result as one JSON line to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config, groups, model_name, precision = args.child.split("/")
        result = run_child(config, int(groups), args.tokens, model_name, precision, args.steps, args.mini_batch_size)
        print(json.dumps(result))
        return
    lists = {
        "configs": (args.configs.split(","), CONFIGS),
        "models": (args.models.split(","), MODELS),
        "precisions": (args.precisions.split(","), PRECISIONS),
    }
    for flag, (values, valid) in lists.items():
        bad = [value for value in values if value not in valid]
        if bad:
            parser.error(f"--{flag}: unknown {', '.join(bad)}; valid: {', '.join(valid)}")
    groups_list = [int(value) for value in args.groups.split(",")]
    print(f"machine: {machine()}")
    header = f"{'config':20} {'model':10} {'prec':5} {'B':>3} {'peak MiB':>9} {'x mnrl':>6} {'growth':>7} {'cpu s':>7}"
    print(header + "  breakdown MiB (at the saved-tensor peak)")
    for model_name in lists["models"][0]:
        for precision in lists["precisions"][0]:
            for groups in groups_list:
                reference = None
                for config in lists["configs"][0]:
                    spec = f"{config}/{groups}/{model_name}/{precision}"
                    child = subprocess.run(
                        [sys.executable, __file__, "--child", spec, "--tokens", str(args.tokens),
                         "--steps", str(args.steps), "--mini-batch-size", str(args.mini_batch_size)],
                        capture_output=True, text=True, env=CHILD_ENV,
                    )  # fmt: skip
                    if child.returncode != 0:
                        print(f"{spec}: failed ({child.returncode}): {child.stderr.strip().splitlines()[-1:]}")
                        continue
                    result = json.loads(child.stdout.strip().splitlines()[-1])
                    if config == "mnrl":
                        reference = result["peak_mib"]
                    ratio = result["peak_mib"] / reference if reference else float("nan")
                    parts = " ".join(f"{k}={v:.0f}" for k, v in result["breakdown_mib"].items())
                    print(
                        f"{config:20} {model_name:10} {precision:5} {groups:3d} {result['peak_mib']:9.0f} {ratio:6.2f} "
                        f"{result['step_growth_mib']:7.0f} {result['cpu_times_s'][-1]:7.1f}  {parts}",
                        flush=True,
                    )
                    if args.json:
                        record = {"config": config, "groups": groups, "model": model_name, "precision": precision}
                        record.update(tokens=args.tokens, ratio_to_mnrl=ratio, machine=machine(), **result)
                        with Path(args.json).open("a") as handle:
                            handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
