"""The stage layer: checks before any work, one reuse policy by fingerprint, the stage table."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from xprt_st.errors import XPRTError
from xprt_st.fingerprint import FingerprintError, read_fingerprints, write_fingerprint
from xprt_st.pipeline import Action, Stage, plan, run_pipeline
from xprt_st.pipeline.run import STATE_FILE


class CheckError(XPRTError, ValueError):
    """A stand-in stage's failing check."""


@dataclass(frozen=True)
class CountConfig:
    words: tuple[str, ...]
    seed: int = 0


@dataclass
class CountStage:
    """Writes its words to a file; remembers its runs in ``ran``."""

    name: str
    config: CountConfig
    folder: str = ""
    bad_input: bool = False
    fingerprinted: bool = True
    ran: list[str] = field(default_factory=list)

    def fingerprint(self) -> dict[str, Any] | None:
        return {"words": list(self.config.words), "seed": self.config.seed} if self.fingerprinted else None

    def check(self) -> None:
        if self.bad_input:
            raise CheckError(f"{self.name}: no words", option="--words")

    def run(self, folder: Path) -> dict[str, Any]:
        self.ran.append(self.name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.name}.txt").write_text(" ".join(self.config.words), encoding="utf-8")
        return {"words": len(self.config.words)}


def _stages(seed: int = 0, **second: Any) -> list[CountStage]:
    return [
        CountStage("first", CountConfig(("a", "b"), seed), folder="one"),
        CountStage("second", CountConfig(("c",), seed), folder="two", **second),
    ]


def test_a_stand_in_is_a_stage() -> None:
    assert isinstance(_stages()[0], Stage)


def test_a_failing_check_stops_the_run_before_any_stage_runs(tmp_path: Path) -> None:
    stages = _stages(bad_input=True)
    with pytest.raises(CheckError, match="second: no words"):
        run_pipeline(stages, tmp_path / "out")
    assert stages[0].ran == [] and not (tmp_path / "out").exists()


def test_the_same_fingerprint_is_reused_and_reuse_shows_in_the_stage_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_pipeline(_stages(), out)
    assert [row.action for row in first] == [Action.RUN, Action.RUN] and first[0].record == {"words": 2}
    again = _stages()
    table = run_pipeline(again, out)
    assert [row.action for row in table] == [Action.REUSE, Action.REUSE]
    assert again[0].ran == again[1].ran == [] and table[1].record == {"words": 1}
    stored = json.loads((out / STATE_FILE).read_text())
    assert [row["action"] for row in stored["table"]] == ["reused", "reused"]


def test_a_changed_fingerprint_is_refused_before_any_work_or_redone_never_reused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_pipeline(_stages(seed=1), out)
    changed = _stages(seed=2)
    with pytest.raises(FingerprintError, match=r"seed 1 -> 2"):
        run_pipeline(changed, out)
    assert changed[0].ran == changed[1].ran == []
    table = run_pipeline(changed, out, overwrite=True)
    assert [row.action for row in table] == [Action.REDO, Action.REDO] and changed[0].ran == ["first"]


def test_a_stage_after_one_that_runs_runs_too(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_pipeline(_stages(), out)
    stages = _stages()
    stages[0] = CountStage("first", CountConfig(("a", "b")), folder="one", fingerprinted=False)
    assert [row.action for row in run_pipeline(stages, out)] == [Action.RUN, Action.RUN]
    assert stages[1].ran == ["second"]  # its input was written again: the stored output is not reused


def test_an_interrupted_stage_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stages = _stages()

    def broken(folder: Path) -> dict[str, Any]:
        raise KeyboardInterrupt

    stages[1].run = broken  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(stages, out)
    assert plan(_stages(), out) == [Action.REUSE, Action.RUN]


def test_fingerprints_live_in_the_file_every_command_records_in(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_pipeline(_stages(seed=3), out)
    assert read_fingerprints(out) == {"first": {"words": ["a", "b"], "seed": 3}, "second": {"words": ["c"], "seed": 3}}
    state = json.loads((out / STATE_FILE).read_text())
    assert state["stages"]["first"] == {"complete": True, "record": {"words": 2}}


def test_a_stage_folder_that_records_no_settings_is_refused_or_redone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "two").mkdir(parents=True)  # written by a run that recorded nothing: it cannot be checked
    stages = _stages()
    with pytest.raises(FingerprintError, match=r"two records no settings .* give a new --output folder"):
        run_pipeline(stages, out)
    assert stages[0].ran == [] and not (out / "one").exists()
    assert plan(_stages(), out, overwrite=True) == [Action.RUN, Action.REDO]


def test_an_earlier_releases_folder_runs_again_and_its_recipe_prose_is_no_setting(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # what the quickstart's first release stored: fingerprints with the recipe's path and prose, no completion
    old = {"words": ["a", "b"], "seed": 0, "recipe_values": {"name": "x", "source": "/old/x.yaml", "description": "?"}}
    write_fingerprint(out, "first", old)
    stages = [CountStage("first", CountConfig(("a", "b")), folder="one")]
    stages[0].fingerprint = lambda: {"words": ["a", "b"], "seed": 0, "recipe_values": {"name": "x"}}  # type: ignore[method-assign]
    assert [row.action for row in run_pipeline(stages, out)] == [Action.RUN] and stages[0].ran == ["first"]


def test_a_changed_stage_that_never_wrote_its_folder_runs_with_the_new_settings(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stages = _stages(seed=1)

    def stopped(folder: Path) -> dict[str, Any]:  # e.g. its model did not load: nothing written
        raise CheckError("no model")

    stages[0].run = stopped  # type: ignore[method-assign]
    with pytest.raises(CheckError):
        run_pipeline(stages, out)
    assert read_fingerprints(out)["first"]["seed"] == 1 and not (out / "one").exists()
    assert [row.action for row in run_pipeline(_stages(seed=2), out)] == [Action.RUN, Action.RUN]
    assert read_fingerprints(out)["first"]["seed"] == 2


def test_a_completed_stage_whose_folder_was_deleted_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_pipeline(_stages(), out)
    shutil.rmtree(out / "two")  # the user deleted it to have it made again
    stages = _stages()
    assert [row.action for row in run_pipeline(stages, out)] == [Action.REUSE, Action.RUN]
    assert stages[1].ran == ["second"] and (out / "two" / "second.txt").is_file()


@pytest.mark.parametrize("text", ['{"first": {"words": ["a", "b"], "se', '["first"]'])
def test_an_unreadable_fingerprint_file_is_named_not_taken_as_an_older_release(tmp_path: Path, text: str) -> None:
    """Before, a fingerprint file cut short or edited by hand read as empty: the rerun was refused as a folder "written
    by an older xprt-st", and a stage of the output folder itself ran with its records dropped."""
    out = tmp_path / "out"
    run_pipeline(_stages(), out)
    (out / ".xprt-st-fingerprint.json").write_text(text, encoding="utf-8")
    again = _stages(seed=1)
    with pytest.raises(FingerprintError, match=r"\.xprt-st-fingerprint\.json (is not valid JSON|holds a JSON list)"):
        run_pipeline(again, out)
    with pytest.raises(FingerprintError, match="Restore the file"):
        write_fingerprint(out, "third", {"words": []})
    assert again[0].ran == again[1].ran == [] and (out / ".xprt-st-fingerprint.json").read_text() == text
    assert (out / "one" / "first.txt").read_text() == "a b"
    # an output path that is a file records nothing: the command's own check names it (not this file's read)
    assert read_fingerprints(out / "one" / "first.txt") == {}


def test_a_key_another_option_decides_is_named_by_that_option_and_its_change() -> None:
    """Hand-written: ``pairs`` left out of the stored fingerprint reads as its default, and is named by ``--recipe``
    with the recipe's own change where another stage records it, or by ``--recipe`` alone where none does."""
    from xprt_st.fingerprint import SetBy, describe_differences

    set_by = {"pairs": SetBy("--recipe", "mined"), "rank_by": SetBy("--recipe", "fused")}
    found = [("holdout", 0.3, 0.5), ("pairs", None, "inverse-cloze"), ("rank_by", None, "bm25")]
    assert describe_differences(found, set_by, {"recipe": ("self-only", "mixed")}) == (
        "--holdout 0.3 -> 0.5; --recipe self-only -> mixed (which decides pairs mined -> inverse-cloze, "
        "rank_by fused -> bm25)"
    )
    assert describe_differences(found[1:2], set_by) == "--recipe (which decides pairs mined -> inverse-cloze)"
    assert describe_differences(found[:1]) == "--holdout 0.3 -> 0.5"


@pytest.mark.parametrize(
    ("after", "pairs", "message"),
    [
        ({"hard_negatives": -1}, "mined", "--hard-negatives must be >= 0, got -1"),
        ({"lexical_candidates": -2}, "mined", "--lexical-candidates must be >= 0, got -2"),
        ({"hard_negatives": 2, "max_ratio": 1.5}, "mined", "--hard-negative-max-ratio must be in (0, 1], got 1.5"),
        ({"hard_negatives": 2}, "random-span", "--hard-negatives needs mined groups"),
    ],
)
def test_the_after_merge_stage_checks_its_counts_from_python_too(
    tmp_path: Path, after: dict[str, Any], pairs: str, message: str
) -> None:
    from xprt_st.mining.after_merge import AfterMerge
    from xprt_st.mining.config import MiningConfig, MiningConfigError
    from xprt_st.pipeline.stages import AfterMergeStage, MineSettings, MineStage

    mined = MineStage(MineSettings(mining=MiningConfig(pairs=pairs), corpus=("c.jsonl",), output=tmp_path / "out"))
    with pytest.raises(MiningConfigError, match=re.escape(message)):
        AfterMergeStage(AfterMerge(**after), mined).check()
    assert not (tmp_path / "out").exists()
