"""Does the label-free check rank the models that the comparisons train? (issue 18, item 5, from BERT)

The models of finished comparison runs (``xprt-st compare`` folders and switch-experiment folders) already
have labelled scores on disk (``RUN/scores/...``: per task, with the per-item scores the bootstrap resamples).
This script scores each of them on one label-free task and relates the two:

- **the held-out task**: documents of the same sources (BBC News, Debian HTML pages) that none of the given
  runs trained on, sampled with another seed, every training corpus's ids removed, mined by the offline
  default with the comparisons' settings and ``--holdout 0.95`` (only the held-out part is read);
- for every model: label-free nDCG@10 on that task, and the labelled mean over the run's own tasks;
- Kendall tau (tau-b) between the two within each experiment (one labelled task set, one start) and within
  each seed of it, with a percentile bootstrap interval over models, and over all experiments that share a
  labelled task set;
- the selection gap (LARMOR's): labelled mean of the model the label-free task picks minus the best labelled
  mean among the candidates of one experiment and seed.

Run (after the runs it reads have finished)::

    python benchmarks/label_free_settings.py --output runs/label-free-settings \\
      --compare runs/compare-from-bert-v2 runs/compare-from-bert-120-v2 --switch runs/switch \\
      --results benchmarks/results/label-free-settings-cpu.json

Stages are skipped when their output exists: the held-out corpus, its mining, each model's label-free score
(``OUTPUT/scores.jsonl``). ``--titles`` keeps each held-out document's title and headings (:func:`titled_row`), so
the folder also serves ``titles:DIR``; ``benchmarks/label_free_titles.py --mined OUTPUT/mined --indomain RUN``
then scores every candidate signal of issue 26 on it::

    python benchmarks/label_free_settings.py --output runs/titles-from-bert --titles
    python benchmarks/label_free_titles.py --output runs/titles-from-bert --mined runs/titles-from-bert/mined \\
      --skip-own --indomain runs/compare-from-bert-v3
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from label_free_evidence import kendall, selection_gap

logger = logging.getLogger("label_free_settings")

MINING = ["--max-tokens", "64", "--min-tokens", "16", "--max-passages", "32", "--threshold-quantile", "0.5"]
"""The comparisons' mining settings (``compare-from-bert-*.yaml``, ``switch-experiment.yaml``)."""


def training_ids(config_path: Path, folder: Path) -> set[str]:
    """The document ids a comparison config's corpus holds (its corpus built again in ``folder``, seconds)."""
    import yaml

    from xprt_st.compare.config import CompareConfig
    from xprt_st.compare.corpus import build_corpus

    raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    kept = {key: raw[key] for key in ("corpus", "corpus_seed") if key in raw}
    config = CompareConfig.from_dict({"tasks": ["stsb"], **kept})  # the corpus alone is read
    build_corpus(config, folder)
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        return {json.loads(line)["id"] for line in handle}


def build_heldout_corpus(
    output: Path, exclude: set[str], bbc: int, debian: int, seed: int, titles: bool = False
) -> Path:
    """A seeded sample of the comparisons' sources, every training document removed, as JSONL.

    With ``titles`` every row also carries what its author wrote (:func:`titled_row`), for ``titles:DIR``.
    """
    from xprt_st.compare.config import CompareConfig
    from xprt_st.compare.corpus import build_corpus

    path = output / "corpus.jsonl"
    if path.is_file():
        return path
    debian_pages = {"path": "debian-docs-html/pages.jsonl.gz", "html": True, "id_field": "id"}
    sources = [
        {"path": "bbc-news/bbc-fulltext.zip", "max_documents": bbc + len(exclude)},
        {**debian_pages, "max_documents": debian + len(exclude)},
    ]
    config = CompareConfig.from_dict({"corpus": sources, "corpus_seed": seed, "tasks": ["stsb"]})
    build_corpus(config, output / "source")
    kept: dict[str, list[str]] = defaultdict(list)
    pages = debian_pages_html(config.resolve(debian_pages["path"])) if titles else {}
    with gzip.open(output / "source" / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            source = "bbc" if row["id"].startswith("bbc") else "debian"
            if row["id"] not in exclude and len(kept[source]) < (bbc if source == "bbc" else debian):
                kept[source].append(json.dumps(titled_row(row, pages), ensure_ascii=False) + "\n" if titles else line)
    output.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(kept["bbc"] + kept["debian"]), encoding="utf-8")
    logger.info("held-out corpus: %d BBC and %d Debian documents", len(kept["bbc"]), len(kept["debian"]))
    return path


def debian_pages_html(path: Path) -> dict[str, str]:
    """The raw HTML of every Debian page, by the id the comparison's corpus gives it (``pages.jsonl.gz:ID``)."""
    from xprt_st.mining import iter_corpus

    return {f"{path.name}:{r.doc_id}": r.text for r in iter_corpus([path], text_field="html", id_field="id") if r.text}


def titled_row(row: dict[str, Any], pages: dict[str, str]) -> dict[str, Any]:
    """A held-out row with its author's title in ``title`` and, for a Debian page, its headings in its text.

    The comparison's corpus keeps the main text of a Debian page and drops its headings; here the page's raw HTML
    is read again (:func:`~xprt_st.mining.html_text.extract_main_text_with_headings`, as ``mine --html`` reads it)
    and each ``<h1>``-``<h3>`` is written as a Markdown heading line at its place, so plain-text mining finds it
    (:func:`~xprt_st.mining.headings.markdown_headings`); the page's title is its first ``<h1>``, else its
    ``<title>``. A BBC article's title is its headline, the first line (:func:`~xprt_st.mining.headings.plain_title`).
    A row without one gets an empty title (mining reads that as none).
    """
    from xprt_st.mining.headings import plain_title
    from xprt_st.mining.html_text import extract_main_text_with_headings

    html = pages.get(row["id"])
    if html is None:
        return {**row, "title": plain_title(row["text"]) or ""}
    text, headings, title = extract_main_text_with_headings(html, row["id"])
    if text is None:
        return {**row, "title": title or ""}
    pieces, offset = [], 0
    for heading in headings:
        pieces += [text[offset : heading.start], "#" * heading.level + " "]
        offset = heading.start
    return {**row, "text": "".join([*pieces, text[offset:]]), "title": title or ""}


def mine_heldout(corpus: Path, mined: Path, title_field: str | None = None) -> None:
    """Mine the held-out corpus as the comparisons mine theirs, nearly all of it held out."""
    if (mined / "heldout" / "groups").is_dir():
        return
    command = [sys.executable, "-m", "xprt_st", "mine", str(corpus), "--output", str(mined), "--id-field", "id"]
    titles = ["--title-field", title_field] if title_field else []
    subprocess.run([*command, *MINING, *titles, "--holdout", "0.95", "--quiet"], check=True)


def _labelled(payload: dict[str, Any]) -> float:
    return float(np.mean(list(payload["scores"].values())))


def compare_models(run: Path) -> list[dict[str, Any]]:
    """Every model of a compare run with its labelled scores: the start, then each seed's trained models."""
    rows = []
    for key_dir in sorted((run / "scores").iterdir()):
        start = key_dir / "start.json"
        if not start.is_file():
            continue
        start_payload = json.loads(start.read_text())
        for seed_dir in sorted(key_dir.glob("seed-*")):
            seed = int(seed_dir.name.split("-")[1])
            rows.append({"model": "start", "seed": seed, "folder": None, "labelled_mean": _labelled(start_payload)})
            for file in sorted(seed_dir.glob("*.json")):
                rows.append(
                    {
                        "model": file.stem,
                        "seed": seed,
                        "folder": str(run / f"seed-{seed}" / file.stem),
                        "labelled_mean": _labelled(json.loads(file.read_text())),
                    }
                )
    return rows


def switch_models(run: Path) -> list[dict[str, Any]]:
    """Every model of a switch run: the fork checkpoint (its reference), the trunk continued and each branch."""
    record = json.loads((run / "switch.json").read_text()) if (run / "switch.json").is_file() else {}
    fork = record.get("fork_step", 200)
    trunk = Path(record.get("trunk", "random-span-contrastive")).stem
    rows = []
    for seed_dir in sorted((run / "scores").glob("seed-*")):
        seed = int(seed_dir.name.split("-")[1])
        for file in sorted(seed_dir.glob("*.json")):
            label = file.stem
            folder = run / seed_dir.name / (trunk if label == "fork" else label)
            if label == "fork":
                folder = folder / f"checkpoint-{fork}"
            rows.append(
                {
                    "model": label,
                    "seed": seed,
                    "folder": str(folder),
                    "labelled_mean": _labelled(json.loads(file.read_text())),
                }
            )
    return rows


def score_all(models: list[dict[str, Any]], mined: Path, start_model: Path, path: Path) -> list[dict[str, Any]]:
    """Label-free nDCG@10 (and 10-NN overlap with the start) of every model, appended to ``path`` as it goes."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation.label_free import drift, load_heldout_task, score_model

    done = {}
    if path.is_file():
        done = {r["folder"]: r for r in map(json.loads, path.read_text().splitlines())}
    heldout = load_heldout_task(mined)
    start = SentenceTransformer(str(start_model), device="cpu")
    start.max_seq_length = 128
    start_score = score_model(start, heldout)
    done.setdefault(str(start_model), {"folder": str(start_model), "label_free": start_score.score, "knn_overlap": 1.0})
    for row in models:
        folder = row["folder"] or str(start_model)
        if folder not in done:
            model = SentenceTransformer(folder, device="cpu")
            model.max_seq_length = 128
            score = score_model(model, heldout)
            done[folder] = {
                "folder": folder,
                "label_free": score.score,
                "knn_overlap": drift(score, start_score).overlap,
            }
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(done[folder]) + "\n")
            logger.info("%s: label-free %.4f", folder, score.score)
        row |= {k: done[folder][k] for k in ("label_free", "knn_overlap")}
    return models


def summarize(experiments: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Kendall tau and selection gaps within each experiment and each of its seeds, and over experiments."""
    summary: dict[str, Any] = {"experiments": {}}
    for name, rows in experiments.items():
        unique = {(r["model"] if r["model"] == "start" else f"{r['model']}@{r['seed']}"): r for r in rows}
        models = [{**r, "name": key} for key, r in unique.items()]
        per_seed = {}
        for seed in sorted({r["seed"] for r in rows}):
            candidates = [{**r, "name": r["model"]} for r in rows if r["seed"] == seed]
            per_seed[str(seed)] = {"kendall": kendall(candidates), "selection": selection_gap(candidates)}
        summary["experiments"][name] = {
            "kendall": kendall(models),
            "selection": selection_gap(models),
            "per_seed": per_seed,
            "mean_selection_gap_over_seeds": float(np.mean([s["selection"]["gap"] for s in per_seed.values()])),
            "models": models,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--compare", type=Path, nargs="*", default=[], help="xprt-st compare run folders")
    parser.add_argument("--switch", type=Path, nargs="*", default=[], help="switch-experiment run folders")
    parser.add_argument("--start-model", type=Path, default=Path("runs/small-bert"))
    parser.add_argument(
        "--train-configs",
        type=Path,
        nargs="+",
        default=[Path(f"benchmarks/{name}.yaml") for name in ("compare-from-bert-cpu", "switch-experiment")],
        help="the configs whose corpora the held-out task must not share a document with",
    )
    parser.add_argument("--bbc", type=int, default=200)
    parser.add_argument("--debian", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--results", type=Path, default=None, help="Also copy the summary here.")
    parser.add_argument(
        "--titles",
        action="store_true",
        help="Keep each held-out document's title and headings (for titles:DIR, benchmarks/label_free_titles.py).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    missing = [
        str(path) for path in (*args.train_configs, args.start_model, *args.compare, *args.switch) if not path.exists()
    ]
    if missing:
        parser.error(f"not found: {', '.join(missing)} (run from the repository root, or pass the paths)")
    exclude = set().union(*(training_ids(c, args.output / "training-corpora" / c.stem) for c in args.train_configs))
    corpus = build_heldout_corpus(args.output, exclude, args.bbc, args.debian, args.seed, titles=args.titles)
    mined = args.output / "mined"
    mine_heldout(corpus, mined, title_field="title" if args.titles else None)
    experiments = {run.name: compare_models(run) for run in args.compare}
    experiments |= {run.name: switch_models(run) for run in args.switch}
    every = [row for rows in experiments.values() for row in rows]
    score_all(every, mined, args.start_model, args.output / "scores.jsonl")
    summary = {"command": " ".join(sys.argv), "excluded_documents": len(exclude), **summarize(experiments)}
    text = json.dumps(summary, indent=2) + "\n"
    (args.output / "summary.json").write_text(text, encoding="utf-8")
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(text, encoding="utf-8")
    for name, experiment in summary["experiments"].items():
        tau = experiment["kendall"]
        logger.info(
            "%s: tau %.2f [%.2f, %.2f] over %d models; mean selection gap %.4f",
            name,
            tau["tau"],
            tau["ci_low"],
            tau["ci_high"],
            tau["models"],
            experiment["mean_selection_gap_over_seeds"],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
