"""Does the label-free check track labelled scores? Kendall tau, selection gap and the interpolation grid.

Issue 18, item 5, at CPU scale: every model of a small comparison (recipes x seeds, their middle
checkpoints, and the weight interpolations of each final model with the start) is scored on the
label-free task (the held-out documents of the mined folder) and on labelled tasks (ArguAna and
STS-B subsamples); the script reports

- Kendall tau between the label-free nDCG@10 and the labelled mean, over all models and within each
  recipe, with a percentile bootstrap interval over models (2,000 resamples, seed 0);
- the selection gap (LARMOR's): labelled mean of the model the label-free task picks minus the best
  labelled mean among the candidates, overall and for each run's interpolation grid;
- for each run's grid (alpha 0 = the start ... 1 = the trained model): the labelled gain over the start
  with its stratified paired bootstrap interval (queries and pairs), and the alpha each score picks.

Run (the mined folder needs a held-out part: ``xprt-st mine --holdout``; the script mines it when
absent, which needs a version of ``xprt-st mine`` with ``--holdout``)::

    nice -n 19 python benchmarks/label_free_evidence.py --output runs/label-free-evidence

Stages are skipped when their output exists (a killed run continues): corpus, mining, each training
run, each candidate's scores (``OUTPUT/scores.jsonl``). The summary goes to ``OUTPUT/evidence.json``
and, with ``--results``, to a copy under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("label_free_evidence")

LABELLED_TASKS = ({"name": "arguana", "max_queries": 100, "max_corpus": 500}, {"name": "stsb", "max_queries": 300})
EVAL_MAX_SEQ_LENGTH = 128
"""Every candidate reads the labelled and the held-out texts at this limit (as the comparisons evaluate)."""


def build_corpus(data_dir: Path, output: Path, documents: int, seed: int) -> Path:
    """A seeded sample of BBC News articles as JSONL (``id``, ``text``)."""
    path = output / "corpus.jsonl"
    if path.is_file():
        return path
    output.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(data_dir / "bbc-news" / "bbc-fulltext.zip") as archive:
        names = sorted(name for name in archive.namelist() if name.endswith(".txt"))
        chosen = sorted(random.Random(seed).sample(names, min(documents, len(names))))
        rows = [{"id": name, "text": archive.read(name).decode("latin-1")} for name in chosen]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def mine_with_holdout(corpus: Path, mined: Path, holdout: float) -> None:
    if (mined / "heldout" / "groups").is_dir():
        return
    command = [sys.executable, "-m", "xprt_st.cli", "mine", str(corpus), "--output", str(mined), "--id-field", "id"]
    command += ["--max-tokens", "64", "--min-tokens", "16", "--max-passages", "32", "--holdout", str(holdout)]
    subprocess.run(command, check=True)


def train_runs(mined: Path, output: Path, recipes: list[str], seeds: list[int], args: argparse.Namespace) -> list[Path]:
    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe

    runs = []
    for recipe in recipes:
        for seed in seeds:
            folder = output / "runs" / f"{recipe}-{seed}"
            if not (folder / "modules.json").is_file():
                overrides = {
                    "training.max_steps": args.max_steps,
                    "training.batch_size": args.batch_size,
                    "training.learning_rate": args.learning_rate,
                    "training.max_seq_length": 64,
                    "training.seed": seed,
                    "training.save_steps": args.max_steps // 2,
                    "training.eval_steps": args.max_steps // 2,
                    "training.save_total_limit": None,
                }
                train_recipe(load_recipe(recipe, overrides=overrides), data=mined, output=folder, progress=False)
            runs.append(folder)
    return runs


def candidates(runs: list[Path], alphas: list[float], max_steps: int) -> list[dict[str, Any]]:
    """What gets scored: the start, every run's middle checkpoint and final model, and the interpolations."""
    rows = [{"name": "start", "recipe": "start", "run": None, "kind": "start", "alpha": 0.0}]
    for run in runs:
        recipe = run.name.rsplit("-", 1)[0]
        rows.append({"name": f"{run.name}@{max_steps // 2}", "recipe": recipe, "run": run.name, "kind": "checkpoint"})
        rows += [
            {
                "name": f"{run.name}@a{alpha:g}",
                "recipe": recipe,
                "run": run.name,
                "kind": "interpolation",
                "alpha": alpha,
            }
            for alpha in alphas
        ]
        rows.append({"name": run.name, "recipe": recipe, "run": run.name, "kind": "final", "alpha": 1.0})
    return rows


def load_candidate(row: dict[str, Any], output: Path, start: Any, max_steps: int) -> Any:
    from sentence_transformers import SentenceTransformer

    from xprt_st.interpolate import interpolate

    if row["kind"] == "start":
        return copy.deepcopy(start)  # the caller shortens its token limit; the start itself must stay as loaded
    folder = output / "runs" / row["run"]
    if row["kind"] == "checkpoint":
        return SentenceTransformer(str(folder / f"checkpoint-{max_steps // 2}"), device="cpu")
    trained = SentenceTransformer(str(folder), device="cpu")
    return trained if row["kind"] == "final" else interpolate(start, trained, row["alpha"])


def recorded_label_free(row: dict[str, Any], output: Path, max_steps: int) -> float | None:
    """The label-free score training already wrote (``label_free.json``) for the start, a checkpoint or a final model.

    The held-out passages are at most 64 tokens (the mining limit), so the serving limit training scored them at
    and :data:`EVAL_MAX_SEQ_LENGTH` give the same embeddings.
    """
    runs = sorted((output / "runs").glob("*/label_free.json"))
    if row["kind"] == "start":
        return json.loads(runs[0].read_text())["start"] if runs else None
    if row["kind"] not in ("final", "checkpoint"):
        return None
    path = output / "runs" / row["run"] / "label_free.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if row["kind"] == "final":
        return float(record["model"])
    rows = [h for h in record["history"] if h.get("step") == max_steps // 2]
    return float(rows[0]["label-free_ndcg@10"]) if rows else None


def score_candidates(rows: list[dict[str, Any]], output: Path, mined: Path, data_dir: Path, max_steps: int) -> dict:
    from xprt_st.evaluation.catalog import resolve_task
    from xprt_st.evaluation.label_free import load_heldout_task, score_model
    from xprt_st.evaluation.run import evaluate_models
    from xprt_st.models import load_model

    path = output / "scores.jsonl"
    done = {}
    if path.is_file():
        done = {record["name"]: record for record in map(json.loads, path.read_text().splitlines())}
    heldout = load_heldout_task(mined)
    tasks = [
        resolve_task(spec["name"], data_dir, max_queries=spec.get("max_queries"), max_corpus=spec.get("max_corpus"))
        for spec in LABELLED_TASKS
    ]
    start = load_model(None, device="cpu")
    for row in rows:
        if row["name"] in done:
            continue
        model = load_candidate(row, output, start, max_steps)
        model.max_seq_length = EVAL_MAX_SEQ_LENGTH
        recorded = recorded_label_free(row, output, max_steps)
        label_free = recorded if recorded is not None else score_model(model, heldout).score
        report = evaluate_models([model], tasks, labels=["m"], cache_dir=None)
        record = {
            **row,
            "label_free": label_free,
            "label_free_source": "the run's label_free.json" if recorded is not None else "scored here",
            "labelled": {task: report.score("m", task) for task in report.tasks},
            "items": {
                **{task: {"kind": "retrieval", "ndcg_at_10": q["m"]} for task, q in report.per_query.items()},
                **{task: {"kind": "sts", **p["m"]} for task, p in report.per_pair.items()},
            },
        }
        record["labelled_mean"] = float(np.mean(list(record["labelled"].values())))
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        done[row["name"]] = record
        logger.info(
            "%s: label-free %.4f, labelled mean %.4f", row["name"], record["label_free"], record["labelled_mean"]
        )
    return done


def kendall(records: list[dict[str, Any]], n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Kendall tau (tau-b) of label-free vs labelled mean, with a percentile bootstrap interval over models."""
    from scipy.stats import kendalltau

    x = np.array([r["label_free"] for r in records])
    y = np.array([r["labelled_mean"] for r in records])
    tau = float(kendalltau(x, y).statistic)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_resamples):
        index = rng.integers(0, len(x), len(x))
        value = kendalltau(x[index], y[index]).statistic
        if np.isfinite(value):
            draws.append(value)
    low, high = (float(v) for v in np.percentile(draws, [2.5, 97.5])) if draws else (float("nan"), float("nan"))
    return {"models": len(records), "tau": tau, "ci_low": low, "ci_high": high}


def selection_gap(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Labelled mean of the label-free pick minus the best labelled mean (0: the check picks the best)."""
    picked = max(records, key=lambda r: (r["label_free"], -r.get("alpha", 1.0)))
    best = max(records, key=lambda r: r["labelled_mean"])
    return {"picked": picked["name"], "best": best["name"], "gap": picked["labelled_mean"] - best["labelled_mean"]}


def grid(records: dict[str, dict[str, Any]], run: str) -> dict[str, Any]:
    from xprt_st.evaluation.bootstrap import paired_items, pooled_interval

    start = records["start"]
    trained = (r for r in records.values() if r["run"] == run and r["kind"] in ("interpolation", "final"))
    rows = [start, *sorted(trained, key=lambda r: r["alpha"])]
    table = []
    for row in rows:
        entry = {"alpha": row.get("alpha", 0.0), "label_free": row["label_free"], "labelled_mean": row["labelled_mean"]}
        if row is not start:
            interval = pooled_interval([paired_items(row["items"][t], start["items"][t]) for t in row["items"]])
            entry |= {
                "gain": interval.estimate,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "verdict": interval.verdict,
            }
        table.append(entry)
    return {"run": run, "grid": table, **selection_gap([{**r, "name": str(r.get("alpha", 0.0))} for r in rows])}


def summarize(records: dict[str, dict[str, Any]], runs: list[Path]) -> dict[str, Any]:
    models = list(records.values())
    recipes = sorted({r["recipe"] for r in models} - {"start"})
    return {
        "labelled_tasks": list(LABELLED_TASKS),
        "eval_max_seq_length": EVAL_MAX_SEQ_LENGTH,
        "kendall_overall": kendall(models),
        "kendall_within_recipe": {
            recipe: kendall([r for r in models if r["recipe"] in (recipe, "start")]) for recipe in recipes
        },
        "selection_overall": selection_gap(models),
        "interpolation": [grid(records, run.name) for run in runs],
        "models": [
            {key: r[key] for key in ("name", "recipe", "kind", "label_free", "labelled", "labelled_mean")}
            for r in models
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("XPRT_DATA_DIR", "../shared/data")))
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--holdout", type=float, default=0.25)
    parser.add_argument("--recipes", default="change-only-positive,xprt")
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--alphas", default="0.25,0.5,0.75")
    parser.add_argument("--results", type=Path, default=None, help="Also copy evidence.json here.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    corpus = build_corpus(args.data_dir, args.output, args.documents, seed=0)
    mined = args.output / "mined"
    mine_with_holdout(corpus, mined, args.holdout)
    recipes, seeds = args.recipes.split(","), [int(s) for s in args.seeds.split(",")]
    runs = train_runs(mined, args.output, recipes, seeds, args)
    rows = candidates(runs, [float(a) for a in args.alphas.split(",")], args.max_steps)
    records = score_candidates(rows, args.output, mined, args.data_dir, args.max_steps)
    summary = {
        "command": " ".join(sys.argv),
        "settings": {k: str(v) for k, v in vars(args).items()},
        **summarize({r["name"]: records[r["name"]] for r in rows}, runs),
    }
    text = json.dumps(summary, indent=2) + "\n"
    (args.output / "evidence.json").write_text(text, encoding="utf-8")
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(text, encoding="utf-8")
    print(
        json.dumps({k: summary[k] for k in ("kendall_overall", "kendall_within_recipe", "selection_overall")}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
