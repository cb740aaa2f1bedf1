"""`xprt-st quickstart --corpus FILE --task BEIR_DIR`: the whole loop on a user's documents, from a folder outside
the repository, and every bad input named in one line before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.heldout_helpers import seed_leaving_both
from xprt_st.cli import app
from xprt_st.mining.reader import iter_corpus

TOPICS = {
    "kettle": ["Fill the kettle with fresh water.", "Switch the kettle on at the wall.", "Wait for the click."],
    "printer": ["Open the printer tray.", "Load plain paper face down.", "Close the tray until it locks."],
    "router": ["Unplug the router for ten seconds.", "Plug it back in and wait.", "The lights turn green."],
    "backup": ["Choose the folders to back up.", "Pick an external drive.", "Start the backup and wait."],
    "password": ["Open the account settings.", "Choose change password.", "Type the new password twice."],
    "vpn": ["Install the VPN client.", "Sign in with your company account.", "Connect to the nearest server."],
}


def _documents() -> list[dict[str, str]]:
    """24 help-desk pages in the user's own field names: doc_id, heading, body (paragraphs)."""
    documents = []
    for number in range(4):
        for topic, steps in TOPICS.items():
            lines = [f"{step} This is step {index} for the {topic}, version {number}." for index, step in
                     enumerate(steps * 2, start=1)]  # fmt: skip
            body = "\n\n".join(lines)
            documents.append({"doc_id": f"{topic}-{number}", "heading": f"{topic} {number}", "body": body})
    return documents


def _write_user_data(folder: Path) -> tuple[Path, Path]:
    """The user's corpus (JSONL) and labelled BEIR folder: one question per topic, its pages relevant."""
    folder.mkdir(parents=True, exist_ok=True)
    documents = _documents()
    corpus = folder / "helpdesk.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in documents), encoding="utf-8")
    beir = folder / "helpdesk-beir"
    (beir / "qrels").mkdir(parents=True)
    rows = [{"_id": d["doc_id"], "title": d["heading"], "text": d["body"]} for d in documents]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    queries = {f"q-{topic}": f"How do I sort out the {topic}?" for topic in TOPICS}
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": qid, "text": text}) + "\n" for qid, text in queries.items()), encoding="utf-8"
    )
    qrels = [f"q-{topic}\t{topic}-{number}\t1" for topic in TOPICS for number in range(4)]
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n")
    return corpus, beir


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_quickstart_runs_the_whole_loop_on_a_user_corpus_and_beir_folder(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, beir = _write_user_data(tmp_path / "user")
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id"]
    args += ["--task", str(beir), "-o", "out", "--model", str(tiny_model_path), "--max-steps", "2"]
    args += ["--batch-size", "4", "--holdout", "0.3", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"

    summary = json.loads((elsewhere / "out" / "summary.json").read_text())
    assert summary["config"]["corpus"] == [str(corpus)] and summary["config"]["task"] == str(beir)
    assert summary["config"]["tasks"] == [str(beir)]  # what was scored, not the shipped run's python-faq
    heldout = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert summary["mining"]["documents"] + heldout.get("heldout_documents", 0) <= 24
    assert summary["mining"]["groups"] > 0
    # the closing table on the user's task, every query scored, with the paired interval
    assert list(summary["scores"]) == ["starting model", "after hybrid-teacher-hard"]
    assert all(set(scores) == {"helpdesk-beir"} for scores in summary["scores"].values())
    before, after = (summary["scores"][name]["helpdesk-beir"] for name in summary["scores"])
    assert summary["gain"]["helpdesk-beir"] == pytest.approx(after - before, abs=1e-12)
    assert summary["interval"]["helpdesk-beir"]["ci_low"] != ""
    per_query = json.loads((elsewhere / "out" / "evaluation" / "scores.json").read_text())
    assert "helpdesk-beir" in json.dumps(per_query)
    flat = _flat(result.output)
    assert "Retrieval before and after pre-training (nDCG@10)" in flat and "gain, 95% CI" in flat
    # the label-free check on held-out pages, always
    record = summary["label_free"]
    assert record is not None and record["queries"] >= 2, record
    assert "Label-free nDCG@10" in flat or "No label-free check" in flat
    assert (elsewhere / "out" / "model" / "modules.json").is_file()


def test_a_folder_of_markdown_pages_is_a_corpus_with_its_titles_kept(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    _, beir = _write_user_data(tmp_path / "user")
    pages = tmp_path / "user" / "pages"
    for document in _documents():
        topic = document["doc_id"].split("-")[0]
        (pages / topic).mkdir(parents=True, exist_ok=True)
        text = f"# {document['heading'].title()}\n\n{document['body']}\n"
        (pages / topic / f"{document['doc_id']}.md").write_text(text, encoding="utf-8")
    (tmp_path / "user" / "pages" / "logo.png").write_bytes(b"\x89PNG")  # not a page: not read
    # the pages' ids are their paths, which move with pytest's folder: a seed whose draw holds some out and keeps most
    seed = seed_leaving_both([[record.doc_id for record in iter_corpus([pages])]], 0.3, held=2, kept=12)
    args = ["quickstart", "--corpus", str(pages), "--task", str(beir), "-o", "out", "--model", str(tiny_model_path)]
    args += ["--max-steps", "1", "--batch-size", "4", "--holdout", "0.3", "--seed", str(seed), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert stats["documents"] == 24  # the 24 pages, and not the picture beside them
    # every held-out page has its "# Heading" as its title
    assert stats["holdout"]["documents"] > 0 and stats["holdout"]["titles"] == stats["holdout"]["documents"]
    summary = json.loads((elsewhere / "out" / "summary.json").read_text())
    assert summary["config"]["corpus"] == [str(pages)] and "helpdesk-beir" in summary["gain"]
    # the titles and headings are a second check without labels, start against trained, with its interval
    titles = summary["titles"]
    assert titles["queries"] == stats["holdout"]["titles"] + stats["holdout"]["headings"]
    assert titles["difference"] == pytest.approx(titles["model"] - titles["start"], abs=1e-12)
    assert titles["ci_low"] <= titles["difference"] <= titles["ci_high"]
    assert f"Titles and headings nDCG@10 on {titles['queries']} held-out" in _flat(result.output)


def test_without_a_task_the_label_free_check_is_the_comparison(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    args += ["--model", str(tiny_model_path), "--batch-size", "4", "--holdout", "0.3", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    summary = json.loads((elsewhere / "out" / "summary.json").read_text())
    assert summary["scores"] == {} and summary["gained"] is None and summary["label_free"]["queries"] >= 2
    assert summary["titles"] is None and "Titles and headings" not in result.output  # the corpus has no titles
    assert summary["config"]["tasks"] == []  # no labelled task was scored
    # without --max-steps a small corpus trains one pass over its groups, not the default 300 steps
    steps = summary["mining"]["groups"] // 4
    assert 1 <= steps < 300 and summary["config"]["max_steps"] == steps
    assert (elsewhere / "out" / "model" / f"checkpoint-{steps}").is_dir()
    assert "Retrieval before and after" not in result.output and "Label-free nDCG@10" in _flat(result.output)


def test_a_recipe_with_hard_negatives_gets_them_mined_by_the_quickstart(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    args += ["--recipe", "change-only-positive-hard", "--model", str(tiny_model_path), "--max-steps", "1"]
    args += ["--batch-size", "4", "--holdout", "0.3", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    assert stats["settings"]["hard_negatives"] == 2 and stats["hard_negatives"]["groups"] == stats["groups"]
    import datasets

    columns = datasets.load_from_disk(str(elsewhere / "out" / "mined")).column_names
    assert {"negative_1", "negative_2"} <= set(columns)
    assert (elsewhere / "out" / "model" / "modules.json").is_file()


class _Said:
    """A command's output, searched without the line breaks and spaces the terminal's wrapping puts anywhere."""

    def __init__(self, text: str) -> None:
        self.text = "".join(text.split())

    def __contains__(self, needle: str) -> bool:
        return "".join(needle.split()) in self.text


def _bad(tmp_path: Path, *extra: str) -> _Said:
    result = CliRunner().invoke(app, ["quickstart", "-o", str(tmp_path / "out"), *extra])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    assert result.output.count("error:") == 1, result.output
    return _Said(result.output)


def test_a_missing_corpus_file_is_named_before_any_work(no_work: None, tmp_path: Path) -> None:
    flat = _bad(tmp_path, "--corpus", str(tmp_path / "nope.jsonl"))
    assert "--corpus" in flat and "nope.jsonl" in flat


def test_an_empty_corpus_is_named_before_any_work(no_work: None, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    flat = _bad(tmp_path, "--corpus", str(tmp_path / "empty.jsonl"))
    assert "error: --corpus:" in flat and "no documents to read (every source is empty)" in flat


def test_a_corpus_that_mines_no_group_ends_in_one_line_and_keeps_the_mining_record(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    """Readable documents too short for a group (one passage each): the mining error in one line, exit 1, and
    the folder's stats.json that says why (what was computed is kept)."""
    corpus = tmp_path / "short.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Just one short passage, number {i}."}) + "\n" for i in range(5)))
    args = ["quickstart", "--corpus", str(corpus), "-o", "out", "--model", str(tiny_model_path), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, f"{result.output}\n{result.exception!r}"
    flat = _Said(result.output)
    assert "Traceback" not in result.output and result.output.count("no groups:") == 1, result.output
    assert "single_passage 5" in flat
    assert json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())["groups"] == 0


def test_fewer_groups_than_one_step_is_named_after_mining_and_the_mining_is_kept(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    args += ["--model", str(tiny_model_path), "--batch-size", "500", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, f"{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    stats = json.loads((elsewhere / "out" / "mined" / "stats.json").read_text())
    flat = _Said(result.output)
    assert f"{stats['groups']} groups were mined" in flat and f"--batch-size {stats['groups']}" in flat
    assert not stats["settings"].get("hard_negatives")  # refused before the hard negatives were searched
    assert not (elsewhere / "out" / "model").exists()


def test_a_wrong_text_or_id_field_is_named_before_any_work(no_work: None, tmp_path: Path) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    flat = _bad(tmp_path, "--corpus", str(corpus))  # the text is under 'body', not 'text'
    assert f"error: --corpus: {corpus}:1: no text field 'text'" in flat
    flat = _bad(tmp_path, "--corpus", str(corpus), "--text-field", "body", "--id-field", "uuid")
    assert "'uuid'" in flat


def test_a_beir_folder_without_qrels_or_with_ids_that_do_not_match_is_named(no_work: None, tmp_path: Path) -> None:
    corpus, beir = _write_user_data(tmp_path / "user")
    user = ["--corpus", str(corpus), "--text-field", "body"]
    (beir / "qrels" / "test.tsv").rename(beir / "qrels" / "dev.tsv")
    flat = _bad(tmp_path, *user, "--task", str(beir))
    assert f"--task {beir}" in flat and "has no qrels/test.tsv" in flat
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq-other\tdoc-other\t1\n")
    flat = _bad(tmp_path, *user, "--task", str(beir))
    assert f"--task {beir}" in flat and "judgement" in flat
    flat = _bad(tmp_path, *user, "--task", str(tmp_path / "no-such-beir"))
    assert "no-such-beir" in flat and "does not exist" in flat


def test_user_data_options_need_a_corpus(no_work: None, tmp_path: Path) -> None:
    flat = _bad(tmp_path, "--task", str(tmp_path), "--id-field", "doc_id")
    assert "--task, --id-field: only with --corpus" in flat


def test_a_wrong_title_field_is_named_before_any_work(no_work: None, tmp_path: Path) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    flat = _bad(tmp_path, "--corpus", str(corpus), "--text-field", "body", "--title-field", "title")
    assert f"error: --corpus: {corpus}:1: no title field 'title'" in flat and "--title-field" in flat


def test_a_bad_record_past_the_first_ends_in_one_line_naming_its_line(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    """The first record is checked before any work; one further down is found while mining reads it."""
    corpus, _ = _write_user_data(tmp_path / "user")
    lines = corpus.read_text().splitlines()
    lines[9] = json.dumps({"doc_id": "broken", "body": "half of a pair: \ud800 here"})  # a lone surrogate
    corpus.write_text("\n".join(lines) + "\n")
    args = ["quickstart", "--corpus", str(corpus), "--text-field", "body", "--id-field", "doc_id", "-o", "out"]
    result = CliRunner().invoke(app, [*args, "--model", str(tiny_model_path), "-q"])
    assert result.exit_code == 1, f"{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    flat = _Said(result.output)
    assert f"error: --corpus: {corpus}:10:" in flat and "lone surrogate" in flat
    assert not (elsewhere / "out" / "model").exists()


def test_an_output_folder_mined_from_other_documents_is_named_and_kept(
    elsewhere: Path, tmp_path: Path, tiny_model_path: Path
) -> None:
    """A second corpus into the first's --output: refused in one line, before any work, naming the corpus that
    differs and the ways on (--overwrite or a new -o), and the first mining is left as it was."""
    first, _ = _write_user_data(tmp_path / "first")
    second, _ = _write_user_data(tmp_path / "second")
    user = ["--text-field", "body", "--id-field", "doc_id", "-o", "out", "--model", str(tiny_model_path), "-q"]
    # --batch-size 500 stops after mining (fewer groups than one step), which is all this test needs
    CliRunner().invoke(app, ["quickstart", "--corpus", str(first), *user, "--batch-size", "500"])
    stats = (elsewhere / "out" / "mined" / "stats.json").read_text()
    result = CliRunner().invoke(app, ["quickstart", "--corpus", str(second), *user])
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    flat = _Said(result.output)
    assert f"error: --output out: out/mined was made with other settings (--corpus {first.resolve()}" in flat
    assert f"-> {second.resolve()}" in flat
    assert "Pass --overwrite to delete that run and start again, or give a new -o folder." in flat
    assert (elsewhere / "out" / "mined" / "stats.json").read_text() == stats


def test_a_user_corpus_trains_the_sweeps_best_step_count_and_the_demo_stays_short() -> None:
    from xprt_st.quickstart import DEFAULTS, QuickstartConfig, corpus_steps

    assert (DEFAULTS.recipe, DEFAULTS.max_steps, DEFAULTS.corpus_max_steps) == ("hybrid-teacher-hard", 20, 300)
    assert QuickstartConfig().max_steps == 20
    assert QuickstartConfig(corpus=("my.jsonl",)).max_steps is None  # set from the mined groups
    assert QuickstartConfig(corpus=("my.jsonl",), max_steps=7).max_steps == 7
    # 300 steps, but never a second pass: ArguAna's 17,246 groups take 300, 600 NFCorpus documents' 1,324 take 82
    assert [corpus_steps(groups, 16) for groups in (17_246, 4_800, 4_799, 1_324, 16, 3)] == [300, 300, 299, 82, 1, 1]


def test_the_closing_note_names_a_loss_as_a_loss() -> None:
    from xprt_st.quickstart import LOSS_NOTE, NO_GAIN_NOTE, closing_note

    def summary(*verdicts: str) -> dict:
        return {"gained": all(v == "gain" for v in verdicts), "interval": {f"t{i}": {"verdict": v} for i, v in
                enumerate(verdicts)}}  # fmt: skip

    assert closing_note(summary("gain", "gain")) is None
    assert closing_note(summary("gain", "no clear difference")) == NO_GAIN_NOTE
    assert closing_note(summary("gain", "loss", "loss")) == LOSS_NOTE.format(tasks="t1, t2")
    assert "below 0 on t1, t2. Keep the starting model" in closing_note(summary("gain", "loss", "loss"))


def test_a_hybrid_is_served_only_where_it_is_clearly_ahead_of_every_single_model() -> None:
    """``serve_hybrid`` names the better hybrid where its paired interval lies above 0 against the start, the trained
    model and BM25 alike; a hybrid ahead of two of the three is not enough."""
    from xprt_st.evaluation.run import EvaluationReport, TaskScore
    from xprt_st.quickstart import hybrid_note
    from xprt_st.quickstart.summary import hybrid_summary

    models = ["start", "trained", "bm25", "hybrid:start", "hybrid:trained"]

    def report(per_model: dict[str, list[float]]) -> EvaluationReport:
        made = EvaluationReport(models=models, tasks=["t"])
        for model, values in per_model.items():
            made.per_query.setdefault("t", {})[model] = {f"q{i}": v for i, v in enumerate(values)}
            made.scores.append(TaskScore(model, "t", "ndcg_at_10", sum(values) / len(values), model, "t"))
        return made

    low, high = [0.2] * 40, [0.9] * 40
    ahead = hybrid_summary(report({"start": low, "trained": low, "bm25": low, "hybrid:start": high,
                                   "hybrid:trained": high}), "start", "trained")  # fmt: skip
    assert ahead["serve_hybrid"] == {"t": "hybrid:start"}  # the first of two equal hybrids
    assert ahead["trained_minus_start"]["t"]["difference"] == 0.0
    assert "the starting model's hybrid serves as well" in hybrid_note({"hybrid": ahead})
    bm25_level = hybrid_summary(report({"start": low, "trained": low, "bm25": high, "hybrid:start": high,
                                        "hybrid:trained": [0.8] * 40}), "start", "trained")  # fmt: skip
    assert bm25_level["serve_hybrid"] == {"t": None} and hybrid_note({"hybrid": bm25_level}) is None
    assert bm25_level["trained_minus_start"]["t"]["verdict"] == "loss"
    trained_better = hybrid_summary(report({"start": low, "trained": low, "bm25": low, "hybrid:start": [0.6] * 40,
                                            "hybrid:trained": high}), "start", "trained")  # fmt: skip
    assert trained_better["serve_hybrid"] == {"t": "hybrid:trained"}
    assert "serve the trained model's hybrid" in hybrid_note({"hybrid": trained_better})
    assert hybrid_summary(EvaluationReport(models=models[:3], tasks=["t"]), "start", "trained") == {}
