"""Mined-folder validation: each bad input fails with what, where and how to fix it."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from training_helpers import write_mined

from xprt_st.training.data import MinedDataError, load_mined


def test_a_valid_folder_loads_with_its_stats(mined_dir):
    mined = load_mined(mined_dir)
    assert len(mined.dataset) == 16 and mined.stats["groups"] == 16
    assert mined.dataset.column_names == ["anchor", "positive", "related_2", "related_3", "related_4", "label"]


def test_missing_folder_and_missing_stats(tmp_path):
    with pytest.raises(MinedDataError, match=r"does not exist.*xprt-st mine"):
        load_mined(tmp_path / "nowhere")
    Dataset.from_dict({"anchor": ["a"], "label": [0]}).save_to_disk(str(tmp_path / "plain"))
    with pytest.raises(MinedDataError, match=r"is not a mined dataset: it has no stats\.json"):
        load_mined(tmp_path / "plain")


def test_stats_without_dataset(tmp_path):
    (tmp_path / "stats.json").write_text("{}")
    with pytest.raises(MinedDataError, match=r"no dataset saved with datasets\.save_to_disk"):
        load_mined(tmp_path)


def test_wrong_columns_and_wrong_mining_mode_are_all_reported(tmp_path):
    folder = tmp_path / "spans"
    Dataset.from_dict({"anchor": ["a", "b"], "label": ["x", "y"]}).save_to_disk(str(folder))
    (folder / "stats.json").write_text(json.dumps({"settings": {"pairs": "random-span"}}))
    with pytest.raises(MinedDataError) as caught:
        load_mined(folder, requires={"pairs": "mined"}, min_rows=4)
    message = str(caught.value)
    assert "missing text column 'positive'" in message
    assert "'label' must be int64 document ids" in message
    assert "fewer than the 4 one batch needs" in message
    assert "needs data mined with pairs='mined' but stats.json says pairs='random-span'" in message


def test_random_positive_data_is_refused_by_a_recipe_for_mined_positives(tmp_path):
    folder = write_mined(tmp_path / "random", stats={"settings": {"positive": "random", "pairs": "mined"}})
    assert load_mined(folder, requires={"positive": "random"}).stats["settings"]["positive"] == "random"
    with pytest.raises(MinedDataError, match="positive='mined'"):
        load_mined(folder, requires={"positive": "mined"})


def test_the_fix_for_other_mined_data_names_a_real_command_and_a_short_column_list(tmp_path):
    # data mined with 20 hard negatives given to a recipe that reads 2: the fix is a real `mine --merge` command
    # with the option as the CLI spells it, and the columns are summarised, not listed
    folder = write_mined(tmp_path / "many", stats={"settings": {"hard_negatives": 20}}, negatives=20)
    with pytest.raises(MinedDataError) as caught:
        load_mined(folder, requires={"hard_negatives": 2}, min_rows=10**6)
    message = str(caught.value)
    assert f"xprt-st mine --merge {folder} --hard-negatives 2" in message
    assert "--hard_negatives" not in message
    columns = len(Dataset.load_from_disk(str(folder)).column_names)
    assert "negative_20" not in message and f"and {columns - 8} more." in message


def test_a_structure_recipe_on_the_mined_groups_is_sent_to_the_structure_folder_or_told_there_is_none(tmp_path):
    # before: "mine again with `xprt-st mine ... --pairs structure`", an option mine does not have
    none = {"groups": 0, "note": "the corpus has no titles to pair (none found, or every one dropped)"}
    folder = write_mined(tmp_path / "plain", stats={"settings": {"pairs": "mined"}, "structure": none})
    with pytest.raises(MinedDataError) as caught:
        load_mined(folder, requires={"pairs": "structure"})
    assert f"{folder}/stats.json says the corpus has no titles to pair" in str(caught.value)
    with pytest.raises(MinedDataError, match=r"structure was not written: .* says the corpus has no titles to pair"):
        load_mined(folder / "structure", requires={"pairs": "structure"})
    # a folder mined without --structure: the real command, and where its pairs will be
    other = write_mined(tmp_path / "other", stats={"settings": {"pairs": "mined"}})
    with pytest.raises(MinedDataError) as caught:
        load_mined(other, requires={"pairs": "structure-mixed"})
    assert (
        "--structure titles,headings,links --hard-negatives 2 --structure-mix 0.5` and train on DIR/structure-mixed"
        in (" ".join(str(caught.value).split()))
    )
    # the pairs are there: train on them
    write_mined(other / "structure", stats={"settings": {"pairs": "structure"}})
    with pytest.raises(MinedDataError, match=rf"train on {other}/structure, which this folder's mining wrote"):
        load_mined(other, requires={"pairs": "structure"})


def test_a_structure_folder_without_negatives_is_sent_to_the_pass_that_writes_it(tmp_path):
    """Before: DIR/structure without negatives was told to run `xprt-st mine --merge DIR/structure --hard-negatives
    2`, which fails (DIR/structure is no mining run)."""
    mined = write_mined(tmp_path / "m", stats={"settings": {"pairs": "mined"}})
    structure = write_mined(
        mined / "structure",
        stats={
            "settings": {"pairs": "structure", "structure": "titles,headings", "hard_negatives": 0},
            "derived_from": "..",
        },
    )
    with pytest.raises(MinedDataError) as caught:
        load_mined(structure, requires={"hard_negatives": 2})
    message = " ".join(str(caught.value).split())
    assert f"`xprt-st mine --merge {mined} --structure titles,headings --hard-negatives 2`" in message
    assert f"--merge {structure}" not in message


@pytest.mark.parametrize("key", ["settings", "holdout", "structure"])
def test_a_stats_entry_that_is_no_object_is_named_not_a_traceback(tmp_path, key):
    """Before, a hand-edited stats.json whose ``settings`` was a list ended train's checks in an AttributeError."""
    folder = write_mined(tmp_path / "mined", n_groups=4)
    stats = json.loads((folder / "stats.json").read_text())
    stats[key] = [1, 2]
    (folder / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(MinedDataError, match=rf"stats.json: '{key}' must be a JSON object, found list"):
        load_mined(folder)


def test_pairs_that_do_not_fit_the_recipe_are_fixed_by_a_merge_of_a_stored_run(tmp_path):
    # before: "mine again with `xprt-st mine ... --pairs inverse-cloze`", a re-mine where a merge is enough
    from xprt_st.mining.layout import CONFIG_FILE

    folder = write_mined(tmp_path / "mined", stats={"settings": {"pairs": "mined"}})
    (folder / CONFIG_FILE).write_text("{}", encoding="utf-8")  # the stored run a merge reads its scores from
    with pytest.raises(MinedDataError) as caught:
        load_mined(folder, requires={"pairs": "inverse-cloze"})
    assert f"`xprt-st mine --merge {folder} --pairs inverse-cloze`" in str(caught.value)
    # a folder without the stored run (copied groups only) cannot be merged: mining again is the fix
    copied = write_mined(tmp_path / "copied", stats={"settings": {"pairs": "mined"}})
    with pytest.raises(MinedDataError, match=r"mine again with `xprt-st mine \.\.\. --pairs inverse-cloze`"):
        load_mined(copied, requires={"pairs": "inverse-cloze"})
