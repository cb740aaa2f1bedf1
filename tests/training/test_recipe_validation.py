"""Recipes: every packaged file parses, settings merge in one order, and all problems are reported at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from xprt_st.objectives import OBJECTIVES
from xprt_st.recipe import RECIPES_DIR, SETTINGS, RecipeError, available_recipes, build_recipe, load_recipe

EXPECTED = {
    "xprt",
    "change-only-positive",
    "random-positive",
    "random-span-contrastive",
    "retromae",
    "tsdae",
    "self-only",
}


def test_packaged_recipes_exist_and_open_with_their_run_command():
    assert EXPECTED <= set(available_recipes())
    assert (Path(__file__).resolve().parents[2] / "recipes").resolve() == RECIPES_DIR
    for name in available_recipes():
        text = (RECIPES_DIR / f"{name}.yaml").read_text()
        comments = [line for line in text.splitlines() if line.startswith("#")]
        assert any(f"xprt-st train --recipe {name} " in line for line in comments), name
        assert any(line.startswith("# Override:") for line in comments), name


def test_baselines_change_only_the_objective():
    """Same groups, steps, batch and schedule: recipes may not set training or retention values."""
    import yaml

    for name in available_recipes():
        raw = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text())
        assert "training" not in raw and "retention" not in raw, name
        assert raw["objective"]["name"] in OBJECTIVES


def test_settings_hold_the_paper_values():
    raw = {"name": "t", "objective": {"name": "cross-passage"}}
    continued = build_recipe(raw)
    assert continued.training.learning_rate == 1e-6 and continued.retention.enabled
    assert (continued.retention.start, continued.retention.end) == (40.0, 0.0)
    bert = build_recipe(raw, setting="from-bert")
    assert bert.training.epochs == 6.0 and not bert.retention.enabled
    assert bert.training.batch_size == continued.training.batch_size  # shared default, one place
    assert set(SETTINGS) == {"continued", "from-bert"}


def test_overrides_win_over_setting_and_recipe():
    recipe = load_recipe("change-only-positive", overrides={"training.max_steps": 7, "training.learning_rate": 3e-5})
    assert recipe.training.max_steps == 7 and recipe.training.learning_rate == 3e-5
    assert recipe.source.endswith("change-only-positive.yaml")


def test_every_problem_is_reported_with_key_and_valid_values(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nsetting: continued\nobjectve: {name: cross-passage}\n"
        "training: {batch_size: 1, learnign_rate: 0.1, precision: fp8}\n"
        "retention: {enabled: yes-please}\n"
    )
    with pytest.raises(RecipeError) as caught:
        load_recipe(bad)
    message = str(caught.value)
    assert "objectve: unknown key (did you mean 'objective'?)" in message
    assert "objective: missing" in message
    assert "training.learnign_rate: unknown key (did you mean 'learning_rate'?)" in message
    assert "training.precision: 'fp8' is not valid; choose one of fp32, bf16, fp16" in message
    assert "retention.enabled: must be true or false" in message
    assert len(caught.value.problems) >= 5


def test_objective_arguments_are_bound_without_building():
    with pytest.raises(RecipeError, match=r"objective.args.temprature: not an argument of CrossPassageLoss; valid: "):
        build_recipe({"name": "t", "objective": {"name": "cross-passage", "args": {"temprature": 0.1}}})
    with pytest.raises(RecipeError, match=r"'nope' is not a registered objective; valid: .*cross-passage"):
        build_recipe({"name": "t", "objective": {"name": "nope"}})


def test_unknown_recipe_name_lists_the_packaged_ones():
    with pytest.raises(RecipeError, match=r"packaged recipes: .*xprt"):
        load_recipe("no-such-recipe")
