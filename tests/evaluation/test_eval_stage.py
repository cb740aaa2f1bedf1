"""``xprt-st evaluate`` on the stage layer: every check before anything loads or is written, then the scoring in the
held folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xprt_st.evaluation.run import EvaluateConfig
from xprt_st.models import ModelLoadError
from xprt_st.output_folder import LOCK_FILE
from xprt_st.pipeline import Action, Stage, run_pipeline
from xprt_st.pipeline.evaluate import EvaluateStage


class Presented:
    """The ``present`` hook: what it was shown, and whether the folder's lock was taken then."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, bool]] = []

    def __call__(self, report: Any, folder: Any) -> None:
        self.calls.append((report, (folder.path / LOCK_FILE).is_file()))


@pytest.mark.parametrize(
    ("models", "tasks", "error", "message"),
    [
        (("/no/such/model-folder",), ("python-faq",), ModelLoadError, "^MODELS: "),
        (("bm25",), ("mined:somewhere",), ValueError, "is a label-free task"),
    ],
)
def test_a_failing_evaluate_check_stops_before_anything_loads_or_is_written(
    tmp_path: Path, models: tuple[str, ...], tasks: tuple[str, ...], error: type, message: str
) -> None:
    output = tmp_path / "eval"
    presented = Presented()
    stage = EvaluateStage(EvaluateConfig(models=models, tasks=tasks, output_dir=output), presented)
    assert isinstance(stage, Stage)
    with pytest.raises(error, match=message):
        run_pipeline([stage], output)
    assert stage.report is None and presented.calls == [] and not output.exists()


def test_the_stage_scores_in_the_held_folder_and_reports_in_the_stage_table(beir_folder: Path, tmp_path: Path) -> None:
    output = tmp_path / "eval"
    presented = Presented()
    config = EvaluateConfig(models=("bm25",), tasks=(str(beir_folder),), output_dir=output, no_cache=True)
    table = run_pipeline([EvaluateStage(config, presented)], output)
    assert [(row.stage, row.action) for row in table] == [("evaluate", Action.RUN)]
    assert table[0].record["models"] == ["bm25"] and len(presented.calls) == 1 and presented.calls[0][1]
