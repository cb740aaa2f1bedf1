"""Label-free selection, round 2 (issue 26): do titles and headings rank models as labelled queries do?

In-domain, on NFCorpus: the held-out documents of a mined folder (``xprt-st mine --title-field title --holdout``)
give the candidate signals, NFCorpus's test queries the labelled score, and the two rankings of a set of models
are related by Kendall tau (tau-b, 95% percentile bootstrap over models, 2,000 resamples, seed 0) and by LARMOR's
selection gap (labelled score of the model a signal picks minus the best labelled score), as in
``docs/results/10-label-free-check.md`` (the functions of ``label_free_evidence.py``).

Candidate signals, all from the held-out documents only, higher = better:

- ``titles``: nDCG@10 of ``titles:DIR`` (each held-out title a query, its document's passages relevant);
- ``mined``: nDCG@10 of ``mined:DIR`` (the mining model's own neighbours, section 10's check);
- ``alignment``: minus the mean squared distance of neighbouring passages of one document (Wang and Isola);
- ``uniformity``: minus the log mean Gaussian potential over all held-out passage pairs.

Settings (each its own ranking):

- ``own``: the start (all-MiniLM-L6-v2) and short runs trained here on the mined folder's training documents,
  each with its middle checkpoint and its interpolations with the start; labelled score: nDCG@10 of ``--labelled``
  (default NFCorpus) on a seeded subsample of its test queries with every judged document kept
  (``--max-queries``/``--max-corpus``; 0 keeps every query);
- ``indomain`` (``--indomain RUN...``): the models of in-domain ``xprt-st compare`` runs (NFCorpus, ArguAna, the
  Python docs: docs/results/12-titles-and-headings.md, 12b) with the labelled scores they recorded (every test
  query); the mined folder must hold out the same documents (same ``--holdout``, seed and id field), so none of
  those models trained on them;
- ``switch`` (``--switch RUN...``): every model of switch-experiment runs (``benchmarks/switch_experiment.py``:
  the fork checkpoint, the trunk continued and each branch, per seed) with the labelled means they recorded; the
  mined folder holds documents none of them trained on (``label_free_settings.py --titles`` leaves out the
  switch config's documents).

Run (stages are skipped when their output exists; ``OUTPUT/scores-*.jsonl`` keep every scored model)::

    nice -n 10 python benchmarks/label_free_titles.py --output runs/titles-nf --mined runs/titles-nf/mined \\
        --recipes change-only-positive,tsdae --max-steps 20 --alphas 0.5 --indomain RUN --results FILE
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from label_free_evidence import candidates, kendall, load_candidate, selection_gap, train_runs
from label_free_settings import compare_models, switch_models

logger = logging.getLogger("label_free_titles")

SIGNALS = ("titles", "mined", "alignment", "uniformity")
EVAL_MAX_SEQ_LENGTH = 128
"""The held-out passages are at most 64 tokens; the labelled documents of the own setting are read at 128."""


def signals(model: Any, heldout: Any, titles: Any) -> dict[str, Any]:
    """Every candidate signal of one model, from one encoding of the held-out passages (and of the titles)."""
    from xprt_st.evaluation import label_free
    from xprt_st.evaluation import titles as titles_task
    from xprt_st.evaluation.embedding_stats import alignment, neighbour_pairs, uniformity

    if heldout.texts != titles.texts:
        raise ValueError("the label-free and the titles task do not list the same held-out passages")
    tick = time.perf_counter()
    passages = label_free.encode_passages(model, heldout)
    scored = titles_task.score_model(model, titles, passages=passages)
    mined = label_free.score_embeddings(heldout, passages)
    return {
        "titles": scored.score,
        "titles_per_query": scored.per_query,
        "mined": float(np.mean(list(mined.values()))),
        "alignment": -alignment(passages, neighbour_pairs(heldout.ids)),
        "uniformity": -uniformity(passages),
        "signal_seconds": time.perf_counter() - tick,
    }


def _done(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return {record["name"]: record for record in map(json.loads, path.read_text().splitlines())}


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def endpoint_candidates(endpoints: list[Path], alphas: list[float]) -> list[dict[str, Any]]:
    """The start, and for each trained folder its interpolations with the start and itself (``run`` is its path)."""
    rows = [{"name": "start", "recipe": "start", "run": None, "kind": "start", "alpha": 0.0}]
    for folder in endpoints:
        name = f"{folder.parent.name}/{folder.name}"
        for alpha in alphas:
            rows.append({"name": f"{name}@a{alpha:g}", "run": str(folder), "kind": "interpolation", "alpha": alpha})
        rows.append({"name": name, "run": str(folder), "kind": "final", "alpha": 1.0})
    return rows


def _load_own(row: dict[str, Any], output: Path, start: Any, max_steps: int) -> Any:
    """A candidate of :func:`endpoint_candidates` (its ``run`` is a path), else of ``label_free_evidence``."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.interpolate import interpolate

    if row["kind"] == "start" or not Path(str(row["run"])).is_absolute():
        return load_candidate(row, output, start, max_steps)
    trained = SentenceTransformer(str(row["run"]), device="cpu")
    return trained if row["kind"] == "final" else interpolate(start, trained, row["alpha"])


def score_own(rows: list[dict[str, Any]], output: Path, tasks: tuple[Any, Any], labelled: Any, max_steps: int) -> list:
    """The own setting: signals and the labelled score (``--labelled``, subsampled) of every candidate."""
    from xprt_st.evaluation.run import evaluate_models
    from xprt_st.models import load_model

    path = output / "scores-own.jsonl"
    done = _done(path)
    start = load_model(None, device="cpu")
    for row in rows:
        if row["name"] in done:
            continue
        model = _load_own(row, output, start, max_steps)
        model.max_seq_length = EVAL_MAX_SEQ_LENGTH
        record = {**row, **signals(model, *tasks)}
        tick = time.perf_counter()
        report = evaluate_models([model], [labelled], labels=["m"], cache_dir=None)
        record |= {"labelled_mean": report.score("m", report.tasks[0]), "labelled_seconds": time.perf_counter() - tick}
        _append(path, record)
        done[row["name"]] = record
        logger.info(
            "own %s: titles %.4f mined %.4f labelled %.4f",
            row["name"],
            record["titles"],
            record["mined"],
            record["labelled_mean"],
        )
    return [done[row["name"]] for row in rows]


def _starting_model(run: Path) -> str | None:
    """The model a compare run started from, as its ``compare_config.yaml`` names it; None: the offline default."""
    import yaml

    from xprt_st.models import DEFAULT_ALIASES

    model = yaml.safe_load((run / "compare_config.yaml").read_text(encoding="utf-8")).get("model")
    return None if model is None or str(model) in DEFAULT_ALIASES else str(model)


def _score_folder(
    folder: str | None, row: dict[str, Any], path: Path, tasks: tuple[Any, Any], setting: str
) -> dict[str, Any]:
    """The signals of the model in ``folder`` (None: the offline default) added to ``row``, appended to ``path``."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.models import load_model

    model = load_model(None, device="cpu") if folder is None else SentenceTransformer(folder, device="cpu")
    model.max_seq_length = EVAL_MAX_SEQ_LENGTH
    record = {**row, **signals(model, *tasks)}
    _append(path, record)
    logger.info("%s %s: titles %.4f labelled %.4f", setting, row["name"], record["titles"], row["labelled_mean"])
    return record


def score_indomain(runs: list[Path], output: Path, tasks: tuple[Any, Any]) -> list[dict[str, Any]]:
    """The in-domain setting: signals of every model of compare runs, beside the labelled scores they recorded.

    The runs must score the same task and hold out the same documents (a comparison and its sweep folders,
    seeded with its mined folder); the start is counted once, and a model of any run after the first is named
    after its folder (``change-only-positive-hard@seed42@in-domain-nfcorpus-sweep-lr2e-5-s300``).
    """
    path = output / "scores-indomain.jsonl"
    done = _done(path)
    # the start and any final model the own setting already scored have the same signals: not encoded twice
    own = {
        (None if r["kind"] == "start" else r["run"]): r
        for r in _done(output / "scores-own.jsonl").values()
        if r["kind"] in ("start", "final")
    }
    records = []
    rows = [(i, row) for i, run in enumerate(runs) for row in compare_models(run)]
    for index, row in rows:
        name = f"{row['model']}@seed{row['seed']}" + (f"@{runs[index].name}" if index else "")
        if row["model"] == "start":
            name = "start"
            if any(r["name"] == "start" for r in records):
                continue
        if name not in done and row["folder"] in own:
            done[name] = {
                "name": name,
                **row,
                **{key: own[row["folder"]][key] for key in (*SIGNALS, "titles_per_query")},
            }
            _append(path, done[name])
        if name not in done:
            # the start is the comparison's own starting model (the offline default, the small BERT, ...)
            folder = row["folder"] if row["folder"] is not None else _starting_model(runs[index])
            done[name] = _score_folder(folder, {"name": name, **row}, path, tasks, "indomain")
        records.append(done[name])
    return records


def score_switch(runs: list[Path], output: Path, tasks: tuple[Any, Any]) -> list[dict[str, Any]]:
    """The switch setting: signals of every model of switch runs, beside the labelled means they recorded.

    A model is named ``label@seedN`` (``fork@seed42``, ``change-only-positive@seed43``), with ``@RUN`` after it for
    any run after the first.
    """
    path = output / "scores-switch.jsonl"
    done = _done(path)
    records = []
    for index, run in enumerate(runs):
        for row in switch_models(run):
            name = f"{row['model']}@seed{row['seed']}" + (f"@{run.name}" if index else "")
            if name not in done:
                done[name] = _score_folder(row["folder"], {"name": name, **row}, path, tasks, "switch")
            records.append(done[name])
    return records


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Kendall tau with its interval and the selection gap of every signal against the labelled score."""
    summary: dict[str, Any] = {"models": len(records)}
    for signal in SIGNALS:
        rows = [{**r, "label_free": r[signal]} for r in records]
        summary[signal] = {**kendall(rows), **selection_gap(rows)}
    summary["best"] = max(records, key=lambda r: r["labelled_mean"])["name"]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--mined", type=Path, required=True, help="A mined folder with heldout/titles.")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("XPRT_DATA_DIR", "../shared/data")))
    parser.add_argument("--recipes", default="change-only-positive,tsdae")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--alphas", default="0.5")
    parser.add_argument(
        "--endpoints",
        nargs="*",
        type=Path,
        default=None,
        help="Trained model folders (from the start) to interpolate with the start instead of training here.",
    )
    parser.add_argument(
        "--labelled",
        default=None,
        help="The own setting's labelled task: a task spec of `xprt-st evaluate` (a named task or a BEIR folder; "
        "default DATA_DIR/nfcorpus).",
    )
    parser.add_argument("--max-queries", type=int, default=50)
    parser.add_argument("--max-corpus", type=int, default=1000)
    parser.add_argument(
        "--indomain",
        type=Path,
        nargs="*",
        default=None,
        help="In-domain compare runs holding out the same documents (a comparison and its sweep folders).",
    )
    parser.add_argument(
        "--switch", type=Path, nargs="*", default=None, help="Switch-experiment run folders (switch_experiment.py)."
    )
    parser.add_argument("--skip-own", action="store_true", help="Only the --indomain and --switch settings.")
    parser.add_argument("--results", type=Path, default=None, help="Also copy the summary here.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(1)  # on a shared, overloaded machine one thread per process wastes the least
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from xprt_st.evaluation.catalog import resolve_task
    from xprt_st.evaluation.label_free import load_heldout_task
    from xprt_st.evaluation.titles import load_titles_task

    given = [*((run, "--indomain") for run in args.indomain or []), *((run, "--switch") for run in args.switch or [])]
    for path, what in ((args.mined, "--mined"), *given):
        if not path.is_dir():
            parser.error(f"{what} {path} is not a folder")
    tasks = (load_heldout_task(args.mined), load_titles_task(args.mined))
    args.output.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "heldout": {"passages": len(tasks[0].texts), "anchors": len(tasks[0].queries), "titles": len(tasks[1].queries)},
        "settings": {},
    }
    if not args.skip_own:
        labelled = resolve_task(
            args.labelled or str(args.data_dir / "nfcorpus"),
            args.data_dir,
            max_queries=args.max_queries or None,
            max_corpus=args.max_corpus or None,
        )
        alphas = [float(a) for a in args.alphas.split(",")]
        if args.endpoints:
            rows = endpoint_candidates(args.endpoints, alphas)
        else:
            seeds = [int(s) for s in args.seeds.split(",")]
            runs = train_runs(args.mined, args.output, args.recipes.split(","), seeds, args)
            rows = candidates(runs, alphas, args.max_steps)
        records = score_own(rows, args.output, tasks, labelled, args.max_steps)
        summary["settings"]["own"] = {**summarize(records), "models_scored": [_brief(r) for r in records]}
    if args.indomain:
        records = score_indomain(args.indomain, args.output, tasks)
        summary["settings"]["indomain"] = {**summarize(records), "models_scored": [_brief(r) for r in records]}
    if args.switch:
        records = score_switch(args.switch, args.output, tasks)
        summary["settings"]["switch"] = {**summarize(records), "models_scored": [_brief(r) for r in records]}
    text = json.dumps(summary, indent=2) + "\n"
    (args.output / "titles-evidence.json").write_text(text, encoding="utf-8")
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(text, encoding="utf-8")
    print(json.dumps({k: {s: v[s] for s in SIGNALS} for k, v in summary["settings"].items()}, indent=2))
    return 0


def _brief(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "labelled_mean", *SIGNALS, "signal_seconds", "labelled_seconds")
    return {key: record[key] for key in keys if key in record}


if __name__ == "__main__":
    raise SystemExit(main())
