"""benchmarks/label_free_settings.py --titles: the from-BERT held-out folder keeps what the authors wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xprt_st.mining.headings import TITLE_LEVEL, markdown_headings, sections

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"

PAGE = """<html><head><title>Tab title</title></head><body><main>
<h1>Installing the server</h1>
<p>The package installs a daemon that listens on port eighty and serves the files of the site directory.</p>
<h2>Configuration files</h2>
<p>Every option lives in one file under the etc folder, read once when the daemon starts and never again.</p>
<h3>Logging</h3>
<p>Requests are written to a log that rotates every week, keeping four old copies compressed beside it.</p>
</main></body></html>"""


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling label_free_evidence
    import label_free_settings

    yield label_free_settings
    sys.modules.pop("label_free_settings", None)


def test_a_debian_page_gets_its_h1_as_title_and_its_headings_as_markdown_lines(script) -> None:
    row = {"id": "pages.jsonl.gz:p1", "text": "main text without headings"}
    titled = script.titled_row(row, {"pages.jsonl.gz:p1": PAGE})
    assert titled["title"] == "Installing the server"
    found = [(h.text, h.level) for h in markdown_headings(titled["text"])]
    assert found == [("Installing the server", 1), ("Configuration files", 2), ("Logging", 3)]
    # the section under "Logging" holds its paragraph, and no heading marker is left inside the body text
    logging_start = next(h.start for h in markdown_headings(titled["text"]) if h.text == "Logging")
    assert "rotates every week" in titled["text"][logging_start:]
    assert titled["text"].count("#") == 1 + 2 + 3


def test_a_bbc_article_gets_its_headline_and_its_text_unchanged(script) -> None:
    text = "Ad sales boost Time Warner profit\n\nQuarterly profits at US media giant TimeWarner jumped 76%."
    row = {"id": "bbc-fulltext.zip:business/001.txt", "text": text}
    titled = script.titled_row(row, {})
    assert titled == {**row, "title": "Ad sales boost Time Warner profit"}


def test_a_row_without_a_headline_gets_an_empty_title(script) -> None:
    text = "A first line that ends in a full stop.\n\nMore text follows here."
    assert script.titled_row({"id": "x", "text": text}, {})["title"] == ""


def test_the_headings_map_to_the_passages_of_their_sections(script) -> None:
    titled = script.titled_row({"id": "p", "text": ""}, {"p": PAGE})
    text = titled["text"]
    paragraphs = [(text.index(p), text.index(p) + len(p)) for p in ("The package", "Every option", "Requests are")]
    spans = [(start, text.find(".", start) + 1) for start, _ in paragraphs]
    found = sections(markdown_headings(text), titled["title"], spans, len(text))
    by_text = {(s.text, s.level): (s.first, s.stop) for s in found}
    # the title covers the page; the h1 repeats it and is dropped; h2 runs to the end (h3 is inside it)
    assert by_text[("Installing the server", TITLE_LEVEL)] == (0, 3)
    assert ("Installing the server", 1) not in by_text
    assert by_text[("Configuration files", 2)] == (1, 3)
    assert by_text[("Logging", 3)] == (2, 3)
