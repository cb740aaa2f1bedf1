"""Issue 29: the one output-folder guard (lock, manifest, refusal of other files, --overwrite, symlinks, long names)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from xprt_st.mining.config import MiningOutputError
from xprt_st.mining.layout import FolderLock as MiningLock
from xprt_st.output_folder import (
    LOCK_FILE,
    MANIFEST_FILE,
    FolderBusyError,
    OutputFolder,
    OutputFolderError,
    check_output_file,
    command_folder,
    remove_path,
)
from xprt_st.paths import output_folder_problem

LONG = "n" * 256


@pytest.fixture
def live_pid():
    """The pid of a live process other than this one (a second run holding a lock)."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield holder.pid
    holder.kill()
    holder.wait()


def _dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


def test_the_manifest_records_what_the_command_wrote_and_overwrite_deletes_only_that(tmp_path):
    out = tmp_path / "run"
    with command_folder(out, "train"):
        (out / "README.md").write_text("model card")
        (out / "checkpoint-2").mkdir()
    assert json.loads((out / MANIFEST_FILE).read_text()) == {"command": "train", "files": ["README.md", "checkpoint-2"]}
    assert not (out / LOCK_FILE).exists()
    (out / "notes.txt").write_text("the user's, added later")  # beside a run of train: kept, not refused
    with command_folder(out, "train", overwrite=True):
        assert sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE) == [MANIFEST_FILE, "notes.txt"]
    assert (out / "notes.txt").read_text() == "the user's, added later"


def test_a_folder_of_other_files_is_refused_before_anything_is_written(tmp_path):
    user = tmp_path / "u"
    user.mkdir()
    (user / "README.md").write_text("mine")
    (user / "config.json").write_text("{}")
    with pytest.raises(OutputFolderError) as error:
        command_folder(user, "interpolate").acquire()
    message = str(error.value)
    assert "holds files that xprt-st interpolate did not write: README.md, config.json" in message
    assert "\n" not in message
    assert sorted(p.name for p in user.iterdir()) == ["README.md", "config.json"]  # no lock, no manifest left
    # --overwrite deletes only the command's own files: other files still refuse the folder
    with pytest.raises(OutputFolderError):
        command_folder(user, "interpolate", overwrite=True).acquire()
    assert (user / "README.md").read_text() == "mine"


def test_another_commands_folder_is_foreign_and_named(tmp_path):
    out = tmp_path / "run"
    with command_folder(out, "train"):
        (out / "model.safetensors").write_bytes(b"")
    with pytest.raises(OutputFolderError, match=r"\(it was written by xprt-st train\): model.safetensors"):
        command_folder(out, "interpolate").check()


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(tmp_path, live_pid, caplog):
    out = tmp_path / "run"
    out.mkdir()
    record = {"pid": live_pid, "host": socket.gethostname(), "command": "train", "started": "2026-12-01 09:00:00"}
    (out / LOCK_FILE).write_text(json.dumps(record))
    with pytest.raises(FolderBusyError) as error:
        command_folder(out, "train").acquire()
    assert f"pid {live_pid} on host {socket.gethostname()} (xprt-st train), since 2026-12-01 09:00:00" in str(
        error.value
    )
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == live_pid  # the holder's lock is left alone

    # a killed run of the same command: its lock is taken over with a line; what it recorded is ours, nothing else
    (out / "checkpoint-1").mkdir()
    (out / "notes.md").write_text("the user's, added after the kill")
    stale = {**record, "pid": _dead_pid()}
    (out / LOCK_FILE).write_text(json.dumps(stale))
    with caplog.at_level(logging.WARNING), command_folder(out, "train", overwrite=True):
        pass
    assert f"taking over the stale lock {out / LOCK_FILE}" in caplog.text and "no longer running" in caplog.text
    assert (out / "notes.md").exists() and not (out / "checkpoint-1").exists()
    assert not (out / MANIFEST_FILE).exists() or json.loads((out / MANIFEST_FILE).read_text())["files"] == []


def test_a_killed_save_leaves_its_names_to_the_rerun_and_a_users_files_stay_foreign(tmp_path):
    """Round 5: adoption of a killed run takes only what it recorded: names it listed (:meth:`record`) and what
    appeared during the save it declared (:meth:`writing`); a user's file from before that save is never its."""
    out = tmp_path / "run"
    folder = command_folder(out, "train").acquire()
    folder.record("checkpoint-1")
    (out / "checkpoint-1").mkdir()
    (out / "notes.md").write_text("the user's, written while the run trained")
    with pytest.raises(KeyboardInterrupt), folder.writing():
        (out / "model.safetensors").write_bytes(b"half")
        manifest = json.loads((out / MANIFEST_FILE).read_text())  # what a kill -9 here would leave
        assert manifest["files"] == ["checkpoint-1"] and manifest["writing_beside"] == ["checkpoint-1", "notes.md"]
        raise KeyboardInterrupt
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    (out / LOCK_FILE).write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "command": "train"}))
    with command_folder(out, "train") as again:
        assert again.own() == {"checkpoint-1", "model.safetensors"}
    assert command_folder(out, "train").foreign() == ["notes.md"]


def test_an_unreadable_lock_is_called_unreadable_not_a_process_that_ended(tmp_path, caplog):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text("{half-writ")
    with caplog.at_level(logging.WARNING), command_folder(out, "train"):
        pass
    assert "an unreadable lock file: its holder cannot be named or checked" in caplog.text
    assert "no longer running" not in caplog.text


def test_mining_uses_the_same_lock(tmp_path, live_pid):
    lock = tmp_path / ".xprt-mine-run.lock"
    lock.write_text(json.dumps({"pid": live_pid, "host": socket.gethostname(), "started": "then"}))
    with pytest.raises(MiningOutputError, match=f"pid {live_pid}"):
        MiningLock(lock, "the mining folder x").acquire()


def test_deleting_never_follows_a_symlink(tmp_path):
    kept = tmp_path / "elsewhere"
    (kept / "shard").mkdir(parents=True)
    (kept / "shard" / "part").write_text("data")
    out = tmp_path / "out"
    out.mkdir()
    (out / "shards").symlink_to(kept, target_is_directory=True)
    (out / "file-link").symlink_to(kept / "shard" / "part")
    remove_path(out / "shards")
    remove_path(out / "file-link")
    assert (kept / "shard" / "part").read_text() == "data"
    assert not (out / "shards").exists() and not (out / "file-link").is_symlink()


def test_a_manifest_naming_paths_outside_the_folder_deletes_nothing_there(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "run"
    out.mkdir()
    (out / MANIFEST_FILE).write_text(json.dumps({"command": "train", "files": ["../victim.txt", "..", "/etc"]}))
    OutputFolder(out, "train", overwrite=True).acquire().release()
    assert victim.read_text() == "keep"


def test_a_name_too_long_for_the_filesystem_is_one_line_naming_the_option(tmp_path):
    for path in (tmp_path / LONG, tmp_path / LONG / "inside"):
        problem = output_folder_problem(path, "--output")
        assert problem.startswith("--output ") and "is 256 bytes long" in problem and "at most 255" in problem
        with pytest.raises(OutputFolderError, match="256 bytes"):
            command_folder(path, "evaluate", option="--output-dir").acquire()
    assert output_folder_problem(tmp_path / ("n" * 255), "--output") is None


def test_a_file_output_refuses_folders_and_files_it_did_not_write(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "the user\'s corpus"}\n')
    ours = tmp_path / "old-report.html"
    ours.write_text("<!-- mine -->")

    def is_ours(path: Path) -> bool:
        return path.read_text().startswith("<!-- mine -->")

    with pytest.raises(OutputFolderError, match=r"-o .*corpus.jsonl is an existing file that xprt-st did not write"):
        check_output_file(corpus, "-o", is_ours, "an HTML report")
    with pytest.raises(OutputFolderError, match=r"is an existing folder; give the path of an HTML report"):
        check_output_file(tmp_path, "-o", is_ours, "an HTML report")
    with pytest.raises(OutputFolderError, match="256 bytes"):
        check_output_file(tmp_path / LONG, "-o", is_ours, "an HTML report")
    assert check_output_file(ours, "-o", is_ours, "an HTML report") == ours
    assert check_output_file(tmp_path / "new.html", "-o", is_ours, "an HTML report") == tmp_path / "new.html"
    assert corpus.read_text() == '{"text": "the user\'s corpus"}\n'


def test_a_shared_folder_takes_no_lock_and_knows_its_names_without_a_manifest(tmp_path):
    run = tmp_path / "cmp"
    (run / "seed-0").mkdir(parents=True)
    (run / "compare_config.yaml").write_text("recipes: []\n")
    folder = command_folder(run, "compare").acquire()
    assert not (run / LOCK_FILE).exists()
    folder.release()
    (run / "README.md").write_text("user")
    command_folder(run, "compare").check()  # a compare run is there: the user's notes beside it stay
    empty_but_user = tmp_path / "other"
    empty_but_user.mkdir()
    (empty_but_user / "README.md").write_text("user")
    with pytest.raises(OutputFolderError, match=r"xprt-st compare did not write: README\.md"):
        command_folder(empty_but_user, "compare").check()


def test_a_command_that_wrote_nothing_leaves_no_folder_and_no_manifest(tmp_path):
    command_folder(tmp_path / "new", "evaluate").acquire().release()
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    command_folder(kept, "evaluate").acquire().release()
    assert kept.is_dir() and not any(kept.iterdir())


def test_mine_refuses_a_model_folder(tmp_path):
    from xprt_st.mining.layout import MiningLayout

    model = tmp_path / "model"
    with command_folder(model, "train"):
        (model / "config.json").write_text("{}")
        (model / "modules.json").write_text("[]")
    with pytest.raises(MiningOutputError, match=r"xprt-st mine did not write \(\.xprt-st-manifest\.json, config\.json"):
        MiningLayout(model).check_not_foreign()


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("evaluate", ["evaluate", "default", "--tasks", "python-faq", "--no-cache", "-o"]),
        ("quickstart", ["quickstart", "-o"]),
        ("interpolate", ["interpolate", "default", "default", "--alpha", "0.5", "-o"]),
        ("finetune-compare", ["finetune-compare", "--pretrained", "default", "-o"]),
    ],
)
def test_every_writing_command_refuses_a_folder_another_live_run_is_writing_before_any_work(
    command: str, args: list[str], tmp_path, live_pid, no_work
):
    """Two commands into one output folder at once: the second stops in one line naming the holder, before a model
    loads, and leaves the holder's lock alone (``train`` and ``mine`` have their own tests of this)."""
    from typer.testing import CliRunner

    from xprt_st.cli import app

    out = tmp_path / "run"
    out.mkdir()
    record = {"pid": live_pid, "host": socket.gethostname(), "command": command, "started": "2026-12-07 09:00:00"}
    (out / LOCK_FILE).write_text(json.dumps(record))
    result = CliRunner().invoke(app, [*args, str(out)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2, message
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert f"pid {live_pid} on host {socket.gethostname()} (xprt-st {command})" in message, message
    assert message.count("error") == 1 and "Traceback" not in message
    assert json.loads((out / LOCK_FILE).read_text()) == record
    assert sorted(path.name for path in out.iterdir()) == [LOCK_FILE]
