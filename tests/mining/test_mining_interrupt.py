"""Ctrl-C (a real SIGINT, in a real process) in each stage of ``xprt-st mine``: one line and exit 130, no
traceback, and the same command run again ends on the folder an uninterrupted run makes.

The signal is sent from inside the stage (the function it calls next is wrapped to send it), so each case stops
where it says: while a chunk is encoded, after the training groups of the merge are moved into place, while the
hard negatives are searched, while BM25 indexes the passages and while it retrieves the lexical candidates.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
from typer.testing import CliRunner

from tests.mining.test_mining_kill import _corpus
from xprt_st.cli import app
from xprt_st.cli.app import INTERRUPTED

runner = CliRunner()

INTERRUPTED_RUN = """
import importlib, os, signal, sys
module, attribute, after = sys.argv[1], sys.argv[2], sys.argv[3] == "after"
owner = importlib.import_module(module)
*path, name = attribute.split(".")
for part in path:
    owner = getattr(owner, part)
real = getattr(owner, name)
def interrupted(*args, **kwargs):
    if not after:
        os.kill(os.getpid(), signal.SIGINT)
    value = real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)
    return value
setattr(owner, name, interrupted)
from xprt_st.cli import app
app(sys.argv[4:], prog_name="xprt-st")
"""

STAGES = {
    "encoding a chunk": ("xprt_st.mining.encoder", "MiningEncoder.encode", "before"),
    "the merge, groups in place": ("xprt_st.mining.merge", "publish_dataset", "after"),
    "the hard-negative search": ("xprt_st.mining.hard_negatives", "nearest_other_documents", "before"),
    "the BM25 index": ("xprt_st.mining.lexical_candidates", "_bm25_index", "before"),
    "the lexical retrieval": ("xprt_st.mining.lexical_candidates", "_retrieve", "before"),
}


def _mine(corpus: Path, model: Path, output: Path) -> list[str]:
    return [
        "mine", str(corpus), "--mining-model", str(model), "--max-tokens", "32", "--min-tokens", "8",
        "--text-field", "body", "--id-field", "id", "--threshold-quantile", "0", "--holdout", "0.3",
        "--hard-negatives", "2", "--lexical-candidates", "2", "-o", str(output), "-q",
    ]  # fmt: skip


def _folder(folder: Path) -> tuple[dict, dict]:
    """The groups and the statistics, less the timings no two runs share."""
    stats = json.loads((folder / "stats.json").read_text())
    stats.pop("encode_seconds", None)
    return datasets.load_from_disk(str(folder)).to_dict(), stats


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> tuple[Path, tuple[dict, dict]]:
    base = tmp_path_factory.mktemp("interrupted-mining")
    corpus = _corpus(base / "c.jsonl")
    result = runner.invoke(app, _mine(corpus, tiny_model_path, base / "reference"))
    assert result.exit_code == 0, result.output
    return corpus, _folder(base / "reference")


@pytest.mark.parametrize("stage", list(STAGES))
def test_ctrl_c_in_each_mining_stage_is_one_line_and_the_rerun_equals_an_uninterrupted_run(
    stage: str, reference: tuple[Path, tuple[dict, dict]], tiny_model_path: Path, tmp_path: Path
) -> None:
    corpus, expected = reference
    out = tmp_path / "out"
    module, attribute, when = STAGES[stage]
    child = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_RUN, module, attribute, when, *_mine(corpus, tiny_model_path, out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert child.returncode == 130, child.stderr[-3000:]
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    assert child.stderr.rstrip().splitlines()[-1] == f"xprt-st mine: {INTERRUPTED}"
    if stage != "encoding a chunk":  # the chunks were encoded before the signal: the rerun does not encode again
        assert (out / "shards").is_dir()

    again = runner.invoke(app, _mine(corpus, tiny_model_path, out))
    assert again.exit_code == 0, again.output
    assert _folder(out) == expected
    assert not [path.name for path in out.iterdir() if path.name.endswith(".tmp")]
    shutil.rmtree(out)
