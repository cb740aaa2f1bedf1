"""One error base: every exception class of the package derives from XPRTError, and the CLI prints any of them
as one line with its exit code."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest
import typer

from xprt_st.cli.common import report_error
from xprt_st.errors import XPRTError

PACKAGE = Path(__file__).resolve().parents[1] / "xprt_st"


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _exception_classes() -> list[tuple[str, type]]:
    """Every class defined in a module of the package that is an exception (warnings aside)."""
    found = []
    for name in _modules():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
        source = Path(module.__file__).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.col_offset == 0:
                cls = getattr(module, node.name, None)
                if isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, Warning):
                    found.append((f"{name}.{node.name}", cls))
    return found


def test_every_project_exception_derives_from_the_one_base() -> None:
    classes = _exception_classes()
    assert len(classes) >= 35  # the walk found them (a broken walk would pass with none)
    outside = [name for name, cls in classes if not issubclass(cls, XPRTError)]
    assert not outside, f"exceptions outside xprt_st.errors.XPRTError: {outside}"


def test_the_other_bases_callers_catch_are_kept() -> None:
    from xprt_st.mining.config import MiningConfigError, NoGroupsError
    from xprt_st.mining.records import CorpusError
    from xprt_st.training.checkpoints import CheckpointWriteError

    assert issubclass(CorpusError, ValueError) and issubclass(MiningConfigError, ValueError)
    assert issubclass(CheckpointWriteError, OSError) and CheckpointWriteError("disk full").exit_code == 1
    assert NoGroupsError("none").exit_code == 1 and NoGroupsError.heading == "no groups"


def test_report_error_prints_one_line_with_the_option_and_the_exit_code(capsys: pytest.CaptureFixture) -> None:
    from xprt_st.models import ModelLoadError

    exit_ = report_error(ModelLoadError("no such model"), option="--model")
    assert isinstance(exit_, typer.Exit) and exit_.exit_code == 2
    assert capsys.readouterr().err.strip() == "error: --model: no such model"
    report_error(XPRTError("--model: already named", option="--model"), exit_code=1)
    assert capsys.readouterr().err.strip() == "error: --model: already named"
    assert report_error(ValueError("plain")).exit_code == 2


def test_the_command_class_turns_any_project_error_into_its_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    # a recipe that does not exist: RecipeError, caught by no except list in the train command
    result = CliRunner().invoke(app, ["train", "--recipe", "no-such-recipe", "--mined", "m", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.lstrip().startswith("error:") and "Traceback" not in result.output
