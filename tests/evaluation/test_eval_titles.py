"""``titles:DIR``: held-out titles and headings as queries, scored by hand, against pytrec_eval and through mteb."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset

from tests.heldout_helpers import write_heldout
from xprt_st.evaluation.catalog import resolve_task
from xprt_st.evaluation.embedding_stats import alignment, neighbour_pairs, uniformity
from xprt_st.evaluation.label_free import HeldOutError
from xprt_st.evaluation.titles import (
    FEW_QUERIES,
    NoTitlesError,
    comparison_record,
    load_titles_task,
    ndcg_at_k,
    score_embeddings,
    score_model,
    titles_task,
)

PASSAGES = {0: ["a0", "a1", "a2"], 1: ["b0", "b1", "b2"]}
GROUPS = [(0, 0, [1, 2]), (1, 1, [0, 2])]
TITLES = [(0, "title", 0, "Doc A", [0, 1, 2]), (1, "title", 0, "Doc B", [0, 1, 2]), (1, "heading", 2, "B end", [2])]
ANGLES = {"0-0": 0, "0-1": 10, "0-2": 50, "1-0": 30, "1-1": 90, "1-2": 100}
QUERY_ANGLES = [18, 93, 62]


def write_titles(folder: Path, rows=TITLES) -> Path:
    """A held-out part with ``heldout/titles`` rows ``(label, kind, level, text, passages)``, as mining writes."""
    write_heldout(folder, PASSAGES, GROUPS)
    columns = dict(zip(["label", "kind", "level", "text", "passages"], map(list, zip(*rows, strict=True)), strict=True))
    Dataset.from_dict(columns).save_to_disk(str(folder / "heldout" / "titles"))
    return folder


def _unit(degrees) -> np.ndarray:
    radians = np.deg2rad(np.asarray(degrees, dtype=float))
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_the_task_and_its_score_by_hand(tmp_path):
    task = load_titles_task(write_titles(tmp_path))
    assert task.query_ids == ["t0-0", "t1-0", "t1-1"] and task.kinds == ["title", "title", "heading"]
    assert task.qrels() == {
        "t0-0": {"0-0": 1, "0-1": 1, "0-2": 1},
        "t1-0": {"1-0": 1, "1-1": 1, "1-2": 1},
        "t1-1": {"1-2": 1},
    }
    per_query = score_embeddings(task, _unit(QUERY_ANGLES), _unit([ANGLES[i] for i in task.ids]))
    d = [1 / math.log2(r + 1) for r in range(1, 7)]
    # t0-0 at 18 deg: 0-1 (10) 1-0 (30) 0-0 (0) 0-2 (50) 1-1 (90) 1-2 (100); relevant at ranks 1, 3, 4
    assert per_query["t0-0"] == pytest.approx((d[0] + d[2] + d[3]) / sum(d[:3]), abs=1e-12)
    # t1-0 at 93 deg: 1-1 (90), 1-2 (100), 0-2 (50), 1-0 (30): relevant at 1, 2, 4
    assert per_query["t1-0"] == pytest.approx((d[0] + d[1] + d[3]) / sum(d[:3]), abs=1e-12)
    # t1-1 at 62 deg: 0-2 (50), 1-1 (90), 1-0 (30), 1-2 (100): its one passage at rank 4
    assert per_query["t1-1"] == pytest.approx(d[3], abs=1e-12)
    assert per_query["t0-0"] == pytest.approx(0.906025, abs=1e-6)


def test_a_title_shared_by_documents_is_one_query_answered_by_each_of_them(tmp_path):
    # ArguAna titles every argument of a debate with the debate's topic: both documents answer "Doc A"
    rows = [(0, "title", 0, "Doc A", [0, 1, 2]), (1, "title", 0, "doc  a", [0, 1, 2]), (1, "heading", 2, "B end", [2])]
    task = load_titles_task(write_titles(tmp_path, rows))
    assert task.query_ids == ["t0-0", "t1-0"] and task.queries == ["Doc A", "B end"]
    assert task.qrels()["t0-0"] == {f"{label}-{p}": 1 for label in (0, 1) for p in range(3)}
    per_query = score_embeddings(task, _unit([18, 62]), _unit([ANGLES[i] for i in task.ids]))
    d = [1 / math.log2(r + 1) for r in range(1, 7)]
    # every passage of both documents answers "Doc A": its top 6 are all relevant (alone, doc 0 read 0.906 above)
    assert per_query["t0-0"] == pytest.approx(1.0, abs=1e-12)
    assert per_query["t1-0"] == pytest.approx(d[3], abs=1e-12)


def test_ndcg_agrees_with_trec_eval_on_random_binary_data():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(1)
    n, q = 50, 15
    scores = rng.normal(size=(q, n))
    relevance = [frozenset(int(c) for c in rng.choice(n, size=rng.integers(1, 12), replace=False)) for _ in range(q)]
    ours = ndcg_at_k(scores, relevance)
    qrels = {str(r): {str(c): 1 for c in rel} for r, rel in enumerate(relevance)}
    run = {str(r): {str(c): float(scores[r, c]) for c in range(n)} for r in range(q)}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert ours == pytest.approx([theirs[str(r)]["ndcg_cut_10"] for r in range(q)], abs=1e-9)


def test_the_mteb_task_gives_the_scores_of_the_pure_functions(tmp_path, tiny_model):
    texts = {
        label: [f"document {label} passage {i} about topic {label * 3 + i}" for i in range(4)] for label in range(3)
    }
    groups = [(0, 0, [1, 2, 3]), (1, 1, [0, 3, 2]), (2, 3, [2, 1, 0])]
    folder = write_heldout(tmp_path / "mined", texts, groups)
    rows = [(label, "title", 0, f"topic {label} overview", [0, 1, 2, 3]) for label in range(3)]
    rows += [(0, "heading", 2, "the second half of zero", [2, 3]), (2, "heading", 3, "passage one", [1])]
    columns = dict(zip(["label", "kind", "level", "text", "passages"], map(list, zip(*rows, strict=True)), strict=True))
    Dataset.from_dict(columns).save_to_disk(str(folder / "heldout" / "titles"))
    ours = score_model(tiny_model, load_titles_task(folder))

    from xprt_st.evaluation.run import evaluate_models

    report = evaluate_models([tiny_model, tiny_model], [resolve_task(f"titles:{folder}")], labels=["a", "b"])
    task = report.tasks[0]
    assert task == "titles:mined"
    assert report.per_query[task]["a"] == pytest.approx(ours.per_query, abs=1e-5)
    assert report.score("a", task) == pytest.approx(ours.score, abs=1e-5)
    record = comparison_record(report.per_query[task]["b"], report.per_query[task]["a"])
    assert record["difference"] == pytest.approx(0.0, abs=1e-9) and record["queries"] == 5


def test_label_free_tasks_are_left_out_of_the_mean(tmp_path, tiny_model):
    from xprt_st.evaluation.run import evaluate_models

    folder = write_titles(tmp_path / "mined")
    report = evaluate_models([tiny_model], [titles_task(folder), resolve_task("python-faq", max_queries=5)])
    row = report.wide_rows()[0]
    assert row["mean"] == pytest.approx(row["python-faq"]) and row["mean"] != pytest.approx(row["titles:mined"])


def test_missing_titles_and_broken_rows_are_named(tmp_path):
    with pytest.raises(HeldOutError, match="does not exist"):
        load_titles_task(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(HeldOutError, match=r"no held-out part.*--title-field"):
        load_titles_task(tmp_path / "plain")
    write_heldout(tmp_path / "untitled", PASSAGES, GROUPS)
    with pytest.raises(NoTitlesError, match=r"no title or heading.*--title-field"):
        resolve_task(f"titles:{tmp_path / 'untitled'}")
    write_titles(tmp_path / "bad", [(0, "title", 0, "A", [0, 7]), (1, "title", 0, "B", [0])])
    with pytest.raises(HeldOutError, match="row 0: document 0 has no passage 7"):
        load_titles_task(tmp_path / "bad")
    write_titles(tmp_path / "one", [(0, "title", 0, "A", [0])])
    with pytest.raises(NoTitlesError, match=r"holds 1 title.*at least 2"):
        load_titles_task(tmp_path / "one")


def test_evaluate_cli_prints_the_titles_interval(tmp_path, tiny_model_path):
    from typer.testing import CliRunner

    from xprt_st.cli import app

    folder = write_titles(tmp_path / "mined")
    out = tmp_path / "eval"
    args = ["evaluate", str(tiny_model_path), str(tiny_model_path), "--tasks", f"titles:{folder}"]
    result = CliRunner().invoke(app, [*args, "--output-dir", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "titles:mined:" in flat and "difference +0.0000 [+0.0000, +0.0000]" in flat
    record = json.loads((out / "label_free.json").read_text())[0]
    assert record["task"] == "titles:mined" and record["queries"] == 3


def test_alignment_and_uniformity_by_hand():
    assert neighbour_pairs(["0-0", "0-1", "0-3", "1-0", "1-1"]) == [(0, 1), (3, 4)]
    x = _unit([0, 90, 180])
    assert alignment(x, [(0, 1), (0, 2)]) == pytest.approx((2.0 + 4.0) / 2)
    # pairs: (0, 90) d^2 = 2, (0, 180) 4, (90, 180) 2 -> log mean exp(-2 d^2)
    assert uniformity(x) == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))


def _pages(folder: Path, suffix: str, documents: int, heading: str) -> Path:
    """``documents`` pages whose first line is ``heading`` (with ``{i}``), then three paragraphs."""
    folder.mkdir()
    topics = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano"]
    for i in range(documents):
        topic = topics[i % len(topics)]
        body = "\n\n".join(
            f"Paragraph {j} of page {i} tells {topic} facts, {topic} history and detail {i * 10 + j}." for j in range(3)
        )
        (folder / f"page-{i}{suffix}").write_text(heading.format(i=i, topic=topic) + "\n\n" + body, encoding="utf-8")
    return folder


def _seed_for(corpus: Path, fraction: float) -> int:
    """A seed whose draw holds out 2 to n - 3 of the ``n`` pages of ``corpus``, whose ids are the files' paths
    (:func:`tests.heldout_helpers.seed_leaving_both`): seed 0 held out all 12 pages (no groups left) in pytest-235's
    folder, and 10 or more (no "only N queries" caveat) in about 2% of folders."""
    from tests.heldout_helpers import seed_leaving_both
    from xprt_st.mining.reader import iter_corpus

    return seed_leaving_both([[record.doc_id for record in iter_corpus([corpus])]], fraction, held=2, kept=3)


def _mine(corpus: Path, out: Path, model, **settings) -> Path:
    from xprt_st.mining import GroupBuilder, MiningConfig

    if "id_field" not in settings:  # ids are the files' paths: a seed that leaves both parts documents
        settings["seed"] = _seed_for(corpus, 0.5)
    config = MiningConfig(max_tokens=32, min_tokens=4, batch_size=16, threshold_quantile=0.5, holdout=0.5, **settings)
    GroupBuilder([corpus], out, config, model=model, progress=False).run()
    return out


def test_titles_that_are_plain_text_first_lines_get_a_caveat_on_screen_and_in_the_record(tmp_path, tiny_model):
    """A folder of .txt pages mined without --title-field: its "titles" are first lines. Before, evaluate scored
    them as titles people wrote, without a word; now the screen and label_free.json say what they are."""
    from typer.testing import CliRunner

    from xprt_st.cli import app

    mined = _mine(_pages(tmp_path / "txt", ".txt", 12, "Note {i} on the {topic}"), tmp_path / "m", tiny_model)
    task = load_titles_task(mined)
    assert set(task.kinds) == {"title"} and task.first_lines == len(task.queries) >= 2
    assert task.caveat is not None and "first lines of plain-text documents" in task.caveat
    assert f"has only {len(task.queries)} queries" in task.caveat  # fewer than FEW_QUERIES as well

    model = tmp_path / "tiny"
    tiny_model.save(str(model))
    out = tmp_path / "eval"
    args = ["evaluate", str(model), str(model), "--tasks", f"titles:{mined}", "--no-cache", "--output-dir", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"caveat: {task.caveat}" in flat
    record = json.loads((out / "label_free.json").read_text())[0]
    assert record["task"] == "titles:m" and record["caveat"] == task.caveat

    from xprt_st.cli.quickstart import titles_line
    from xprt_st.quickstart import titles_summary

    summary = titles_summary(mined, str(model), model)  # the quickstart's titles line on the same folder
    assert summary["caveat"] == task.caveat and summary["first_lines"] == len(task.queries)
    line = titles_line(summary)
    assert line.endswith(f"Caveat: {task.caveat}") and "written by people" not in line


def test_markdown_titles_and_title_fields_are_not_called_first_lines(tmp_path, tiny_model):
    markdown = _mine(_pages(tmp_path / "md", ".md", 12, "# Note {i} on the {topic}"), tmp_path / "m", tiny_model)
    task = load_titles_task(markdown)
    assert task.first_lines == 0 and "first lines" not in (task.caveat or "")

    pages = sorted(_pages(tmp_path / "titled", ".txt", 40, "Note {i} on the {topic}").iterdir())
    rows = [{"id": p.stem, "title": p.read_text().split("\n")[0], "text": p.read_text()} for p in pages]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    fielded = load_titles_task(_mine(corpus, tmp_path / "f", tiny_model, id_field="id", title_field="title"))
    assert len(fielded.queries) >= FEW_QUERIES and fielded.first_lines == 0 and fielded.caveat is None


def test_task_names_and_paths_print_as_typed_not_as_rich_markup_or_emoji(tmp_path, tiny_model_path):
    import re

    from typer.testing import CliRunner

    from xprt_st.cli import app

    # the task of a folder named m is titles:m, and "titles:m: ..." held rich's emoji code :m: (printed "titlesⓂ")
    for folder, task in ((tmp_path / "hc" / "m", "titles:m"), (tmp_path / "[bold]v2", "titles:[bold]v2")):
        write_titles(folder)
        out = tmp_path / f"eval-{folder.name}"
        args = ["evaluate", str(tiny_model_path), str(tiny_model_path), "--tasks", f"titles:{folder}"]
        result = CliRunner(env={"COLUMNS": "250"}).invoke(app, [*args, "--output-dir", str(out), "--no-cache"])
        assert result.exit_code == 0, result.output
        assert "Ⓜ" not in result.output
        assert re.search(rf"┃\s+{re.escape(task)} ┃", result.output), result.output  # the table's column
        assert re.search(rf"│ {re.escape(task)}\s+│", result.output), result.output  # the differences table's row
        assert re.search(rf"^{re.escape(task)}: ", result.output, re.MULTILINE), result.output  # the interval line
        assert f"wrote {out}" in result.output
        assert json.loads((out / "label_free.json").read_text())[0]["task"] == task
