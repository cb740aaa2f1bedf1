"""Issue 41 (round 5): a quickstart rerun into the same -o reuses a stage only when it was made with the same
settings, and a mined/ or model/ it did not write is never its result.

Before, a rerun with another --recipe, --max-steps, --holdout, --seed or --model reused the old model without a word
(and re-merged the held-out set on a new --holdout), and a user's own OUTPUT/model/ was reported as the trained
model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_quickstart_corpus import _write_user_data
from xprt_st.cli import app
from xprt_st.fingerprint import FINGERPRINT_FILE
from xprt_st.output_folder import MANIFEST_FILE


def _options(corpus: Path, output: Path, model: Path) -> dict[str, str]:
    return {
        "--corpus": str(corpus),
        "--text-field": "body",
        "--id-field": "doc_id",
        "-o": str(output),
        "--model": str(model),
        "--max-steps": "1",
        "--batch-size": "4",
        "--holdout": "0.3",
    }


def _args(options: dict[str, str], *extra: str) -> list[str]:
    return ["quickstart", *[part for pair in options.items() for part in pair], "-q", *extra]


def _flat(text: str) -> str:
    return "".join(text.split())


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> tuple[Path, dict[str, str]]:
    """One quickstart on 24 help-desk pages (1 step of the tiny model, label-free check only)."""
    root = tmp_path_factory.mktemp("reuse")
    corpus, _ = _write_user_data(root / "user")
    options = _options(corpus, root / "out", tiny_model_path)
    result = CliRunner().invoke(app, _args(options))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return root, options


def _changed(root: Path, option: str, tiny_model_path: Path) -> tuple[str, str, str]:
    """The new value of ``option`` and the stage and words the refusal names."""
    if option == "--model":
        other = root / "other-model"
        if not other.exists():
            shutil.copytree(tiny_model_path, other)
        return str(other), "mined", f"--model {tiny_model_path} -> {other}"
    if option == "--corpus":
        corpus, _ = _write_user_data(root / "second")
        return str(corpus), "mined", f"--corpus {(root / 'user' / 'helpdesk.jsonl').resolve()} ("
    new, stage, old = {
        "--recipe": ("self-only", "model", "hybrid-teacher-hard"),
        "--max-steps": ("2", "model", "1"),
        "--holdout": ("0.5", "mined", "0.3"),
        "--seed": ("7", "mined", "42"),
    }[option]
    return new, stage, f"{option} {old} -> {new}"


@pytest.mark.parametrize("option", ["--recipe", "--max-steps", "--holdout", "--seed", "--model", "--corpus"])
def test_a_rerun_with_a_changed_setting_stops_before_any_work_naming_what_differs(
    first_run: tuple[Path, dict[str, str]], tiny_model_path: Path, no_work: None, option: str
) -> None:
    root, options = first_run
    output = root / "out"
    weights = (output / "model" / "model.safetensors").read_bytes()
    summary = (output / "summary.json").read_text()
    new, stage, named = _changed(root, option, tiny_model_path)
    result = CliRunner().invoke(app, _args({**options, option: new}))
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    said = _flat(result.output)
    assert _flat(f"error: --output {output}: {output / stage} was made with other settings (") in said
    assert _flat(named) in said, result.output
    assert _flat("Pass --overwrite to delete that run and start again, or give a new -o folder.") in said
    assert (output / "model" / "model.safetensors").read_bytes() == weights
    assert (output / "summary.json").read_text() == summary


@pytest.mark.parametrize(
    ("recipe", "decided"),
    [("inverse-cloze-hard", "pairs mined -> inverse-cloze"), ("lexical-positive-hard", "rank_by fused -> bm25")],
)
def test_a_rerun_whose_recipe_changes_the_mining_names_the_recipe_not_a_mining_option(
    first_run: tuple[Path, dict[str, str]], no_work: None, recipe: str, decided: str
) -> None:
    """The recipe decides mined/'s pairs or ranking; the quickstart has no --pairs or --rank-by, so the refusal
    names --recipe, its stored and new value, and what it changes in the mining (it named ``--pairs (none)``)."""
    root, options = first_run
    output = root / "out"
    result = CliRunner().invoke(app, _args({**options, "--recipe": recipe}))
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    said = _flat(result.output)
    assert _flat(f"{output / 'mined'} was made with other settings (") in said, result.output
    assert _flat(f"--recipe hybrid-teacher-hard -> {recipe} (which decides {decided})") in said, result.output
    assert "--pairs" not in result.output and "--rank-by" not in result.output and "(none)" not in result.output


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quickstart that would train fails the test: the rerun must reuse the model."""
    import xprt_st.training

    def trained(*args, **kwargs):
        raise AssertionError("a rerun that should reuse the model trained again")

    monkeypatch.setattr(xprt_st.training, "train_recipe", trained)  # the one the training stage calls


def test_a_rerun_with_the_same_settings_reuses_the_model_without_training(
    first_run: tuple[Path, dict[str, str]], no_training: None
) -> None:
    root, options = first_run
    result = CliRunner().invoke(app, _args(options))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    stages = json.loads((root / "out" / FINGERPRINT_FILE).read_text())
    assert set(stages) == {"mined", "model"} and stages["model"]["recipe"] == "hybrid-teacher-hard"
    manifest = json.loads((root / "out" / MANIFEST_FILE).read_text())
    assert {"mined", "model", "summary.json"} <= set(manifest["files"])


def test_the_recipe_files_location_is_not_a_setting(first_run: tuple[Path, dict[str, str]], no_training: None) -> None:
    """The same recipe from another checkout or install (the first release stored its path and prose) is reused."""
    root, options = first_run
    path = root / "out" / FINGERPRINT_FILE
    stored = path.read_text()
    stages = json.loads(stored)
    assert "source" not in stages["model"]["recipe_values"]
    stages["model"]["recipe_values"].update(source="/old/checkout/recipes/x.yaml", description="older prose")
    path.write_text(json.dumps(stages))
    try:
        result = CliRunner().invoke(app, _args(options))
    finally:
        path.write_text(stored)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"


def test_overwrite_deletes_the_run_and_trains_with_the_new_settings(tmp_path: Path, tiny_model_path: Path) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    options = _options(corpus, tmp_path / "out", tiny_model_path)
    assert CliRunner().invoke(app, _args(options)).exit_code == 0
    (tmp_path / "out" / "notes.md").write_text("the user's")
    result = CliRunner().invoke(app, _args({**options, "--max-steps": "2"}, "--overwrite"))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    state = json.loads((tmp_path / "out" / "model" / "training_state" / "config.json").read_text())
    assert state["global_step"] == 2
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["config"]["max_steps"] == 2
    assert (tmp_path / "out" / "notes.md").read_text() == "the user's"


def test_a_users_own_model_folder_is_not_the_quickstarts_result(tmp_path: Path, no_work: None) -> None:
    output = tmp_path / "out"
    (output / "model").mkdir(parents=True)
    (output / "model" / "modules.json").write_text("[]")  # the user's own SentenceTransformer folder
    result = CliRunner().invoke(app, ["quickstart", "-o", str(output), "-q"])
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert "holds files that xprt-st quickstart did not write: model" in " ".join(result.output.split())
    assert sorted(p.name for p in output.iterdir()) == ["model"] and (output / "model" / "modules.json").exists()


def test_a_model_folder_beside_a_killed_runs_mining_is_not_taken_as_trained(
    first_run: tuple[Path, dict[str, str]], tmp_path: Path, no_work: None
) -> None:
    """A run killed after mining recorded mined/ only; a model/ that appeared since is the user's, not its."""
    root, options = first_run
    output = tmp_path / "out"
    shutil.copytree(root / "out", output)
    manifest = json.loads((output / MANIFEST_FILE).read_text())
    (output / MANIFEST_FILE).write_text(json.dumps({**manifest, "files": ["mined"]}))
    result = CliRunner().invoke(app, _args({**options, "-o": str(output)}))
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert _flat(f"{output / 'model'} was not written by xprt-st quickstart") in _flat(result.output)


def test_a_run_stopped_after_its_checkpoint_resumes_from_it_keeping_the_mining(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """Before, a quickstart stopped between its checkpoint and its final save could not be run again: train refused
    the checkpoints ("continue it with --resume last", an option the quickstart lacks), and --overwrite deleted the
    mining too."""
    import torch
    from safetensors.torch import load_file

    corpus, _ = _write_user_data(tmp_path / "user")
    options = _options(corpus, tmp_path / "out", tiny_model_path)
    assert CliRunner().invoke(app, _args(options)).exit_code == 0
    model, mined = tmp_path / "out" / "model", tmp_path / "out" / "mined"
    trained = load_file(model / "model.safetensors")
    for path in model.iterdir():  # what the final save wrote: the run stopped after checkpoint-1
        if not path.name.startswith(("checkpoint-", ".xprt-st")):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert [path.name for path in model.iterdir() if path.is_dir()] == ["checkpoint-1"]
    stats = (mined / "stats.json").read_bytes()
    result = CliRunner().invoke(app, _args(options))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert "checkpoints of a stopped run of these settings: resuming it" in " ".join(result.output.split())
    resumed = load_file(model / "model.safetensors")
    assert resumed.keys() == trained.keys() and all(torch.equal(resumed[k], trained[k]) for k in trained)
    assert (mined / "stats.json").read_bytes() == stats  # the mining was reused, not done again
