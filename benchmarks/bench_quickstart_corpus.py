"""The one-command path on real documents, stage by stage: this checkout against another, in one run.

    python benchmarks/bench_quickstart_corpus.py --reference /path/to/older/checkout \\
        --json benchmarks/results/bench-quickstart-corpus-cpu.json

Each turn runs ``xprt-st quickstart --corpus DOCS --task BEIR`` in a fresh process, one torch thread, with
the checkout's ``xprt_st`` first on ``PYTHONPATH``, on the first ``--documents`` NFCorpus abstracts of the
shared data (``$XPRT_DATA_DIR`` or ``../shared/data``) with their titles, and a labelled BEIR folder cut to
those abstracts (the test queries with a relevant abstract among them). The checkouts run in turns
(reference, code, code, reference, ...), so both see the same machine load.

**What is timed.** The same stages in every checkout: the process wraps functions that both versions have
(the quickstart's ``mine``, ``_add_hard_negatives``, ``train_recipe``, ``evaluate_models``,
``label_free_summary``, ``titles_summary``; mining's ``split_shard`` and ``MiningEncoder.encode``; the
training-time label-free evaluator) in the stage timer of *this* checkout's ``xprt_st/stage_timing.py``,
loaded by path, so an older checkout that has no timer is measured alike. An inner stage's seconds are its
own (the outer stage is paused): ``train`` is the training steps with what the Trainer does around them,
without the label-free scoring inside it; ``other`` is the time between stages (checks, loading the recipe,
writing files). Python start-up and imports are the process's wall time minus the stages' sum.

**What is compared.** The mined groups (every column, hard negatives included), the trained weights
(largest absolute difference) and every score of ``summary.json`` must agree between the checkouts; the
JSON says how closely they do. The ratios are this checkout's seconds over the reference's, per stage, for
the stages that are not training steps (everything but ``train``; also without the labelled evaluation,
which encodes whole documents no other stage reads), and for the whole process. With ``--repeats`` above 1
every turn is kept and the ratios are those of the first turn of each; ``--recompute`` recomputes them from a
written JSON.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TIMER_FILE = REPO / "xprt_st" / "stage_timing.py"
WRAPPED = [  # (module, attribute or Class.method, stage): names both the older and this checkout have (the
    # quickstart's module: xprt_st/quickstart.py before it was a package, xprt_st/quickstart/run.py since, and
    # xprt_st/quickstart/stages.py, whose stages call them, since the quickstart runs through run_pipeline; "a|b": the
    # name older code has, then this checkout's; "module:name": a name of another module, where this checkout's
    # stages, the pipeline's own, call it)
    ("xprt_st.quickstart", "run_quickstart", "other"),
    ("xprt_st.quickstart", "mine|xprt_st.mining.mine:run_mining", "mine"),
    ("xprt_st.mining.engines.local", "GroupBuilder.split_shard", "read corpus"),
    ("xprt_st.mining.encoder", "MiningEncoder.encode", "encode for mining"),
    ("xprt_st.quickstart", "_add_hard_negatives|finish_mining|xprt_st.pipeline.stages:finish_mining", "hard negatives"),
    ("xprt_st.quickstart", "train_recipe|xprt_st.training:train_recipe", "train"),
    ("xprt_st.training.label_free", "LabelFreeEvaluator.score_start", "label-free: start (in training)"),
    ("xprt_st.training.label_free", "LabelFreeEvaluator.__call__", "label-free: trained (in training)"),
    ("xprt_st.training.run", "finish", "label-free: trained (in training)"),
    ("xprt_st.quickstart", "evaluate_models|xprt_st.evaluation.run:evaluate_models",
     "evaluate: task (start and trained)"),
    # this checkout scores the label-free check and the titles in one runner: both go to the first row
    ("xprt_st.quickstart", "label_free_summary|xprt_st.evaluation.heldout_checks:run_heldout_checks",
     "label-free summary"),
    ("xprt_st.quickstart", "titles_summary|xprt_st.quickstart.summary:titles_summary", "titles: start and trained"),
]  # fmt: skip
TRAINING = "train"
EVALUATION = "evaluate: task (start and trained)"


def build_inputs(data_dir: Path, documents: int, folder: Path) -> tuple[Path, Path]:
    """The first ``documents`` NFCorpus abstracts (JSONL with ``_id``, ``title``, ``text``) and a BEIR folder of
    them: the test queries with at least one relevant abstract among them, their judgements cut to those."""
    source = data_dir / "nfcorpus"
    if not (source / "corpus.jsonl.gz").is_file():
        sys.exit(f"{source}/corpus.jsonl.gz is missing: the benchmark reads NFCorpus from the shared data")
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "nfcorpus-docs.jsonl"
    rows = []
    with gzip.open(source / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
        for _, line in zip(range(documents), lines, strict=False):
            rows.append(json.loads(line))
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ids = {r["_id"] for r in rows}
    qrels = [line.split("\t") for line in (source / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    kept = [(q, d, s) for q, d, s in qrels if d in ids]
    queries = {q for q, _, _ in kept}
    beir = folder / "nfcorpus-beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    (beir / "corpus.jsonl").write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    with gzip.open(source / "queries.jsonl.gz", "rt", encoding="utf-8") as lines:
        texts = [json.loads(line) for line in lines]
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q["_id"], "text": q["text"]}) + "\n" for q in texts if q["_id"] in queries),
        encoding="utf-8",
    )
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in kept), encoding="utf-8"
    )
    return corpus, beir


def _timer_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_stage_timing", TIMER_FILE)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _wrap(timer: Any, module_name: str, attribute: str, name: str) -> None:
    import functools
    import importlib

    module = importlib.import_module(module_name)
    if module_name == "xprt_st.quickstart" and hasattr(module, "__path__"):  # the package: the module that calls it
        homes = []
        for home in ("stages", "run"):
            try:
                homes.append(importlib.import_module(f"xprt_st.quickstart.{home}"))
            except ModuleNotFoundError:  # a package from before the stages
                continue
        own = [name for name in attribute.split("|") if ":" not in name]
        found = [home for home in homes if any(hasattr(home, name.split(".")[0]) for name in own)]
        module = (found or homes)[0]
    for option in attribute.split("|"):
        home_name, _, name = option.rpartition(":")
        home = importlib.import_module(home_name) if home_name else module
        if hasattr(home, name.split(".")[0]):
            module, attribute = home, name
            break
    owner, _, method = attribute.rpartition(".")
    target = getattr(module, owner) if owner else module
    original = getattr(target, method)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with timer.stage(name):
            return original(*args, **kwargs)

    setattr(target, method, timed)


def child(code: Path, result: Path, arguments: list[str]) -> None:
    """In the measured process: wrap the stages, run the quickstart command, write the stage table."""
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    sys.path.insert(0, str(code))
    timing = _timer_module()
    timer = timing.StageTimer()
    for module_name, attribute, name in WRAPPED:
        _wrap(timer, module_name, attribute, name)
    from xprt_st.cli import app

    try:
        app(arguments, standalone_mode=False)
    finally:
        record = {
            "stages": timer.rows(),
            "process_wall_s": time.perf_counter() - started_wall,
            "process_cpu_s": time.process_time() - started_cpu,
        }
        result.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def run_turn(label: str, code: Path, corpus: Path, beir: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One quickstart in a fresh process with ``code`` first on the path; its stage table and outputs."""
    output = work / f"{label}-run"
    result = work / f"{label}-stages.json"
    command = ["quickstart", "--corpus", str(corpus), "--id-field", "_id", "--title-field", "title"]
    command += ["--task", str(beir), "-o", str(output), "--max-steps", str(args.max_steps)]
    command += ["--batch-size", str(args.batch_size), "--seed", str(args.seed)]
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env |= {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tick = time.perf_counter()
    log = work / f"{label}.log"
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(code), str(result), "--", *command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.perf_counter() - tick
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{label}: the quickstart failed (exit {done.returncode}); see {log}")
    record = json.loads(result.read_text(encoding="utf-8"))
    record |= {"label": label, "code": str(code), "wall_s": wall}
    record["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record["output"] = str(output)
    summary = json.loads((output / "summary.json").read_text(encoding="utf-8"))
    record["own_stage_table"] = summary.get("stages")  # the checkout's own table, where it writes one
    return record


def agreement(reference: Path, code: Path) -> dict[str, Any]:
    """How closely two runs agree: the mined groups, the trained weights, every score of summary.json."""
    import datasets
    import numpy as np
    from safetensors.numpy import load_file

    groups = [datasets.load_from_disk(str(folder / "mined")) for folder in (reference, code)]
    same_groups = groups[0].column_names == groups[1].column_names and groups[0].to_dict() == groups[1].to_dict()
    columns = [c for c in groups[0].column_names if c in groups[1].column_names]
    shared = min(len(g) for g in groups)  # rows compared in order; another count of groups is itself a difference
    differing = {
        c: [i for i, (a, b) in enumerate(zip(groups[0][c][:shared], groups[1][c][:shared], strict=True)) if a != b]
        for c in columns
    }
    rows = sorted({i for found in differing.values() for i in found})
    repeated = [  # per run: the rows whose negatives are one passage repeated (a single survivor, or a random one)
        {i for i, (a, b) in enumerate(zip(g["negative_1"], g["negative_2"], strict=True)) if a == b}
        if "negative_2" in g.column_names
        else set()
        for g in groups
    ]
    hard_negatives = [
        json.loads((folder / "mined" / "stats.json").read_text(encoding="utf-8")).get("hard_negatives")
        for folder in (reference, code)
    ]
    weights = [load_file(str(folder / "model" / "model.safetensors")) for folder in (reference, code)]
    common = [k for k in weights[0] if k in weights[1] and weights[0][k].shape == weights[1][k].shape]
    largest = max((float(np.abs(weights[0][k] - weights[1][k]).max()) for k in common), default=float("inf"))
    summaries = [json.loads((folder / "summary.json").read_text(encoding="utf-8")) for folder in (reference, code)]
    scores: dict[str, float] = {}
    for section in ("label_free", "titles"):
        for key in ("start", "model", "difference"):
            values = [s[section][key] for s in summaries if s.get(section)]
            if len(values) == 2:
                scores[f"{section}.{key}"] = abs(values[0] - values[1])
    for model_label, by_task in summaries[0]["scores"].items():  # labels both runs have (a recipe names its line)
        for task, value in by_task.items():
            other = summaries[1]["scores"].get(model_label, {}).get(task)
            if other is not None:
                scores[f"scores.{model_label}.{task}"] = abs(value - other)
    return {
        "groups_equal": same_groups,
        "groups": len(groups[0]) if len(groups[0]) == len(groups[1]) else [len(g) for g in groups],
        "group_columns": groups[0].column_names,
        "differing_rows_per_column": {c: len(found) for c, found in differing.items()},
        "differing_rows": rows,
        "repeated_negative_rows": [len(r) for r in repeated],
        "differing_rows_with_repeated_negatives_in_both": sum(i in repeated[0] and i in repeated[1] for i in rows),
        "hard_negative_stats": hard_negatives,
        "weights_keys_equal": sorted(weights[0]) == sorted(weights[1]),
        "weights_max_abs_difference": largest,
        "score_abs_differences": scores,
        "all_within_1e-6": same_groups and largest <= 1e-6 and all(v <= 1e-6 for v in scores.values()),
    }


def ratios(reference: dict[str, Any], code: dict[str, Any]) -> dict[str, Any]:
    """This checkout's seconds over the reference's: per stage, the stages that are not training, the whole run."""
    rows = {r["stage"]: r for r in reference["stages"]}
    table = []
    for row in code["stages"]:
        base = rows.get(row["stage"])
        table.append(
            {
                "stage": row["stage"],
                "reference_wall_s": base["wall_s"] if base else None,
                "code_wall_s": row["wall_s"],
                "reference_cpu_s": base["cpu_s"] if base else None,
                "code_cpu_s": row["cpu_s"],
                "wall_ratio": row["wall_s"] / base["wall_s"] if base and base["wall_s"] else None,
            }
        )

    def seconds(record: dict[str, Any], key: str, wanted: Any) -> float:
        return sum(r[key] for r in record["stages"] if wanted(r["stage"]))

    parts = {
        "not_training": lambda name: name != TRAINING,
        "training": lambda name: name == TRAINING,
        "not_training_nor_labelled_evaluation": lambda name: name != TRAINING and name != EVALUATION,
    }
    summary = {}
    for key in ("wall_s", "cpu_s"):
        for part, wanted in parts.items():
            both = [seconds(r, key, wanted) for r in (reference, code)]
            summary[f"{part}_{key}"] = {"reference": both[0], "code": both[1], "ratio": both[1] / both[0]}
        whole = [reference[key], code[key]]
        summary[f"whole_process_{key}"] = {"reference": whole[0], "code": whole[1], "ratio": whole[1] / whole[0]}
    return {"stages": table, **summary}


def machine() -> dict[str, Any]:
    """The CPU's model name and its native bf16 support as torch reports it (what ``--precision auto`` follows)."""
    import torch

    name = "unknown"
    for line in (
        Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            break
    probes = {"amx": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
    return {"cpu": name} | {key: bool(getattr(torch.cpu, probe, lambda: False)()) for key, probe in probes.items()}


def verdicts(output: Path) -> dict[str, Any]:
    """A run's gain and verdict per labelled task and its label-free verdict (``summary.json``)."""
    summary = json.loads((output / "summary.json").read_text(encoding="utf-8"))
    tasks = {task: (summary["gain"][task], summary["interval"][task].get("verdict")) for task in summary["gain"]}
    label_free = summary.get("label_free") or {}
    return {"tasks": tasks, "label_free": label_free.get("verdict"), "precision": summary["config"].get("precision")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="the older checkout (its repository root)")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout measured against it (default: this)")
    parser.add_argument("--documents", type=int, default=1500)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeats", type=int, default=1, help="turns of each checkout (alternating)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("XPRT_DATA_DIR", REPO.parent / "shared/data"))
    )
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="only recompute the ratios of --json from the turns it holds (and the agreement, if their runs remain)",
    )
    args = parser.parse_args()
    if args.recompute:
        result = json.loads(args.json.read_text(encoding="utf-8"))
        turns = result["turns"]
        first = [next(t for t in turns if t["label"].startswith(label)) for label in ("reference", "code")]
        result["ratios"] = ratios(*first)
        if all((Path(t["output"]) / "summary.json").is_file() for t in first):
            result["agreement"] = agreement(Path(first[0]["output"]), Path(first[1]["output"]))
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(result["ratios"], indent=2))
        return

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-quickstart-corpus-"))
    corpus, beir = build_inputs(args.data_dir, args.documents, work / "inputs")
    turns: list[dict[str, Any]] = []
    order = []
    for repeat in range(args.repeats):
        pair = [("reference", args.reference), ("code", args.code)]
        order += pair if repeat % 2 == 0 else pair[::-1]
    for number, (label, code) in enumerate(order):
        print(f"turn {number + 1}/{len(order)}: {label} ({code})", flush=True)
        turns.append(run_turn(f"{label}-{number}", code, corpus, beir, work, args))
        print(f"  {turns[-1]['wall_s']:.0f} s wall, {turns[-1]['cpu_s']:.0f} s CPU", flush=True)
    reference = [t for t in turns if t["label"].startswith("reference")]
    code = [t for t in turns if t["label"].startswith("code")]
    result = {
        "benchmark": "quickstart --corpus, stage by stage",
        "documents": args.documents,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "threads": 1,
        "cpu_count": os.cpu_count(),
        "machine": machine(),
        "load_average_at_end": os.getloadavg(),
        "order": [t["label"] for t in turns],
        "turns": turns,
        "agreement": agreement(Path(reference[0]["output"]), Path(code[0]["output"])),
        "verdicts": {t["label"]: verdicts(Path(t["output"])) for t in turns},
        "ratios": ratios(reference[0], code[0]),
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text, encoding="utf-8")
    print(json.dumps({"agreement": result["agreement"], "ratios": result["ratios"]}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        separator = sys.argv.index("--")
        child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[separator + 1 :])
    else:
        main()
