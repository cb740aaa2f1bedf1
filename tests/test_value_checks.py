"""Round 4 of issue 29: every value checked before work (NaN included), and messages that name the real cause."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.recipe import RecipeError, load_recipe

runner = CliRunner()


def _text(result) -> str:
    return " ".join(result.output.split())


# --- case 3: NaN and infinities -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_recipe_float_that_is_nan_or_infinite_is_refused(tmp_path, value):
    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\nobjective:\n  name: xprt\n  args:\n    cross_weight: {value}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"objective.args.cross_weight: must be a finite number"):
        load_recipe(path)


def test_every_float_field_of_a_recipe_refuses_nan():
    for key in ("training.learning_rate", "training.warmup_ratio", "retention.start", "training.weight_decay"):
        with pytest.raises(RecipeError, match="must be a finite number"):
            load_recipe("xprt", overrides={key: float("nan")})


def test_a_bound_never_contains_nan():
    from xprt_st.objectives import NON_NEGATIVE, POSITIVE_NUMBER, Bound

    assert not NON_NEGATIVE.contains(float("nan")) and not POSITIVE_NUMBER.contains(float("nan"))
    assert not Bound(0, 1).contains(float("nan")) and Bound(0, 1).contains(0.5)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--recipe", "xprt", "--data", "d", "--output", "o", "--learning-rate", "nan"],
        ["inspect", "somewhere", "--threshold", "nan"],
        ["interpolate", "a", "b", "-o", "o", "--alpha", "inf"],
    ],
)
def test_every_float_option_refuses_nan_before_the_command_runs(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "is not a finite number" in _text(result)
    assert f"'{args[-2]}'" in _text(result)


# --- case 4: a configuration that trains nothing -------------------------------------------------------------


def test_an_objective_whose_every_weight_is_zero_is_refused():
    zero = {f"objective.args.{key}": 0 for key in ("xp_weight", "cross_weight", "self_weight", "mlm_weight")}
    with pytest.raises(RecipeError, match="every term weight is 0"):
        load_recipe("xprt", overrides={**zero, "objective.args.unif_weight": 0.0})
    load_recipe("xprt", overrides={**zero, "objective.args.unif_weight": 0.1})  # one term left: fine
    # self-only fixes xp and cross at 0: zeroing the other three leaves nothing
    with pytest.raises(RecipeError, match="every term weight is 0"):
        load_recipe(
            "self-only",
            overrides={f"objective.args.{key}": 0 for key in ("self_weight", "mlm_weight", "unif_weight")},
        )


def test_the_weights_rule_knows_xprtloss_defaults():
    import inspect

    from xprt_st.losses import XPRTLoss
    from xprt_st.objectives import XPRT_WEIGHTS

    parameters = inspect.signature(XPRTLoss.__init__).parameters
    assert XPRT_WEIGHTS == {key: parameters[key].default for key in XPRT_WEIGHTS}


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_outside_numpys_range_is_refused(seed):
    with pytest.raises(RecipeError, match=r"seed: must be in \[0, 2\*\*32\)"):
        load_recipe("xprt", overrides={"training.seed": seed})


# --- case 5, 16, 21: finetune-compare and evaluate ----------------------------------------------------------


@pytest.mark.parametrize("epochs", ["0", "-3"])
def test_finetune_compare_refuses_epochs_that_train_nothing_before_loading_data(tmp_path, epochs):
    result = runner.invoke(
        app,
        ["finetune-compare", "--pretrained", "default", "--task", str(tmp_path / "nowhere"), "--epochs", epochs,
         "--output-dir", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2 and re.search(rf"--epochs {epochs}(\.0)?: must be above 0", _text(result))
    assert "Traceback" not in result.output and "nowhere" not in _text(result)  # before the task is looked for


def test_finetune_compare_refuses_a_bad_domain_pattern_before_loading_data(tmp_path):
    result = runner.invoke(
        app,
        ["finetune-compare", "--pretrained", "default", "--task", str(tmp_path / "nowhere"), "--domain-pattern", "([",
         "--output-dir", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2 and "--domain-pattern '([': not a regular expression" in _text(result)
    assert "nowhere" not in _text(result)  # refused before the task was looked for


@pytest.mark.parametrize("value", ["0", "-1"])
def test_evaluate_refuses_a_sample_size_below_one(tmp_path, value):
    result = runner.invoke(
        app, ["evaluate", "--tasks", "python-faq", "--max-queries", value, "--output-dir", str(tmp_path / "e")]
    )
    assert result.exit_code == 2 and f"--max-queries {value}: must be at least 1" in _text(result)


# --- case 6 and the intervals of evaluate A B ----------------------------------------------------------------


def _report():
    from xprt_st.evaluation.run import EvaluationReport, TaskScore

    report = EvaluationReport(models=["a", "b"], tasks=["python-faq", "mined:m"])
    values = {("a", "python-faq"): 0.5, ("b", "python-faq"): 0.7, ("a", "mined:m"): 0.9, ("b", "mined:m"): 0.1}
    for (model, task), value in values.items():
        report.scores.append(TaskScore(model, task, "ndcg_at_10", value, "k", task))
    report.per_query["python-faq"] = {"a": {"q1": 0.2, "q2": 0.8, "q3": 0.5}, "b": {"q1": 0.5, "q2": 0.9, "q3": 0.7}}
    return report


def test_the_label_free_score_stays_out_of_the_mean():
    rows = {row["model"]: row for row in _report().wide_rows()}
    assert rows["a"]["mean"] == pytest.approx(0.5) and rows["b"]["mean"] == pytest.approx(0.7)
    from xprt_st.evaluation.run import is_label_free

    assert is_label_free("mined:x") and is_label_free("titles:x") and not is_label_free("arguana")


def test_evaluate_of_two_models_gives_the_second_minus_the_first_with_a_paired_interval(tmp_path):
    report = _report()
    (row,) = report.differences()
    # by hand: per-query differences 0.3, 0.1, 0.2, mean 0.2; the interval lies within the differences' range
    assert row["model"] == "b" and row["reference"] == "a" and row["task"] == "python-faq"
    assert row["difference"] == pytest.approx(0.2) and 0.1 - 1e-9 <= row["ci_low"] <= 0.2 <= row["ci_high"] <= 0.3
    assert row["items"] == 3 and row["verdict"] == "gain"
    written = json.loads(report.write_json(tmp_path / "s.json").read_text())
    assert written["mean_of"] == ["python-faq"] and written["differences"][0]["difference"] == pytest.approx(0.2)


# --- case 12: a UTF-8 byte-order mark ------------------------------------------------------------------------


def test_a_byte_order_mark_keeps_the_first_record_and_is_reported_once(tmp_path, caplog):
    from xprt_st.mining.formats import TextFields, iter_source

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"text": "first"}\n{"text": "second"}\n')
    with caplog.at_level(logging.WARNING, logger="xprt_st.mining.formats"):
        for _ in range(2):  # the checks read a file, then the corpus reads it again
            records = list(iter_source(path, TextFields("text"), None, "train", 0, 1000))
            assert [record.text for record in records] == ["first", "second"]
    assert caplog.text.count("byte-order mark") == 1


# --- case 14: quickstart ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value"), [("--batch-size", "1"), ("--max-steps", "0")])
def test_quickstart_refuses_its_own_flags_before_mining(tmp_path, flag, value):
    result = runner.invoke(app, ["quickstart", "-o", str(tmp_path / "q"), flag, value, "--no-progress"])
    assert result.exit_code == 2 and f"{flag} {value}" in _text(result) and "--save-steps" not in _text(result)
    assert not (tmp_path / "q" / "mined").exists()


# --- cases 15, 23 and duplicate recipes: compare ------------------------------------------------------------


def _compare_config(tmp_path: Path, **extra) -> Path:
    raw = {"corpus": [{"path": "x.jsonl"}], "tasks": ["stsb"], "recipes": ["xprt"], **extra}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _compare(*args: str):
    return runner.invoke(app, ["compare", *args])


def test_compare_names_the_flag_of_a_bad_seed_list_or_recipe(tmp_path):
    config = str(_compare_config(tmp_path))
    result = _compare("--config", config, "--output", str(tmp_path / "r"), "--seeds", "1,x")
    assert result.exit_code == 2 and "--seeds" in _text(result) and "comma-separated integers" in _text(result)
    result = _compare("--config", config, "--output", str(tmp_path / "r"), "--recipes", "xprt,nope")
    assert result.exit_code == 2 and "--recipes nope: no recipe file 'nope'" in _text(result)
    result = _compare("--config", config, "--output", str(tmp_path / "r"), "--recipes", "xprt,xprt")
    assert result.exit_code == 2 and "--recipes: xprt given twice" in _text(result)


def test_compare_refuses_a_zero_sample_in_its_config(tmp_path):
    from xprt_st.compare.config import CompareConfigError, load_compare_config

    raw = {"corpus": [{"path": "x.jsonl", "max_documents": 0}], "tasks": [{"name": "stsb", "max_queries": 0}]}
    path = tmp_path / "z.yaml"
    path.write_text(yaml.safe_dump({**raw, "recipes": ["xprt"]}), encoding="utf-8")
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(path)
    assert "corpus[0].max_documents: 0" in str(error.value) and "tasks[0].max_queries: 0" in str(error.value)


# --- case 17 and 25: inspect, --tasks with a comma ----------------------------------------------------------


def test_inspect_refuses_a_negative_sample(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path), "--sample", "-1"])
    assert result.exit_code == 2 and "--sample -1" in _text(result)


def test_a_folder_whose_name_holds_a_comma_is_one_task(tmp_path):
    from xprt_st.evaluation.catalog import split_task_specs

    folder = tmp_path / "a,b"
    folder.mkdir()
    assert split_task_specs([f"mined:{folder}"]) == [f"mined:{folder}"]
    assert split_task_specs([f"stsb,mined:{tmp_path}/a\\,b"]) == ["stsb", f"mined:{folder}"]
    assert split_task_specs(["arguana,stsb"]) == ["arguana", "stsb"]
    assert split_task_specs([" x , y "]) == ["x", "y"]


# --- case 18 and 25: starting the CLI ----------------------------------------------------------------------

_INTERRUPT_DURING_IMPORTS = """
import os, signal, sys
class Hook:
    def find_spec(self, name, path, target=None):
        if name == "xprt_st.cli.mine":  # half way through the CLI's imports
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = ["xprt-st", "--help"]
from xprt_st.cli.__main__ import main
main()
"""


def test_an_interrupt_while_the_cli_starts_is_one_line_and_exit_130():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _INTERRUPT_DURING_IMPORTS], capture_output=True, text=True)
    assert result.returncode == 130
    assert result.stderr.strip() == "xprt-st: interrupted while starting; nothing was done"


def test_the_cli_starts_without_torch_and_keeps_the_quickstart_default():
    import subprocess
    import sys

    heavy = "('torch', 'sentence_transformers', 'mteb')"
    code = f"import sys, xprt_st.cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    import inspect

    from xprt_st.cli.quickstart import quickstart
    from xprt_st.quickstart import HOLDOUT

    assert inspect.signature(quickstart).parameters["holdout"].default == HOLDOUT


# --- case 20, 22, 24: messages ------------------------------------------------------------------------------


def test_a_label_free_result_on_few_anchors_carries_a_caveat():
    from xprt_st.evaluation.label_free import LabelFreeScore, comparison, format_comparison

    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(6, 4))

    def score(values):
        return LabelFreeScore({f"q{i}": v for i, v in enumerate(values)}, embeddings)

    record = comparison(score([0.1, 0.2]), score([0.9, 0.8]))
    assert "only 2 held-out anchors" in record["caveat"] and "caveat: only 2" in format_comparison(record)
    many = comparison(score([0.5] * 30), score([0.4] * 30))
    assert "caveat" not in many and "caveat" not in format_comparison(many)


def test_fork_and_resume_compare_resolved_model_paths(tmp_path, monkeypatch, tiny_model_path):
    from xprt_st.training.fork import same_model

    monkeypatch.chdir(tiny_model_path.parent)
    assert same_model(tiny_model_path.name, str(tiny_model_path))
    assert same_model("default", "all-MiniLM-L6-v2")
    assert not same_model(str(tiny_model_path), str(tmp_path))


def test_mined_tasks_name_the_true_reason_a_path_is_not_a_folder(tmp_path):
    import os

    from xprt_st.evaluation.label_free import HeldOutError, load_heldout_task

    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    os.mkfifo(tmp_path / "fifo")
    reasons = {
        "file": "is a file, not a folder",
        "loop": "is a symbolic link loop",
        "dangling": "which does not exist",
        "fifo": "is a pipe, not a folder",
        "missing": "does not exist",
    }
    for name, reason in reasons.items():
        with pytest.raises(HeldOutError, match=reason):
            load_heldout_task(tmp_path / name)
    read, write = os.pipe()  # what a shell's <(cat f) passes: /dev/fd/N
    try:
        with pytest.raises(HeldOutError, match="is a pipe"):
            load_heldout_task(f"/dev/fd/{read}")
    finally:
        os.close(read)
        os.close(write)


# --- 25: smaller ones --------------------------------------------------------------------------------------


def test_finetune_prints_no_raw_trainer_dicts(tmp_path, tiny_model, capsys):
    from xprt_st.finetune.folds import LabelledPair
    from xprt_st.finetune.result import FinetuneSettings
    from xprt_st.finetune.run import finetune

    pairs = [LabelledPair(f"question {i} about topic {i}", f"answer {i} on topic {i}") for i in range(8)]
    finetune(tiny_model, pairs, FinetuneSettings(epochs=1, batch_size=4), tmp_path / "ft")
    out = capsys.readouterr().out
    assert "{'loss'" not in out and "'train_runtime'" not in out


def test_the_mined_task_honours_max_queries(tmp_path):
    from tests.heldout_helpers import write_heldout
    from xprt_st.evaluation.catalog import resolve_tasks

    texts = {label: [f"doc {label} passage {i} word{label * 5 + i}" for i in range(4)] for label in range(3)}
    groups = [(0, 0, [1, 2]), (0, 3, [2, 1]), (1, 1, [0, 2]), (1, 2, [3, 0]), (2, 0, [1, 3])]
    folder = write_heldout(tmp_path / "m", texts, groups)
    full, small = (resolve_tasks([f"mined:{folder}"], max_queries=n)[0] for n in (None, 2))
    assert [len(task.beir.queries) for task in (full, small)] == [5, 2]
    assert len(small.beir.corpus) == len(full.beir.corpus) == 12  # every held-out passage stays a candidate
    assert full.metadata.revision != small.metadata.revision


def test_the_heldout_choice_does_not_depend_on_how_the_path_is_spelled(tmp_path, monkeypatch):
    from xprt_st.mining.reader import expand_sources

    (tmp_path / "sub").mkdir()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "a"}\n', encoding="utf-8")
    (tmp_path / "link.jsonl").symlink_to(corpus)
    monkeypatch.chdir(tmp_path / "sub")
    spellings = ["../c.jsonl", str(corpus), f"{tmp_path}/sub/../c.jsonl", "../link.jsonl"]
    assert {str(expand_sources([spelling])[0]) for spelling in spellings} == {str(corpus.resolve())}
