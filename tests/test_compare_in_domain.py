"""In-domain comparison: an evaluation task's own documents as the pre-training corpus, hard negatives as a variant."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import datasets
import pytest
import yaml

from xprt_st.compare import CompareConfigError, data_variant, load_compare_config
from xprt_st.compare.config import CompareConfig, resolve_compare_tasks
from xprt_st.compare.corpus import CORPUS_FILE, build_corpus, document_text

TOPICS = {
    "baseball": "pitcher batter inning perfect game umpire catcher base strike",
    "carbon": "capture storage emissions pipeline wells policy energy plant gas",
    "bread": "sourdough yeast starter flour water fermentation crust oven loaf",
    "trucks": "pickup frame engine towing cab fleet diesel axle generation",
}


def _beir(folder: Path, documents: int = 8, broken_queries: bool = False) -> Path:
    """A BEIR folder; with ``broken_queries`` its queries and qrels cannot be read at all."""
    (folder / "qrels").mkdir(parents=True)
    rows = []
    for i in range(documents):
        topic, words = list(TOPICS.items())[i % len(TOPICS)]
        vocab = words.split()
        sentences = [
            " ".join(vocab[(i + p + j) % len(vocab)] for j in range(12)) + f" {topic} {i} {p}." for p in range(5)
        ]
        rows.append({"_id": f"D{i}", "title": f"On {topic} {i}", "text": " ".join(sentences)})
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    if broken_queries:
        (folder / "queries.jsonl").write_text("QUERY-TEXT-SENTINEL {not json\n", encoding="utf-8")
        (folder / "qrels" / "test.tsv").mkdir()  # a folder where the file should be: opening it fails
    else:
        queries = [{"_id": f"q{i}", "text": f"what about {t}"} for i, t in enumerate(TOPICS)]
        (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in queries) + "\n", encoding="utf-8")
        qrels = ["query-id\tcorpus-id\tscore"] + [f"q{i}\tD{i}\t1" for i in range(len(TOPICS))]
        (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return folder


def _config(data_dir: Path, **corpus: object) -> CompareConfig:
    return CompareConfig.from_dict(
        {"corpus": [corpus], "tasks": ["stsb"], "recipes": ["change-only-positive"], "data_dir": str(data_dir)}
    )


def test_titles_are_a_first_sentence_or_dropped() -> None:
    assert document_text("Statins and cancer", "We studied.", "prepend") == "Statins and cancer. We studied."
    assert document_text("Is it safe?", "Yes.", "prepend") == "Is it safe? Yes."
    assert document_text("Statins", "We studied.", "drop") == "We studied."
    assert document_text("", "We studied.", "prepend") == "We studied."


def test_a_task_corpus_reads_only_the_documents_never_queries_or_qrels(tmp_path: Path, monkeypatch) -> None:
    _beir(tmp_path / "data" / "mytask", broken_queries=True)
    import xprt_st.evaluation.readers as readers

    def refuse(*args, **kwargs):
        raise AssertionError("the evaluation reader (queries and qrels) must not be used for the training corpus")

    monkeypatch.setattr(readers, "read_beir_folder", refuse)
    config = _config(tmp_path / "data", task="mytask")
    stats = build_corpus(config, tmp_path / "run" / "corpus")
    assert stats["documents"] == 8 and stats["sources"][0]["task"] == "mytask"
    with gzip.open(tmp_path / "run" / "corpus" / CORPUS_FILE, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    assert [r["id"] for r in rows] == [f"D{i}" for i in range(8)]  # the task's own ids
    assert rows[0]["text"].startswith("On baseball 0. ") and rows[0]["title"] == "On baseball 0"
    assert not any("SENTINEL" in r["text"] for r in rows)


def test_a_task_source_is_also_a_path_and_a_missing_one_is_named(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "elsewhere" / "beir")
    config = _config(tmp_path / "data", task=str(folder), titles="drop", max_documents=3)
    stats = build_corpus(config, tmp_path / "run")
    assert stats["documents"] == 3 and stats["sources"][0]["readable"] == 8
    with pytest.raises(FileNotFoundError, match=r"corpus task 'nothere'.*corpus\.jsonl"):
        build_corpus(_config(tmp_path / "data", task="nothere"), tmp_path / "run2")


def test_corpus_source_errors_are_listed_together(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    raw = {
        "corpus": [{"max_documents": 3}, {"path": "a.jsonl", "task": "nfcorpus"}, {"task": "nfcorpus", "titles": "x"}],
        "tasks": ["stsb"],
        "recipes": ["change-only-positive"],
    }
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(CompareConfigError) as error:
        load_compare_config(path)
    message = str(error.value)
    assert "corpus[0]: give exactly one of path" in message and "corpus[1]: give exactly one of path" in message
    assert "corpus[2].titles: 'x' is not one of ['prepend', 'drop']" in message


def test_file_sources_keep_their_old_recorded_form_and_tasks_resolve_under_data_dir(tmp_path: Path) -> None:
    _beir(tmp_path / "data" / "mytask")
    config = CompareConfig.from_dict(
        {"corpus": [{"path": "x.jsonl"}], "tasks": ["mytask"], "recipes": ["change-only-positive"]}
        | {"data_dir": str(tmp_path / "data")}
    )
    assert set(config.to_dict()["corpus"][0]) == {"path", "html", "text_field", "id_field", "max_documents"}
    [task] = resolve_compare_tasks(config)
    assert "-mytask-" in task.metadata.name


def test_a_recipe_with_hard_negatives_gets_its_own_data_variant() -> None:
    assert data_variant({"positive": "mined", "hard_negatives": "2"}) == (
        "hard-negatives-2",
        {"positive": "mined", "pairs": "mined", "hard_negatives": "2"},
    )
    assert data_variant({"positive": "mined"})[0] == "mined"


def test_in_domain_compare_with_hard_negatives_end_to_end(
    tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xprt_st.pipeline.run as pipeline_run
    from xprt_st.compare import run_compare

    ran: list[list[str]] = []
    real_run = pipeline_run.run_pipeline

    def recorded(stages, output, **kwargs):
        ran.append([stage.name for stage in stages])
        return real_run(stages, output, **kwargs)

    monkeypatch.setattr(pipeline_run, "run_pipeline", recorded)
    _beir(tmp_path / "data" / "mytask", documents=12)
    config = CompareConfig.from_dict(
        {
            "model": str(tiny_model_path),
            "corpus": [{"task": "mytask"}],
            "data_dir": str(tmp_path / "data"),
            "mining": {"threshold_quantile": 0.3, "max_tokens": 24, "min_tokens": 4, "batch_size": 16},
            "recipes": ["change-only-positive-hard"],
            "seeds": [1],
            "training": {"max_steps": 2, "batch_size": 2, "max_seq_length": 32, "save_steps": 2, "logging_steps": 1},
            "eval_max_seq_length": 32,
            "tasks": ["mytask"],
        }
    )
    result = run_compare(config, tmp_path / "run", progress=False)
    variant = tmp_path / "run" / "data" / "hard-negatives-2"
    groups = datasets.load_from_disk(str(variant))
    mined = datasets.load_from_disk(str(tmp_path / "run" / "mined"))
    assert {"negative_1", "negative_2"} <= set(groups.column_names)
    assert groups["anchor"] == mined["anchor"]  # the same groups as every other recipe's
    assert json.loads((variant / "stats.json").read_text())["settings"]["hard_negatives"] == 2
    assert (tmp_path / "run" / "seed-1" / "change-only-positive-hard" / "COMPLETE").is_file()
    assert result is not None
    # the run is the pipeline's stages; none is fingerprinted, so no state file that processes sharing the folder
    # would overwrite (the markers and locks decide reuse)
    assert ran == [["data", "references", "seed 1: change-only-positive-hard"]]
    assert not (tmp_path / "run" / pipeline_run.STATE_FILE).exists()
    assert run_compare(config, tmp_path / "run", progress=False).scores == result.scores  # the rerun reuses all
