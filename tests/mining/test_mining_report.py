"""`xprt-st inspect` reads a mined folder chunk by chunk: the same page, without holding every passage."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

import xprt_st.mining.layout as layout_package
import xprt_st.mining.layout.folder as folder_module
import xprt_st.mining.report as report_module
from xprt_st.mining import GroupBuilder, MiningConfig, write_report
from xprt_st.mining.layout import MiningLayout

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano", "orchid", "railway"]


def _mined(tmp_path: Path, model, chunk_size: int) -> Path:
    rows = []
    for i in range(14):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} tells {topic} facts, {TOPICS[(i + j) % 10]} and more "
            f"{topic} history, with detail number {i * 10 + j}."
            for j in range(1 + i % 5)  # documents of one passage too: never sampled
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    tmp_path.mkdir(parents=True, exist_ok=True)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "mined"
    config = MiningConfig(max_tokens=32, min_tokens=8, batch_size=8, chunk_size=chunk_size, id_field="id")
    GroupBuilder([corpus], out, config, model=model, progress=False).run()
    return out


def _refuse_loading_everything(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("inspect must not load every passage of the folder")

    for module in (layout_package, folder_module, report_module):
        monkeypatch.setattr(module, "load_passages", refuse, raising=False)


def test_the_report_streams_chunks_and_equals_the_report_of_the_whole_corpus_in_one_table(
    tmp_path, tiny_model, monkeypatch
):
    out = _mined(tmp_path, tiny_model, chunk_size=3)
    assert len(MiningLayout(out).chunks(1)) == 5
    read: list[int] = []
    original = MiningLayout.read_chunk

    def counted(self, *args, **kwargs):
        table = original(self, *args, **kwargs)
        read.append(table.num_rows)
        return table

    _refuse_loading_everything(monkeypatch)
    monkeypatch.setattr(MiningLayout, "read_chunk", counted)
    streamed = write_report(out, tmp_path / "streamed.html", sample=4).read_text()
    total = sum(original(MiningLayout(out), 0, 1, c, ["label"]).num_rows for c in range(5))
    assert read and max(read) < total  # never more than one chunk's rows at a time

    # The same folder read as one table (all passages in memory, as the report did before it streamed):
    def whole(self, num_shards, columns=None):
        yield pa.concat_tables([original(self, s, num_shards, c, columns) for s, c in self.chunks(num_shards)])

    monkeypatch.setattr(MiningLayout, "iter_passages", whole)
    in_one_table = write_report(out, tmp_path / "whole.html", sample=4).read_text()
    assert streamed == in_one_table
    assert streamed.count("<div class='doc'>") == 4
    assert "threshold sweep" in streamed
