"""``xprt-st train`` on the stage layer: TrainStage checks everything that needs no model before any stage runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from training_helpers import write_mined

import xprt_st.training.recipe_setup as recipe_setup
from xprt_st.models import ModelLoadError
from xprt_st.output_folder import OutputFolderError
from xprt_st.pipeline import Action, Stage, run_pipeline
from xprt_st.pipeline.stages import TrainStage
from xprt_st.recipe import load_recipe
from xprt_st.training.pace import recorded_pace
from xprt_st.training.run import TrainSettings
from xprt_st.training.trainer import TrainingStateError


def _settings(data: Path, output: Path, start: Path, **changes: Any) -> TrainSettings:
    overrides = {"training.model": str(start), "training.max_steps": 2, "training.batch_size": 4,
                 "training.save_steps": 1, "training.max_seq_length": 32, **changes.pop("overrides", {})}  # fmt: skip
    return TrainSettings(load_recipe("self-only", overrides=overrides), data, output, progress=False, **changes)


class Recorder:
    """A stage before training that writes a file when it runs."""

    name = "before"
    folder = "before"
    config = None

    def __init__(self) -> None:
        self.ran = False

    def fingerprint(self) -> None:
        return None

    def check(self) -> None:
        """Nothing to check."""

    def run(self, folder: Path) -> dict[str, Any]:
        self.ran = True
        folder.mkdir(parents=True)
        return {}


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the checks ended")

    monkeypatch.setattr(recipe_setup, "load_model", refuse)


def test_a_train_stage_is_a_stage(tmp_path: Path, tiny_model_path: Path) -> None:
    assert isinstance(TrainStage(_settings(tmp_path, tmp_path / "run", tiny_model_path)), Stage)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"resume": "last"}, TrainingStateError, "holds no checkpoint-N folder"),
        ({"resume": "last", "overwrite": True}, TrainingStateError, "cannot be combined with --resume"),
        ({"fork_from": "trunk", "resume": "last"}, TrainingStateError, "it cannot --resume"),
        ({"model": "no/such-model-folder", "model_option": "--model"}, ModelLoadError, "^--model: "),
    ],
)
def test_a_failing_train_check_stops_the_run_before_any_stage_runs(
    tmp_path: Path, tiny_model_path: Path, no_model_load: None, changes: dict, error: type, message: str
) -> None:
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    before = Recorder()
    with pytest.raises(error, match=message):
        run_pipeline([before, TrainStage(_settings(data, output, tiny_model_path, **changes))], output)
    assert not before.ran and not output.exists()  # nothing ran, nothing written


def test_an_output_inside_the_mined_folder_is_refused_by_the_check(
    tmp_path: Path, tiny_model_path: Path, no_model_load: None
) -> None:
    data = write_mined(tmp_path / "mined", n_groups=8)
    with pytest.raises(OutputFolderError, match="is inside the --mined folder"):
        run_pipeline([TrainStage(_settings(data, data / "run", tiny_model_path))], data / "run")
    assert not (data / "run").exists()


def test_train_runs_as_a_stage_and_its_resume_checks_come_before_any_model_loads(
    tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    table = run_pipeline([TrainStage(_settings(data, output, tiny_model_path))], output)
    assert [(row.stage, row.action) for row in table] == [("train", Action.RUN)]
    assert table[0].record == {"model": str(output), "trained": True} and (output / "modules.json").is_file()
    # the run records its pace: 2 steps of 4 groups of self-only's 5 texts (anchor, positive, related_2..4)
    pace = recorded_pace(output)
    assert pace is not None and pace.texts == 2 * 4 * 5 and pace.seconds > 0
    assert pace.step_over_forward is None  # this mined folder stores no encoding to compare with

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the checks ended")

    monkeypatch.setattr(recipe_setup, "load_model", refuse)
    # a finished run is refused without --resume; a resume with another batch layout is refused, naming it
    with pytest.raises(OutputFolderError, match="already holds"):
        run_pipeline([TrainStage(_settings(data, output, tiny_model_path))], output)
    changed = _settings(
        data, output, tiny_model_path, resume="last", overrides={"training.max_steps": 4, "training.seed": 7}
    )
    with pytest.raises(TrainingStateError, match=r"training\.seed was \d+ when it was written, now 7"):
        run_pipeline([TrainStage(changed)], output)
    # a resume of the finished run with the same settings trains nothing: the stage says so in its record
    same = TrainStage(_settings(data, output, tiny_model_path, resume="last"))
    assert run_pipeline([same], output)[0].record == {"model": str(output), "trained": False}
