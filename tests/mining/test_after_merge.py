"""The one chain after the merge: every entry point runs it with its seed, and `xprt-st mine` and the quickstart
given the same corpus and settings write the same groups and hard negatives."""

from __future__ import annotations

import shutil
from pathlib import Path

import datasets
import pytest
from typer.testing import CliRunner

import xprt_st.mining.hard_negatives as hard_negatives_module
from tests.test_quickstart_corpus import _write_user_data
from xprt_st.cli import app
from xprt_st.mining.after_merge import AfterMerge, finish_mining, has_hard_negatives
from xprt_st.output_folder import command_folder
from xprt_st.pipeline import run_pipeline
from xprt_st.quickstart.config import QuickstartConfig
from xprt_st.quickstart.run import quickstart_stages


@pytest.fixture
def every_candidate_filtered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group's negatives become the seeded stand-ins, so the seed alone decides them."""
    original = hard_negatives_module.positive_aware_filter

    def nothing_survives(scores, indices, positive_scores, count, max_ratio):
        chosen, found = original(scores, indices, positive_scores, count, max_ratio)
        found[:] = 0
        return chosen, found

    monkeypatch.setattr(hard_negatives_module, "positive_aware_filter", nothing_survives)


def _rows(folder: Path) -> list[dict]:
    return datasets.load_from_disk(str(folder)).to_list()


def test_mine_and_the_quickstart_write_the_same_groups_and_hard_negatives(
    tmp_path: Path, tiny_model_path: Path, every_candidate_filtered: None
) -> None:
    corpus, _ = _write_user_data(tmp_path / "user")
    config = QuickstartConfig(
        output=tmp_path / "quickstart",
        corpus=(str(corpus),),
        text_field="body",
        id_field="doc_id",
        model=str(tiny_model_path),
        recipe="change-only-positive-hard",
        holdout=0.3,
        seed=43,
    )
    mined = tmp_path / "quickstart" / "mined"
    with command_folder(config.output, "quickstart") as folder:  # the quickstart's own stages: mine, hard negatives
        mine_stage, hard_negatives, *_ = quickstart_stages(config.plan(), folder, progress=False)
        run_pipeline([mine_stage, hard_negatives], folder.path)

    out = tmp_path / "mine"
    args = ["mine", str(corpus), "-o", str(out), "--text-field", "body", "--id-field", "doc_id", "--holdout", "0.3"]
    args += ["--seed", "43", "--hard-negatives", "2", "--mining-model", str(tiny_model_path), "-q"]
    args += ["--threshold-quantile", str(config.threshold_quantile), "--max-tokens", str(config.max_seq_length)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    quickstart_rows, mine_rows = _rows(mined), _rows(out)
    assert len(mine_rows) >= 4 and "negative_2" in mine_rows[0]
    assert mine_rows == quickstart_rows  # the same groups, and the same stand-in negatives (seed 43 in both)
    # the seed decides those negatives: seed 0, what `xprt-st mine` drew before, gives others
    other = tmp_path / "seed-0"
    shutil.copytree(out, other)
    finish_mining(other, AfterMerge(hard_negatives=2, seed=0, max_ratio=0.9), model=str(tiny_model_path))
    assert [row["negative_1"] for row in _rows(other)] != [row["negative_1"] for row in mine_rows]


def test_a_folder_that_has_the_hard_negatives_is_not_redone(tmp_path: Path, tiny_model, monkeypatch) -> None:
    from tests.mining.test_mining_merge import _corpus
    from xprt_st.mining import mine

    out = tmp_path / "mined"
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id"}
    mine(_corpus(tmp_path / "c.jsonl", 10), out, model=tiny_model, progress=False, hard_negatives=1, **settings)
    assert has_hard_negatives(out, 1) and not has_hard_negatives(out, 2) and not has_hard_negatives(out, 1, 0.5)

    def refused(*args, **kwargs):
        raise AssertionError("the hard negatives were searched again")

    monkeypatch.setattr("xprt_st.mining.after_merge.add_hard_negatives", refused)
    stats = {"groups": 1}
    assert finish_mining(out, AfterMerge(hard_negatives=1), model=tiny_model, stats=stats) is stats
