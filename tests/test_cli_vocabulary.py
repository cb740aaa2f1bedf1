"""One vocabulary across the ``xprt-st`` commands: every option name is known, means one thing, has one type.

The table below is the vocabulary: a new option needs a row here (with what it means), so a second
spelling of an existing idea (``--output-dir`` beside ``--output``, ``--data`` beside ``--mined``) or a
second meaning of a name (``--model`` as the mining model) fails this test. The old spellings still
work as hidden aliases, each announcing itself in one line.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.cli.aliases import DEPRECATED, DROP, deprecation_line, rewrite_arguments

OPTIONS: dict[str, tuple[str, str]] = {
    # name: (type, meaning)
    "--output": ("Path", "the folder (or file) the command writes"),
    "--quiet": ("bool", "no progress displays and no informational lines"),
    "--verbose": ("bool", "also the libraries' log records and warnings"),
    "--mined": ("Path", "a folder written by xprt-st mine"),
    "--model": ("str", "the starting model of training"),
    "--mining-model": ("str", "the model that encodes passages for mining"),
    "--batch-size": ("int", "training examples (groups or pairs) per step"),
    "--encode-batch-size": ("int", "texts per encoding batch"),
    "--encode-backend": ("str", "what runs the model when it only encodes (torch, onnx, openvino)"),
    "--epochs": ("float", "passes over the training examples"),
    "--data-dir": ("Path", "the benchmark-data folder ($XPRT_DATA_DIR)"),
    "--max-steps": ("int", "optimizer steps"),
    "--learning-rate": ("float", "peak learning rate"),
    "--seed": ("int", "the seed of the command's random choices"),
    "--recipe": ("str", "a training recipe: name or YAML"),
    "--recipes": ("str", "comma-separated recipes"),
    "--seeds": ("str", "comma-separated training seeds"),
    "--config": ("Path", "a comparison YAML"),
    "--setting": ("str", "a recipe setting (continued, from-bert)"),
    "--resume": ("str", "checkpoint to resume from"),
    "--fork-from": ("str", "checkpoint of another run to continue from"),
    "--save-steps": ("int", "checkpoint interval"),
    "--logging-steps": ("int", "logging interval"),
    "--eval-steps": ("int", "label-free evaluation interval"),
    "--keep-best": ("bool", "end on the best label-free checkpoint"),
    "--precision": ("str", "auto, fp32 or bf16 (train: fp16 too); auto follows what the device computes natively"),
    "--max-seq-length": ("int", "token limit per passage in training"),
    "--print-recipe": ("bool", "print the resolved recipe"),
    "--report-only": ("bool", "rewrite a comparison's report only"),
    "--holdout": ("float", "fraction of documents kept out of training"),
    "--max-documents": ("int", "use only the first N documents"),
    "--corpus": ("list[str]", "the user's document files"),
    "--task": ("str", "one retrieval task (name or BEIR folder)"),
    "--tasks": ("list[str]", "evaluation tasks"),
    "--text-field": ("str", "the field with a document's text"),
    "--id-field": ("str", "the field with a document's id"),
    "--title-field": ("str", "the field with a document's title"),
    "--html": ("bool", "the text is raw HTML"),
    "--split": ("str", "a Hugging Face dataset split"),
    "--prompt": ("str", "prompt text before each passage"),
    "--prompt-name": ("str", "a prompt stored in the model"),
    "--device": ("str", "a torch device"),
    "--max-tokens": ("int", "most tokens per passage"),
    "--min-tokens": ("int", "fewest tokens before a passage closes"),
    "--overlap-tokens": ("int", "tokens repeated after a cut"),
    "--max-passages": ("int", "most passages per document"),
    "--threshold": ("float", "a fixed anchor centrality threshold"),
    "--threshold-quantile": ("float", "the anchor threshold as a quantile"),
    "--top-k": ("int", "related passages per anchor"),
    "--hard-negatives": ("int", "passages of other documents mined as hard negatives per anchor"),
    "--lexical-candidates": ("int", "BM25's top passages of other documents per anchor, for the hybrid teacher"),
    "--hybrids": ("bool", "beside bm25, each dense model's hybrid with it, compared"),
    "--hard-negative-max-ratio": (
        "float",
        "the false-negative filter: most cosine to the anchor, as a share of the positive's",
    ),
    "--rank-by": ("str", "how related passages are ranked"),
    "--positive": ("str", "how the positive is chosen"),
    "--pairs": ("str", "mined or random-span pairs"),
    "--structure": ("str", "author-written texts (titles, headings) mined as anchors of structure pairs"),
    "--structure-mix": ("float", "the share of structure pairs in each batch of the mixed groups"),
    "--num-shards": ("int", "mining shards"),
    "--shard-index": ("int", "the one shard to run"),
    "--chunk-size": ("int", "documents per mining checkpoint"),
    "--engine": ("str", "local or ray"),
    "--num-workers": ("int", "Ray encoder workers"),
    "--ray-address": ("str", "a Ray cluster"),
    "--skip-unreadable": ("bool", "count unreadable files instead of failing"),
    "--report": ("bool", "also write the HTML report"),
    "--overwrite": ("bool", "redo what the output folder holds"),
    "--merge": ("Path", "re-merge a stored mining run"),
    "--sample": ("int", "documents shown in the report"),
    "--label": ("list[str]", "a model's name in the table"),
    "--max-queries": ("int", "a seeded sample of queries"),
    "--max-corpus": ("int", "a seeded sample of documents"),
    "--overlap-thirds": ("bool", "scores per third of word overlap"),
    "--cache-dir": ("Path", "the mteb result cache"),
    "--no-cache": ("bool", "no result cache"),
    "--pretrained": ("str", "a pre-trained model to compare"),
    "--train-pairs": ("Path", "labelled training pairs"),
    "--train-split": ("str", "a qrels split used for training"),
    "--query-field": ("str", "the query column of the pairs"),
    "--positive-field": ("str", "the positive column of the pairs"),
    "--test-fraction": ("float", "share of queries held out for testing"),
    "--domain-field": ("str", "the field naming a query's sub-domain"),
    "--domain-pattern": ("str", "a regex naming a query's sub-domain"),
    "--pretrain-set": ("list[str]", "a recipe override key=value"),
    "--tolerance": ("float", "the loss below which a sub-domain is flagged"),
    "--save-models": ("bool", "also save the fine-tuned models"),
    "--alpha": ("float", "the interpolation weight"),
    "--alphas": ("str", "interpolation weights to choose from"),
    "--select": ("str", "mined:DIR that chooses the weight"),
}
"""Every option name any command may use, with its type and its one meaning."""

SHORT_NAMES = {"-o": "--output", "-q": "--quiet", "-v": "--verbose", "-c": "--config", "-t": "--tasks"}
"""A short name always stands for the same long one."""

NEGATIONS = {"--no-keep-best": "--keep-best", "--no-skip-unreadable": "--skip-unreadable", "--no-hybrids": "--hybrids"}

ENCODING_COMMANDS = {"mine", "evaluate", "interpolate"}
"""Commands that encode but never train: their batch is --encode-batch-size, never --batch-size."""


@functools.cache
def _commands() -> dict[str, Any]:
    return dict(typer.main.get_command(app).commands)


def _type_name(param: Any) -> str:
    kind = param.bare_type()
    return kind.__name__ if isinstance(kind, type) else str(kind)


def _options(command: Any) -> list[Any]:
    return [param for param in command.params if param.param_type_name == "option"]


def test_the_command_tree_is_the_one_this_test_knows() -> None:
    assert set(_commands()) == {
        "mine",
        "inspect",
        "train",
        "compare",
        "evaluate",
        "finetune-compare",
        "interpolate",
        "quickstart",
    }


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_name_is_in_the_vocabulary_with_its_one_type(name: str) -> None:
    command = _commands()[name]
    for param in _options(command):
        longs = [opt for opt in param.opts if opt.startswith("--")]
        shorts = [opt for opt in param.opts if not opt.startswith("--")]
        assert len(longs) == 1, f"{name}: {param.opts} should have exactly one long name"
        long = longs[0]
        assert long in OPTIONS, f"{name} {long}: not in the vocabulary (add a row with its meaning, or reuse a name)"
        assert _type_name(param) == OPTIONS[long][0], f"{name} {long}: type {_type_name(param)}, not {OPTIONS[long][0]}"
        for short in shorts:
            assert SHORT_NAMES.get(short) == long, f"{name}: {short} is {long}, elsewhere {SHORT_NAMES.get(short)}"
        for negation in param.secondary_opts:
            assert NEGATIONS.get(negation) == long, f"{name}: unexpected negation {negation}"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_writes_with_o_and_takes_quiet_and_verbose(name: str) -> None:
    names = {opt for param in _options(_commands()[name]) for opt in param.opts}
    assert {"-o", "--output", "-q", "--quiet", "-v", "--verbose"} <= names, sorted(names)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_batch_size_means_training_examples_and_encoding_has_its_own_name(name: str) -> None:
    names = {opt for param in _options(_commands()[name]) for opt in param.opts}
    if name in ENCODING_COMMANDS:
        assert "--batch-size" not in names and "--encode-batch-size" in names
    else:
        assert "--encode-batch-size" not in names


def _help(name: str) -> str:
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", sorted(_commands()))
def test_the_help_shows_no_old_spelling_and_no_old_launcher(name: str) -> None:
    text = " ".join(_help(name).split())
    for old in {old for table in DEPRECATED.values() for old in table} - {"--model", "--batch-size"}:
        assert not re.search(re.escape(old) + r"(?![\w-])", text), f"{name} --help mentions {old}"
    assert "xprt_st.training" not in text
    # One default threshold quantile: examples never spell another one.
    assert not re.search(r"--threshold-quantile 0\.[0-46-9]", text)


def test_required_options_are_marked_in_the_help() -> None:
    assert "[required]" in " ".join(_help("compare").split())
    train = " ".join(_help("train").split())
    assert "--recipe <str> Recipe" in train and "[required]" in train
    assert "Folder written by `xprt-st mine` (required, except with --print-recipe)" in train
    assert "(required, except with --print-recipe)" in train.split("--output <path>")[1]
    assert "required except with --merge" in " ".join(_help("mine").split())


def test_the_id_field_help_says_it_decides_the_held_out_documents() -> None:
    assert "decides which are held out" in " ".join(_help("mine").split())


# --------------------------------------------------------------------------------------------------
# The old spellings
# --------------------------------------------------------------------------------------------------

BASE_ARGUMENTS = {
    "train": ["--recipe", "xprt"],
    "compare": ["--config", "c.yaml", "-o", "out"],
    "quickstart": [],
    "mine": [],
    "evaluate": [],
    "interpolate": ["start", "trained", "-o", "out"],
    "finetune-compare": [],
}
VALUES = {"Path": "some/folder", "str": "some-model", "int": "7", "list[str]": "a"}
ALIASES = sorted((command, old, new) for command, table in DEPRECATED.items() for old, new in table.items())


def _parse(command: str, args: list[str]) -> dict[str, Any]:
    click_command = _commands()[command]
    return click_command.make_context(command, [*BASE_ARGUMENTS[command], *args]).params


@pytest.mark.parametrize(("command", "old", "new"), ALIASES, ids=[f"{c} {o}" for c, o, _ in ALIASES])
def test_an_old_spelling_sets_what_the_new_one_sets_and_says_so_in_one_line(
    command: str, old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    click_command = _commands()[command]
    assert old not in {opt for param in click_command.params for opt in param.opts}, "an alias must stay hidden"
    uses = 1
    if new == DROP:
        assert _parse(command, [old]) == _parse(command, [])
    else:
        param = next(param for param in click_command.params if new in param.opts)
        flag = _type_name(param) == "bool"
        value = [] if flag else [VALUES[_type_name(param)]]
        expected = _parse(command, [new, *value])
        capsys.readouterr()
        assert _parse(command, [old, *value]) == expected
        assert expected != _parse(command, [])
        if not flag:
            assert _parse(command, [f"{old}={value[0]}"]) == expected
            uses = 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [deprecation_line(old, new)] * uses


def test_the_deprecation_line_reads_as_the_vocabulary_says() -> None:
    assert deprecation_line("--data", "--mined") == "--data is deprecated; use --mined"


def test_rewriting_leaves_values_and_everything_after_a_double_dash_alone() -> None:
    args, lines = rewrite_arguments("train", ["--data", "d", "--data", "e", "--no-progress", "--", "--data"])
    assert args == ["--mined", "d", "--mined", "e", "--quiet", "--", "--data"]
    assert lines == ["--data is deprecated; use --mined", "--no-progress is deprecated; use --quiet"]
    assert rewrite_arguments("mine", ["--data", "x"]) == (["--data", "x"], [])  # not an alias of mine


def test_an_old_spelling_runs_end_to_end_through_the_cli() -> None:
    result = CliRunner().invoke(app, ["train", "--recipe", "xprt", "--data", "mined", "--print-recipe"])
    assert result.exit_code == 0, result.output
    assert "--data is deprecated; use --mined" in result.output
    assert "training:" in result.output  # the recipe YAML


def test_quiet_and_verbose_together_are_refused_in_one_line() -> None:
    result = CliRunner().invoke(app, ["evaluate", "-q", "-v", "-o", "x"])
    assert result.exit_code == 2
    assert "give -q/--quiet or -v/--verbose, not both" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("command", "args", "line"),
    [
        ("train", ["--data", "A", "--mined", "B"], "--data A and --mined B give the same option twice"),
        ("evaluate", ["--output-dir", "A", "-o", "B", "m"], "--output-dir A and -o B give the same option twice"),
        ("evaluate", ["--output=B", "--output-dir=A", "m"], "--output-dir=A and --output=B give the same option twice"),
    ],
)
def test_an_old_and_a_new_spelling_together_are_one_error_line(command: str, args: list[str], line: str) -> None:
    """Round 5: ``--data A --mined B`` trained on one of them silently; now one line names both and the fix."""
    result = CliRunner().invoke(app, [command, *args])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert line in text and text.count("Error:") == 1 and "Traceback" not in text, text
    assert "is deprecated" not in text  # refused, not rewritten
