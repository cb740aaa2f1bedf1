"""The quickstart's inputs and notes: a `--model` that does not load, more steps than one pass over the mined groups,
and a `--task` whose documents are not the `--corpus` trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.model_folders import custom_code_model, unreadable_weights_model
from tests.test_quickstart_corpus import _write_user_data
from xprt_st.cli import app

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _user_run(corpus: Path, model: Path, *extra: str) -> list[str]:
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    return [*args, "--model", str(model), "--batch-size", "4", "--holdout", "0.3", "-q", *extra]


def test_a_model_that_needs_its_own_code_is_refused_before_any_work(
    no_work: None, elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    model = custom_code_model(tiny_model_path, tmp_path / "custom")
    result = runner.invoke(app, _user_run(corpus, model))
    message = _flat(result.output)
    assert result.exit_code == 2 and message.startswith("error: --model: "), message
    assert "no trust_remote_code" in message and message.count("error") == 1
    assert not (elsewhere / "out").exists()


def test_a_model_that_fails_to_load_is_one_line_and_the_corrected_command_runs_in_the_same_folder(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    broken = unreadable_weights_model(tiny_model_path, tmp_path / "broken")
    result = runner.invoke(app, _user_run(corpus, broken, "--max-steps", "1"))
    message = _flat(result.output)
    assert result.exit_code == 2, message
    assert "error: --model: could not load model" in message and str(broken) in message, message
    assert message.count("error") == 1 and "Traceback" not in message
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (elsewhere / "out" / "mined").exists()  # the model is loaded before the mining records its run
    result = runner.invoke(app, _user_run(corpus, tiny_model_path, "--max-steps", "1"))
    assert result.exit_code == 0, _flat(result.output)
    assert (elsewhere / "out" / "model" / "modules.json").is_file()


def test_the_passes_over_the_mined_groups_and_the_note_past_one_pass() -> None:
    from xprt_st.quickstart.notes import passes_note, training_passes

    assert training_passes(60, 16, 290) == pytest.approx(3.310, abs=1e-3)
    assert passes_note(20, 16, 320) is None and passes_note(5, 16, 320) is None  # one pass, a quarter of one
    note = passes_note(60, 16, 290)
    assert note is not None and note.startswith("--max-steps 60 at --batch-size 16 trains 3.3 passes over the 290")
    assert note.endswith("--max-steps 18 is one pass")


def test_the_share_of_a_tasks_documents_found_in_the_corpus_by_id_or_text(tmp_path: Path) -> None:
    from xprt_st.quickstart.notes import corpus_overlap, task_corpus_note, task_corpus_overlap, text_key

    overlap = corpus_overlap([("a", "one two"), ("b", "three\n four"), ("c", "five")], {"a"}, {text_key("three four")})
    assert overlap == {"documents": 3, "found": 2, "share": 0.6667}
    assert task_corpus_note("beir", overlap) is None
    note = task_corpus_note("my-beir", {"documents": 24, "found": 0, "share": 0.0})
    assert note is not None and note.startswith("--task my-beir: 0 of its 24 corpus documents (0%) are --corpus")
    assert "another corpus than the one trained on" in note

    corpus, beir = _write_user_data(tmp_path / "user")
    by_id = {"text_field": "body", "id_field": "doc_id", "html": False}
    assert task_corpus_overlap(beir, [corpus], by_id) == {"documents": 24, "found": 24, "share": 1.0}
    by_text = {"text_field": "body", "id_field": None, "html": False}  # ids are file:line then; the texts match
    assert task_corpus_overlap(beir, [corpus], by_text)["found"] == 24
    other = _other_task(tmp_path / "other-beir")
    assert task_corpus_overlap(other, [corpus], by_id) == {"documents": 3, "found": 0, "share": 0.0}


def _other_task(folder: Path) -> Path:
    """A labelled BEIR folder of three documents that are not the help-desk corpus's."""
    (folder / "qrels").mkdir(parents=True)
    texts = {"o1": "Tides follow the moon.", "o2": "Bees make honey in hives.", "o3": "Glaciers carve valleys."}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()))
    queries = {"q1": "What moves the tides?", "q2": "Where is honey made?"}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\to1\t1\nq2\to2\t1\n")
    return folder


def test_a_run_past_one_pass_on_another_corpus_than_its_task_says_both(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    task = _other_task(tmp_path / "other-beir")
    result = CliRunner(env={"COLUMNS": "250"}).invoke(
        app, _user_run(corpus, tiny_model_path, "--task", str(task), "--max-steps", "40")
    )
    assert result.exit_code == 0, _flat(result.output)
    summary = json.loads((elsewhere / "out" / "summary.json").read_text())
    groups = summary["mining"]["groups"]
    assert summary["training_passes"] == pytest.approx(40 * 4 / groups, abs=1e-3) and 40 * 4 > groups
    assert summary["notes"]["passes"].startswith(f"--max-steps 40 at --batch-size 4 trains {40 * 4 / groups:.1f}")
    assert summary["task_corpus_overlap"] == {"documents": 3, "found": 0, "share": 0.0}
    assert summary["notes"]["task_corpus"].startswith(f"--task {task}: 0 of its 3 corpus documents")
    flat = _flat(result.output)
    assert summary["notes"]["passes"] in flat and f"note: {summary['notes']['task_corpus']}" in flat


def test_a_recipe_of_lexical_positives_mines_its_own_ranking_and_trains(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    from xprt_st.quickstart import QuickstartConfig

    # the default recipe asks no ranking of its own: its mining fingerprint is what it was
    assert "rank_by" not in QuickstartConfig(output=tmp_path / "o").mining_fields()
    corpus, _ = _write_user_data(tmp_path / "user")
    result = runner.invoke(
        app, _user_run(corpus, tiny_model_path, "--recipe", "lexical-positive-hard", "--max-steps", "1")
    )
    assert result.exit_code == 0, _flat(result.output)
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert stats["settings"]["rank_by"] == "bm25" and stats["settings"]["hard_negatives"] == 2
    assert 0.0 <= stats["positives_not_nearest"] <= 1.0
    summary = json.loads((elsewhere / "out" / "summary.json").read_text())
    assert summary["mining"]["positives_not_nearest"] == stats["positives_not_nearest"]
    assert (elsewhere / "out" / "model" / "modules.json").is_file()


def test_query_shaped_anchors_train_from_the_quickstart_on_their_own_merge(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    result = runner.invoke(
        app, _user_run(corpus, tiny_model_path, "--recipe", "inverse-cloze-hard", "--max-steps", "1")
    )
    assert result.exit_code == 0, _flat(result.output)
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert stats["settings"]["pairs"] == "inverse-cloze" and stats["settings"]["hard_negatives"] == 2
    assert stats["groups"] > 0 and 0.0 <= stats["inverse_cloze"]["positives_own_passage"] <= 1.0
    assert (elsewhere / "out" / "model" / "modules.json").is_file()


def test_the_hybrid_teacher_trains_from_the_quickstart_on_the_default_mining(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    result = runner.invoke(
        app, _user_run(corpus, tiny_model_path, "--recipe", "hybrid-teacher-hard", "--max-steps", "1")
    )
    assert result.exit_code == 0, _flat(result.output)
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert stats["settings"]["rank_by"] == "fused" and stats["settings"]["hard_negatives"] == 2
    config = json.loads((elsewhere / "out" / "model" / "training_state" / "config.json").read_text())
    assert config["recipe"]["objective"]["name"] == "hybrid-teacher"
    assert (elsewhere / "out" / "model" / "modules.json").is_file()
