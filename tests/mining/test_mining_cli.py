"""`xprt-st mine` and `xprt-st inspect` through the real Typer app."""

from __future__ import annotations

import gzip
import json
import re

import datasets
from typer.testing import CliRunner

from tests.conftest import shared_data
from xprt_st.cli import app
from xprt_st.columns import GROUP_COLUMNS, LABEL

runner = CliRunner()


def _corpus(path):
    rows = []
    for i in range(6):
        paragraphs = [
            f"Paragraph {j} of document {i} is about topic {i} and its many details, number {i * 7 + j}."
            for j in range(4)
        ]
        rows.append(json.dumps({"body": "\n\n".join(paragraphs)}))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_mine_merge_and_inspect(tmp_path, tiny_model_path):
    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"
    common = ["--model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    result = runner.invoke(
        app, ["mine", str(corpus), "--output", str(out), "--text-field", "body", "--threshold-quantile", "0.5", *common]
    )
    assert result.exit_code == 0, result.output
    assert "xPRT mining summary" in result.output and "passage_coverage" in result.output
    dataset = datasets.load_from_disk(str(out))
    assert dataset.column_names == [*GROUP_COLUMNS, LABEL] and len(dataset) > 0

    result = runner.invoke(app, ["mine", "--merge", str(out), "--threshold", "1.0", "-q"])
    assert result.exit_code == 1
    assert "--threshold-quantile" in " ".join(result.output.split())
    assert json.loads((out / "stats.json").read_text())["groups"] == 0

    result = runner.invoke(app, ["mine", "--merge", str(out), "--threshold-quantile", "0.3", "--report", "-q"])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "anchor" in page and "excluded" in page and "tfidf" in page

    result = runner.invoke(app, ["inspect", str(out), "--output", str(tmp_path / "r.html"), "--sample", "2"])
    assert result.exit_code == 0, result.output
    assert len(re.findall(r"class='doc'", (tmp_path / "r.html").read_text())) == 2


def test_mine_reports_wrong_columns_and_bad_flags(tmp_path, tiny_model_path):
    corpus = _corpus(tmp_path / "c.jsonl")
    result = runner.invoke(
        app, ["mine", str(corpus), "--output", str(tmp_path / "o"), "--model", str(tiny_model_path), "-q"]
    )
    assert result.exit_code == 2
    assert "no text field 'text'" in result.output and "--text-field" in result.output
    result = runner.invoke(app, ["mine", str(corpus), "--output", str(tmp_path / "o"), "--rank-by", "bm25", "-q"])
    assert result.exit_code == 2 and "rank_by='bm25' is not one of" in result.output


_NAV_FOOTER = re.compile(
    r"previous topic|next topic|report a bug|show source|quick search|©|copyright \d{4}|last updated on|"
    r"created using sphinx|found a bug\?|index modules|prev\s+up|up\s+home|home\s+next",
    re.IGNORECASE,
)


def test_debian_html_pages_mine_without_boilerplate_anchors(tmp_path, minilm):
    """Real pages with the real model: no anchor is navigation, a search box or a footer."""
    from xprt_st.mining import GroupBuilder, MiningConfig

    pages = shared_data("debian-docs-html", "pages.jsonl.gz")
    sample = tmp_path / "pages.jsonl"
    wanted = {'{"id": "python3.11/html/library/': 3, '{"id": "postgresql-doc-15/html/sql-': 3}
    with gzip.open(pages, "rt", encoding="utf-8") as handle, sample.open("w", encoding="utf-8") as out:
        for line in handle:
            prefix = next((p for p in wanted if line.startswith(p)), None)
            if prefix and wanted[prefix]:
                out.write(line)
                wanted[prefix] -= 1
    config = MiningConfig(html=True, id_field="id", threshold_quantile=0.3, batch_size=32)
    stats = GroupBuilder([sample], tmp_path / "out", config, model=minilm, progress=False).run()
    assert stats["documents"] == 6 and stats["groups"] > 0
    anchors = datasets.load_from_disk(str(tmp_path / "out"))["anchor"]
    assert not [a for a in anchors if _NAV_FOOTER.search(a)]
