"""Copy an in-domain ``xprt-st compare`` run's small records into the repository (the run folder stays outside).

Writes ``OUT/compare.md``, ``OUT/compare.csv`` and ``OUT/timings.json`` as the run wrote them, and
``OUT/records.json``: the corpus, mining and hard-negative statistics, every model's ``label_free.json``, and the
objective loss each training logged at its first logged step (``start of training: objective loss ...``), read
from the run's own ``xprt-st.log``, the structure pairs' statistics and each model's logged losses (its checkpoints'
``trainer_state.json``, which runs trained elsewhere by benchmarks/structure_comparison.py keep)::

    python benchmarks/in_domain_records.py runs/in-domain-arguana benchmarks/results/in-domain-arguana
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

_TRAINING = re.compile(r"seed (\d+): training (\S+)")
_START_LOSS = re.compile(r"start of training: objective loss (.+) at step (\d+)")


def start_losses(log: Path) -> dict[str, dict[str, Any]]:
    """``{"seed-S/RECIPE": {"loss": "base=0.32", "step": 5}}`` for every training the log records (the last wins)."""
    losses: dict[str, dict[str, Any]] = {}
    current = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []:
        if match := _TRAINING.search(line):
            current = f"seed-{match.group(1)}/{match.group(2)}"
        elif (match := _START_LOSS.search(line)) and current is not None:
            losses[current] = {"loss": match.group(1), "step": int(match.group(2))}
    return losses


def logged_losses(run: Path) -> dict[str, dict[str, float]]:
    """``{"seed-S/RECIPE": {"25": loss, ...}}``: every training loss a model's last checkpoint logged, by step."""
    losses: dict[str, dict[str, float]] = {}
    for state in sorted(run.glob("seed-*/*/checkpoint-*/trainer_state.json")):
        model = state.parent.parent
        history = json.loads(state.read_text(encoding="utf-8")).get("log_history", [])
        losses[f"{model.parent.name}/{model.name}"] = {
            str(entry["step"]): round(float(entry["loss"]), 4) for entry in history if "loss" in entry
        }
    return losses


def records(run: Path) -> dict[str, Any]:
    """The run's statistics and per-model records, each read from the file the run wrote."""

    def read(path: Path) -> Any:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    stats = read(run / "mined" / "stats.json") or {}
    return {
        "corpus": read(run / "corpus" / "corpus_stats.json"),
        "mining": {key: value for key, value in stats.items() if not isinstance(value, dict | list)},
        "holdout": stats.get("holdout"),
        "hard_negatives": {
            folder.name: (read(folder / "stats.json") or {}).get("hard_negatives")
            for folder in sorted((run / "data").glob("hard-negatives-*"))
        },
        "structure": stats.get("structure"),
        "structure_mix": {
            folder.name: (read(folder / "stats.json") or {}).get("structure_mix")
            for folder in sorted((run / "data").glob("structure-mixed-*"))
        },
        "label_free": {str(path.relative_to(run)): read(path) for path in sorted(run.glob("seed-*/*/label_free.json"))},
        "start_losses": start_losses(run / "xprt-st.log"),
        "logged_losses": logged_losses(run),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    if not (args.run / "compare_config.yaml").is_file():
        parser.error(f"{args.run} is not a compare run folder (no compare_config.yaml)")
    args.output.mkdir(parents=True, exist_ok=True)
    for name in ("compare.md", "compare.csv", "timings.json"):
        if (args.run / name).is_file():
            shutil.copyfile(args.run / name, args.output / name)
    text = json.dumps(records(args.run), indent=2, sort_keys=True) + "\n"
    (args.output / "records.json").write_text(text, encoding="utf-8")
    print(f"{args.output}: compare.md, compare.csv, timings.json, records.json")


if __name__ == "__main__":
    main()
