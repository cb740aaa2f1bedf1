"""Hard negatives from other documents: the pure top-k and filter by hand, and the pass over a mined folder."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.mining.test_mining_merge import _corpus  # the same topic corpus as the merge tests
from xprt_st.mining import mine
from xprt_st.mining.hard_negatives import add_hard_negatives, nearest_other_documents, positive_aware_filter


def _unit(*angles_degrees: float) -> np.ndarray:
    radians = np.radians(angles_degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_nearest_other_documents_by_hand_and_the_same_in_any_chunking() -> None:
    # query at 0 degrees (document 0); pool at 0 (document 0: excluded), 10, 30, 60, 90 degrees (documents 1-4)
    queries = _unit(0.0)
    pool = _unit(0.0, 10.0, 30.0, 60.0, 90.0)
    labels = np.array([0, 1, 2, 3, 4])
    for chunk in (1, 2, 5, 100):
        scores, indices = nearest_other_documents(queries, np.array([0]), pool, labels, depth=3, pool_chunk=chunk)
        assert indices.tolist() == [[1, 2, 3]]
        assert scores[0] == pytest.approx(np.cos(np.radians([10.0, 30.0, 60.0])), abs=1e-6)
    # fewer candidates than the depth: the rest are -inf / -1
    scores, indices = nearest_other_documents(queries, np.array([0]), pool[:2], labels[:2], depth=3)
    assert indices.tolist() == [[1, -1, -1]] and np.isneginf(scores[0, 1:]).all()


def test_positive_aware_filter_drops_candidates_above_the_ratio_of_the_positive() -> None:
    # positive cosine 0.9: the threshold at 0.95 x 0.9 = 0.855 drops 0.99 and 0.86, keeps 0.85 and 0.5
    scores = np.array([[0.99, 0.86, 0.85, 0.5]])
    indices = np.array([[10, 11, 12, 13]])
    chosen, found = positive_aware_filter(scores, indices, np.array([0.9]), count=2, max_ratio=0.95)
    assert chosen.tolist() == [[12, 13]] and found.tolist() == [2]
    # one survivor for two slots: padded with it; ratio 1 keeps everything up to the positive itself
    chosen, found = positive_aware_filter(scores, indices, np.array([0.9]), count=2, max_ratio=0.56)
    assert chosen.tolist() == [[13, 13]] and found.tolist() == [1]
    chosen, _ = positive_aware_filter(scores, indices, np.array([0.9]), count=2, max_ratio=1.0)
    assert chosen.tolist() == [[11, 12]]  # only 0.99 lies above the positive's 0.9 itself
    # nothing survives: -1 throughout, found 0 (the caller draws a stand-in)
    chosen, found = positive_aware_filter(scores, indices, np.array([0.5]), count=2, max_ratio=0.5)
    assert chosen.tolist() == [[-1, -1]] and found.tolist() == [0]


def test_mine_adds_negatives_of_other_training_documents(tmp_path: Path, tiny_model) -> None:
    corpus = _corpus(tmp_path / "c.jsonl", 16)
    out = tmp_path / "mined"
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.25}
    stats = mine(corpus, out, model=tiny_model, progress=False, hard_negatives=2, **settings)
    assert stats["settings"]["hard_negatives"] == 2 and stats["hard_negatives"]["groups"] == stats["groups"]
    groups = datasets.load_from_disk(str(out))
    assert {"negative_1", "negative_2"} <= set(groups.column_names) and len(groups) == stats["groups"]
    passages = pq.read_table(out / "passages.parquet").to_pylist()
    documents_of = {}
    for row in passages:
        documents_of.setdefault(row["text"], set()).add((row["label"], row["held_out"]))
    held_out_texts = {row["text"] for row in passages if row["held_out"]}
    assert held_out_texts, "the corpus must hold out some documents for this test to mean anything"
    for group in groups:
        for column in ("negative_1", "negative_2"):
            text = group[column]
            assert text not in held_out_texts
            assert all(label != group["label"] for label, _ in documents_of[text])  # another document's passage
    # the paper's data is untouched: the mined group columns are those of a folder mined without the option
    plain = tmp_path / "plain"
    mine(corpus, plain, model=tiny_model, progress=False, **settings)
    plain_groups = datasets.load_from_disk(str(plain))
    assert plain_groups["anchor"] == groups["anchor"] and plain_groups["positive"] == groups["positive"]
    # a second pass replaces the columns instead of adding more
    add_hard_negatives(out, 1, model=tiny_model)
    again = datasets.load_from_disk(str(out))
    assert [c for c in again.column_names if c.startswith("negative_")] == ["negative_1"]
    assert json.loads((out / "stats.json").read_text())["settings"]["hard_negatives"] == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--hard-negatives", "-1"], "--hard-negatives must be >= 0"),
        (["--hard-negatives", "2", "--hard-negative-max-ratio", "1.5"], "--hard-negative-max-ratio must be in (0, 1]"),
        (["--hard-negatives", "2", "--pairs", "random-span"], "--hard-negatives needs mined groups"),
    ],
)
def test_bad_hard_negative_flags_are_named_before_any_work(tmp_path: Path, flags: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    corpus = _corpus(tmp_path / "c.jsonl", 2)
    result = CliRunner().invoke(app, ["mine", str(corpus), "--output", str(tmp_path / "out"), "-q", *flags])
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out" / "stats.json").exists()


@pytest.mark.parametrize("documents", ["one document of several passages", "one passage"])
def test_a_one_document_corpus_ends_with_one_line_instead_of_looping(
    tmp_path: Path, tiny_model_path: Path, documents: str
) -> None:
    """The stand-in negative was drawn in a `while True` that never ends without a second document."""
    import subprocess
    import sys

    corpus = tmp_path / "c.jsonl"
    text = (
        "\n\n".join(f"The river story part {j} tells river facts and history number {j}." for j in range(6))
        if documents.startswith("one document")
        else "A single short passage about rivers."
    )
    corpus.write_text(json.dumps({"text": text, "id": "d0"}) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "xprt_st", "mine", str(corpus), "-o", str(tmp_path / "out"), "-q"]
    command += ["--mining-model", str(tiny_model_path), "--hard-negatives", "2", "--max-tokens", "16"]
    command += ["--min-tokens", "4"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[2])
    assert done.returncode in (1, 2), done.stderr[-2000:]
    said = " ".join(done.stderr.split())
    assert "Traceback" not in said
    assert ("1 training document(s)" in said) or ("no groups" in said)
    assert not (tmp_path / "out" / ".xprt-st.lock").exists()


def test_more_hard_negatives_than_other_passages_are_refused_before_the_model_loads(tmp_path: Path, tiny_model) -> None:
    from xprt_st.mining.hard_negatives import HardNegativesError

    corpus = _corpus(tmp_path / "c.jsonl", 6)
    out = tmp_path / "mined"
    mine(corpus, out, model=tiny_model, progress=False, max_tokens=32, min_tokens=8, id_field="id")
    before = (out / "stats.json").read_text()
    passages = pq.read_table(out / "passages.parquet", columns=["label"]).column("label").to_pylist()
    limit = len(passages) - max(passages.count(label) for label in set(passages))
    with pytest.raises(HardNegativesError, match=f"at most {limit} distinct negatives per group"):
        add_hard_negatives(out, 1000, model="/no/such/model")  # the check runs before any model is loaded
    assert (out / "stats.json").read_text() == before
    assert not any(c.startswith("negative_") for c in datasets.load_from_disk(str(out)).column_names)


def test_a_re_merge_keeps_the_folders_hard_negatives_unless_told_to_drop_them(tmp_path: Path, tiny_model_path) -> None:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    corpus = _corpus(tmp_path / "c.jsonl", 10)
    out = tmp_path / "mined"
    common = ["--model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    first = CliRunner().invoke(
        app, ["mine", str(corpus), "-o", str(out), "--id-field", "id", "--hard-negatives", "2", *common]
    )
    assert first.exit_code == 0, first.output

    def negatives() -> list[str]:
        return [c for c in datasets.load_from_disk(str(out)).column_names if c.startswith("negative_")]

    assert negatives() == ["negative_1", "negative_2"]
    # README step 2's re-merge, with no --hard-negatives: the recipe that read this folder still can
    again = CliRunner().invoke(app, ["mine", "--merge", str(out), "--threshold-quantile", "0.3", *common])
    assert again.exit_code == 0, again.output
    assert "keeping the 2 hard negatives per group" in again.output
    assert negatives() == ["negative_1", "negative_2"]
    assert json.loads((out / "stats.json").read_text())["settings"]["hard_negatives"] == 2
    dropped = CliRunner().invoke(app, ["mine", "--merge", str(out), "--hard-negatives", "0", *common])
    assert dropped.exit_code == 0, dropped.output
    assert negatives() == []


def test_a_group_that_no_longer_needs_a_stand_in_moves_no_other_groups(
    tmp_path: Path, tiny_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in of a group whose every candidate was filtered is drawn per group. Before, one generator
    served them in turn, so a near-tie that gave one group a real negative (a stored encoding against a fresh
    one differ by float rounding) shifted every later group's stand-in."""
    import xprt_st.mining.hard_negatives as module

    corpus = _corpus(tmp_path / "c.jsonl", 16)
    out = tmp_path / "mined"
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id"}
    mine(corpus, out, model=tiny_model, progress=False, **settings)
    original = module.positive_aware_filter

    def runs(first_found: bool) -> list[str]:
        def nothing_survives(scores, indices, positive_scores, count, max_ratio):
            chosen, found = original(scores, indices, positive_scores, count, max_ratio=1e-9)
            found[:] = 0
            if first_found:  # the first group's candidate now passes the filter
                chosen[0], found[0] = indices[0, :count], count
            return chosen, found

        monkeypatch.setattr(module, "positive_aware_filter", nothing_survives)
        add_hard_negatives(out, 1, model=tiny_model, seed=3)
        return datasets.load_from_disk(str(out))["negative_1"]

    every_group_drawn, first_not_drawn = runs(False), runs(True)
    assert len(every_group_drawn) >= 4
    assert first_not_drawn[1:] == every_group_drawn[1:]


def test_hard_negatives_that_were_all_filtered_are_said_on_screen_and_in_stats(tmp_path: Path, tiny_model_path) -> None:
    """Before: 43 of 43 groups with every candidate filtered (a weak mining model) got random passages as their
    "hard" negatives, said only in the log at INFO."""
    from typer.testing import CliRunner

    from xprt_st.cli import app

    corpus = _corpus(tmp_path / "c.jsonl", 10)
    out = tmp_path / "mined"
    common = ["--model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    result = CliRunner().invoke(
        app,
        ["mine", str(corpus), "-o", str(out), "--hard-negatives", "1", "--hard-negative-max-ratio", "1e-9", *common],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "stats.json").read_text())["hard_negatives"]
    assert summary["groups_all_filtered"] == summary["groups"] > 0
    assert "had every candidate filtered" in summary["note"] and "random passages" in summary["note"]
    flat = " ".join(result.output.split())
    assert f"{summary['groups']} of {summary['groups']} groups had every candidate filtered" in flat


def test_the_passes_after_a_merge_run_inside_the_folders_lock(
    tmp_path: Path, tiny_model_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: two ``mine --merge DIR --hard-negatives K`` at once both exited 0: the hard-negative and structure
    passes ran after the folder's lock was released, and the folder ended with the last writer's K."""
    from typer.testing import CliRunner

    import xprt_st.mining.after_merge as chain
    from xprt_st.cli import app
    from xprt_st.mining.layout import MiningLayout

    corpus = _corpus(tmp_path / "c.jsonl", 10)
    out = tmp_path / "mined"
    common = ["--model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "-q"]
    assert CliRunner().invoke(app, ["mine", str(corpus), "-o", str(out), *common]).exit_code == 0
    lock = MiningLayout(out).lock().path
    seen: list[bool] = []
    original, original_structure = chain.add_hard_negatives, chain.write_structure_groups

    def watched(*args, **kwargs):
        seen.append(lock.is_file())
        return original(*args, **kwargs)

    def watched_structure(*args, **kwargs):
        seen.append(lock.is_file())
        return original_structure(*args, **kwargs)

    monkeypatch.setattr(chain, "add_hard_negatives", watched)  # the chain after the merge calls both
    monkeypatch.setattr(chain, "write_structure_groups", watched_structure)
    for args in (["mine", "--merge", str(out)], ["mine", str(corpus), "-o", str(out)]):
        result = CliRunner().invoke(app, [*args, "--hard-negatives", "1", "--structure", "titles", *common])
        assert result.exit_code == 0, result.output
    assert seen == [True, True, True, True] and not lock.exists()
