"""A merge killed midway (SIGKILL, in a real process): no reader takes the half-merged folder, the rerun finishes it.

A merge moves its parts into place one after another (the training groups, the passages, the held-out part, then
``stats.json``). Killed after the first, the folder held the new merge's groups beside the old merge's statistics
and held-out draw: ``train`` would have trained on groups no ``stats.json`` described, and ``stats.json`` still said
the old pairs.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.mining.config import MiningConfigError
from xprt_st.mining.layout import MERGE_UNFINISHED, read_stats

runner = CliRunner()

KILLED_MERGE = """
import importlib, os, signal, sys
merge = importlib.import_module("xprt_st.mining.merge")
real = merge.publish_dataset
def publish_then_die(*args, **kwargs):  # the training groups are in place; the rest is not
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
merge.publish_dataset = publish_then_die
from xprt_st.cli import app
app(sys.argv[1:], prog_name="xprt-st")
"""


def _corpus(path: Path) -> Path:
    rows = []
    for i in range(12):
        paragraphs = [
            f"Paragraph {j} of document {i} is about topic {i} and its many details, number {i * 7 + j}. It says more."
            for j in range(5)
        ]
        rows.append(json.dumps({"body": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n")
    return path


def _dataset(folder: Path) -> dict:
    return datasets.load_from_disk(str(folder)).to_dict()


def test_a_merge_killed_midway_is_refused_by_every_reader_and_its_rerun_equals_an_uninterrupted_merge(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    out, reference = tmp_path / "out", tmp_path / "reference"
    mine = ["mine", str(_corpus(tmp_path / "c.jsonl")), "--mining-model", str(tiny_model_path), "--max-tokens", "32"]
    mine += ["--min-tokens", "8", "--text-field", "body", "--id-field", "id", "--threshold-quantile", "0"]
    result = runner.invoke(app, [*mine, "--holdout", "0.3", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    shutil.copytree(out, reference)
    remerge = ["mine", "--merge", "FOLDER", "--pairs", "inverse-cloze", "-q"]
    result = runner.invoke(app, [part if part != "FOLDER" else str(reference) for part in remerge])
    assert result.exit_code == 0, result.output

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MERGE, *[part if part != "FOLDER" else str(out) for part in remerge]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / MERGE_UNFINISHED).is_file()
    assert _dataset(out) == _dataset(reference)  # the new groups are in place ...
    assert read_stats(out, unfinished_ok=True)["settings"]["pairs"] == "mined"  # ... beside the old statistics

    fix = f"merge it again, which reuses every scored passage: xprt-st mine --merge {out}"
    with pytest.raises(MiningConfigError, match="its last merge was stopped before it finished") as error:
        read_stats(out)
    assert fix in str(error.value) and "--pairs inverse-cloze" in str(error.value)
    readers = {
        "train": ["train", "--mined", str(out), "--recipe", "change-only-positive", "-o", str(tmp_path / "model")],
        "evaluate mined:": ["evaluate", "default", "--tasks", f"mined:{out}", "--no-cache", "-o", str(tmp_path / "e")],
        "evaluate titles:": [
            "evaluate",
            "default",
            "--tasks",
            f"titles:{out}",
            "--no-cache",
            "-o",
            str(tmp_path / "t"),
        ],
        "inspect": ["inspect", str(out)],
    }
    import xprt_st.models

    def started(*args, **kwargs):
        raise AssertionError("a model loaded before the half-merged folder was refused")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(xprt_st.models, "load_model", started)
        for reader, args in readers.items():
            result = runner.invoke(app, args)
            message = " ".join(result.output.split())
            assert result.exit_code != 0 and "stopped before it finished" in message, (reader, message)
            assert fix in message, (reader, message)
            assert result.exception is None or isinstance(result.exception, SystemExit), (reader, result.exception)

    # the merge it names finishes the folder as an uninterrupted merge left its copy
    result = runner.invoke(app, [part if part != "FOLDER" else str(out) for part in remerge])
    assert result.exit_code == 0, result.output
    assert not (out / MERGE_UNFINISHED).exists()
    assert _dataset(out) == _dataset(reference)
    assert _dataset(out / "heldout" / "groups") == _dataset(reference / "heldout" / "groups")
    assert _dataset(out / "heldout" / "passages") == _dataset(reference / "heldout" / "passages")
    ours, theirs = read_stats(out), read_stats(reference)
    assert ours["groups"] == theirs["groups"] and ours["settings"] == theirs["settings"]
