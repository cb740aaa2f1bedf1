"""One in-domain comparison as the row format of docs/results/11-in-domain.md, from the records the run wrote.

Reads ``RECORDS/compare.csv`` and ``RECORDS/records.json`` (``benchmarks/in_domain_records.py`` copies both
from a run folder) and prints one Markdown row per recipe: each seed's score and gain with its 95% interval,
the mean gain, the verdict over seeds (the seeds' common verdict, else *seeds disagree*), the objective loss
logged at the first logged step, and the label-free change of each seed (x100)::

    python benchmarks/in_domain_table.py benchmarks/results/in-domain-arguana-small-bert
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from xprt_st.evaluation.bootstrap import DISAGREE


def _signed(value: float) -> str:
    return f"{value * 100:+.2f}"


def rows(records: Path) -> list[str]:
    """The table's header, the start's row and one row per recipe, in the order the run trained them."""
    table = [
        r for r in csv.DictReader((records / "compare.csv").open(encoding="utf-8")) if r["task"] != "mean over tasks"
    ]
    extra = json.loads((records / "records.json").read_text(encoding="utf-8"))
    seeds = sorted({int(r["seed"]) for r in table})
    recipes = list(dict.fromkeys(r["model"] for r in table if r["model"] != "start"))
    by = {(int(r["seed"]), r["model"]): r for r in table}
    start = next(r for r in table if r["model"] == "start")
    label_free = extra.get("label_free", {})
    start_label_free = next((v["start"] for v in label_free.values() if v), None)
    head = [f"seed {seed}: score, gain [95% CI]" for seed in seeds]
    lines = [
        "| recipe | " + " | ".join(head) + " | mean gain | verdict over seeds | objective loss at step 5 | "
        "label-free change, seeds " + " / ".join(map(str, seeds)) + " |",
        "|---|" + "---|" * (len(seeds) + 4),
        "| start | "
        + " | ".join(f"{float(start['score']) * 100:.2f}" for _ in seeds)
        + " | | | | "
        + (f"{start_label_free:.4f} |" if start_label_free is not None else "|"),
    ]
    for recipe in recipes:
        cells, gains, verdicts, losses, drifts = [], [], [], [], []
        for seed in seeds:
            row = by.get((seed, recipe))
            if row is None:
                cells.append("not run")
                continue
            gain, low, high = (float(row[k]) for k in ("delta_vs_start", "ci_low", "ci_high"))
            cells.append(f"{float(row['score']) * 100:.2f}, {_signed(gain)} [{_signed(low)}, {_signed(high)}]")
            gains.append(gain)
            verdicts.append(row["verdict"])
            loss = extra.get("start_losses", {}).get(f"seed-{seed}/{recipe}", {}).get("loss", "")
            losses.append(f"{float(loss.split('=', 1)[-1]):.4g}" if loss else "")
            record = label_free.get(f"seed-{seed}/{recipe}/label_free.json")
            drifts.append(_signed(record["difference"]) if record else "")
        prefix = "L_xp " if recipe.startswith("xprt") else ""
        verdict = verdicts[0] if len(set(verdicts)) == 1 else DISAGREE
        lines.append(
            f"| {recipe} | {' | '.join(cells)} | {_signed(statistics.mean(gains))} | {verdict} | "
            f"{prefix}{' / '.join(losses)} | {' / '.join(drifts)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="a folder written by benchmarks/in_domain_records.py")
    args = parser.parse_args(argv)
    print("\n".join(rows(args.records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
