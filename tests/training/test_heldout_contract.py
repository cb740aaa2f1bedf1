"""The held-out contract: a run records what it trained on; a later check refuses to score it on those documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.mining.test_mining_merge import TOPICS, _config  # the merge tests' corpus topics and settings
from xprt_st.cli import app
from xprt_st.mining import GroupBuilder, is_held_out, merge
from xprt_st.training.checkpoints import TRAINING_CONFIG_FILE, TRAINING_STATE_DIR
from xprt_st.training.heldout_contract import (
    RECORD_KEY,
    HeldOutContractError,
    contamination_warning,
    count_overlap,
    folder_documents,
    overlap_problem,
    refuse_overlap,
    run_record,
)


def _corpus(path: Path, documents: int, copies: int = 1) -> Path:
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history. "
            f"Experts on the {topic} add detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
            for j in range(3 + i % 3)
        ]
        for copy in range(copies):
            rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}-copy-{copy}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def mined(tmp_path, tiny_model) -> Path:
    out = tmp_path / "mined"
    GroupBuilder([_corpus(tmp_path / "c.jsonl", 30)], out, _config(holdout=0.2), model=tiny_model, progress=False).run()
    return out


def _trained_model(folder: Path, model_path: Path, record: dict) -> Path:
    """A model folder as a training run leaves it: weights plus training_state/config.json with the record."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(str(model_path), device="cpu").save(str(folder))
    (folder / TRAINING_STATE_DIR).mkdir(exist_ok=True)
    (folder / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE).write_text(json.dumps({RECORD_KEY: record}))
    return folder


def test_the_record_names_every_trained_document_and_a_remerge_is_counted_exactly(mined):
    record = run_record(mined)
    ids = [f"doc-{i}-copy-0" for i in range(30)]
    held_then = {i for i in ids if is_held_out(i, 0.2, 0)}
    documents = folder_documents(mined)
    assert set(documents.heldout) == held_then and documents.fraction == 0.2 and documents.seed == 0
    assert record["heldout"] == len(held_then) and record["holdout"] == {"fraction": 0.2, "seed": 0}
    assert set(documents.trained) <= set(ids) - held_then and record["trained"] == len(documents.trained) > 0
    assert overlap_problem_free(record, mined)

    merge(mined, _config(holdout=0.5))
    held_now = {i for i in ids if is_held_out(i, 0.5, 0)}
    expected = len(held_now & set(documents.trained))  # hand count: held out now, trained on then
    assert expected > 0
    assert count_overlap(record, sorted(held_now)) == expected


def overlap_problem_free(record: dict, folder: Path) -> bool:
    return count_overlap(record, folder_documents(folder).heldout) == 0


def test_evaluate_and_interpolate_refuse_a_model_trained_on_documents_now_held_out(tmp_path, mined, tiny_model_path):
    model = _trained_model(tmp_path / "run", tiny_model_path, run_record(mined))
    assert overlap_problem(model, mined, "x") is None  # the run's own holdout: nothing trained on is held out
    merge(mined, _config(holdout=0.5))
    problem = overlap_problem(model, mined, "evaluate --tasks mined:m")
    assert problem is not None and "--holdout 0.2 -> 0.5" in problem and "--merge" in problem
    with pytest.raises(HeldOutContractError, match=r"trained on [0-9]+ of the [0-9]+ documents"):
        refuse_overlap(["default", model], mined, "evaluate")

    result = CliRunner().invoke(
        app, ["evaluate", str(model), "--tasks", f"mined:{mined}", "--no-cache", "--output-dir", str(tmp_path / "e")]
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "--holdout 0.2 -> 0.5" in text and "Traceback" not in text
    assert not (tmp_path / "e" / "scores.csv").exists()

    result = CliRunner().invoke(
        app,
        ["interpolate", str(tiny_model_path), str(model), "--alphas", "0,1", "--select", f"mined:{mined}", "-o",
         str(tmp_path / "mix")],
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "interpolate --select" in text and "--holdout 0.2 -> 0.5" in text
    assert not (tmp_path / "mix" / "modules.json").exists()


def _titled_corpus(path: Path, documents: int) -> Path:
    """JSONL documents with a ``title`` field, so the held-out part keeps titles for ``titles:DIR``."""
    rows = [json.loads(line) for line in _corpus(path, documents).read_text().splitlines()]
    for i, row in enumerate(rows):
        row["title"] = f"All about the {TOPICS[i % len(TOPICS)]} in document {i}"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("change", ["holdout", "seed", "other folder"])
def test_titles_tasks_refuse_a_model_trained_on_the_documents_they_hold_out(
    tmp_path, tiny_model, tiny_model_path, change
):
    """``titles:DIR`` asks the held-out documents' titles: a model that trained on those documents is refused as on
    ``mined:DIR`` (before, a re-merged, other-seed or other folder's titles task scored it)."""
    corpus = _titled_corpus(tmp_path / "t.jsonl", 40)
    trained_on = tmp_path / "mined"
    config = _config(holdout=0.2, title_field="title")
    GroupBuilder([corpus], trained_on, config, model=tiny_model, progress=False).run()
    model = _trained_model(tmp_path / "run", tiny_model_path, run_record(trained_on))
    assert overlap_problem(model, trained_on, "x") is None
    scored = trained_on
    if change == "holdout":
        merge(trained_on, _config(holdout=0.5, title_field="title"))
    elif change == "seed":
        merge(trained_on, _config(holdout=0.2, seed=7, title_field="title"))
    else:
        scored = tmp_path / "other"
        config = _config(holdout=0.5, seed=3, title_field="title")
        GroupBuilder([corpus], scored, config, model=tiny_model, progress=False).run()
    assert json.loads((scored / "stats.json").read_text())["holdout"]["titles"] >= 2  # a task today's code scores

    result = CliRunner().invoke(
        app, ["evaluate", str(model), "--tasks", f"titles:{scored}", "--no-cache", "--output-dir", str(tmp_path / "e")]
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in text, text
    assert f"evaluate --tasks titles:{scored}: {model} trained on" in text
    assert f"xprt-st mine --merge {scored} --holdout 0.2 --seed 0" in text  # the fix
    expected = {
        "holdout": f"{scored} was re-merged since the run (--holdout 0.2 -> 0.5)",
        "seed": f"{scored} was re-merged since the run (--seed 0 -> 7)",
        "other folder": f"the run trained on {trained_on.resolve()}, whose documents {scored} holds out, drawn with "
        "other settings (--holdout 0.2 -> 0.5, --seed 0 -> 3)",
    }
    assert expected[change] in text
    assert not (tmp_path / "e" / "scores.csv").exists()


def test_a_run_records_its_documents_and_keep_best_refuses_a_start_that_trained_on_the_heldout(
    tmp_path, mined, tiny_model_path
):
    """A real training run: its config names the documents; a second run from it on a re-merged folder is refused."""
    common = ["train", "--recipe", "change-only-positive", "--max-seq-length", "32"]
    common += ["--max-steps", "1", "--batch-size", "2", "--no-progress", "--data", str(mined)]
    start = ["--model", str(tiny_model_path)]
    result = CliRunner().invoke(app, [*common, *start, "--output", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "run" / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE).read_text())
    record = config[RECORD_KEY]
    assert record["holdout"] == {"fraction": 0.2, "seed": 0}
    assert record["trained"] == len(folder_documents(mined).trained)
    assert "Held-out contract: trained on" in (tmp_path / "run" / "README.md").read_text()

    merge(mined, _config(holdout=0.5))
    again = ["--model", str(tmp_path / "run"), "--keep-best", "--save-steps", "1", "--output", str(tmp_path / "again")]
    result = CliRunner().invoke(app, [*common, *again])
    text = " ".join(result.output.split())
    assert result.exit_code != 0 and "train --keep-best" in text and "trained on" in text, text
    assert not (tmp_path / "again" / "checkpoint-1").exists()


def test_cross_id_duplicates_between_the_parts_are_counted_as_contamination(tmp_path, tiny_model):
    out = tmp_path / "dup"
    corpus = _corpus(tmp_path / "d.jsonl", 20, copies=2)
    stats = GroupBuilder([corpus], out, _config(holdout=0.5), model=tiny_model, progress=False).run()
    # hand count: a document whose one copy is held out and the other is not
    split = [i for i in range(20) if is_held_out(f"doc-{i}-copy-0", 0.5, 0) != is_held_out(f"doc-{i}-copy-1", 0.5, 0)]
    assert split
    found = stats["holdout"]["contamination"]
    assert found["documents"] == len(split)
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "passages.parquet", columns=["doc_id", "held_out"]).to_pylist()
    held_copies = {row["doc_id"] for row in rows if row["held_out"]}
    assert (
        found["passages"]
        == sum(1 for row in rows if row["held_out"] and int(row["doc_id"].split("-")[1]) in split)
        == sum(1 for row in rows if row["doc_id"] in held_copies and int(row["doc_id"].split("-")[1]) in split)
    )
    assert all(" = " in example for example in found["examples"])
    assert json.loads((out / "stats.json").read_text())["holdout"]["contamination"] == found
    # the checks that read the folder (evaluate mined:DIR, interpolate --select, the training run) name them
    warning = contamination_warning(out)
    assert warning is not None and f"{found['documents']} of its {stats['holdout']['documents']} held-out" in warning
    assert contamination_warning(tmp_path / "nowhere") is None


def test_a_failed_remerge_keeps_the_previous_groups_and_names_the_holdout(mined):
    """Case 19: a re-merge that forms no group leaves the last groups; holding out everything is named as the cause."""
    import datasets

    from xprt_st.mining import NoGroupsError

    before = json.loads((mined / "stats.json").read_text())
    groups = len(datasets.load_from_disk(str(mined)))
    assert groups == before["groups"] > 0
    assert all(is_held_out(f"doc-{i}-copy-0", 0.999, 0) for i in range(30))  # every document, by hand
    with pytest.raises(NoGroupsError) as error:
        merge(mined, _config(holdout=0.999))
    message = " ".join(str(error.value).split())
    assert "--holdout 0.999 held out all 30 documents" in message and "threshold" not in message
    assert f"previous {groups} training groups" in message
    assert len(datasets.load_from_disk(str(mined))) == groups
    assert json.loads((mined / "stats.json").read_text()) == before

    with pytest.raises(NoGroupsError, match="centrality threshold"):
        merge(mined, _config(threshold_quantile=None, threshold=1.0))  # no passage reaches it
    assert len(datasets.load_from_disk(str(mined))) == groups


def test_train_refuses_a_cut_short_passages_file_before_the_start_loads(tmp_path, mined, tiny_model_path, monkeypatch):
    """The run's record reads the document ids from passages.parquet: before, train read it after the starting model
    had loaded, and a cut-short file ended in pyarrow's traceback."""
    import xprt_st.training.recipe_setup

    def loaded(*args, **kwargs):
        raise AssertionError("the starting model loaded before the passages file was read")

    monkeypatch.setattr(xprt_st.training.recipe_setup, "load_model", loaded)
    parts = sorted((mined / "passages.parquet").rglob("*.parquet")) or [mined / "passages.parquet"]
    data = parts[0].read_bytes()
    parts[0].write_bytes(data[: len(data) // 2])
    arguments = ["train", "--recipe", "change-only-positive", "--max-steps", "1", "--batch-size", "2"]
    arguments += ["--mined", str(mined), "--model", str(tiny_model_path), "--output", str(tmp_path / "run")]
    result = CliRunner().invoke(app, arguments)
    text = "".join(result.output.split())  # a long path wraps anywhere on the console
    assert result.exit_code == 2 and "Traceback" not in text, result.output
    assert "passages.parquetcannotberead" in text and f"mine{mined}again".replace(" ", "") in text, result.output
    assert not (tmp_path / "run" / "modules.json").exists()
