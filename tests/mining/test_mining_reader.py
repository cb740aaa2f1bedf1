"""Corpus input formats, HTML extraction and bad input: each a clear error or a counted skip."""

from __future__ import annotations

import gzip
import json
import re
import zipfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import shared_data
from xprt_st.mining.duplicates import _Hash64Set
from xprt_st.mining.reader import (
    DEFAULT_MAX_DOCUMENT_CHARS,
    MARKUP_SAMPLE,
    UNREADABLE_RECORD,
    CorpusColumnError,
    CorpusMarkupError,
    CorpusReadError,
    CorpusRecordError,
    DuplicateCounter,
    RawRecord,
    check_sources,
    expand_sources,
    extract_main_text,
    input_differences,
    input_identity,
    iter_corpus,
    looks_like_markup,
    nesting_depth,
)


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_gz_parquet_and_ordinals_across_files(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"text": "first", "id": "x1"}, {"text": "second", "id": "x2"}])
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"text": "third", "id": "x3"}) + "\n")
    pq.write_table(pa.table({"text": ["fourth"], "id": ["x4"]}), tmp_path / "c.parquet")
    records = list(iter_corpus([tmp_path], id_field="id"))
    assert [r.text for r in records] == ["first", "second", "third", "fourth"]
    assert [r.ordinal for r in records] == [0, 1, 2, 3]
    assert [r.doc_id for r in records] == ["x1", "x2", "x3", "x4"]
    assert records[1].origin.endswith("a.jsonl:2")


def test_zip_of_txt_with_a_latin1_file(tmp_path):
    path = tmp_path / "news.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("bbc/tech/001.txt", b"Headline\n\nBody.")
        archive.writestr("bbc/tech/002.txt", "Caf\xe9 prices\n\nUp 5\xa3.".encode("latin-1"))
        archive.writestr("bbc/README.md", "not a document")
    records = list(iter_corpus([path]))
    assert [r.doc_id for r in records] == ["bbc/tech/001.txt", "bbc/tech/002.txt"]
    assert records[1].text == "Café prices\n\nUp 5£."
    assert [r.repair for r in records] == [None, "decoded_latin1"]


def test_bad_lines_are_counted_skips_not_crashes(tmp_path):
    path = tmp_path / "bad.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"text": "good one"}\n')
        handle.write(b"{not json\n")
        handle.write(b'{"title": "no text field"}\n')
        handle.write(b'{"text": 42}\n')
        handle.write(b"[1, 2]\n")
        handle.write('{"text": "caf\xe9"}\n'.encode("latin-1"))  # non-UTF-8 bytes
    records = list(iter_corpus([path]))
    assert [r.skip for r in records] == [
        None,
        "invalid_json",
        "missing_text_field",
        "text_not_a_string",
        "invalid_json",
        None,
    ]
    assert records[5].text == "café" and records[5].repair == "decoded_latin1"
    assert records[2].origin.endswith("bad.jsonl:3")


def test_wrong_columns_name_the_file_and_the_fields(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"body": "x"}])
    with pytest.raises(CorpusColumnError, match=r"a\.jsonl:1: no text field 'text'.*\['body'\].*--text-field"):
        list(iter_corpus([tmp_path / "a.jsonl"]))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "b.parquet")
    with pytest.raises(CorpusColumnError, match=r"b\.parquet: no text field 'text'"):
        list(iter_corpus([tmp_path / "b.parquet"]))
    with pytest.raises(CorpusColumnError, match="no id field 'doc'"):
        list(iter_corpus([tmp_path / "b.parquet"], text_field="body", id_field="doc"))


def test_unreadable_and_missing_sources(tmp_path):
    with pytest.raises(CorpusReadError, match="no such file or folder"):
        expand_sources([tmp_path / "missing.jsonl"])
    (tmp_path / "notes.csv").write_text("a,b")
    with pytest.raises(CorpusReadError, match="unsupported file type"):
        expand_sources([tmp_path / "notes.csv"])
    broken = tmp_path / "broken.jsonl.gz"
    good = gzip.compress(("\n".join(json.dumps({"text": f"t{i}"}) for i in range(200)) + "\n").encode())
    broken.write_bytes(good[: len(good) // 2])  # truncated gzip stream
    with pytest.raises(CorpusReadError, match=r"broken\.jsonl\.gz: cannot read.*--skip-unreadable"):
        list(iter_corpus([broken]))
    skipped: Counter[str] = Counter()
    _jsonl(tmp_path / "z.jsonl", [{"text": "after"}])
    records = list(iter_corpus([broken, tmp_path / "z.jsonl"], skip_unreadable=True, skipped=skipped))
    assert skipped["unreadable_source"] == 1
    assert records[-1].text == "after"
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(CorpusReadError, match=r"bad\.parquet"):
        list(iter_corpus([tmp_path / "bad.parquet"]))


def test_saved_dataset_folder_is_a_source(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": ["one", "two"]}).save_to_disk(str(tmp_path / "ds"))
    assert [r.text for r in iter_corpus([tmp_path / "ds"])] == ["one", "two"]


_PAGE = """<html><head><title>Rivers</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/a">About us</a></li><li><a href="/c">Contact</a></li></ul></nav>
<form class="search"><input type="text" name="q"><button>Quick search</button></form>
<main><article><h1>How rivers shape valleys</h1>
<p>Rivers carve valleys over thousands of years by eroding rock and carrying sediment downstream to the sea.</p>
<h2>Erosion</h2>
<p>The speed of the water decides how much sediment a river can carry; floods move boulders that calm water leaves.</p>
<ul><li>Hydraulic action breaks rock apart.</li><li>Abrasion grinds the riverbed with carried stones.</li></ul>
<p>Over time meanders form where the outer bank erodes faster than the inner bank, widening the valley floor.</p>
</article></main>
<footer><p>Copyright 2024 Example Corp. All rights reserved. Privacy policy | Terms of use</p></footer>
</body></html>"""


def test_html_extraction_keeps_blocks_and_drops_navigation_and_footer():
    text = extract_main_text(_PAGE)
    assert text is not None
    blocks = text.split("\n\n")
    assert "How rivers shape valleys" in blocks
    assert "Erosion" in blocks
    assert "Hydraulic action breaks rock apart." in blocks
    for boilerplate in ("Quick search", "About us", "Copyright", "Privacy policy"):
        assert boilerplate not in text
    assert extract_main_text("<html><body></body></html>") is None


_NAV_FOOTER = re.compile(
    r"previous topic|next topic|report a bug|show source|quick search|©|copyright \d{4}|last updated on|"
    r"created using sphinx|found a bug\?|index modules|prev\s+up|up\s+home|home\s+next",
    re.IGNORECASE,
)
"""Navigation, search box and footer strings of the Sphinx (Python) and DocBook (PostgreSQL) pages."""


def test_real_debian_pages_lose_their_navigation_and_footers():
    path = shared_data("debian-docs-html", "pages.jsonl.gz")
    wanted = {"python3.11/html/library/": 10, "postgresql-doc-15/html/app-": 5}
    raw_hits = kept_hits = 0
    for record in iter_corpus([path], text_field="html", id_field="id"):
        prefix = next((p for p in wanted if record.doc_id.startswith(p)), None)
        if prefix is None or wanted[prefix] == 0:
            continue
        wanted[prefix] -= 1
        plain = re.sub(r"<[^>]+>", " ", record.text)
        raw_hits += bool(_NAV_FOOTER.search(" ".join(plain.split())))
        kept_hits += len(_NAV_FOOTER.findall(extract_main_text(record.text, record.origin) or ""))
        if not any(wanted.values()):
            break
    assert raw_hits == 15  # every raw page carries the boilerplate
    assert kept_hits == 0


def test_markdown_and_html_pages_are_documents_in_a_folder_or_zip_of_pages(tmp_path):
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "install.md").write_text("# Install\n\nRun the installer.\n\n## Upgrade\n\nRun it again.\n")
    (docs / "faq.html").write_text("<html><head><title>FAQ</title></head><body><p>Answers.</p></body></html>")
    (docs / "logo.png").write_bytes(b"\x89PNG")  # not a document: left out of the folder
    records = list(iter_corpus([docs]))
    assert [Path(r.doc_id).relative_to(docs).as_posix() for r in records] == ["faq.html", "guide/install.md"]
    assert records[1].text.startswith("# Install\n") and records[0].text.startswith("<html>")
    # beside data files a page is the data's README, not a document; beside .txt pages it is one (issue 41)
    (docs / "notes.txt").write_text("Plain notes.")
    assert expand_sources([docs]) == [docs / "faq.html", docs / "guide" / "install.md", docs / "notes.txt"]
    _jsonl(docs / "data.jsonl", [{"text": "A record."}])
    assert expand_sources([docs]) == [docs / "data.jsonl", docs / "notes.txt"]
    assert expand_sources([docs / "faq.html"]) == [docs / "faq.html"]  # named, it is read
    archive_path = tmp_path / "docs.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("a/page.htm", "<p>Page.</p>")
        archive.writestr("a/readme.markdown", "# Readme")
        archive.writestr("a/image.svg", "<svg/>")
    assert [r.doc_id for r in iter_corpus([archive_path])] == ["a/page.htm", "a/readme.markdown"]
    with pytest.raises(CorpusReadError, match=r"logo\.png: unsupported file type; give .*\*\.md or \*\.html file"):
        check_sources([docs / "logo.png"])
    # a page without --html is refused before any work, naming the fix
    with pytest.raises(CorpusMarkupError, match=r"faq\.html.*Pass --html"):
        check_sources([docs / "faq.html"], html=False)


def test_bbc_zip_reads_every_article_with_one_latin1_repair():
    path = shared_data("bbc-news", "bbc-fulltext.zip")
    records = list(iter_corpus([path]))
    assert len(records) == 2225
    assert Counter(r.repair for r in records)["decoded_latin1"] == 1
    assert all(r.text and r.doc_id.endswith(".txt") for r in records)


def test_a_fallback_text_field_is_read_per_source_and_named(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"html": "<p>page</p>"}])
    pq.write_table(pa.table({"text": ["<p>raw page in text</p>"]}), tmp_path / "b.parquet")
    records = list(iter_corpus([tmp_path], text_field="html", fallback_text_field="text"))
    assert [(r.text, r.text_field) for r in records] == [("<p>page</p>", "html"), ("<p>raw page in text</p>", "text")]
    with pytest.raises(CorpusColumnError, match="no text field 'html';"):
        list(iter_corpus([tmp_path / "b.parquet"], text_field="html"))


def test_sources_are_checked_from_their_first_record(tmp_path):
    good = _jsonl(tmp_path / "good.jsonl", [{"text": "fine"}])
    wrong = _jsonl(tmp_path / "wrong.jsonl", [{"body": "no text field"}])
    assert check_sources([good]) == [good]
    with pytest.raises(CorpusColumnError, match=r"wrong.jsonl:1: no text field 'text'; the fields are \['body'\]"):
        check_sources([good, wrong])
    with pytest.raises(CorpusReadError, match=r"gone\.jsonl: no such file"):
        check_sources([good, tmp_path / "gone.jsonl"])
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    with pytest.raises(CorpusReadError, match=r"broken\.jsonl\.gz: cannot be read"):
        check_sources([broken])
    assert check_sources([broken], skip_unreadable=True) == [broken]  # left for iter_corpus to count
    empty = _jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(CorpusReadError, match=r"empty\.jsonl: no documents to read \(every source is empty\)"):
        check_sources([empty])
    assert check_sources([empty, good]) == [empty, good]  # one empty file among others: mining counts it


def test_a_source_none_of_whose_first_records_is_a_document_is_refused_before_any_work(tmp_path):
    csv_named_jsonl = _jsonl(tmp_path / "table.jsonl", ["id,text", "1,hello world", "2,more words"])
    with pytest.raises(
        CorpusRecordError,
        match=r"table\.jsonl: none of its first 3 record\(s\) can be read \(invalid_json 3, from .*table\.jsonl:1\); "
        r"they are lines that are not JSON objects",
    ):
        check_sources([csv_named_jsonl])
    numbers = _jsonl(tmp_path / "numbers.jsonl", [{"text": 5}, {"text": ["a"]}, "[1, 2]"])
    with pytest.raises(CorpusRecordError, match=r"\(text_not_a_string 2, invalid_json 1, .*pass --text-field"):
        check_sources([numbers])
    # one broken line before readable ones is counted and skipped by mining, not refused
    mostly_good = _jsonl(tmp_path / "mostly.jsonl", ["not json", {"text": "fine"}, {"text": "also fine"}])
    assert check_sources([mostly_good]) == [mostly_good]
    assert [r.skip for r in iter_corpus([mostly_good])] == ["invalid_json", None, None]
    # only the first MARKUP_SAMPLE records are read: a readable record further down still passes
    late = _jsonl(tmp_path / "late.jsonl", ["bad"] * (MARKUP_SAMPLE - 1) + [{"text": "fine"}])
    assert check_sources([late]) == [late]
    too_late = _jsonl(tmp_path / "too-late.jsonl", ["bad"] * MARKUP_SAMPLE + [{"text": "fine"}])
    with pytest.raises(CorpusRecordError, match=rf"none of its first {MARKUP_SAMPLE} record"):
        check_sources([too_late])


def test_input_identity_tells_other_input_from_the_same_bytes(tmp_path):
    corpus = _jsonl(tmp_path / "c.jsonl", [{"text": "one"}, {"text": "two"}])
    other = _jsonl(tmp_path / "d.jsonl", [{"text": "three"}])
    stored = input_identity([corpus])
    assert stored[0]["size"] == corpus.stat().st_size and len(stored[0]["sha256"]) == 64
    assert input_differences(stored, [corpus]) == []
    assert input_differences(stored, [other]) == [f"{corpus} is no longer an input", f"{other} is a new input"]
    both = input_identity([corpus, other])
    assert input_differences(both, [other, corpus]) == [
        "the same inputs are given in another order (document labels follow the order)"
    ]
    _jsonl(corpus, [{"text": "one"}, {"text": "two"}, {"text": "added"}])
    assert "bytes when mined" in input_differences(stored, [corpus])[0]


# ---- issue 20: raw HTML without --html, unreadable records, capped zip members, duplicates, deep pages


def test_raw_html_in_the_text_field_is_refused_without_html_before_any_work(tmp_path):
    pages = _jsonl(tmp_path / "pages.jsonl", [{"html": _PAGE, "id": f"p{i}"} for i in range(3)])
    with pytest.raises(CorpusMarkupError, match=r"pages\.jsonl: the field 'html' of 3 of its first 3 records is HTML.*"
                       r"pages\.jsonl:1.*Pass --html"):  # fmt: skip
        check_sources([pages], text_field="html", html=False)
    assert check_sources([pages], text_field="html", html=True) == [pages]
    assert check_sources([pages], text_field="html") == [pages]  # a caller that does not say: no check


def test_prose_that_mentions_tags_is_not_taken_for_markup(tmp_path):
    prose = [
        "Wrap the block in a <div> element and close it with </div>; nothing else is needed.",
        "An HTML tutorial: write <p>text</p> for a paragraph, <b>bold</b> for bold and <i>it</i> for italics. "
        + "Browsers have rendered these since the nineties and every page of the web still uses them. " * 5,
        "Plain text about rivers, valleys and the sea, with no markup at all.",
    ]
    assert not any(looks_like_markup(text) for text in prose)
    assert looks_like_markup(_PAGE) and looks_like_markup("<!DOCTYPE html><title>x</title>")
    path = _jsonl(tmp_path / "docs.jsonl", [{"text": text} for text in prose])
    assert check_sources([path], html=False) == [path]
    # one page among mostly prose is not a corpus of pages
    mixed = _jsonl(tmp_path / "mixed.jsonl", [{"text": _PAGE}] + [{"text": t} for t in prose])
    assert check_sources([mixed], html=False) == [mixed]


def test_real_debian_pages_as_text_are_refused_with_the_fix():
    path = shared_data("debian-docs-html", "pages.jsonl.gz")
    with pytest.raises(CorpusMarkupError, match=r"of 20 of its first 20 records is HTML markup.*--html"):
        check_sources([path], text_field="html", html=False)


def _unreadable_lines(path: Path) -> Path:
    deep = '{"id": "3", "text": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with path.open("w", encoding="ascii") as handle:
        handle.write('{"id": "1", "text": "a good first record"}\n')
        handle.write('{"id": "2", "text": "a lone half \\ud800 of a pair"}\n')  # the JSON escape a UTF-16 writer leaves
        handle.write(deep + "\n")
        handle.write('{"text": "fine text", "id": "bad \\udfff id"}\n')
        handle.write('{"id": "5", "text": "a good last record"}\n')
    return path


def test_an_unreadable_record_names_its_file_and_line_without_skip_unreadable(tmp_path):
    path = _unreadable_lines(tmp_path / "c.jsonl")
    with pytest.raises(CorpusRecordError, match=r"c\.jsonl:2: field 'text' holds a lone surrogate.*--skip-unreadable"):
        list(iter_corpus([path]))
    (tmp_path / "deep.jsonl").write_text(path.read_text().splitlines()[2] + "\n")
    with pytest.raises(CorpusRecordError, match=r"deep\.jsonl:1: the JSON is nested deeper"):
        list(iter_corpus([tmp_path / "deep.jsonl"]))
    with pytest.raises(CorpusRecordError, match=r"deep\.jsonl:1: the JSON is nested deeper"):
        check_sources([tmp_path / "deep.jsonl"])  # a first record: refused before any work


def test_unreadable_records_are_skipped_and_counted_with_skip_unreadable(tmp_path):
    path = _unreadable_lines(tmp_path / "c.jsonl")
    records = list(iter_corpus([path], id_field="id", skip_unreadable=True))
    assert [r.skip for r in records] == [None, UNREADABLE_RECORD, UNREADABLE_RECORD, UNREADABLE_RECORD, None]
    assert [r.ordinal for r in records] == [0, 1, 2, 3, 4]
    assert "field 'id' holds a lone surrogate" in records[3].problem
    assert records[4].text == "a good last record"
    assert check_sources([tmp_path / "c.jsonl"], skip_unreadable=True)


def test_zip_members_are_streamed_and_stop_at_the_character_cap(tmp_path, monkeypatch):
    path = tmp_path / "big.zip"
    member = ("All work and no play makes a dull corpus. " * 200_000).encode()  # 8.4 MB, compresses to ~30 kB
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a/small.txt", "A short article.")
        archive.writestr("a/huge.txt", member)
    read_bytes = []
    original_read = zipfile.ZipExtFile.read

    def counting_read(self, n=-1):
        data = original_read(self, n)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting_read)
    huge, small = list(iter_corpus([path]))
    assert huge.doc_id == "a/huge.txt" and len(huge.text) == DEFAULT_MAX_DOCUMENT_CHARS
    assert sum(read_bytes) <= 4 * DEFAULT_MAX_DOCUMENT_CHARS + (1 << 17)  # the cap, not the member's 8.4 MB
    assert huge.bytes_not_read == len(member) - (sum(read_bytes) - len("A short article."))
    assert small.text == "A short article." and small.bytes_not_read == 0


def test_a_capped_read_never_cuts_a_utf8_character_into_a_latin1_repair(tmp_path):
    (tmp_path / "accents.txt").write_text("é" * 100_000 + "\n", encoding="utf-8")  # 2 bytes a character
    (record,) = iter_corpus([tmp_path / "accents.txt"], max_chars=70_000)
    assert record.text == "é" * 70_000 and record.repair is None
    assert record.bytes_not_read == 200_001 - (1 << 16) * 3  # three 64 KiB blocks read: 98,304 characters
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 ".encode("latin-1") * 30_000)
    (record,) = iter_corpus([latin], max_chars=1_000)
    assert record.text == "café " * 200 and record.repair == "decoded_latin1"


def test_duplicate_documents_and_ids_are_counted_with_a_warning(tmp_path, caplog):
    rows = [
        {"id": "a", "text": "The same text."},
        {"id": "b", "text": "Another text."},
        {"id": "c", "text": "The same text."},
        {"id": "a", "text": "A third text under an id already used."},
    ]
    path = _jsonl(tmp_path / "dup.jsonl", rows)
    counts: Counter[str] = Counter()
    with caplog.at_level("WARNING"):
        records = list(iter_corpus([path], id_field="id", counts=counts))
    assert len(records) == 4  # counted, not dropped
    assert counts == Counter(duplicate_documents=1, duplicate_ids=1)
    assert "dup.jsonl:3 repeats an earlier document's text" in caplog.text
    assert "dup.jsonl:4 repeats the id 'a'" in caplog.text
    counts = Counter()
    list(iter_corpus([_jsonl(tmp_path / "unique.jsonl", rows[:2])], id_field="id", counts=counts))
    assert counts["duplicate_documents"] == counts["duplicate_ids"] == 0


def test_the_duplicate_tables_stop_growing_at_their_bound_and_stay_exact_below_it():
    table = _Hash64Set(max_slots=1 << 10)
    values = [(i * 0x9E3779B97F4A7C15) % (1 << 64) or 1 for i in range(1, 2_000)]
    seen = [table.add(v) for v in values[:500]]
    assert not any(seen) and len(table) == 500 and all(table.add(v) for v in values[:500])
    for v in values[500:]:
        table.add(v)
    assert table.full and len(table) == 717 and len(table._table) == 1 << 10  # 70% of 1024 slots, no more
    counter = DuplicateCounter(max_slots=1 << 10)
    for i in range(3_000):
        counter.add(RawRecord(i, f"id-{i}", f"text {i % 2_000}", f"f:{i}"))
    assert counter.saturated and 0 < counter.documents <= 1_000 and counter.ids == 0


def test_pages_nested_deeper_than_the_parser_limit_keep_their_main_text():
    paragraph = "The lighthouse keeper logged every passing ship in a thick leather book, night after night. " * 4
    for depth in (300, 3_000):
        page = (
            "<html><head><script>var tracking = 1;</script></head><body><nav>Home | About us | Contact</nav>"
            + "<div>" * depth
            + f"<p>{paragraph}</p><p>Storms came from the west. {paragraph}</p>"
            + "</div>" * depth
            + "<footer>Copyright 2024 Example Corp.</footer></body></html>"
        )
        assert nesting_depth(page) > 255
        text = extract_main_text(page, f"deep-{depth}")
        assert text is not None and "lighthouse keeper" in text and "Storms came from the west" in text
        assert "About us" not in text and "tracking" not in text


def test_mine_names_an_unreadable_record_counts_it_with_skip_unreadable_and_warns_of_duplicates(
    tmp_path, tiny_model_path
):
    from typer.testing import CliRunner

    from xprt_st.cli import app

    rows = [
        json.dumps(
            {"text": "\n\n".join(f"Paragraph {j} of document {i} is about topic {i}, detail {j}." for j in range(4))}
        )
        for i in range(6)
    ]
    rows.insert(2, '{"text": "a lone half \\ud800 of a surrogate pair"}')
    rows.append(rows[0])  # an exact duplicate document: counted with a warning, not dropped
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(rows) + "\n", encoding="ascii")
    runner = CliRunner(env={"COLUMNS": "250"})
    common = ["--mining-model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    common += ["--threshold-quantile", "0.5"]
    result = runner.invoke(app, ["mine", str(corpus), "--output", str(tmp_path / "out"), *common])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "c.jsonl:3: field 'text' holds a lone surrogate" in message and "--skip-unreadable" in message
    result = runner.invoke(app, ["mine", str(corpus), "--output", str(tmp_path / "out"), "--skip-unreadable", *common])
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["skipped"]["unreadable_record"] == 1
    assert "c.jsonl:8 repeats an earlier document's text" in " ".join(result.output.split())


def test_cases_that_already_held_stay_held(tmp_path):
    """Issue 20's 'holds well' reader cases: NUL bytes, emoji and right-to-left text, integer and null ids,
    an empty file, and a folder mixing corpus files with other files."""
    rows = [
        {"id": 7, "text": "NUL\x00inside a text"},
        {"id": None, "text": "emoji 🧭🌊 and right-to-left שלום עולם مرحبا"},
        {"id": "../../etc/x", "text": "an id that looks like a path"},
    ]
    folder = tmp_path / "mixed"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", rows)
    (folder / "empty.jsonl").write_text("")
    (folder / "notes.csv").write_text("a,b\n")
    (folder / "readme.md").write_text("# not a corpus file")
    assert expand_sources([folder]) == [folder / "a.jsonl", folder / "empty.jsonl"]
    records = list(iter_corpus([folder], id_field="id"))
    assert [r.text for r in records] == [row["text"] for row in rows]
    assert [r.doc_id for r in records] == ["7", f"{folder / 'a.jsonl'}:2", "../../etc/x"]  # a null id: file:line
    assert all(r.skip is None for r in records)
    assert list(iter_corpus([folder / "empty.jsonl"])) == []


def test_a_mixed_folder_of_pages_is_read_whole_and_skipped_files_are_named(tmp_path, caplog):
    """Issue 41: 4 .txt, 4 .md and 4 .html pages read as the 4 .txt ones, with no word about the other 8."""
    folder = tmp_path / "pages"
    folder.mkdir()
    for i in range(4):
        (folder / f"t{i}.txt").write_text(f"Text page {i}.")
        (folder / f"m{i}.md").write_text(f"# Markdown page {i}\n\nBody.")
        (folder / f"h{i}.html").write_text(f"<html><body><p>HTML page {i}.</p></body></html>")
    (folder / "scan.pdf").write_bytes(b"%PDF-1.4")
    with caplog.at_level("WARNING"):
        records = list(iter_corpus([folder]))
    assert len(records) == 12
    assert "scan.pdf" in caplog.text and "skipped" in caplog.text
    # a README beside data files is still not a document, and the log says so and why
    readme_folder = tmp_path / "dataset"
    readme_folder.mkdir()
    _jsonl(readme_folder / "corpus.jsonl", [{"text": "One record."}])
    (readme_folder / "README.md").write_text("# About this data")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert [r.text for r in iter_corpus([readme_folder])] == ["One record."]
    assert "README.md: a page beside data files (corpus.jsonl) is read as the data's README" in caplog.text


def test_html_extracts_the_html_pages_of_a_mixed_folder_and_reads_the_others_as_text(tmp_path, tiny_model):
    """Issue 41: with --html, .txt pages went through trafilatura and were blamed on --html."""
    from xprt_st.mining.passages import PassageSplitter
    from xprt_st.mining.stages import DocumentSplitter

    folder = tmp_path / "pages"
    folder.mkdir()
    words = " ".join(f"word{i}" for i in range(40))
    (folder / "a.txt").write_text(f"Plain text page. {words}.\n\nA second paragraph. {words}.")
    (folder / "b.md").write_text(f"# Markdown\n\nBody text. {words}.\n\nMore body. {words}.")
    paragraphs = "".join(f"<p>Paragraph {j} of the article. {words}.</p>" for j in range(3))
    (folder / "c.html").write_text(f"<html><body><article>{paragraphs}</article></body></html>")
    stage = DocumentSplitter(PassageSplitter(tiny_model.tokenizer, max_tokens=32, min_tokens=8), html=True)
    documents = list(stage.run(iter_corpus([folder], text_field="html", fallback_text_field="text")))
    assert len(documents) == 3 and not stage.skipped
    assert not any("<p>" in passage for document in documents for passage in document.passages)


def test_a_page_cut_at_the_cap_before_its_main_text_says_so(tmp_path, tiny_model):
    """Issue 41: a 5 MB attribute was cut and then called "no main text: drop --html"."""
    from xprt_st.mining.passages import PassageSplitter
    from xprt_st.mining.records import SKIP_FIXES
    from xprt_st.mining.stages import DocumentSplitter

    page = tmp_path / "big.html"
    body = "".join(f"<p>Paragraph {j} of the article, with enough words to count as text.</p>" for j in range(5))
    page.write_text(f'<html><body><div data-blob="{"x" * 5_000_000}"></div><article>{body}</article></body></html>')
    stage = DocumentSplitter(PassageSplitter(tiny_model.tokenizer, max_tokens=32, min_tokens=8), html=True)
    assert list(stage.run(iter_corpus([page], text_field="html", fallback_text_field="text"))) == []
    assert dict(stage.skipped) == {"html_cut_before_main_text": 1}
    assert "read cap" in SKIP_FIXES["html_cut_before_main_text"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig"])
def test_a_text_file_with_a_byte_order_mark_is_decoded_by_it(tmp_path, encoding):
    """Issue 41: UTF-16 .txt files (Notepad's "Unicode") were decoded as latin-1 and trained on as garbage."""
    text = "Café crème: naïve façade, 東京 and ünïcödé.\n\nA second paragraph."
    path = tmp_path / "page.txt"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = "\ufeff".encode(encoding) + data  # the -be codec writes no mark itself
    path.write_bytes(data)
    (record,) = iter_corpus([path])
    assert record.text == text and record.repair is None
    archive_path = tmp_path / "pages.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("page.txt", data)
    (member,) = iter_corpus([archive_path])
    assert member.text == text and member.repair is None


def test_a_zip_inside_a_zip_is_read_to_a_bounded_depth(tmp_path, caplog):
    """Issue 41: a zip inside a zip was skipped without a word."""
    from xprt_st.mining.formats import MAX_ZIP_DEPTH

    def zipped(members: dict[str, bytes]) -> bytes:
        import io

        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        return buffer.getvalue()

    inner = zipped({"b.txt": b"Inner page.", "c.txt": b"Second inner page."})
    outer = tmp_path / "outer.zip"
    outer.write_bytes(zipped({"a.txt": b"Outer page.", "more/inner.zip": inner, "photo.jpg": b"\xff\xd8"}))
    with caplog.at_level("WARNING"):
        records = list(iter_corpus([outer]))
    assert [(r.doc_id, r.text) for r in records] == [
        ("a.txt", "Outer page."),
        ("more/inner.zip!b.txt", "Inner page."),
        ("more/inner.zip!c.txt", "Second inner page."),
    ]
    assert [r.ordinal for r in records] == [0, 1, 2] and "photo.jpg" in caplog.text
    deep = b"Deepest page."
    nested = {"deep.txt": deep}
    for level in range(MAX_ZIP_DEPTH):
        nested = {f"level{level}.zip": zipped(nested), "top.txt": b"Top page."}
    too_deep = tmp_path / "deep.zip"
    too_deep.write_bytes(zipped(nested))
    caplog.clear()
    with caplog.at_level("WARNING"):
        texts = [r.text for r in iter_corpus([too_deep])]
    assert "Deepest page." not in texts and texts.count("Top page.") == MAX_ZIP_DEPTH
    assert f"zips deep is skipped (at most {MAX_ZIP_DEPTH})" in caplog.text


def test_a_link_leaving_the_corpus_folder_is_not_read_and_is_named(tmp_path, caplog):
    """A symlink inside the corpus folder to a file outside it (the system's user database, a private key, as an
    archive from someone else can carry) was read silently: its lines reached the training groups and the report."""
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "id_rsa.txt").write_text("PRIVATE KEY LINE")
    folder = tmp_path / "pages"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("Page a.")
    (folder / "sub" / "b.txt").write_text("Page b.")
    (folder / "key.txt").symlink_to(outside / "id_rsa.txt")
    (folder / "again.txt").symlink_to(folder / "a.txt")  # a link within the folder is read
    with caplog.at_level("WARNING"):
        texts = sorted(record.text for record in iter_corpus([folder]))
    assert texts == ["Page a.", "Page a.", "Page b."]
    assert "1 link(s) to files outside the folder are not read (key.txt)" in caplog.text


def test_a_file_past_the_read_cap_is_warned_about_once(tmp_path, caplog):
    """Before: each cap warning was printed twice (the check before work reads the first records, then the run)."""
    from xprt_st.mining.formats import DEFAULT_MAX_DOCUMENT_CHARS
    from xprt_st.mining.reader import check_sources

    folder = tmp_path / "pages"
    folder.mkdir()
    (folder / "big.txt").write_text("A long page. " * (DEFAULT_MAX_DOCUMENT_CHARS // 13 + 100))
    with caplog.at_level("WARNING"):
        check_sources([folder], html=False)
        records = list(iter_corpus([folder]))
    assert len(records) == 1 and len(records[0].text) == DEFAULT_MAX_DOCUMENT_CHARS
    warned = [r.getMessage() for r in caplog.records if "characters are read" in r.getMessage()]
    assert len(warned) == 1 and f"only its first {DEFAULT_MAX_DOCUMENT_CHARS} characters" in warned[0]
