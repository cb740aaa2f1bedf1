"""Titles and headings: found in Markdown, plain text and HTML, mapped to passages, kept for held-out documents."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from xprt_st.mining import GroupBuilder, MiningConfig, is_held_out
from xprt_st.mining.headings import Section, TextHeading, clean_heading, markdown_headings, plain_title, sections
from xprt_st.mining.html_text import extract_main_text, extract_main_text_with_headings
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.reader import CorpusColumnError, check_sources, iter_corpus


def test_markdown_headings_levels_one_to_three_outside_code_fences():
    text = "# Guide\nintro\n## Install ##\nsteps\n```\n# not a heading\n```\n#### too deep\n#tag\n### Notes\nend"
    found = markdown_headings(text)
    assert [(h.text, h.level) for h in found] == [("Guide", 1), ("Install", 2), ("Notes", 3)]
    assert [text[h.start : h.start + 7] for h in found] == ["# Guide", "## Inst", "### Not"]


def test_plain_title_is_a_short_first_line_before_a_blank_line():
    assert plain_title("Ad sales boost Time Warner profit\n\nQuarterly profits at US media giant.") == (
        "Ad sales boost Time Warner profit"
    )
    assert plain_title("Is it over?\n\nYes.") == "Is it over?"
    assert plain_title("Dear John,\n\nI write.") is None  # a salutation
    assert plain_title("One sentence ends here.\n\nMore text.") is None
    assert plain_title("A headline\nthen text at once") is None  # no blank line after it
    assert plain_title("Only a headline\n\n") is None  # nothing under it
    assert plain_title(" ".join(["word"] * 21) + "\n\nbody") is None


def test_sections_map_titles_and_headings_to_the_passages_they_overlap():
    # characters: [0, 100) before any heading, h2 A at 100, h3 A1 at 200, h2 B at 300, end 400
    marks = [TextHeading("A", 2, 100), TextHeading("A1", 3, 200), TextHeading("B", 2, 300)]
    spans = [(0, 90), (100, 190), (200, 320), (330, 400)]  # passage 2 runs across the start of B
    assert sections(marks, "Doc", spans, 400) == [
        Section("Doc", 0, 0, 4),
        Section("A", 2, 1, 3),
        Section("A1", 3, 2, 3),
        Section("B", 2, 2, 4),
    ]
    # a heading under no passage, or with the title's text, is left out; no passages, no sections
    assert sections([TextHeading("doc", 2, 0), TextHeading("Gone", 2, 500)], "Doc", spans, 600) == [
        Section("Doc", 0, 0, 4)
    ]
    assert sections(marks, "Doc", [], 400) == []
    assert sections([], "  ", spans, 400) == []  # a blank title is no title


def test_the_splitter_reports_each_passage_span(tiny_model):
    splitter = PassageSplitter(tiny_model.tokenizer, max_tokens=12, min_tokens=4)
    text = "## Intro\n\nAlpha beta gamma delta epsilon.\n\n## Use\n\nZeta eta theta iota kappa lambda mu."
    result = splitter.split(text)
    assert len(result.spans) == len(result.passages) >= 2
    for (start, end), passage in zip(result.spans, result.passages, strict=True):
        assert " ".join(text[start:end].split()) == " ".join(passage.split())


PAGE = (
    "<html><head><title>Site &amp; Page</title></head><body><nav>Home About Contact</nav><article>"
    "<h1>The Big Title</h1><p>First paragraph of text that is long enough to be main text content here and there, "
    "with more words to pass the extraction threshold of the extractor.</p>"
    "<h2>Section A</h2><p>Text of section A goes here with many words so that it is kept by the extractor.</p>"
    "<h3>Sub A1</h3><p>Sub section text with plenty of words in it as well to be extracted by it, surely.</p>"
    "<h2>Section B</h2><p>Text of section B, another paragraph with lots of words inside to be kept too.</p>"
    "</article><footer>Copyright notice</footer></body></html>"
)


def test_html_extraction_keeps_heading_positions_and_the_title():
    text, marks, title = extract_main_text_with_headings(PAGE)
    assert text == extract_main_text(PAGE)
    assert [(h.text, h.level) for h in marks] == [
        ("The Big Title", 1),
        ("Section A", 2),
        ("Sub A1", 3),
        ("Section B", 2),
    ]
    assert all(text[h.start : h.start + len(h.text)] == h.text for h in marks)
    assert title == "The Big Title"  # the first <h1>, before <title>
    no_h1 = PAGE.replace("<h1>The Big Title</h1>", "")
    assert extract_main_text_with_headings(no_h1)[2] == "Site & Page"


def test_a_sphinx_permalink_mark_is_not_part_of_a_heading():
    sphinx = (
        '<html><head><title>json - Python docs</title></head><body><div class="body">'
        '<h1>json \u2014 JSON encoder<a class="headerlink" href="#json">\u00b6</a></h1>'
        "<p>JSON is a lightweight data interchange format inspired by JavaScript object literal syntax.</p>"
        '<h2>Basic Usage<a class="headerlink" href="#usage">\u00b6</a></h2>'
        "<p>Serialize an object as a JSON formatted stream to a file-like object with dump and dumps.</p>"
        "</div></body></html>"
    )
    _, marks, title = extract_main_text_with_headings(sphinx)
    assert title == "json \u2014 JSON encoder" and [h.text for h in marks] == [title, "Basic Usage"]
    assert [clean_heading(t) for t in ("Notes \U0001f517", "Install #", "C#", "F# and C# \u00b6")] == [
        "Notes",
        "Install",
        "C#",
        "F# and C#",
    ]
    assert clean_heading("\u00b6") is None


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano", "orchid", "railway"]


def _articles(documents: int, markdown: bool = False) -> list[dict]:
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = []
        for j in range(4):
            if markdown:
                paragraphs.append(f"## {topic.title()} part {j}")
            paragraphs.append(
                f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history. "
                f"Experts on the {topic} add detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
            )
        rows.append({"id": f"doc-{i}", "title": f"All about the {topic} {i}", "text": "\n\n".join(paragraphs)})
    return rows


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    return MiningConfig(**(settings | overrides))


def test_mining_keeps_the_titles_and_headings_of_held_out_documents_only(tmp_path, tiny_model):
    corpus = _jsonl(tmp_path / "c.jsonl", _articles(20, markdown=True))
    out = tmp_path / "out"
    stats = GroupBuilder([corpus], out, _config(holdout=0.3, title_field="title"), model=tiny_model, progress=False)
    stats = stats.run()
    held = {f"doc-{i}" for i in range(20) if is_held_out(f"doc-{i}", 0.3, 0)}
    titles = datasets.load_from_disk(str(out / "heldout" / "titles"))
    passages = datasets.load_from_disk(str(out / "heldout" / "passages")).to_pandas()
    label_of = {row["id"]: n for n, row in enumerate(_articles(20))}
    assert set(titles["label"]) == {label_of[i] for i in held}
    kinds = titles.to_pandas()
    assert (kinds["kind"] == "title").sum() == len(held)
    assert (
        stats["holdout"]["titles"] == len(held) and stats["holdout"]["headings"] == (kinds["kind"] == "heading").sum()
    )
    assert stats["holdout"]["headings"] >= len(held)  # each document has four "## Topic part j" sections
    for row in titles:
        own = passages[passages["label"] == row["label"]]
        if row["kind"] == "title":
            assert row["text"].startswith("All about the") and row["passages"] == sorted(own["passage"])
        else:
            covered = own[own["passage"].isin(row["passages"])]["text"]
            part = row["text"].split()[-1]
            assert row["level"] == 2 and any(f"part {part} of document" in text for text in covered)
    # the same folder without the title field: the headings only, and no title counted
    plain = tmp_path / "plain"
    stats = GroupBuilder([corpus], plain, _config(holdout=0.3), model=tiny_model, progress=False).run()
    assert "title" not in datasets.load_from_disk(str(plain / "heldout" / "titles"))["kind"]
    assert stats["holdout"]["titles"] == 0
    # a Markdown page's first "# ..." is its title when the record has none, as an HTML page's first <h1>
    pages = [{**row, "text": f"# {row['title']}\n\n{row['text']}"} for row in _articles(20, markdown=True)]
    md = tmp_path / "md"
    stats = GroupBuilder([_jsonl(tmp_path / "md.jsonl", pages)], md, _config(holdout=0.3), model=tiny_model).run()
    found = datasets.load_from_disk(str(md / "heldout" / "titles")).to_pandas()
    assert stats["holdout"]["titles"] == len(held) and (found["kind"] == "title").sum() == len(held)
    assert all(text.startswith("All about the") for text in found[found["kind"] == "title"]["text"])
    assert not any(found[found["kind"] == "heading"]["text"].str.startswith("All about the"))  # not a heading too


def test_a_corpus_without_titles_is_mined_as_before(tmp_path, tiny_model):
    rows = [{k: v for k, v in row.items() if k != "title"} for row in _articles(20)]
    out = tmp_path / "out"
    stats = GroupBuilder([_jsonl(tmp_path / "c.jsonl", rows)], out, _config(holdout=0.3), model=tiny_model).run()
    assert not (out / "heldout" / "titles").exists()
    holdout = {"fraction", "documents", "groups", "passages", "contamination", "drawn_by"}
    assert set(stats["holdout"]) == holdout  # no "titles" count (and no draw caveat: the draw hashes the ids)
    assert "title_field" not in json.loads((out / "mining_config.json").read_text())


def test_title_field_is_read_and_a_missing_one_is_named_before_any_work(tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", [{"text": "a b c", "title": "T"}, {"text": "d e", "title": ""}])
    assert [r.title for r in iter_corpus([corpus], title_field="title")] == ["T", None]
    assert [r.title for r in iter_corpus([corpus])] == [None, None]
    with pytest.raises(CorpusColumnError, match=r"no title field 'name'.*--title-field"):
        check_sources([corpus], title_field="name")


def test_mine_cli_title_field_and_html_headings(tmp_path, tiny_model_path):
    from typer.testing import CliRunner

    from xprt_st.cli import app

    pages = [
        {"id": f"p{i}", "html": PAGE.replace("The Big Title", f"Page {i} title").replace("Section A", f"Topic {i}")}
        for i in range(12)
    ]
    corpus = _jsonl(tmp_path / "pages.jsonl", pages)
    out = tmp_path / "out"
    args = ["mine", str(corpus), "-o", str(out), "--html", "--id-field", "id", "--model", str(tiny_model_path)]
    result = CliRunner().invoke(
        app, [*args, "--holdout", "0.5", "--max-tokens", "24", "--min-tokens", "4", "-q", "--report"]
    )
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    held = sum(is_held_out(f"p{i}", 0.5, 0) for i in range(12))
    assert stats["holdout"]["titles"] == held > 0 and stats["holdout"]["headings"] == 3 * held
    assert f"&quot;titles&quot;: {held}" in (out / "report.html").read_text()
    titles = datasets.load_from_disk(str(out / "heldout" / "titles")).to_pandas()
    assert set(titles.loc[titles["kind"] == "heading", "level"]) == {2, 3}
    bad = CliRunner().invoke(app, ["mine", str(corpus), "-o", str(tmp_path / "x"), "--html", "--title-field", "name"])
    assert (
        bad.exit_code != 0
        and "no title field 'name'" in " ".join(bad.output.split())
        and not (tmp_path / "x" / "mining_config.json").exists()
    )
