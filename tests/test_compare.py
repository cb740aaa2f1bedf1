"""``xprt-st compare`` end to end on tiny data: mine, train two recipes, evaluate, tabulate, resume."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.compare import (
    CompareConfigError,
    CompareResult,
    data_variant,
    gain_table,
    load_compare_config,
    markdown_report,
    write_report,
)
from xprt_st.compare.run import _claim, data_folders, train_one

runner = CliRunner()

TOPICS = {
    "baseball": "pitcher batter inning perfect game umpire catcher base strike",
    "carbon": "capture storage emissions pipeline wells policy energy plant gas",
    "bread": "sourdough yeast starter flour water fermentation crust oven loaf",
    "trucks": "pickup frame engine towing cab fleet diesel axle generation",
}


def _write_corpus(folder: Path) -> Path:
    """Twelve documents of six paragraphs each, in the miner's JSONL layout."""
    lines = []
    for doc in range(12):
        topic, words = list(TOPICS.items())[doc % len(TOPICS)]
        vocab = words.split()
        paragraphs = [
            " ".join(f"{vocab[(doc + p + i) % len(vocab)]}" for i in range(14)) + f" {topic} note {doc} {p}."
            for p in range(6)
        ]
        lines.append(json.dumps({"id": f"doc-{doc}", "text": "\n\n".join(paragraphs)}))
    path = folder / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _write_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d{i}", "title": "", "text": f"{t}: {w}"} for i, (t, w) in enumerate(TOPICS.items())]
    queries = [{"_id": f"q{i}", "text": f"what about {t} {w.split()[0]}"} for i, (t, w) in enumerate(TOPICS.items())]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in corpus) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in queries) + "\n", encoding="utf-8")
    qrels = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(len(TOPICS))]
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return folder


def _write_sts(path: Path) -> Path:
    pairs = [
        ("the pitcher threw a perfect game", "a perfect game was pitched", 4.8),
        ("bread rises with yeast", "yeast makes the dough rise", 4.2),
        ("carbon is stored underground", "the truck tows a trailer", 0.4),
        ("the catcher called the pitch", "the oven bakes the loaf", 0.2),
        ("a pickup with a diesel engine", "the truck has a diesel engine", 3.9),
        ("emissions are captured at the plant", "the plant captures its emissions", 4.6),
    ]
    path.write_text("\n".join(f"{a}\t{b}\t{s}" for a, b, s in pairs) + "\n", encoding="utf-8")
    return path


def _config(tmp_path: Path, model: Path) -> Path:
    raw = {
        "model": str(model),
        "corpus": [{"path": str(_write_corpus(tmp_path)), "id_field": "id", "max_documents": 10}],
        "mining": {"threshold_quantile": 0.3, "max_tokens": 24, "min_tokens": 4, "batch_size": 16},
        "recipes": ["change-only-positive", "random-span-contrastive"],
        "seeds": [1],
        "training": {"max_steps": 2, "batch_size": 2, "max_seq_length": 32, "save_steps": 2, "logging_steps": 1},
        "eval_max_seq_length": 32,
        "tasks": [str(_write_beir(tmp_path / "beir")), {"name": str(_write_sts(tmp_path / "sts.tsv"))}],
    }
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_compare_cli_end_to_end_and_resume(tmp_path: Path, tiny_model_path: Path) -> None:
    config = _config(tmp_path, tiny_model_path)
    run = tmp_path / "run"
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(run), "--quiet"])
    assert result.exit_code == 0, result.output

    for name in ("compare.md", "compare.csv", "compare.png", "corpus/corpus_stats.json", "mined/stats.json"):
        assert (run / name).is_file(), name
    for recipe in ("change-only-positive", "random-span-contrastive"):
        assert (run / "seed-1" / recipe / "COMPLETE").is_file()
        assert (run / "seed-1" / recipe / "modules.json").is_file()
    # the random-span data is a re-merge of the same stored passages, not a second mining run
    spans = json.loads((run / "data" / "pairs-random-span" / "stats.json").read_text())
    assert spans["settings"]["pairs"] == "random-span"
    assert spans["passages"] == json.loads((run / "mined" / "stats.json").read_text())["passages"]

    with (run / "compare.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["model"] for row in rows} == {"start", "change-only-positive", "random-span-contrastive"}
    assert len(rows) == 3 * (2 + 1)  # two tasks and the mean over tasks
    assert all(float(row["delta_vs_start"]) == 0.0 for row in rows if row["model"] == "start")
    # every difference to the start has its paired bootstrap interval: queries (BEIR) and pairs (STS) are kept
    (scores_dir,) = (run / "scores").iterdir()
    stored = json.loads((scores_dir / "seed-1" / "change-only-positive.json").read_text())["per_item"]
    assert {record["kind"] for record in stored.values()} == {"retrieval", "sts"}
    assert all(len(r["cosine"]) == len(r["gold"]) == 6 for r in stored.values() if r["kind"] == "sts")
    for row in rows:
        if row["model"] != "start":
            assert float(row["ci_low"]) <= float(row["delta_vs_start"]) + 1e-9 <= float(row["ci_high"]) + 2e-9
            assert row["verdict"] in {"gain", "loss", "no clear difference"}
    markdown = (run / "compare.md").read_text()
    assert "| change-only-positive |" in markdown and "gain vs start [95% CI]" in markdown
    assert "Verdict per task across seeds" in markdown and "paired bootstrap" in markdown
    assert "95% CI" in result.output and "verdict" in result.output
    # BM25 is scored once on the retrieval task alone, as a reference line outside the means
    reference = json.loads((scores_dir / "bm25.json").read_text())
    assert list(reference["scores"]) == ["beir"] and reference["per_item"]["beir"]["kind"] == "retrieval"
    assert f"| beir | {100 * reference['scores']['beir']:.2f} |" in markdown
    # and the start's hybrid once, each recipe's hybrid per seed, on the retrieval task alone: the hybrid lines
    hybrid = json.loads((scores_dir / "hybrid" / "start.json").read_text())
    assert list(hybrid["scores"]) == ["beir"] and hybrid["model"].startswith("hybrid:")
    recipe_hybrid = json.loads((scores_dir / "hybrid" / "seed-1" / "change-only-positive.json").read_text())
    assert recipe_hybrid["model"] == f"hybrid:{run / 'seed-1' / 'change-only-positive'}"
    assert "### Hybrid lines" in markdown
    assert f"| change-only-positive | beir | {100 * hybrid['scores']['beir']:.2f} |" in markdown

    # a second run finds everything complete: nothing is trained or evaluated again
    timings = (run / "timings.json").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (run / "seed-1").rglob("model.safetensors")}
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    assert (run / "timings.json").read_text() == timings
    assert {p: p.stat().st_mtime_ns for p in (run / "seed-1").rglob("model.safetensors")} == stamps

    # a run folder seeded by copying another's corpus/ and mined/ is refused in one line (mined/ records the
    # corpus file's path), before anything is trained; linking corpus/ instead is the way the line gives
    copied = tmp_path / "copied"
    copied.mkdir()
    for name in ("corpus", "mined"):
        shutil.copytree(run / name, copied / name)
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(copied), "--quiet"])
    assert result.exit_code == 1 and result.exception is not None and "Traceback" not in result.output
    flat = " ".join(result.output.split())
    assert "error:" in flat and "mined from other input" in flat and "link its corpus/" in flat, flat
    assert not (copied / "seed-1").exists()

    # a recipe folder without COMPLETE (a killed run) resumes from its last complete checkpoint;
    # the starting model's scores are kept
    folder = run / "seed-1" / "random-span-contrastive"
    (folder / "COMPLETE").unlink()
    # scores live under one folder per evaluation setting (tasks, subsampling, token limit)
    (scores,) = (run / "scores").iterdir()
    (scores / "seed-1" / "random-span-contrastive.json").unlink()
    kept = (scores / "start.json").stat().st_mtime_ns
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    assert (folder / "COMPLETE").is_file()
    assert (scores / "seed-1" / "random-span-contrastive.json").is_file()
    assert (scores / "start.json").stat().st_mtime_ns == kept


def test_config_errors_are_listed_together(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"corpus": [{"path": "x.zip", "maxdocs": 3}], "tasks": [], "recipes": ["no-such"], "foo": 1})
    )
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(path)
    message = str(error.value)
    assert "foo: unknown key" in message and "maxdocs" in message and "tasks:" in message


def test_config_fields_are_type_checked_by_the_shared_binder(tmp_path: Path) -> None:
    # One binder for recipes and comparison configs: a field of the wrong type is named with the value.
    path = tmp_path / "typed.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "corpus": [{"path": "x.zip", "html": "yes", "max_documents": "10"}],
                "tasks": [{"name": "stsb", "max_queries": 1.5}],
                "seeds": [1, "two"],
            }
        )
    )
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(path)
    message = str(error.value)
    assert "corpus[0].html: must be true or false, found 'yes'" in message
    assert "corpus[0].max_documents: must be an integer, found '10'" in message
    assert "tasks[0].max_queries: must be an integer, found 1.5" in message
    assert "seeds[1]: must be an integer, found 'two'" in message


def test_a_bad_shared_override_is_named_by_its_config_key_not_a_flag(tmp_path: Path) -> None:
    path = tmp_path / "lr.yaml"
    path.write_text(
        yaml.safe_dump(
            {"corpus": [{"path": "x.jsonl"}], "tasks": ["stsb"], "recipes": ["xprt"], "training": {"learning_rate": -1}}
        )
    )
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(path)
    assert "recipe xprt: training.learning_rate: must be positive, got -1.0" in str(error.value)
    assert "--learning-rate" not in str(error.value)


def test_an_unreadable_corpus_or_an_unknown_task_is_refused_before_the_run_folder_is_made(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """The corpus sources and the tasks are read before anything is written: one line each, exit 2."""
    corpus = _write_corpus(tmp_path)
    raw = {"model": str(tiny_model_path), "recipes": ["change-only-positive"], "data_dir": str(tmp_path / "data")}
    cases = [
        ({"corpus": [{"path": str(tmp_path / "gone.jsonl")}], "tasks": [str(_write_sts(tmp_path / "sts.tsv"))]},
         ["1 problem(s) in the corpus", "corpus[0]:", "gone.jsonl: no such file or folder"]),
        ({"corpus": [{"path": str(corpus), "text_field": "body"}, {"task": "no-such-beir"}],
          "tasks": [str(tmp_path / "sts.tsv")]},
         ["2 problem(s) in the corpus", "corpus[0]:", "no text field 'body'", "corpus[1]: corpus task 'no-such-beir'"]),
        ({"corpus": [{"path": str(corpus)}], "tasks": ["no-such-task"]},
         ["error: tasks: unknown task 'no-such-task'"]),
    ]  # fmt: skip
    for number, (keys, said) in enumerate(cases):
        path = tmp_path / f"bad-{number}.yaml"
        path.write_text(yaml.safe_dump(raw | keys), encoding="utf-8")
        output = tmp_path / f"run-{number}"
        result = runner.invoke(app, ["compare", "-c", str(path), "-o", str(output), "-q"])
        assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
        flat = " ".join(result.output.split())
        assert "Traceback" not in result.output and all(" ".join(part.split()) in flat for part in said), flat
        assert not output.exists()


def test_data_variants_follow_the_recipes_requirements() -> None:
    assert data_variant({"positive": "mined", "pairs": "mined"})[0] == "mined"
    assert data_variant({"positive": "random", "pairs": "mined"}) == (
        "positive-random",
        {"positive": "random", "pairs": "mined"},
    )
    assert data_variant({"pairs": "random-span"})[0] == "pairs-random-span"
    # query-shaped groups with hard negatives get a folder of their own, not the mined groups' hard-negatives-2
    assert data_variant({"pairs": "inverse-cloze", "hard_negatives": "2"}) == (
        "pairs-inverse-cloze-hard-negatives-2",
        {"positive": "mined", "pairs": "inverse-cloze", "hard_negatives": "2"},
    )
    assert data_variant({"pairs": "mined", "hard_negatives": "2"})[0] == "hard-negatives-2"


def test_gain_and_spread_by_hand(tmp_path: Path) -> None:
    result = CompareResult(
        tasks=["a", "b"],
        metrics={"a": "ndcg_at_10", "b": "cosine_spearman"},
        models=["start", "xprt"],
        seeds=[1, 2],
        scores={
            1: {"start": {"a": 0.50, "b": 0.80}, "xprt": {"a": 0.52, "b": 0.80}},
            2: {"start": {"a": 0.50, "b": 0.80}, "xprt": {"a": 0.50, "b": 0.81}},
        },
    )
    assert result.gain(1, "xprt") == pytest.approx(0.01)
    assert result.gain(2, "xprt") == pytest.approx(0.005)
    config = load_compare_config(_config_stub(tmp_path))
    table = markdown_report(result, config)
    # mean gain +0.75, spread 0.50 (×100); per task a +1.00, b +0.50; no per-item scores: no interval, no verdict
    assert "| xprt | +1.00 (no interval) | +0.50 (no interval) | +0.75 | 0.50 | n/a | a +1.00, b +0.50 |" in table


def _hand_result() -> CompareResult:
    """Two seeds of one model against the start on a retrieval task (4 queries) and an STS task (5 pairs)."""
    start_queries = {"q1": 0.5, "q2": 0.2, "q3": 0.9, "q4": 0.4}
    gold = [0.0, 1.0, 2.0, 3.0, 4.0]
    start_cosine = [0.1, 0.3, 0.2, 0.5, 0.4]  # Spearman 0.8 with gold
    seed_items = {
        # seed 1: +0.1 on every query (degenerate: the interval is exactly [+0.1, +0.1]); STS perfect
        1: ({q: v + 0.1 for q, v in start_queries.items()}, [0.1, 0.2, 0.3, 0.4, 0.5]),
        # seed 2: identical to the start on retrieval (interval [0, 0]); STS unchanged
        2: (dict(start_queries), list(start_cosine)),
    }
    scores, per_item = {}, {}
    start = {"a": sum(start_queries.values()) / 4, "b": 0.8}
    for seed, (queries, cosine) in seed_items.items():
        scores[seed] = {"start": start, "xprt": {"a": sum(queries.values()) / 4, "b": 1.0 if seed == 1 else 0.8}}
        per_item[seed] = {
            "start": {
                "a": {"kind": "retrieval", "ndcg_at_10": start_queries},
                "b": {"kind": "sts", "cosine": start_cosine, "gold": gold},
            },
            "xprt": {
                "a": {"kind": "retrieval", "ndcg_at_10": queries},
                "b": {"kind": "sts", "cosine": cosine, "gold": gold},
            },
        }
    return CompareResult(
        tasks=["a", "b"],
        metrics={"a": "ndcg_at_10", "b": "cosine_spearman"},
        models=["start", "xprt"],
        seeds=[1, 2],
        scores=scores,
        per_item=per_item,
    )


def test_report_gives_bm25_a_reference_line_on_retrieval_tasks_only(tmp_path: Path) -> None:
    result = _hand_result()
    start = result.per_item[1]["start"]["a"]["ndcg_at_10"]
    lexical = {query: value - 0.2 for query, value in start.items()}  # the start 0.2 above BM25 on every query
    result.reference = {
        "scores": {"a": sum(lexical.values()) / 4},
        "per_item": {"a": {"kind": "retrieval", "ndcg_at_10": lexical}},
    }
    interval = result.start_minus_reference("a")
    assert (interval.estimate, interval.low, interval.high) == pytest.approx((0.2, 0.2, 0.2))
    assert result.start_minus_reference("b") is None
    markdown = markdown_report(result, load_compare_config(_config_stub(tmp_path)))
    lines = markdown.splitlines()
    row = next(line for line in lines if line.startswith("| a | "))
    assert row.startswith(
        f"| a | {100 * result.reference['scores']['a']:.2f} | {100 * result.scores[1]['start']['a']:.2f} |"
    )
    assert row.endswith("+20.00 [+20.00, +20.00] gain |")
    assert not any(line.startswith("| b | ") for line in lines)  # STS has no BM25 line
    assert "bm25" not in result.models  # never in a mean or a gain


def test_report_compares_each_recipes_hybrid_with_the_starts_and_names_the_hybrid_to_serve(tmp_path: Path) -> None:
    result = _hand_result()
    start = result.per_item[1]["start"]["a"]["ndcg_at_10"]
    result.reference = {  # BM25 0.3 below the start on every query
        "scores": {"a": sum(start.values()) / 4 - 0.3},
        "per_item": {"a": {"kind": "retrieval", "ndcg_at_10": {q: v - 0.3 for q, v in start.items()}}},
    }

    def record(shift: float) -> dict:
        values = {query: value + shift for query, value in start.items()}
        return {
            "scores": {"a": sum(values.values()) / 4},
            "per_item": {"a": {"kind": "retrieval", "ndcg_at_10": values}},
        }

    # the start's hybrid +0.2 over the start; the recipe's +0.25 (seed 1) and +0.2 (seed 2): +5 and 0 over the start's
    result.hybrids = {seed: {"start": record(0.2), "xprt": record(shift)} for seed, shift in ((1, 0.25), (2, 0.2))}
    interval = result.hybrid_interval(1, "xprt", "a")
    assert (interval.estimate, interval.low, interval.high) == pytest.approx((0.05, 0.05, 0.05))
    assert result.hybrid_interval(1, "xprt", "b") is None
    markdown = markdown_report(result, load_compare_config(_config_stub(tmp_path)))
    row = next(line for line in markdown.splitlines() if line.startswith("| xprt | a | "))
    hybrid_start = 100 * result.hybrids[1]["start"]["scores"]["a"]
    assert row == (
        f"| xprt | a | {hybrid_start:.2f} | {hybrid_start + 2.5:.2f} | +5.00 [+5.00, +5.00] | +0.00 [+0.00, +0.00] "
        "| seeds disagree |"
    )
    # the recipe's hybrid (best on average) is ahead of BM25, the start and the recipe's model in both seeds
    assert "a: serve the hybrid of xprt (BM25 fused with it)" in markdown
    # as good as the recipe's own model on every query in seed 2: no longer ahead of every single model
    result.per_item[2]["xprt"]["a"] = result.hybrids[2]["xprt"]["per_item"]["a"]
    assert "serve the hybrid" not in markdown_report(result, load_compare_config(_config_stub(tmp_path)))


def test_report_states_each_seeds_interval_and_flags_disagreeing_seeds(tmp_path: Path) -> None:
    result = _hand_result()
    retrieval = result.interval(1, "xprt", "a")
    assert (retrieval.estimate, retrieval.low, retrieval.high) == pytest.approx((0.1, 0.1, 0.1))
    assert result.interval(2, "xprt", "a").verdict == "no clear difference"
    assert result.interval(1, "xprt", "b").estimate == pytest.approx(1.0 - 0.8)
    # the mean over tasks of seed 1: (0.1 + 0.2) / 2, its interval from resampling each task within itself
    pooled = result.interval(1, "xprt")
    assert pooled.estimate == pytest.approx(0.15) and pooled.low <= 0.15 <= pooled.high
    assert result.verdict("xprt", "a") == "seeds disagree"  # seed 1 gains, seed 2 does not: no gain claimed
    assert result.verdict("xprt", "b") in {"seeds disagree", "no clear difference"}

    config = load_compare_config(_config_stub(tmp_path))
    markdown = markdown_report(result, config)
    assert "| xprt | +10.00 [+10.00, +10.00] gain |" in markdown
    assert "| xprt | seeds disagree |" in markdown
    run = tmp_path / "report"
    run.mkdir()
    write_report(result, run, config)
    with (run / "compare.csv").open() as handle:
        rows = {(r["seed"], r["model"], r["task"]): r for r in csv.DictReader(handle)}
    assert rows[("1", "xprt", "a")]["verdict"] == "gain"
    assert float(rows[("1", "xprt", "a")]["ci_low"]) == pytest.approx(0.1)
    assert rows[("2", "xprt", "a")]["verdict"] == "no clear difference"
    assert float(rows[("1", "xprt", "mean over tasks")]["delta_vs_start"]) == pytest.approx(0.15)
    assert rows[("1", "start", "a")]["verdict"] == ""


def test_printed_gain_table_is_readable_at_80_columns() -> None:
    from rich.console import Console

    result = _hand_result()
    result.models.append("random-span-contrastive")  # the longest recipe name
    for seed in result.seeds:
        result.scores[seed]["random-span-contrastive"] = result.scores[seed]["xprt"]
        result.per_item[seed]["random-span-contrastive"] = result.per_item[seed]["xprt"]
    console = Console(width=80, record=True)
    console.print(gain_table(result))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for cell in ("random-span-contrastive", "seeds disagree", "+15.00", "[+0.00, +0.00]", "no clear difference"):
        assert cell in text, cell


def _config_stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub.yaml"
    path.write_text(yaml.safe_dump({"corpus": [{"path": "x.jsonl"}], "tasks": ["stsb"], "recipes": ["xprt"]}))
    return path


def test_recipe_lock_is_exclusive_and_stale_locks_are_taken_over(tmp_path: Path) -> None:
    lock = _claim(tmp_path / "seed-1" / ".xprt.lock")
    assert lock is not None and lock.read_text() == str(os.getpid())
    assert _claim(lock) is None  # held by a live process: another compare process skips this recipe
    stale = tmp_path / "seed-1" / ".tsdae.lock"
    stale.write_text("999999999")  # a killed process
    assert _claim(stale) == stale


def test_each_recipe_data_folder_is_named_without_making_it_and_a_held_recipe_is_left_to_its_process(
    tmp_path: Path,
) -> None:
    # what benchmarks/structure_comparison.py's workers read: the folders prepare_data makes, by recipe
    raw = {
        "corpus": [{"path": "x.jsonl"}],
        "tasks": ["stsb"],
        "recipes": ["change-only-positive", "change-only-positive-hard", "structure-positive", "structure-mixed"],
        "mining": {"structure": ["titles"], "structure_hard_negatives": 2},
    }
    (tmp_path / "stub.yaml").write_text(yaml.safe_dump(raw))
    config = load_compare_config(tmp_path / "stub.yaml")
    run = tmp_path / "run"
    assert data_folders(config, run) == {
        "change-only-positive": run / "mined",
        "change-only-positive-hard": run / "data" / "hard-negatives-2",
        "structure-positive": run / "mined" / "structure",
        "structure-mixed": run / "data" / "structure-mixed-0.5-2",
    }
    assert not run.exists()
    # another live process holds seed 7's structure-positive: this one trains and scores nothing of it
    lock = _claim(run / "seed-7" / ".structure-positive.lock")
    assert lock is not None
    assert train_one(config, run, "structure-positive", 7, run / "mined" / "structure", []) is False
    assert sorted(p.name for p in (run / "seed-7").iterdir()) == [".structure-positive.lock"]


def test_structure_recipes_need_structure_mining_in_the_config(tmp_path: Path) -> None:
    raw = {"corpus": [{"path": "x.jsonl"}], "tasks": ["stsb"], "recipes": ["structure-positive", "structure-mixed"]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(tmp_path / "c.yaml")
    lines = str(error.value).splitlines()
    assert "  - recipe structure-positive: it trains on structure pairs: set mining.structure" in lines[1]
    assert "  - recipe structure-mixed: it trains on structure pairs" in lines[2]
    raw["mining"] = {"structure": ["titles"]}  # but no hard negatives for the pairs, which both recipes read
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CompareConfigError, match=r"set mining.structure_hard_negatives: 2"):
        load_compare_config(tmp_path / "c.yaml")
    raw["mining"]["structure_hard_negatives"] = 2
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    assert load_compare_config(tmp_path / "c.yaml").recipes == ["structure-positive", "structure-mixed"]


def test_a_lexical_recipe_needs_its_ranking_in_the_config(tmp_path: Path) -> None:
    raw = {"corpus": [{"path": "x.jsonl"}], "tasks": ["stsb"], "recipes": ["lexical-positive-hard", "tsdae"]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CompareConfigError) as error:  # before anything is mined: it would train on fused positives
        load_compare_config(tmp_path / "c.yaml")
    assert str(error.value).splitlines()[1:] == [
        "  - recipe lexical-positive-hard: it trains on positives ranked by bm25 but mining.rank_by is 'fused': set "
        "mining.rank_by: bm25 (one comparison mines once: compare the fused recipes in a folder of their own)"
    ]
    raw["mining"] = {"rank_by": "bm25"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    assert load_compare_config(tmp_path / "c.yaml").recipes == ["lexical-positive-hard", "tsdae"]


def test_a_corpus_without_structure_pairs_stops_the_structure_recipes_in_one_line_and_keeps_the_mining(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    # plain paragraphs: no title, heading or link to pair (ArguAna's shared titles end the same way)
    config = _config(tmp_path, tiny_model_path)
    raw = yaml.safe_load(config.read_text())
    raw["mining"] |= {"structure": ["titles", "headings"], "structure_hard_negatives": 2}
    raw["recipes"] = ["structure-mixed", "change-only-positive"]
    config.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(run), "--quiet"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    flat = " ".join(result.output.split())
    assert "structure-mixed train on structure pairs, and the corpus has none" in flat, flat
    assert "the corpus has no titles or headings to pair" in flat and "remove these recipes" in flat, flat
    stats = json.loads((run / "mined" / "stats.json").read_text())
    assert stats["structure"]["groups"] == 0 and not (run / "seed-1").exists()
    # the mining is kept: the other recipe trains on it without mining again
    stamp = (run / "mined" / "stats.json").stat().st_mtime_ns
    result = runner.invoke(
        app, ["compare", "--config", str(config), "--output", str(run), "--quiet", "--recipes", "change-only-positive"]
    )
    assert result.exit_code == 0, result.output
    assert (run / "seed-1" / "change-only-positive" / "COMPLETE").is_file()
    assert json.loads((run / "mined" / "stats.json").read_text())["passages"] == stats["passages"]
    assert (run / "mined" / "shards").is_dir() and stamp > 0


def test_from_bert_setting_mines_with_the_embedder_and_trains_the_pretrained_bert(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    from xprt_st.training.pretrain_mlm import SmallBertConfig, pretrain_small_bert

    texts = [json.loads(line)["text"] for line in _write_corpus(tmp_path).read_text().splitlines()]
    small = SmallBertConfig(layers=1, hidden=32, heads=2, intermediate=64, max_seq_length=32, steps=3, batch_size=4)
    bert = tmp_path / "small-bert"
    pretrain_small_bert(texts, bert, small, device="cpu", progress=False)
    config = yaml.safe_load(_config(tmp_path, bert).read_text())
    config |= {"mining_model": str(tiny_model_path), "setting": "from-bert", "recipes": ["xprt", "retromae"]}
    path = tmp_path / "from-bert.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run = tmp_path / "run-bert"
    result = runner.invoke(app, ["compare", "--config", str(path), "--output", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "mined" / "stats.json").read_text())["settings"]["model"] == str(tiny_model_path)
    for recipe in ("xprt", "retromae"):
        state = json.loads((run / "seed-1" / recipe / "training_state" / "config.json").read_text())
        trained = state["recipe"]
        assert trained["setting"] == "from-bert" and trained["training"]["model"] == str(bert)
        assert trained["retention"]["enabled"] is False
    with (run / "compare.csv").open() as handle:
        assert {row["model"] for row in csv.DictReader(handle)} == {"start", "xprt", "retromae"}


@pytest.mark.parametrize(
    "config", sorted(p.name for p in (Path(__file__).parents[1] / "benchmarks").glob("compare-*.yaml"))
)
def test_shipped_comparison_configs_validate(config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from xprt_st.compare import load_compare_config

    root = Path(__file__).parents[1]
    monkeypatch.chdir(root)  # the configs name probe recipes relative to the repository root
    loaded = load_compare_config(root / "benchmarks" / config)  # binds every recipe with the shared overrides
    # a comparison has verdicts over seeds; a sweep's point (one folder per learning rate and steps) has one seed
    assert loaded.recipes and loaded.tasks and len(loaded.seeds) >= (1 if "sweep" in config else 2)


def test_a_changed_configuration_is_refused_before_its_old_scores_are_shown(tmp_path: Path) -> None:
    from xprt_st.compare import run_compare

    sts = _write_sts(tmp_path / "sts.tsv")
    raw = {"model": "start-a", "corpus": [{"path": "x.jsonl"}], "tasks": [str(sts)], "recipes": ["xprt"]}
    raw["training"] = {"max_steps": 10}
    path = tmp_path / "compare.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    first = load_compare_config(path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "compare_config.yaml").write_text(yaml.safe_dump(first.to_dict(), sort_keys=False), encoding="utf-8")
    scores = run / "scores" / first.evaluation_key()
    (scores / "seed-42").mkdir(parents=True)
    label = f"STS:{sts.stem}"
    (scores / "start.json").write_text(json.dumps({"scores": {label: 0.5}, "metrics": {label: "spearman"}}))
    (scores / "seed-42" / "xprt.json").write_text(json.dumps({"scores": {label: 0.6}}))
    stored = (run / "compare_config.yaml").read_text()

    changed = load_compare_config(path, overrides={"model": "start-b", "training": {"learning_rate": 1e-5}})
    assert changed.evaluation_key() == first.evaluation_key()  # the scores folder alone cannot tell
    with pytest.raises(CompareConfigError) as error:
        run_compare(changed, run, progress=False, report_only=True)
    message = str(error.value)
    assert "model: 'start-a' -> 'start-b'" in message and "learning_rate" in message and "another --output" in message
    assert (run / "compare_config.yaml").read_text() == stored  # nothing on disk was rewritten
    assert not (run / "compare.md").exists()

    # more seeds, recipes or tasks are not a change of what the existing models and scores are
    from xprt_st.compare import check_unchanged

    first.seeds = [42, 43]
    check_unchanged(first, run)


def test_a_finished_model_of_an_edited_recipe_is_refused(tmp_path: Path) -> None:
    from xprt_st.compare.run import _check_complete, _resolved_recipe

    config = load_compare_config(_config_stub(tmp_path))
    folder = tmp_path / "seed-42" / "xprt"
    folder.mkdir(parents=True)
    resolved = _resolved_recipe("xprt", config, 42).to_dict()
    (folder / "COMPLETE").write_text(json.dumps({"recipe": "xprt", "seed": 42, "resolved": resolved}))
    _check_complete(folder, resolved)
    _check_complete(folder, {**resolved, "source": "/elsewhere/xprt.yaml"})  # another checkout of the same recipe
    edited = {**resolved, "objective": {**resolved["objective"], "args": {"cross_weight": 0.5}}}
    with pytest.raises(CompareConfigError, match="differs in: objective"):
        _check_complete(folder, edited)


def test_a_finished_model_of_data_written_again_since_is_refused(tmp_path: Path) -> None:
    import datasets

    from xprt_st.compare.run import _check_complete
    from xprt_st.fingerprint import dataset_identity

    data = tmp_path / "structure"
    rows = {"anchor": ["Tea", "Coffee"], "positive": ["Tea is a drink.", "Coffee is too."], "label": [0, 1]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(data))
    trained_on = dataset_identity(data)
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "again"))
    assert dataset_identity(tmp_path / "again") == trained_on  # the same rows written again: the same data
    folder = tmp_path / "seed-42" / "structure-positive"
    folder.mkdir(parents=True)
    (folder / "COMPLETE").write_text(json.dumps({"recipe": "structure-positive", "seed": 42, "data": trained_on}))
    _check_complete(folder, {}, trained_on, data)
    # the structure folder written again under other rules (one pair dropped): the model is not of this data
    datasets.Dataset.from_dict({k: v[:1] for k, v in rows.items()}).save_to_disk(str(data))
    with pytest.raises(CompareConfigError, match=r"was trained on other data than .*structure holds now"):
        _check_complete(folder, {}, dataset_identity(data), data)
    (folder / "COMPLETE").write_text(json.dumps({"recipe": "structure-positive", "seed": 42}))  # before markers had it
    _check_complete(folder, {}, dataset_identity(data), data)


def _build_script():
    """benchmarks/build_unsupervised_start.py as a module (benchmarks/ is not a package)."""
    import importlib.util
    import sys

    path = Path(__file__).parents[1] / "benchmarks" / "build_unsupervised_start.py"
    spec = importlib.util.spec_from_file_location("build_unsupervised_start", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through the module's entry
    spec.loader.exec_module(module)
    return module


def test_unsupervised_start_build_stops_when_flat_and_records_its_curve(tmp_path: Path, tiny_model_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from xprt_st.training.pretrain_mlm import SmallBertConfig, pretrain_small_bert

    script = _build_script()
    texts = [json.loads(line)["text"] for line in _write_corpus(tmp_path).read_text().splitlines()]
    small = SmallBertConfig(layers=1, hidden=32, heads=2, intermediate=64, max_seq_length=32, steps=2, batch_size=4)
    bert = tmp_path / "small-bert"
    pretrain_small_bert(texts, bert, small, device="cpu", progress=False)
    raw = yaml.safe_load(_config(tmp_path, bert).read_text())
    raw |= {"mining_model": str(tiny_model_path), "recipes": ["xprt"]}  # the build trains its own recipe only
    # min_delta 1.0 (a full point of score on the 0-1 scale) cannot be reached: flat at the first evaluation
    raw["stopping"] = {"eval_every": 2, "min_delta": 1.0, "patience": 1}
    raw["training"] |= {"max_steps": 6}
    path = tmp_path / "start.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    output = tmp_path / "start"
    config, stopping = script.load_config(path, {})
    assert config.recipes == ["random-span-contrastive"] and config.training["save_total_limit"] is None
    record = script.build(config, stopping, output, progress=False)

    assert record == json.loads((output / "unsupervised_start.json").read_text())
    assert record["recipe"] == "random-span-contrastive" and record["setting"] == "from-bert"
    assert record["stopped"] == "flat" and record["steps"] == 2
    assert [point["step"] for point in record["curve"]] == [0, 2]
    assert record["contrastive_tokens_seen"] == 2 * 2 * 2 * 32  # steps x batch x two spans x 32 tokens
    assert set(record["final_scores"]) == set(record["curve"][0]["scores"]) and len(record["final_scores"]) == 2
    assert record["small_bert"]["steps"] == 2
    assert (output / "data" / "pairs-random-span" / "stats.json").is_file()
    SentenceTransformer(str(output / "model"))  # the start of the comparison loads as a plain model

    # a second call finds the build complete: nothing is trained again
    stamp = (output / "model" / "model.safetensors").stat().st_mtime_ns
    assert script.build(config, stopping, output, progress=False)["curve"] == record["curve"]
    assert (output / "model" / "model.safetensors").stat().st_mtime_ns == stamp

    # a start that is not a finished small BERT is refused before any work
    raw["model"] = str(tmp_path / "no-such-bert")
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(CompareConfigError, match=r"pretrain_small_bert\.py"):
        script.build(*script.load_config(path, {}), tmp_path / "other", progress=False)
    assert not (tmp_path / "other").exists()
    with pytest.raises(CompareConfigError, match=r"stopping\.typo"):
        script.load_config(path, {"typo": 1})


def test_head_to_head_states_the_difference_of_two_recipes_with_its_own_interval(tmp_path: Path) -> None:
    result = _hand_result()
    # a second recipe, "other": the start's retrieval scores plus 0.05 on every query, the start's STS cosines
    for seed in result.seeds:
        start_items = result.per_item[seed]["start"]
        queries = {q: v + 0.05 for q, v in start_items["a"]["ndcg_at_10"].items()}
        result.per_item[seed]["other"] = {"a": {"kind": "retrieval", "ndcg_at_10": queries}, "b": start_items["b"]}
        result.scores[seed]["other"] = {"a": result.scores[seed]["start"]["a"] + 0.05, "b": 0.8}
    result.models.append("other")

    # seed 1: xprt is +0.1 per query and other +0.05, so xprt - other is exactly +0.05 on every query
    retrieval = result.interval(1, "xprt", "a", reference="other")
    assert (retrieval.estimate, retrieval.low, retrieval.high) == pytest.approx((0.05, 0.05, 0.05))
    # seed 2: xprt equals the start, so xprt - other is exactly -0.05: a loss for xprt
    assert result.interval(2, "xprt", "a", reference="other").verdict == "loss"
    assert result.interval(1, "xprt", "a", reference="xprt") is None

    markdown = markdown_report(result, load_compare_config(_config_stub(tmp_path)))
    assert "### Head to head: xprt minus each other recipe (mean over tasks, ×100)" in markdown
    head = markdown.split("### Head to head")[1]
    other_row = next(line for line in head.splitlines() if line.startswith("| other |"))
    seed1 = result.mean(1, "xprt") - result.mean(1, "other")
    seed2 = result.mean(2, "xprt") - result.mean(2, "other")
    assert f"{100 * seed1:+.2f} [" in other_row and f"{100 * seed2:+.2f} [" in other_row
    assert f"| {100 * (seed1 + seed2) / 2:+.2f} |" in other_row
    assert other_row.rstrip(" |").endswith(("seeds disagree", "gain", "loss", "no clear difference"))


def test_cls_start_serves_the_same_encoder_with_its_cls_vector_and_keeps_the_mlm_head(tmp_path: Path) -> None:
    import importlib.util
    import sys

    import torch

    from xprt_st.models import attach_mlm_head, load_model
    from xprt_st.training.pretrain_mlm import SmallBertConfig, pretrain_small_bert

    path = Path(__file__).parents[1] / "benchmarks" / "make_cls_start.py"
    spec = importlib.util.spec_from_file_location("make_cls_start", path)
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script
    spec.loader.exec_module(script)

    texts = [json.loads(line)["text"] for line in _write_corpus(tmp_path).read_text().splitlines()]
    small = SmallBertConfig(layers=1, hidden=32, heads=2, intermediate=64, max_seq_length=32, steps=2, batch_size=4)
    bert = tmp_path / "small-bert"
    pretrain_small_bert(texts, bert, small, device="cpu", progress=False)
    output = script.make_cls_start(str(bert), tmp_path / "small-bert-cls")

    source, served = load_model(str(bert), device="cpu"), load_model(str(output), device="cpu")
    assert served[1].get_config_dict()["pooling_mode"] == "cls"
    assert (output / "pretraining.json").read_text() == (bert / "pretraining.json").read_text()
    sentences = ["the mined positive matters", "random spans are close behind"]
    features = source.tokenize(sentences)
    with torch.no_grad():
        tokens = source[0](dict(features))["token_embeddings"]
    # the same encoder: the served vector is the source's [CLS] token state, not its mean
    assert torch.allclose(served.encode(sentences, convert_to_tensor=True), tokens[:, 0], atol=1e-5)
    assert not torch.allclose(source.encode(sentences, convert_to_tensor=True), tokens[:, 0], atol=1e-3)
    # the pre-trained MLM head comes along: both heads are the same trained weights
    head_source, head_served = attach_mlm_head(source), attach_mlm_head(served)
    for (name, a), (_, b) in zip(head_source.state_dict().items(), head_served.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    from safetensors.torch import load_file

    trained = load_file(str(bert / "model.safetensors"))["cls.predictions.transform.dense.weight"]
    assert torch.equal(head_served.dense.weight, trained)
    with pytest.raises(SystemExit, match="exists"):
        script.make_cls_start(str(bert), output)


def test_a_rerun_on_edited_corpus_files_or_task_data_is_refused_naming_the_change(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """The built corpus and the scores are found by path and reused as they are; before, a source file or a task
    folder edited since was reported with the old corpus's models and the old data's scores."""
    raw = yaml.safe_load(_config(tmp_path, tiny_model_path).read_text())
    raw |= {"recipes": ["change-only-positive"], "tasks": [raw["tasks"][0]]}
    raw["training"] |= {"max_steps": 1}
    config = tmp_path / "one.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    run = tmp_path / "run"
    command = ["compare", "--config", str(config), "--output", str(run), "--quiet"]
    runner = CliRunner(env={"COLUMNS": "400"})  # wide enough that rich breaks no path of the messages
    assert runner.invoke(app, command).exit_code == 0
    fingerprints = json.loads((run / ".xprt-st-fingerprint.json").read_text())
    (scores,) = (run / "scores").iterdir()
    assert set(fingerprints) == {"corpus", f"scores/{scores.name}"}

    source = tmp_path / "corpus.jsonl"
    before, text = source.stat().st_size, source.read_text()
    source.write_text(text + json.dumps({"id": "doc-new", "text": "a document added since"}) + "\n")
    result = runner.invoke(app, command)
    flat = " ".join(result.output.split())
    assert result.exit_code != 0 and "Traceback" not in flat, flat
    assert f"{run / 'corpus'} was made with other settings (corpus.0 {source.resolve()} ({before} bytes) -> " in flat
    assert f"Use another --output, or delete {run} to start over." in flat
    source.unlink()  # a source no longer found proves nothing: the built corpus is the run's copy
    assert runner.invoke(app, command).exit_code == 0

    source.write_text(text)
    queries = tmp_path / "beir" / "queries.jsonl"
    queries.write_text(queries.read_text().replace("what about", "tell me about"))
    result = runner.invoke(app, command)
    flat = " ".join(result.output.split())
    assert result.exit_code != 0 and f"{scores} was made with other settings (tasks.beir xprt-st-beir-" in flat, flat

    # a fingerprint file cut short records nothing checkable: before, it read as empty, so the old corpus and scores
    # were taken unchecked and the new inputs recorded over them
    record = run / ".xprt-st-fingerprint.json"
    record.write_text(record.read_text()[:40])
    result = runner.invoke(app, command)
    flat = " ".join(result.output.split())
    assert result.exit_code != 0 and "Traceback" not in flat, flat
    assert f"{record} is not valid JSON" in flat and len(record.read_text()) == 40, flat


def test_a_users_folder_at_a_models_name_is_refused_not_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xprt_st.training
    from xprt_st.compare.run import _train, unfinished_run_problem

    config = load_compare_config(_config_stub(tmp_path))
    trained: list[Path] = []
    monkeypatch.setattr(xprt_st.training, "train_recipe", lambda recipe, **kwargs: trained.append(kwargs["output"]))
    mine = tmp_path / "run" / "seed-7" / "xprt"
    mine.mkdir(parents=True)
    (mine / "NOTES.md").write_text("my notes")
    (mine / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(CompareConfigError, match=r"seed-7/xprt holds files xprt-st did not write \(NOTES.md, model"):
        _train("xprt", config, 7, tmp_path / "data", mine, False, mined=tmp_path / "mined")
    assert sorted(p.name for p in mine.iterdir()) == ["NOTES.md", "model.safetensors"] and not trained
    # a run train left before its first checkpoint (its lock, manifest and log) is compare's to remove
    killed = tmp_path / "run" / "seed-7" / "tsdae"
    killed.mkdir()
    (killed / ".xprt-st.lock").write_text("{}")
    (killed / ".xprt-st-manifest.json").write_text(json.dumps({"command": "train", "files": ["runs"]}))
    (killed / "runs").mkdir()
    assert unfinished_run_problem(killed) is None
    _train("tsdae", config, 7, tmp_path / "data", killed, False, mined=tmp_path / "mined")
    assert not killed.exists() and trained == [killed]
    file = tmp_path / "run" / "seed-7" / "self-only"
    file.write_text("not a folder")
    assert "is not a folder xprt-st compare made" in (unfinished_run_problem(file) or "")


def test_compare_refuses_a_users_folder_at_a_models_name_before_any_work(tmp_path: Path, tiny_model_path: Path) -> None:
    config = _config(tmp_path, tiny_model_path)
    mine = tmp_path / "run" / "seed-1" / "change-only-positive"
    mine.mkdir(parents=True)
    (mine / "NOTES.md").write_text("my notes")
    result = runner.invoke(app, ["compare", "--config", str(config), "--output", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "holds files xprt-st did not write (NOTES.md)" in "".join(result.output.split("\n"))
    assert (mine / "NOTES.md").read_text() == "my notes"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["seed-1"]  # nothing mined or trained
    # the same folder while another live compare process trains that recipe (its files appear as it goes): left
    # to that process, not refused
    (tmp_path / "run" / "seed-1" / ".change-only-positive.lock").write_text(str(os.getppid()))
    from xprt_st.compare.run import check_compare_inputs

    check_compare_inputs(load_compare_config(config), tmp_path / "run")
