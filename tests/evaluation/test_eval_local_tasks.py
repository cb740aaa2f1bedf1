"""Offline task loading: tiny hand-made BEIR folders and STS files -> mteb tasks, and bad input."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

from xprt_st.evaluation.catalog import LOCAL_TASKS, beir_task, load_local_task, resolve_beir, resolve_tasks
from xprt_st.evaluation.readers import (
    TaskLoadError,
    read_beir_folder,
    read_semeval_sts_folder,
    read_sts_file,
    subsample_beir,
    subsample_sts,
)
from xprt_st.evaluation.tasks import LocalRetrievalTask, LocalSTSTask


def test_beir_folder_reads_and_drops_absent_documents_with_a_counted_warning(beir_folder: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="xprt_st.evaluation.readers"):
        data = read_beir_folder(beir_folder)
    assert "dropped 1 judgement(s) whose document is not in the corpus" in caplog.text
    assert "d-missing" in caplog.text
    assert data.dropped_qrels == 1
    assert set(data.qrels) == {"q-cats", "q-dogs", "q-tea", "q-weather"}  # unjudged query left out
    assert data.qrels["q-weather"] == {"d-rain": 1, "d-snow": 0}
    assert data.queries["q-tea"] == "What temperature for green tea?"
    assert data.document_text("d-tea") == "Tea Green tea is brewed with water below boiling."
    assert data.document_text("d-snow") == "Snow forms from ice crystals in cold clouds."


def test_gzipped_beir_folder_reads_the_same(tmp_path: Path, beir_writer, beir_folder: Path) -> None:
    gz_folder = beir_writer(tmp_path / "gz", gz=True)
    assert (gz_folder / "corpus.jsonl.gz").is_file()
    assert read_beir_folder(gz_folder) == read_beir_folder(beir_folder)


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_folder_missing_a_file_names_it(beir_folder: Path, missing: str) -> None:
    (beir_folder / missing).unlink()
    with pytest.raises(TaskLoadError, match=missing.replace(".", r"\.")):
        read_beir_folder(beir_folder)


def test_malformed_jsonl_line_names_file_and_line(beir_folder: Path) -> None:
    with (beir_folder / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(TaskLoadError, match=r"corpus\.jsonl, line 8: not valid JSON"):
        read_beir_folder(beir_folder)


def test_qrels_with_no_usable_judgement_is_an_error(tmp_path: Path, beir_writer) -> None:
    folder = beir_writer(tmp_path / "empty", qrels=[("q-cats", "d-nowhere", 1)])
    with pytest.raises(TaskLoadError, match="no judgement with a positive score"):
        read_beir_folder(folder)


def test_subsample_is_deterministic_and_keeps_judged_documents(beir_folder: Path) -> None:
    data = read_beir_folder(beir_folder)
    first = subsample_beir(data, max_queries=2, max_corpus=3, seed=7)
    again = subsample_beir(data, max_queries=2, max_corpus=3, seed=7)
    assert first == again
    assert len(first.queries) == 2
    judged = {doc for docs in first.qrels.values() for doc in docs}
    assert judged <= set(first.corpus)
    assert len(first.corpus) == max(3, len(judged))
    # judged documents survive even when they alone exceed max_corpus
    tight = subsample_beir(data, max_corpus=1, seed=0)
    assert set(tight.corpus) == {doc for docs in data.qrels.values() for doc in docs}
    assert subsample_beir(data) == data


def test_beir_task_is_an_mteb_retrieval_task_with_argu_ana_rule(beir_folder: Path) -> None:
    task = beir_task(beir_folder)
    assert isinstance(task, LocalRetrievalTask)
    assert task.ignore_identical_ids  # q-cats is also a corpus id
    assert task.metadata.main_score == "ndcg_at_10"
    task.load_data()
    split = task.dataset["default"]["test"]
    assert sorted(split["queries"]["id"]) == ["q-cats", "q-dogs", "q-tea", "q-weather"]
    assert len(split["corpus"]) == 7
    other = beir_task(beir_folder, max_queries=2, seed=1)
    assert other.metadata.name != task.metadata.name  # a subsample never reuses cached full results


def test_a_task_is_named_by_its_bytes_not_where_or_when_they_were_written(
    beir_folder: Path, beir_writer, tmp_path: Path
) -> None:
    import os
    import shutil

    name = beir_task(beir_folder).metadata.name
    copy = shutil.copytree(beir_folder, tmp_path / "elsewhere" / beir_folder.name)  # another install or clone
    for path in Path(copy).rglob("*"):
        os.utime(path, ns=(1, 1))
    assert beir_task(copy).metadata.name == name  # its cached scores and a comparison's record still hold
    judged = [("q-cats", "d-cats", 1), ("q-dogs", "d-dogs", 1), ("q-tea", "d-tea", 1), ("q-weather", "d-rain", 1)]
    beir_writer(Path(copy), qrels=judged)  # fewer judgements: another task
    assert beir_task(copy).metadata.name != name


def test_sts_layouts(tmp_path: Path, stsb_writer) -> None:
    stsb = read_sts_file(stsb_writer(tmp_path / "sts-test.csv"))
    assert len(stsb) == 6 and stsb.score[0] == pytest.approx(4.8)
    assert stsb.sentence1[0] == "A man is playing a guitar." and stsb.sentence2[0] == "A man plays the guitar."

    sick = tmp_path / "SICK.txt.gz"
    with gzip.open(sick, "wt", encoding="utf-8") as handle:
        handle.write("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n")
        handle.write('1\tA "quoted" word\tAnother one\t3.5\tNEUTRAL\n2\tx\ty\t1.0\tCONTRADICTION\n')
    data = read_sts_file(sick)
    assert data.sentence1 == ['A "quoted" word', "x"] and data.score == [3.5, 1.0]

    generic = tmp_path / "pairs.tsv"
    generic.write_text("sentence1\tsentence2\tscore\na\tb\t0.5\nc\td\t1\n", encoding="utf-8")
    assert read_sts_file(generic).score == [0.5, 1.0]

    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"bad\.tsv, line 1: 2 tab-separated fields"):
        read_sts_file(bad)
    bad.write_text("a\tb\tnot-a-number-later\nc\td\tx\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"line 2: score 'x' is not a number"):
        read_sts_file(bad)


def test_semeval_folder_concatenates_sets_and_skips_unscored_pairs(tmp_path: Path) -> None:
    folder = tmp_path / "sts16"
    folder.mkdir()
    (folder / "STS.input.a.txt").write_text("s1\tt1\ns2\tt2\n", encoding="utf-8")
    (folder / "STS.gs.a.txt").write_text("1.0\n\n", encoding="utf-8")
    with gzip.open(folder / "STS.input.b.txt.gz", "wt") as handle:
        handle.write("s3\tt3\n")
    with gzip.open(folder / "STS.gs.b.txt.gz", "wt") as handle:
        handle.write("4.5\n")
    data = read_semeval_sts_folder(folder)
    assert data.sentence1 == ["s1", "s3"] and data.score == [1.0, 4.5]
    (folder / "STS.gs.a.txt").unlink()
    with pytest.raises(TaskLoadError, match=r"STS\.gs\.a\.txt"):
        read_semeval_sts_folder(folder)


def test_subsample_sts_is_deterministic(tmp_path: Path, stsb_writer) -> None:
    data = read_sts_file(stsb_writer(tmp_path / "s.csv"))
    assert subsample_sts(data, 3, seed=2) == subsample_sts(data, 3, seed=2)
    assert len(subsample_sts(data, 3, seed=2)) == 3
    assert subsample_sts(data, None) is data


def test_named_tasks_resolve_against_the_data_dir(tmp_path: Path, beir_writer, stsb_writer) -> None:
    beir_writer(tmp_path / "arguana")
    (tmp_path / "stsbenchmark").mkdir()
    stsb_writer(tmp_path / "stsbenchmark" / "sts-test.csv")
    arguana, stsb = resolve_tasks(["arguana,stsb"], tmp_path)
    assert isinstance(arguana, LocalRetrievalTask) and arguana.ignore_identical_ids
    assert isinstance(stsb, LocalSTSTask) and stsb.metadata.main_score == "cosine_spearman"
    assert type(arguana).label == "arguana"
    data, label, ignore = resolve_beir("arguana", tmp_path)
    assert label == "arguana" and ignore and len(data.queries) == 4


def test_named_task_with_absent_folder_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match=r"needs the folder .*sickr.*--data-dir"):
        load_local_task("sickr", tmp_path)


def test_unknown_task_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError) as error:
        resolve_tasks(["arguana-typo"], tmp_path)
    message = str(error.value)
    assert "unknown task 'arguana-typo'" in message
    for name in LOCAL_TASKS:
        assert name in message


def test_folder_that_is_neither_beir_nor_sts(tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    with pytest.raises(TaskLoadError, match="neither a BEIR folder"):
        resolve_tasks([str(tmp_path / "junk")])


def test_packaged_python_faq_task_loads_without_data_dir(tmp_path: Path) -> None:
    task = load_local_task("python-faq", tmp_path / "nowhere", max_queries=5, max_corpus=10)
    assert len(type(task).beir.queries) == 5 and len(type(task).beir.corpus) == 10


def test_mteb_name_offline_falls_back_to_the_local_copy(tmp_path: Path, beir_writer, monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    beir_writer(tmp_path / "arguana")
    (task,) = resolve_tasks(["ArguAna"], tmp_path)
    assert isinstance(task, LocalRetrievalTask) and type(task).label == "arguana"
    with pytest.raises(TaskLoadError, match="needs the Hugging Face hub, which is not reachable"):
        resolve_tasks(["SciFact"], tmp_path)


def _append(path: Path, line: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(line)


@pytest.mark.parametrize(
    ("file", "line", "message"),
    [
        (
            "queries.jsonl",
            b'{"_id": "q-null", "text": null}\n',
            r"queries\.jsonl, line 6: record 'q-null' has text null",
        ),
        ("corpus.jsonl", b'{"_id": "d-null", "text": null}\n', r"corpus\.jsonl, line 8: record 'd-null' has text null"),
        (
            "queries.jsonl",
            b'{"_id": "q-x", "text": "caf\xe9"}\n',
            r"queries\.jsonl, line 6: byte b'\\xe9' .* not UTF-8",
        ),
        ("qrels/test.tsv", b"q-cats\td-dogs\t1.7\n", r"test\.tsv, line 8: score '1\.7' is not a whole number"),
        ("qrels/test.tsv", b"q-cats\td-dogs\tinf\n", r"test\.tsv, line 8: score 'inf' is not a whole number"),
        ("qrels/test.tsv", b"q-cats\td-dogs\tnan\n", r"test\.tsv, line 8: score 'nan' is not a whole number"),
        ("qrels/test.tsv", b"q-cats\td-dogs\t0.5\n", r"test\.tsv, line 8: score '0\.5' is not a whole number"),
    ],
)
def test_a_bad_beir_value_is_one_line_naming_the_file_and_line(
    beir_folder: Path, file: str, line: bytes, message: str
) -> None:
    """Issue 41: null texts read as "None", 1.7 truncated to 1, inf an OverflowError, latin-1 naming no file."""
    _append(beir_folder / file, line)
    with pytest.raises(TaskLoadError, match=message):
        read_beir_folder(beir_folder)


def test_a_whole_number_written_as_a_float_is_its_grade(beir_folder: Path) -> None:
    _append(beir_folder / "qrels" / "test.tsv", b"q-cats\td-dogs\t2.0\n")
    assert read_beir_folder(beir_folder).qrels["q-cats"] == {"d-cats": 1, "d-dogs": 2}


def test_a_pair_judged_twice_is_said_with_both_grades(beir_folder: Path, caplog) -> None:
    """qrels judging one (query, document) pair twice kept the last grade silently (a grade 0 last took the query
    out of the score: 0.877 against 0.793), where repeated corpus and query ids warned."""
    _append(beir_folder / "qrels" / "test.tsv", b"q-cats\td-cats\t0\nq-cats\td-cats\t0\n")
    with caplog.at_level(logging.WARNING, logger="xprt_st.evaluation.readers"):
        data = read_beir_folder(beir_folder)
    assert "2 (query, document) pair(s) are judged more than once, 1 of them with another grade" in caplog.text
    assert "'q-cats'/'d-cats' (line 2: 1, line " in caplog.text and ": 0)" in caplog.text
    assert "q-cats" not in data.qrels  # the last judgement kept, as BEIR's loader does: said, no longer silent


def test_empty_queries_and_repeated_ids_are_counted_and_said(beir_folder: Path, caplog) -> None:
    """Issue 41: empty queries were scored, and a repeated id's last record won without a word."""
    _append(beir_folder / "queries.jsonl", b'{"_id": "q-empty", "text": "  "}\n')
    _append(beir_folder / "queries.jsonl", b'{"_id": "q-tea", "text": "How hot should green tea water be?"}\n')
    _append(beir_folder / "corpus.jsonl", b'{"_id": "d-tea", "title": "Tea", "text": "Brew it at 80 degrees."}\n')
    _append(beir_folder / "qrels" / "test.tsv", b"q-empty\td-cats\t1\n")
    with caplog.at_level(logging.WARNING, logger="xprt_st.evaluation.readers"):
        data = read_beir_folder(beir_folder)
    assert "q-empty" not in data.queries and "q-empty" not in data.qrels
    assert "1 quer(y/ies) with empty text are left out" in caplog.text
    assert "queries.jsonl: 1 id(s) appear more than once; the last record of each is kept" in caplog.text
    assert "'q-tea' (lines 3 and 7)" in caplog.text
    assert "corpus.jsonl: 1 id(s) appear more than once" in caplog.text
    assert data.queries["q-tea"] == "How hot should green tea water be?"
    assert data.document_text("d-tea") == "Tea Brew it at 80 degrees."


def test_two_tasks_that_tables_would_show_under_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    # scores are kept by the shown name: before, the second folder's scores were the first's, with no word
    from tests.evaluation.conftest import CORPUS, QRELS, QUERIES, write_beir

    first = write_beir(tmp_path / "site-a" / "test")
    other = {key: {**value, "text": value["text"] + " again"} for key, value in CORPUS.items()}
    second = write_beir(tmp_path / "site-b" / "test", other, QUERIES, QRELS)
    with pytest.raises(TaskLoadError) as error:
        resolve_tasks([f"{first},{second}"])
    message = str(error.value)
    assert f"{first} and {second} are both shown as test" in message and "separate runs" in message
    assert [len(task.beir.corpus) for task in resolve_tasks([str(first)]) + resolve_tasks([str(second)])] == [7, 7]
