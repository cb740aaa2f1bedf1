"""The mining folder as a careful user expects it: one writer at a time, no stale temporary folders, clear
messages for an output inside the input and for training on an interrupted run (issue 20's mining cases)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from xprt_st.mining import GroupBuilder, MiningConfig, MiningConfigError, MiningOutputError
from xprt_st.mining.layout import MiningLayout
from xprt_st.training.data import MinedDataError, load_mined


def _corpus(path: Path, documents: int = 4) -> Path:
    rows = []
    for i in range(documents):
        paragraphs = [
            f"Paragraph {j} of document {i} tells about boats, rivers and weather number {i * 9 + j}." for j in range(4)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"d{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _config(**overrides) -> MiningConfig:
    return MiningConfig(**({"max_tokens": 32, "min_tokens": 8, "threshold_quantile": 0.5, "chunk_size": 2} | overrides))


def _lock_file(out: Path) -> Path:
    return MiningLayout(out).lock().path


def test_a_second_run_into_a_folder_being_mined_is_refused_with_the_holder(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out.mkdir()
        lock = {"pid": holder.pid, "host": socket.gethostname(), "started": "2026-12-01 09:00:00"}
        _lock_file(out).write_text(json.dumps(lock))
        with pytest.raises(MiningOutputError) as error:
            GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
        message = str(error.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message and "delete" in message
        assert not (out / "mining_config.json").exists()  # nothing of the refused run was written
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone now: its lock is stale, taken over, and released at the end of the run.
    stats = GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    assert stats["groups"] > 0 and not _lock_file(out).exists()


def test_stale_temporary_folders_are_removed_by_the_next_run(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"
    GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    for name in (".dataset.tmp-12345", ".merge.tmp-999"):
        (out / name).mkdir()
        (out / name / "data-00000-of-00001.arrow").write_bytes(b"half written")
    GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    assert not list(out.glob(".dataset.tmp-*")) and not list(out.glob(".merge.tmp*"))


def test_an_output_inside_an_input_folder_is_refused(tmp_path, tiny_model):
    folder = tmp_path / "corpus"
    folder.mkdir()
    _corpus(folder / "c.jsonl")
    with pytest.raises(MiningConfigError, match=r"inside the input folder .*corpus.*outside"):
        GroupBuilder([folder], folder / "mined", _config(), model=tiny_model, progress=False).run()
    assert not (folder / "mined").exists()


def test_training_on_an_interrupted_mining_folder_says_to_resume_it(tmp_path, tiny_model, monkeypatch):
    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "out"

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt("simulated kill")

    with monkeypatch.context() as patch:
        patch.setattr(GroupBuilder, "write_chunk", killed)
        with pytest.raises(KeyboardInterrupt):
            GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    with pytest.raises(MinedDataError, match="rerun the same `xprt-st mine` command to resume it"):
        load_mined(out)
    assert not _lock_file(out).exists()  # an interrupted run leaves no lock behind


def test_a_folder_of_other_files_is_refused_and_overwrite_deletes_only_minings_files(tmp_path, tiny_model):
    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "d"
    (out / "shards").mkdir(parents=True)
    (out / "stats.json").write_text("{}")
    (out / "shards" / "mine.txt").write_text("x")
    with pytest.raises(MiningOutputError, match=r"did not write \(shards/mine\.txt, stats\.json\)"):
        GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    assert (out / "stats.json").read_text() == "{}" and (out / "shards" / "mine.txt").read_text() == "x"

    mined = tmp_path / "mined"
    GroupBuilder([corpus], mined, _config(), model=tiny_model, progress=False).run()
    (mined / "shards" / "mine.txt").write_text("keep")
    (mined / "notes.md").write_text("keep too")
    assert MiningLayout(mined).foreign() == ["notes.md", "shards/mine.txt"]
    GroupBuilder([corpus], mined, _config(), model=tiny_model, progress=False).run()  # a rerun touches neither
    stats = GroupBuilder([corpus], mined, _config(top_k=2), model=tiny_model, progress=False, overwrite=True).run()
    assert stats["settings"]["top_k"] == 2
    assert (mined / "shards" / "mine.txt").read_text() == "keep" and (mined / "notes.md").read_text() == "keep too"


def test_the_cli_says_when_it_resumes(tmp_path, tiny_model_path, monkeypatch):
    from typer.testing import CliRunner

    from xprt_st.cli import app

    corpus = _corpus(tmp_path / "c.jsonl", documents=6)
    out = tmp_path / "out"
    args = ["mine", str(corpus), "-o", str(out), "--mining-model", str(tiny_model_path), "--max-tokens", "32"]
    args += ["--min-tokens", "8", "--chunk-size", "2", "-q"]
    calls = {"n": 0}
    original = GroupBuilder.write_chunk

    def killed_at_the_third_chunk(self, *arguments):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated kill")
        original(self, *arguments)

    with monkeypatch.context() as patch:
        patch.setattr(GroupBuilder, "write_chunk", killed_at_the_third_chunk)
        CliRunner().invoke(app, args)
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "resuming the mining run stored in" in result.output and "2 scored chunks are kept" in result.output
    # a rerun with other settings is refused, and is not first told it resumes
    other = CliRunner(env={"COLUMNS": "250"}).invoke(app, [*args[:-1], "--max-tokens", "48", "-q"])
    assert other.exit_code == 2 and "holds a run mined with other settings" in other.output
    assert "resuming" not in other.output


def test_a_full_disk_is_named_with_its_free_space_and_the_rerun_resumes(tmp_path, tiny_model, monkeypatch):
    import errno

    from xprt_st.mining import run_mining

    corpus = _corpus(tmp_path / "c.jsonl", documents=6)
    out = tmp_path / "out"
    calls = {"n": 0}
    original = MiningLayout.write_chunk

    def full_disk(self, shard, num_shards, chunk, table, counts, embeddings=None):
        calls["n"] += 1
        if calls["n"] == 2:
            path = self.chunk_dir(shard, num_shards, chunk) / "passages.parquet"
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        original(self, shard, num_shards, chunk, table, counts, embeddings)

    with monkeypatch.context() as patch:
        patch.setattr(MiningLayout, "write_chunk", full_disk)
        with pytest.raises(MiningOutputError) as error:
            run_mining([corpus], out, _config(), model=tiny_model, progress=False)
    message = str(error.value)
    assert "chunk-00001" in message and "No space left on device" in message
    assert "GiB free of" in message and "rerun the same command" in message
    assert not _lock_file(out).exists()
    stats = run_mining([corpus], out, _config(), model=tiny_model, progress=False)
    assert stats["documents"] == 6
