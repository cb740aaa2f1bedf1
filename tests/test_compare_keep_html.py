"""The comparison's corpus with ``keep_html``: raw pages, so mining keeps headings and links; the passages unchanged."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from xprt_st.compare import CompareConfigError
from xprt_st.compare.config import CompareConfig
from xprt_st.compare.corpus import CORPUS_FILE, build_corpus, mining_settings
from xprt_st.mining import mine
from xprt_st.quickstart import QUICKSTART_CORPUS


def _tutorial_pages(path: Path) -> Path:
    """The shipped Python documentation's tutorial pages (8, linking to each other) as a JSONL.gz of raw HTML."""
    with gzip.open(QUICKSTART_CORPUS, "rt", encoding="utf-8") as handle:
        rows = [row for line in handle if "/tutorial/" in (row := json.loads(line))["id"]]
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps({"id": row["id"], "html": row["html"]}) + "\n" for row in rows)
    return path


def _config(pages: Path, model: Path, keep_html: bool, **mining: object) -> CompareConfig:
    source = {"path": str(pages), "html": True, "id_field": "id"} | ({"keep_html": True} if keep_html else {})
    settings = {"max_tokens": 48, "min_tokens": 8, "batch_size": 16} | mining
    return CompareConfig.from_dict(
        {"model": str(model), "corpus": [source], "tasks": ["stsb"], "recipes": ["change-only-positive"]}
        | {"mining": settings}
    )


def test_keep_html_mines_the_same_passages_and_keeps_headings_and_links(tmp_path: Path, tiny_model_path: Path):
    pages = _tutorial_pages(tmp_path / "pages.jsonl.gz")
    found = {}
    for keep in (False, True):
        config = _config(pages, tiny_model_path, keep, structure=["titles", "headings", "links"])
        corpus = tmp_path / f"corpus-{keep}"
        stats = build_corpus(config, corpus)
        assert stats["documents"] == 8 and stats["sources"][0].get("keep_html", False) is keep
        with gzip.open(corpus / CORPUS_FILE, "rt", encoding="utf-8") as handle:
            assert all(("html" in json.loads(line)) is keep for line in handle)
        settings = mining_settings(config)
        assert settings.get("html", False) is keep and (settings.get("id_field") == "id") is keep
        mine([corpus / CORPUS_FILE], tmp_path / f"mined-{keep}", model=str(tiny_model_path), progress=False, **settings)
        side = pq.read_table(tmp_path / f"mined-{keep}" / "passages.parquet", columns=["label", "text"]).to_pandas()
        stats = json.loads((tmp_path / f"mined-{keep}" / "stats.json").read_text())["structure"]
        found[keep] = (side.groupby("label")["text"].apply(list).to_dict(), stats)
    (texts, before), (kept_texts, after) = found[False], found[True]
    assert kept_texts == texts  # every page's passages, byte for byte: the texts other configs mine are unchanged
    assert after["kept"]["heading"] > 10 * before["kept"].get("heading", 0)  # the headings survive
    assert after["kept"]["link"] > 0 and not before["kept"].get("link")  # the links resolve by the pages' ids
    assert "outside_corpus" in after["dropped"]["link"]  # links to pages outside the sample


def test_keep_html_needs_html_pages_on_every_source_and_html_mining(tmp_path: Path):
    base = {"tasks": ["stsb"], "recipes": ["change-only-positive"]}
    cases = {
        "corpus[0].keep_html: keeps a page's raw HTML; give it with html: true": [
            {"path": "a.jsonl", "keep_html": True}
        ],
        "corpus: keep_html is set on some sources only": [
            {"path": "a.jsonl", "html": True, "keep_html": True},
            {"task": "nfcorpus"},
        ],
    }
    for message, corpus in cases.items():
        with pytest.raises(CompareConfigError, match=re.escape(message)):
            CompareConfig.from_dict(base | {"corpus": corpus}).validate()
    with pytest.raises(CompareConfigError, match=r"mining\.html: the corpus keeps raw HTML"):
        source = {"path": "a.jsonl", "html": True, "keep_html": True}
        CompareConfig.from_dict(base | {"corpus": [source], "mining": {"html": False}}).validate()
    plain = CompareConfig.from_dict(base | {"corpus": [{"path": "a.jsonl", "html": True}]})
    assert "keep_html" not in plain.to_dict()["corpus"][0]  # recorded as before the option (old folders resume)
