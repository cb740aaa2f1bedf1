"""End to end through the real CLI (typer's CliRunner) with the tiny model on tiny hand-made data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xprt_st.cli import app

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_evaluate_two_models_side_by_side(
    tiny_model_path: Path, beir_folder: Path, tmp_path: Path, stsb_writer
) -> None:
    sts = stsb_writer(tmp_path / "toy-sts.csv")
    out = tmp_path / "out"
    result = _invoke(
        "evaluate",
        str(tiny_model_path),
        str(tiny_model_path),
        "--label",
        "first",
        "--label",
        "second",
        "--tasks",
        f"{beir_folder},{sts}",
        "--output",
        str(out),
        "--no-cache",
        "--overlap-thirds",
    )
    assert result.exit_code == 0, result.output
    for text in ("tinybeir", "toy-sts.csv", "nDCG@10 by word-overlap third"):
        assert text in result.output
    with (out / "scores.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["model"], r["task"], r["metric"]) for r in rows] == [
        ("first", "tinybeir", "ndcg_at_10"),
        ("first", "toy-sts.csv", "cosine_spearman"),
        ("second", "tinybeir", "ndcg_at_10"),
        ("second", "toy-sts.csv", "cosine_spearman"),
    ]
    # the same weights under two labels: same scores and the same weight hash in the result key
    assert rows[0]["score"] == rows[2]["score"] and rows[1]["score"] == rows[3]["score"]
    assert rows[0]["model_key"].split("@")[1] == rows[2]["model_key"].split("@")[1]
    assert 0.0 <= float(rows[0]["score"]) <= 1.0
    payload = json.loads((out / "scores.json").read_text())
    assert payload["tasks"] == {"tinybeir": "ndcg_at_10", "toy-sts.csv": "cosine_spearman"}
    assert (out / "scores.png").stat().st_size > 1000
    with (out / "overlap_thirds.csv").open() as handle:
        thirds = list(csv.DictReader(handle))
    assert [(r["model"], r["third"], r["n_queries"]) for r in thirds][:3] == [
        ("first", "low", "2"),
        ("first", "middle", "1"),
        ("first", "high", "1"),
    ]
    assert all(float(r["gain"]) == 0.0 for r in thirds)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ("nosuchtask", "unknown task 'nosuchtask'"),
        ("nosuchtask", "arguana, stsb, sickr, sts12, sts13, sts14, sts15, python-faq"),
    ],
)
def test_evaluate_unknown_task_lists_valid_names(tasks: str, message: str, tmp_path: Path) -> None:
    result = _invoke("evaluate", "default", "--tasks", tasks, "--output", str(tmp_path))
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_evaluate_folder_missing_a_file_names_it(beir_folder: Path, tmp_path: Path) -> None:
    (beir_folder / "queries.jsonl").unlink()
    result = _invoke("evaluate", "default", "--tasks", str(beir_folder), "--output", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "has no queries.jsonl" in " ".join(result.output.split())


def test_evaluate_model_that_fails_to_load(beir_folder: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    result = _invoke("evaluate", str(broken), "--tasks", str(beir_folder), "--output", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "could not load model" in " ".join(result.output.split()) and "broken-model" in result.output


def test_finetune_compare_identical_models_gain_nothing(tiny_model_path: Path, tmp_path: Path, beir_writer) -> None:
    keys = [(topic, i) for topic in ("web", "med") for i in range(6)]
    corpus = {f"d-{t}-{i}": {"title": "", "text": f"{t} fact number {i} about {t}"} for t, i in keys}
    queries = {f"q-{t}-{i}": f"what about {t} {i}?" for t, i in keys}
    qrels = [(f"q-{t}-{i}", f"d-{t}-{i}", 1) for t, i in keys]
    folder = beir_writer(tmp_path / "ftbeir", corpus, queries, qrels)
    out = tmp_path / "ft"
    result = _invoke(
        "finetune-compare",
        "--model",
        str(tiny_model_path),
        "--pretrained",
        str(tiny_model_path),
        "--task",
        str(folder),
        "--domain-pattern",
        "^q-([a-z]+)-",
        "--batch-size",
        "4",
        "--learning-rate",
        "1e-3",
        "--output",
        str(out),
    )
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "finetune_compare.json").read_text())
    assert payload["plan"]["source"] == "split of the task's queries"
    assert len(payload["plan"]["test_query_ids"]) == 6 and payload["plan"]["n_train_pairs"] == 6
    rows = {row["domain"]: row for row in payload["rows"]}
    assert set(rows) == {"overall", "med", "web"}
    assert rows["overall"]["n_queries"] == 6
    # same start, same settings and seed: identical fine-tuning, so no gain before or after
    for row in rows.values():
        assert row["gain_before"] == 0.0 and row["gain_after"] == 0.0 and row["flag"] == ""
        # and the paired bootstrap interval of a zero difference on every query is exactly [0, 0]
        assert (row["before_low"], row["before_high"], row["verdict_after"]) == (0.0, 0.0, "no clear difference")
    assert "+0.00 [+0.00, +0.00]" in result.output and "95% CI" in result.output
    # fine-tuning did change the model
    assert payload["per_query_ndcg_at_10"]["base"] != payload["per_query_ndcg_at_10"]["base+ft"]
    assert (out / "finetune_compare.csv").is_file()


def test_finetune_compare_needs_exactly_one_source_of_the_pretrained_model(beir_folder: Path, tmp_path: Path) -> None:
    result = _invoke("finetune-compare", "--task", str(beir_folder), "--output", str(tmp_path / "o"))
    assert result.exit_code == 2 and "give either --pretrained MODEL, or --recipe" in " ".join(result.output.split())
    out = str(tmp_path / "o")  # tmp_path holds the task folder: an output folder of other files is refused
    result = _invoke("finetune-compare", "--task", str(beir_folder), "--recipe", "xprt", "--output", out)
    assert result.exit_code == 2 and "--recipe needs --mined" in " ".join(result.output.split())


def test_finetune_compare_from_a_recipe_and_a_mined_folder(tiny_model_path: Path, tmp_path: Path, beir_writer) -> None:
    from tests.training.training_helpers import write_mined

    mined = write_mined(tmp_path / "mined")
    keys = [(topic, i) for topic in ("web", "med") for i in range(4)]
    corpus = {f"d-{t}-{i}": {"title": "", "text": f"{t} fact number {i} about {t}"} for t, i in keys}
    folder = beir_writer(
        tmp_path / "ftbeir",
        corpus,
        {f"q-{t}-{i}": f"what about {t} {i}?" for t, i in keys},
        [(f"q-{t}-{i}", f"d-{t}-{i}", 1) for t, i in keys],
    )
    out = tmp_path / "ft"
    result = _invoke(
        "finetune-compare",
        "--model",
        str(tiny_model_path),
        "--recipe",
        "change-only-positive",
        "--mined",
        str(mined),
        "--pretrain-set",
        "training.max_steps=2",
        "--pretrain-set",
        "training.batch_size=4",
        "--task",
        str(folder),
        "--batch-size",
        "2",  # 4 training pairs: 2 steps (at 4, one step at the warm-up's learning rate 0 fine-tuned nothing)
        "--output",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert (out / "pretrained" / "modules.json").is_file()
    payload = json.loads((out / "finetune_compare.json").read_text())
    assert payload["models"]["pretrained"] == "pretrained"
    assert [row["domain"] for row in payload["rows"]] == ["overall"]


def test_evaluate_names_a_missing_folder_and_what_offline_needs(tmp_path: Path, monkeypatch) -> None:
    from huggingface_hub import constants

    result = _invoke("evaluate", "/no/such/folder", "--output", str(tmp_path / "o"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "model folder /no/such/folder does not exist" in flat
    assert "huggingface.co" not in flat and "connect" not in flat

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = _invoke("evaluate", "some-org/unpackaged-model", "--output", str(tmp_path / "o"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "'some-org/unpackaged-model': no such folder" in flat
    assert (
        "only 'default' (all-MiniLM-L6-v2) is packaged: give the path of a local sentence-transformers folder" in flat
    )
    assert not (tmp_path / "o").exists()


def test_finetune_compare_reads_both_models_at_the_base_length(
    tiny_model_path: Path, tmp_path: Path, beir_writer
) -> None:
    import shutil

    # the same weights, saved with a 4-token limit (as a run trained on short passages used to save them)
    short = tmp_path / "short-model"
    shutil.copytree(tiny_model_path, short)
    config = json.loads((short / "tokenizer_config.json").read_text())
    (short / "tokenizer_config.json").write_text(json.dumps(config | {"model_max_length": 4}))
    keys = [(topic, i) for topic in ("web", "med") for i in range(6)]
    corpus = {f"d-{t}-{i}": {"title": "", "text": f"a long {t} passage whose fact number {i} is late"} for t, i in keys}
    queries = {f"q-{t}-{i}": f"which late fact is number {i} of {t}?" for t, i in keys}
    folder = beir_writer(tmp_path / "ftbeir", corpus, queries, [(f"q-{t}-{i}", f"d-{t}-{i}", 1) for t, i in keys])
    out = tmp_path / "ft"
    result = _invoke(
        "finetune-compare", "--model", str(tiny_model_path), "--pretrained", str(short), "--task", str(folder),
        "--batch-size", "4", "--learning-rate", "1e-3", "--output", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    overall = next(row for row in json.loads((out / "finetune_compare.json").read_text())["rows"])
    # read at the same length, identical weights fine-tune identically: no gain before or after
    assert overall["gain_before"] == 0.0 and overall["gain_after"] == 0.0
    assert "the pre-trained model reads 4 tokens and the base" in (out / "xprt-st.log").read_text()
