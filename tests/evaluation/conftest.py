"""Hand-made tiny BEIR folders and STS files for the evaluation tests (written to tmp_path)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

CORPUS = {
    "d-cats": {"title": "Cats", "text": "Cats sleep most of the day and hunt at night."},
    "d-dogs": {"title": "Dogs", "text": "Dogs need a walk every day and love to play fetch."},
    "d-tea": {"title": "Tea", "text": "Green tea is brewed with water below boiling."},
    "d-coffee": {"title": "Coffee", "text": "Espresso is coffee pressed through fine grounds under pressure."},
    "d-rain": {"title": "Rain", "text": "Rain falls when droplets in clouds grow too heavy."},
    "d-snow": {"title": "", "text": "Snow forms from ice crystals in cold clouds."},
    "q-cats": {"title": "", "text": "When do cats hunt?"},
}
QUERIES = {
    "q-cats": "When do cats hunt?",
    "q-dogs": "How often should dogs be walked?",
    "q-tea": "What temperature for green tea?",
    "q-weather": "Why does rain fall from clouds?",
    "q-unjudged": "A query nobody judged.",
}
QRELS = [
    ("q-cats", "d-cats", 1),
    ("q-dogs", "d-dogs", 1),
    ("q-tea", "d-tea", 1),
    ("q-weather", "d-rain", 1),
    ("q-weather", "d-snow", 0),
    ("q-weather", "d-missing", 1),
]
"""Six judgements; ``d-missing`` is not in the corpus (as 5 of BEIR ArguAna's are not)."""


def write_beir(
    folder: Path,
    corpus: dict[str, dict[str, str]] = CORPUS,
    queries: dict[str, str] = QUERIES,
    qrels: list[tuple[str, str, int]] = QRELS,
    *,
    gz: bool = False,
) -> Path:
    """Write a BEIR folder: corpus.jsonl, queries.jsonl (gzipped when ``gz``) and qrels/test.tsv."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    corpus_lines = "".join(json.dumps({"_id": k, **v}) + "\n" for k, v in corpus.items())
    query_lines = "".join(json.dumps({"_id": k, "text": v, "metadata": {}}) + "\n" for k, v in queries.items())
    for name, text in (("corpus.jsonl", corpus_lines), ("queries.jsonl", query_lines)):
        if gz:
            with gzip.open(folder / f"{name}.gz", "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            (folder / name).write_text(text, encoding="utf-8")
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


STS_PAIRS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 4.8),
    ("A woman is slicing an onion.", "A woman cuts an onion.", 4.2),
    ("A dog runs in the park.", "A cat sleeps on the sofa.", 0.6),
    ("Kids play football outside.", "Children are playing soccer outdoors.", 3.9),
    ("The stock market fell today.", "A bird sings in a tree.", 0.0),
    ("A plane is taking off.", "An airplane departs from the runway.", 4.5),
]


def write_stsb(path: Path, pairs: list[tuple[str, str, float]] = STS_PAIRS) -> Path:
    """The STS-B layout: genre, file, year, id, score, sentence1, sentence2 (tab-separated)."""
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s:.3f}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    """The tiny BEIR folder, plain jsonl."""
    return write_beir(tmp_path / "tinybeir")


@pytest.fixture
def beir_writer():
    """The :func:`write_beir` helper (test modules cannot import a conftest by name)."""
    return write_beir


@pytest.fixture
def stsb_writer():
    """The :func:`write_stsb` helper."""
    return write_stsb
