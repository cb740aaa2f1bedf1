"""The structure pairs a comparison config would train on: its corpus builder and its mining, no training run.

Run:  OMP_NUM_THREADS=1 python benchmarks/structure_pairs_available.py \\
          benchmarks/compare-in-domain-python-docs-structure-links.yaml OUT [--pages PAGES.jsonl.gz]

Builds the config's corpus in ``OUT/corpus`` (``--pages`` replaces the first source's path: the 521 pages of
``scripts/build_quickstart_data.py --all-pages``) and mines it into ``OUT/mined`` with the config's mining
settings and ``structure``, but no structure hard negatives (they do not change what is paired, and cost a
second encoding). Prints the corpus counts, the seconds of each step and ``stats.json``'s ``structure``: the
titles, headings and links kept and dropped by reason (``docs/results/13-structure-first-run.md``, "pairs available").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from xprt_st.compare import load_compare_config
from xprt_st.compare.corpus import CORPUS_FILE, build_corpus, mining_settings
from xprt_st.mining import mine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--pages", help="the first corpus source's path instead of the config's")
    args = parser.parse_args()
    config = load_compare_config(args.config)
    if args.pages:
        config.corpus[0].path = args.pages
    started = time.perf_counter()
    corpus = build_corpus(config, args.output / "corpus")
    print(f"corpus: {json.dumps(corpus)} ({time.perf_counter() - started:.0f} s)", flush=True)
    started = time.perf_counter()
    settings = mining_settings(config) | {"structure_hard_negatives": 0}
    stats = mine([args.output / "corpus" / CORPUS_FILE], args.output / "mined", progress=False, **settings)
    print(f"mining ({time.perf_counter() - started:.0f} s): {json.dumps(stats['structure'])}", flush=True)


if __name__ == "__main__":
    main()
