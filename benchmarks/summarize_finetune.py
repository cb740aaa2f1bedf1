"""One Markdown table from several ``xprt-st finetune-compare`` output folders (docs/results/08-fine-tuning.md).

Reads each folder's ``finetune_compare.json`` (written by the run itself) and prints, per folder, the
overall nDCG@10 of the four models, the gain before and after fine-tuning with their paired bootstrap 95%
intervals and verdicts, and the sub-domains whose gain after fine-tuning is below 0 (with how many of
them have an interval that lies below 0).

Run:  python benchmarks/summarize_finetune.py runs/ft-unsup-xprt-s0 runs/ft-unsup-xprt-s1 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

OVERALL = "overall"


def _cell(gain: float, low: float | None, high: float | None) -> str:
    bounds = "" if low is None or high is None else f" [{100 * low:+.2f}, {100 * high:+.2f}]"
    return f"{100 * gain:+.2f}{bounds}"


def summary_row(folder: Path) -> dict[str, Any]:
    """The overall row and the losing sub-domains of one run, from its own ``finetune_compare.json``."""
    record = json.loads((folder / "finetune_compare.json").read_text(encoding="utf-8"))
    rows = record["rows"]
    overall = next(row for row in rows if row["domain"] == OVERALL)
    domains = [row for row in rows if row["domain"] != OVERALL]
    losing = sorted((row for row in domains if row["gain_after"] < 0), key=lambda row: row["gain_after"])
    return {
        "run": folder.name,
        "seed": record["settings"].get("seed"),
        "test_queries": overall["n_queries"],
        "overall": overall,
        "domains": len(domains),
        "losing_after": [row["domain"] for row in losing],
        "clear_losses_after": [row["domain"] for row in losing if row["verdict_after"] == "loss"],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | fold seed | test queries | base | pre-trained | base+ft | pre-trained+ft | gain before [95% CI] "
        "| verdict | gain after [95% CI] | verdict | sub-domains losing after (clear losses) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        o = row["overall"]
        losing = ", ".join(row["losing_after"]) or "none"
        lines.append(
            f"| {row['run']} | {row['seed']} | {row['test_queries']} | {100 * o['base']:.2f} | "
            f"{100 * o['pretrained']:.2f} | {100 * o['base_ft']:.2f} | {100 * o['pretrained_ft']:.2f} | "
            f"{_cell(o['gain_before'], o['before_low'], o['before_high'])} | {o['verdict_before']} | "
            f"{_cell(o['gain_after'], o['after_low'], o['after_high'])} | {o['verdict_after']} | "
            f"{len(row['losing_after'])} of {row['domains']}: {losing} ({len(row['clear_losses_after'])} clear) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="finetune-compare --output folders")
    args = parser.parse_args()
    print(markdown([summary_row(folder) for folder in args.folders]))


if __name__ == "__main__":
    main()
