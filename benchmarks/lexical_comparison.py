"""Issue 52's in-domain comparison at equal compute: each recipe against the start, BM25 and the hybrid.

Reads the score files of ``xprt-st compare`` runs of one corpus (300 steps x 16 groups, seeds 42 and 43, every
test query, the models read at 128 tokens), all of one configuration but the mining's ranking:

- a fused run (``mining.rank_by`` the default): ``change-only-positive-hard``, ``hybrid-teacher-hard`` and
  ``inverse-cloze-hard`` (its query-shaped groups re-merged from the same mining);
- a BM25 run (``mining.rank_by: bm25``): ``lexical-positive-hard``.

Scores the one reference the runs do not: the hybrid (reciprocal-rank fusion of BM25 and the start, ``hybrid:``)
with the start read at the runs' 128 tokens, in the runs' precision, on the task as their config resolves it; its
start must equal the runs' own start query by query (checked). Then, per corpus: every model's nDCG@10, its paired
95% bootstrap interval against the start, the share of the start-to-hybrid gap it closes, each lexical recipe
against ``change-only-positive-hard`` of the same seed (paired), the share of positives that are not the start's
nearest passage (``stats.json``), and each model's logged terms at step 10 and at its last step::

    python benchmarks/lexical_comparison.py nfcorpus runs/nfcorpus-fused runs/nfcorpus-bm25 \\
        --json benchmarks/results/lexical-comparison/nfcorpus.json

A folder given as ``--fused-scores DIR`` holds the start's and ``change-only-positive-hard``'s score files
(``DIR/start.json``, ``DIR/seed-S/RECIPE.json``: an earlier run's records of the same configuration, as ArguAna's
run of docs/results/16-precision.md); the fused run's own start must equal it query by query.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from xprt_st.compare.config import load_compare_config, resolve_compare_tasks
from xprt_st.evaluation.bootstrap import paired_interval, paired_items
from xprt_st.evaluation.run import evaluate_models
from xprt_st.models import load_model

SEEDS = (42, 43)
REFERENCE = "change-only-positive-hard"
CLOZE_DATA = "pairs-inverse-cloze-hard-negatives-2"
"""The fused run's data folder of ``inverse-cloze-hard`` (``xprt_st.compare.variants.data_variant``)."""


def score_files(run: Path) -> Path:
    """The run's one scores folder (``RUN/scores/KEY``)."""
    folders = sorted((run / "scores").iterdir()) if (run / "scores").is_dir() else []
    if len(folders) != 1:
        raise SystemExit(f"{run}/scores holds {len(folders)} evaluation keys; expected one")
    return folders[0]


def per_item(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The task and per-item record of a one-task score file."""
    (task, items), *rest = record["per_item"].items()
    if rest:
        raise SystemExit(f"{record['model']}: scored on {len(rest) + 1} tasks; expected one")
    return task, items


def hybrid_reference(run: Path, start: dict[str, Any]) -> dict[str, Any]:
    """The hybrid's per-item record at the run's token limit and precision; the start's must equal the run's (both
    runs of a corpus share every setting but the mining's ranking, which the hybrid does not read)."""
    config = load_compare_config(run / "compare_config.yaml")
    with tempfile.TemporaryDirectory() as folder:
        model = load_model(config.model)
        model.max_seq_length = config.eval_max_seq_length
        model.save(folder)
        report = evaluate_models(
            [folder, f"hybrid:{folder}"],
            resolve_compare_tasks(config),
            labels=["start", "hybrid"],
            batch_size=config.eval_batch_size,
            precision=config.evaluation_precision().precision,
        )
    (task,) = report.tasks
    task_name, items = per_item(start)
    mine = report.per_query[task]["start"]
    worst = max(abs(mine[query] - items["ndcg_at_10"][query]) for query in items["ndcg_at_10"])
    if set(mine) != set(items["ndcg_at_10"]) or worst > 1e-6:
        raise SystemExit(f"the start scored here differs from {run}'s (largest per-query difference {worst:.2g})")
    return {
        "model": "hybrid",
        "per_item": {task_name: {"kind": "retrieval", "ndcg_at_10": report.per_query[task]["hybrid"]}},
    }


def logged_terms(run: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{"seed-S/RECIPE": {"10": {"loss": ..., "xp": ...}, "300": {...}}}``: each model's logged terms at step 10 and
    at its last step, from its own last checkpoint's ``trainer_state.json`` (the run's shared log interleaves the
    lines of processes that trained at once)."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for model in sorted(run.glob("seed-*/*/")):
        states = sorted(model.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
        if not states:
            continue
        history = [e for e in json.loads(states[-1].read_text(encoding="utf-8"))["log_history"] if "loss" in e]
        last = max(entry["step"] for entry in history)
        skip = ("learning_rate", "retention_weight", "grad_norm", "epoch", "step")
        found[f"{model.parent.name}/{model.name}"] = {
            str(entry["step"]): {k: round(float(v), 4) for k, v in entry.items() if k not in skip}
            for entry in history
            if entry["step"] in (10, last)
        }
    return found


def compare_corpus(
    name: str, fused: Path, bm25: Path, fused_scores: Path | None = None, hybrid: Path | None = None
) -> dict[str, Any]:
    """The corpus's records: references, every recipe's seeds with intervals, positives and logged terms."""

    def read(path: Path) -> dict[str, Any]:
        return json.loads(path.read_text(encoding="utf-8"))

    fused_folder, bm25_folder = score_files(fused), score_files(bm25)
    reference_folder = fused_scores or fused_folder
    start = read(reference_folder / "start.json")
    for folder in (fused_folder, bm25_folder):
        if per_item(read(folder / "start.json"))[1] != per_item(start)[1]:
            raise SystemExit(f"{folder}'s start is not {reference_folder}'s: not the same corpus, task or scoring")
    if hybrid is not None and hybrid.is_file():  # this script's own output of an earlier call, or the record alone
        hybrid_record = read(hybrid).get("hybrid_record", read(hybrid))
    else:
        hybrid_record = hybrid_reference(bm25, start)
    references = {"start": start, "bm25": read(bm25_folder / "bm25.json"), "hybrid": hybrid_record}

    def mean(record: dict[str, Any]) -> float:
        values = per_item(record)[1]["ndcg_at_10"].values()
        return 100 * statistics.fmean(values)

    def against(record: dict[str, Any], reference: dict[str, Any]) -> dict[str, float]:
        interval = paired_interval(paired_items(per_item(record)[1], per_item(reference)[1]))
        return {"difference": 100 * interval.estimate, "low": 100 * interval.low, "high": 100 * interval.high}

    gap = mean(references["hybrid"]) - mean(start)
    models: dict[str, dict[str, Any]] = {}
    for recipe, folder in (
        (REFERENCE, reference_folder),
        ("hybrid-teacher-hard", fused_folder),
        ("inverse-cloze-hard", fused_folder),
        ("lexical-positive-hard", bm25_folder),
    ):
        for seed in SEEDS:
            path = folder / f"seed-{seed}" / f"{recipe}.json"
            if not path.is_file():
                continue
            record = read(path)
            row = {"score": mean(record), "vs_start": against(record, start)}
            row["gap_closed"] = row["vs_start"]["difference"] / gap if gap > 0 else None
            reference = folder_of(reference_folder, seed)
            if recipe != REFERENCE and reference.is_file():
                row[f"vs_{REFERENCE}"] = against(record, read(reference))
            models[f"seed-{seed}/{recipe}"] = row
    stats = {run.name: read(run / "mined" / "stats.json") for run in (fused, bm25) if (run / "mined").is_dir()}
    cloze = fused / "data" / CLOZE_DATA
    if (cloze / "stats.json").is_file():  # the query-shaped groups: their positives and what their queries are
        stats[f"{fused.name}/{CLOZE_DATA}"] = read(cloze / "stats.json")
    return {
        "corpus": name,
        "task": per_item(start)[0],
        "references": {label: mean(record) for label, record in references.items()},
        "references_vs_start": {label: against(references[label], start) for label in ("bm25", "hybrid")},
        "models": models,
        "positives_not_nearest": {run: value.get("positives_not_nearest") for run, value in stats.items()},
        "inverse_cloze": {run: value["inverse_cloze"] for run, value in stats.items() if "inverse_cloze" in value},
        "logged_terms": {**logged_terms(fused), **logged_terms(bm25)},
        "hybrid_record": hybrid_record,
    }


def query_shape(task: Path, model_name: str | None, anchors: Path | None, cloze: Path | None = None) -> dict[str, Any]:
    """The median length in tokens of the task's test queries, of the mined anchors (``anchors``: a mined folder) and
    of the query-shaped anchors (``cloze``: their data folder): what the training's queries look like against the
    users'."""
    import gzip

    import datasets

    tokenizer = load_model(model_name).tokenizer
    judged = {
        line.split("\t")[0] for line in (task / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    }
    with gzip.open(task / "queries.jsonl.gz", "rt", encoding="utf-8") as handle:
        queries = [record["text"] for record in map(json.loads, handle) if record["_id"] in judged]

    def median_tokens(texts: list[str]) -> float:
        return statistics.median(len(ids) - 2 for ids in tokenizer(texts)["input_ids"])

    shape = {"queries": len(queries), "query_tokens": median_tokens(queries)}
    if anchors is not None:
        texts = datasets.load_from_disk(str(anchors))["anchor"]
        shape["anchor_tokens"] = median_tokens(list(texts[:5000]))
    if cloze is not None and cloze.is_dir():
        shape["cloze_query_tokens"] = median_tokens(list(datasets.load_from_disk(str(cloze))["anchor"][:5000]))
    return shape


def folder_of(scores: Path, seed: int) -> Path:
    """The reference recipe's score file of ``seed`` in a scores folder."""
    return scores / f"seed-{seed}" / f"{REFERENCE}.json"


def _cell(row: dict[str, float]) -> str:
    return f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]"


def table(result: dict[str, Any]) -> list[str]:
    """The corpus's rows of docs/results/17-corpus-words.md: references, then each recipe's seeds, gap share and head to
    head against change-only-positive-hard (nDCG@10 x100)."""
    references = result["references"]
    lines = [
        "| model | seed 42: nDCG@10, vs start [95% CI] | seed 43: nDCG@10, vs start [95% CI] | share of the "
        "start-to-hybrid gap closed | vs change-only-positive-hard, seeds 42 / 43 |",
        "|---|---|---|---|---|",
        f"| start | {references['start']:.2f} | | | |",
    ]
    for label in ("bm25", "hybrid"):
        lines.append(f"| {label} | {references[label]:.2f}, {_cell(result['references_vs_start'][label])} | | | |")
    for recipe in (REFERENCE, "lexical-positive-hard", "inverse-cloze-hard", "hybrid-teacher-hard"):
        rows = [result["models"].get(f"seed-{seed}/{recipe}") for seed in SEEDS]
        if not any(rows):
            continue
        seeds = [f"{row['score']:.2f}, {_cell(row['vs_start'])}" if row else "not run" for row in rows]
        shares = [row["gap_closed"] for row in rows if row and row["gap_closed"] is not None]
        share = f"{statistics.fmean(shares):+.0%}" if shares else "no gap (the hybrid is not above the start)"
        versus = " / ".join(_cell(row[f"vs_{REFERENCE}"]) if row and f"vs_{REFERENCE}" in row else "-" for row in rows)
        lines.append(f"| `{recipe}` | {seeds[0]} | {seeds[1]} | {share} | {versus if recipe != REFERENCE else ''} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", help="the corpus's name in the records")
    parser.add_argument("fused", type=Path, help="the fused run's folder")
    parser.add_argument("bm25", type=Path, help="the BM25 run's folder")
    parser.add_argument("--fused-scores", type=Path, help="score files replacing the fused run's")
    parser.add_argument("--hybrid", type=Path, help="this script's JSON of the corpus written before: its hybrid")
    parser.add_argument("--task-folder", type=Path, help="the task's BEIR folder: measure its queries' shape")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    result = compare_corpus(args.corpus, args.fused, args.bm25, args.fused_scores, args.hybrid)
    if args.task_folder is not None:
        model = load_compare_config(args.bm25 / "compare_config.yaml").model
        result["shape"] = query_shape(args.task_folder, model, args.bm25 / "mined", args.fused / "data" / CLOZE_DATA)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("\n".join(table(result)))


if __name__ == "__main__":
    main()
