"""The quickstart's inputs and notes: a `--model` that does not load, more steps than one pass over the mined groups,
and a `--task` whose documents are not the `--corpus` trained on."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.model_folders import custom_code_model, unreadable_weights_model
from tests.test_quickstart_corpus import _write_user_data
from xprt_st.cli import app

runner = CliRunner()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder outside the repository, without ../shared/data."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("XPRT_DATA_DIR", raising=False)
    return work


def _flat(text: str) -> str:
    return " ".join(text.split())


def _user_run(corpus: Path, model: Path, *extra: str) -> list[str]:
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    return [*args, "--model", str(model), "--batch-size", "4", "--holdout", "0.3", "-q", *extra]


def test_a_model_that_needs_its_own_code_is_refused_before_any_work(
    no_work: None, elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    model = custom_code_model(tiny_model_path, tmp_path / "custom")
    result = runner.invoke(app, _user_run(corpus, model))
    message = _flat(result.output)
    assert result.exit_code == 2 and message.startswith("error: --model: "), message
    assert "no trust_remote_code" in message and message.count("error") == 1
    assert not (elsewhere / "out").exists()


def test_a_model_that_fails_to_load_is_one_line_and_the_corrected_command_runs_in_the_same_folder(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    broken = unreadable_weights_model(tiny_model_path, tmp_path / "broken")
    result = runner.invoke(app, _user_run(corpus, broken, "--max-steps", "1"))
    message = _flat(result.output)
    assert result.exit_code == 2, message
    assert "error: --model: could not load model" in message and str(broken) in message, message
    assert message.count("error") == 1 and "Traceback" not in message
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (elsewhere / "out" / "mined").exists()  # the model is loaded before the mining records its run
    result = runner.invoke(app, _user_run(corpus, tiny_model_path, "--max-steps", "1"))
    assert result.exit_code == 0, _flat(result.output)
    assert (elsewhere / "out" / "model" / "modules.json").is_file()
