"""Issue 29 for mine and inspect: ``--overwrite`` never deletes through the ``shards`` link of a variant folder
(case 7), and ``inspect -o`` never replaces a file it did not write (cases 9 and 17)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.compare.variants import prepare_variant
from xprt_st.mining.layout import MiningLayout
from xprt_st.mining.report import REPORT_SIGNATURE
from xprt_st.training.data import load_mined

runner = CliRunner(env={"COLUMNS": "250"})


def _corpus(path: Path, documents: int = 4) -> Path:
    rows = []
    for i in range(documents):
        paragraphs = [
            f"Paragraph {j} of document {i} is about boats, rivers and weather {i * 9 + j}." for j in range(4)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"d{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _mine_args(corpus: Path, model: Path) -> list[str]:
    return ["mine", str(corpus), "--model", str(model), "--max-tokens", "32", "--min-tokens", "8", "-q",
            "--threshold-quantile", "0.5"]  # fmt: skip


@pytest.fixture(scope="module")
def _mined_once(tmp_path_factory, tiny_model_path) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("guard")
    corpus = _corpus(base / "c.jsonl")
    result = runner.invoke(app, [*_mine_args(corpus, tiny_model_path), "-o", str(base / "mined")])
    assert result.exit_code == 0, result.output
    return corpus, base / "mined"


@pytest.fixture
def mined(_mined_once, tmp_path) -> tuple[Path, Path]:
    corpus, folder = _mined_once
    return corpus, Path(shutil.copytree(folder, tmp_path / "RUN" / "mined"))


def test_overwrite_of_a_linked_variant_unlinks_its_shards_and_keeps_the_mined_run(mined, tiny_model_path):
    corpus, trunk = mined
    variant = trunk.parent / "data" / "positive-random"
    prepare_variant(trunk, variant, {"positive": "random", "pairs": "mined"}, seed=0, progress=False)
    assert (variant / "shards").is_symlink()
    shard_files = sorted(p.relative_to(trunk) for p in (trunk / "shards").rglob("*"))
    assert shard_files

    again = runner.invoke(app, [*_mine_args(corpus, tiny_model_path), "-o", str(variant), "--overwrite"])
    assert again.exit_code == 0, again.output
    assert "Traceback" not in again.output and not isinstance(again.exception, NotADirectoryError)
    assert sorted(p.relative_to(trunk) for p in (trunk / "shards").rglob("*")) == shard_files
    assert len(load_mined(trunk).dataset) > 0  # the trunk's mined run still loads
    assert not (variant / "shards").is_symlink() and MiningLayout(variant).stored_chunks() > 0  # mined anew


def test_inspect_never_replaces_a_file_it_did_not_write(mined, tmp_path):
    _, folder = mined
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "the user\'s corpus"}\n')
    stats = (folder / "stats.json").read_text()
    for target, named in (
        (corpus, "is an existing file that xprt-st did not write"),
        (folder / "stats.json", "is an existing file that xprt-st did not write"),
        (tmp_path, "is an existing folder; give the path of an HTML report"),
    ):
        result = runner.invoke(app, ["inspect", str(folder), "-o", str(target)])
        assert result.exit_code == 2, result.output
        assert named in " ".join(result.output.split()) and "Traceback" not in result.output
    assert corpus.read_text() == '{"text": "the user\'s corpus"}\n'
    assert (folder / "stats.json").read_text() == stats
    assert load_mined(folder).stats["groups"] > 0  # the folder still trains

    # its own report is rewritten, where the user asked and by default
    page = tmp_path / "page.html"
    for args in (["-o", str(page)], ["-o", str(page)], []):
        assert runner.invoke(app, ["inspect", str(folder), *args]).exit_code == 0
    assert page.read_text().startswith(REPORT_SIGNATURE)
    assert (folder / "report.html").read_text().startswith(REPORT_SIGNATURE)
