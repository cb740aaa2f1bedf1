"""The titled held-out folder of an in-domain comparison on a BEIR corpus (docs/results/12-titles-and-headings.md).

An in-domain ``xprt-st compare`` run on a BEIR task (``corpus: [{task: arguana}]``, ``holdout: 0.1``) holds out
the documents that :func:`xprt_st.mining.is_held_out` picks by their ``_id``; none of its models trained on them.
This script writes those documents, plus ``--others`` documents it trained on (a seeded sample, so mining has
training groups and a threshold to fit), as JSONL with their BEIR ``title`` kept out of the ``text``, and mines
it with ``--title-field title`` and the same holdout, so ``OUTPUT/mined`` holds the same held-out documents with
their titles for ``titles:DIR`` (``benchmarks/label_free_titles.py --mined OUTPUT/mined --indomain RUN``)::

    python benchmarks/titled_heldout_beir.py ../shared/data/arguana runs/titles-aa
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

MINING = ["--max-tokens", "64", "--min-tokens", "16", "--max-passages", "32", "--threshold-quantile", "0.5"]
"""The in-domain comparisons' mining settings (``benchmarks/compare-in-domain-*.yaml``)."""


def write_corpus(beir: Path, output: Path, holdout: float, seed: int, others: int) -> tuple[int, int]:
    """``OUTPUT/corpus.jsonl``: every held-out document and ``others`` trained-on ones; their counts."""
    from xprt_st.evaluation.readers import read_beir_folder
    from xprt_st.mining import is_held_out

    corpus = read_beir_folder(beir).corpus
    held = [doc_id for doc_id in corpus if is_held_out(doc_id, holdout, seed)]
    rest = sorted(set(corpus) - set(held))
    chosen = set(held) | set(random.Random(seed).sample(rest, min(others, len(rest))))
    output.mkdir(parents=True, exist_ok=True)
    with (output / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for doc_id in sorted(chosen):
            document = corpus[doc_id]
            row = {"_id": doc_id, "title": document.get("title") or "", "text": document.get("text") or ""}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(held), len(chosen) - len(held)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("beir", type=Path, help="the BEIR folder of the comparison's corpus task")
    parser.add_argument("output", type=Path)
    parser.add_argument("--holdout", type=float, default=0.1, help="the comparison's mining.holdout")
    parser.add_argument("--seed", type=int, default=0, help="the comparison's holdout seed")
    parser.add_argument("--others", type=int, default=600)
    args = parser.parse_args(argv)
    held, others = write_corpus(args.beir, args.output, args.holdout, args.seed, args.others)
    print(f"{held} held-out and {others} other documents -> {args.output / 'corpus.jsonl'}")
    mined = args.output / "mined"
    if not (mined / "heldout").is_dir():
        command = [sys.executable, "-m", "xprt_st", "mine", str(args.output / "corpus.jsonl"), "-o", str(mined)]
        command += ["--id-field", "_id", "--title-field", "title", "--holdout", str(args.holdout), "--quiet"]
        subprocess.run([*command, "--seed", str(args.seed), *MINING], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
