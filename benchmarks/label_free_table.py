"""Every label-free candidate signal over every setting measured: one Markdown table from the records on disk.

Reads the ``titles-evidence.json`` records of ``benchmarks/label_free_titles.py`` (copied to
``benchmarks/results/label-free-titles-*.json``) and prints, per setting, the models ranked, the labelled spread,
and each signal's Kendall tau with its 95% interval and its selection gap in labelled points
(docs/results/12-titles-and-headings.md, 12e)::

    python benchmarks/label_free_table.py benchmarks/results/label-free-titles-*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SIGNALS = ("titles", "mined", "alignment", "uniformity")


def rows(paths: list[Path], min_models: int = 5) -> list[str]:
    """The table's header and one row per setting of each record (``own`` and ``indomain``) that ranks at least
    ``min_models`` models (with fewer, a bootstrap interval over models is nearly always [-1, +1])."""
    head = "| record (setting) | models | labelled spread (x100) | " + " | ".join(SIGNALS) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(SIGNALS)]
    for path in paths:
        record = json.loads(path.read_text(encoding="utf-8"))
        for name, setting in record["settings"].items():
            if setting["models"] < min_models:
                continue
            labelled = [m["labelled_mean"] * 100 for m in setting["models_scored"]]
            cells = []
            for signal in SIGNALS:
                tau = setting[signal]
                cells.append(
                    f"{tau['tau']:+.2f} [{tau['ci_low']:+.2f}, {tau['ci_high']:+.2f}]; gap {tau['gap'] * 100:+.2f}"
                )
            label = path.stem.removeprefix("label-free-titles-")
            lines.append(
                f"| {label} ({name}) | {setting['models']} | {min(labelled):.2f}-{max(labelled):.2f} "
                f"({max(labelled) - min(labelled):.2f}) | " + " | ".join(cells) + " |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, nargs="+")
    parser.add_argument("--min-models", type=int, default=5)
    args = parser.parse_args(argv)
    print("\n".join(rows(args.records, args.min_models)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
