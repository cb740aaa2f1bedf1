"""A disk that refuses the writes of a merge or of the lexical pass (in a real process whose file-size limit stops
every write past a few kilobytes: the kernel's EFBIG, a full disk's ENOSPC by another name): one line naming the
folder and its disk, the folder as it was, and the same command afterwards gives what an uninterrupted run gives."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import datasets
from typer.testing import CliRunner

from tests.mining.test_mining_kill import _corpus
from xprt_st.cli import app
from xprt_st.mining.layout import MERGE_UNFINISHED, read_stats

runner = CliRunner()

LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as a full disk's does
when = sys.argv.pop(1)
def limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))
if when == "lexical":  # the merge writes freely; the lexical pass after it does not
    import xprt_st.mining.after_merge as after_merge
    real = after_merge.add_lexical_candidates
    def limited(*args, **kwargs):
        limit()
        return real(*args, **kwargs)
    after_merge.add_lexical_candidates = limited
from xprt_st.cli import app
if when == "start":
    limit()
app(sys.argv[1:], prog_name="xprt-st")
"""


def _dataset(folder: Path) -> dict:
    return datasets.load_from_disk(str(folder)).to_dict()


def _mined(tmp_path: Path, model: Path) -> Path:
    out = tmp_path / "out"
    mine = ["mine", str(_corpus(tmp_path / "c.jsonl")), "--mining-model", str(model), "--max-tokens", "32"]
    mine += ["--min-tokens", "8", "--text-field", "body", "--id-field", "id", "--threshold-quantile", "0"]
    result = runner.invoke(app, [*mine, "--holdout", "0.3", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def _at(folder: Path, args: list[str]) -> list[str]:
    """``args`` with ``FOLDER`` replaced by ``folder``."""
    return [str(folder) if part == "FOLDER" else part for part in args]


def _limited(when: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", LIMITED, when, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_a_merge_the_disk_refuses_leaves_the_folder_as_it_was_and_names_the_disk(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    out = _mined(tmp_path, tiny_model_path)
    reference = tmp_path / "reference"
    shutil.copytree(out, reference)
    remerge = ["mine", "--merge", "FOLDER", "--pairs", "inverse-cloze", "-q"]
    result = runner.invoke(app, _at(reference, remerge))
    assert result.exit_code == 0, result.output
    before = _dataset(out), read_stats(out)

    refused = _limited("start", *_at(out, remerge))
    message = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 1, message[-2000:]
    assert "Traceback" not in message and "╭" not in message
    assert f"could not write the merge into {out} on the disk mounted at" in message
    assert f"{out} is as it was before the merge" in message and "run the same command again" in message
    assert not (out / MERGE_UNFINISHED).exists()
    assert (_dataset(out), read_stats(out)) == before  # the old merge, whole and readable
    assert not any(path.name.startswith(".") and path.is_dir() for path in out.iterdir())  # no staging left behind

    result = runner.invoke(app, _at(out, remerge))
    assert result.exit_code == 0, result.output
    assert _dataset(out) == _dataset(reference)
    assert read_stats(out)["settings"] == read_stats(reference)["settings"]


def test_a_lexical_pass_the_disk_refuses_keeps_the_groups_and_a_rerun_adds_it(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    out = _mined(tmp_path, tiny_model_path)
    reference = tmp_path / "reference"
    shutil.copytree(out, reference)
    lexical = ["mine", "--merge", "FOLDER", "--lexical-candidates", "2", "-q"]
    result = runner.invoke(app, _at(reference, lexical))
    assert result.exit_code == 0, result.output
    merged = tmp_path / "merged"  # what the merge before the pass writes (its settings are the command's)
    shutil.copytree(out, merged)
    result = runner.invoke(app, ["mine", "--merge", str(merged), "-q"])
    assert result.exit_code == 0, result.output
    before = _dataset(merged)

    refused = _limited("lexical", *_at(out, lexical))
    message = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 1, message[-2000:]
    assert "Traceback" not in message and f"could not write the lexical_* columns into {out}" in message
    assert _dataset(out) == before and "lexical_candidates" not in read_stats(out)
    assert not (out / ".lexical.tmp").exists()

    result = runner.invoke(app, _at(out, lexical))
    assert result.exit_code == 0, result.output
    assert _dataset(out) == _dataset(reference)
