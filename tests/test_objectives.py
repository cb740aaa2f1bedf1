"""The objective registry's argument bounds agree with the losses: what a recipe may set, the loss builds.

Recipes are checked against :attr:`Objective.arg_bounds` when read, so a bad value is refused before any model
loads; these tests keep the table true to the losses' own checks, in both directions, on the tiny model.
"""

from __future__ import annotations

import sys

import pytest

from xprt_st.objectives import OBJECTIVES, Bound, bind_args, build_loss

EDGE = 1e-3


def _inside(bound: Bound) -> list[float]:
    """Accepted values at the edges of ``bound`` (the edge itself when it is closed)."""
    values = []
    if bound.low is not None:
        values.append(bound.low + EDGE if bound.low_open else bound.low)
    if bound.high is not None:
        values.append(bound.high - EDGE if bound.high_open else bound.high)
    return values


def _outside(bound: Bound) -> list[float]:
    values = []
    if bound.low is not None:
        values.append(bound.low if bound.low_open else bound.low - EDGE)
    if bound.high is not None:
        values.append(bound.high if bound.high_open else bound.high + EDGE)
    return values


BOUNDED = [
    (name, arg)
    for name, objective in OBJECTIVES.items()
    for arg in objective.arg_bounds
    if arg not in objective.fixed_args  # self-only fixes xp_weight and cross_weight to 0
]

LOSS_CHECKED = {
    ("xprt", "xp_weight"), ("xprt", "cross_weight"), ("xprt", "self_weight"), ("xprt", "mlm_weight"),
    ("xprt", "unif_weight"), ("xprt", "temperature"), ("xprt", "encoder_mask_ratio"), ("xprt", "decoder_mask_ratio"),
    ("xprt", "prediction_ratio"), ("xprt", "uniformity_t"), ("cross-passage", "temperature"),
    ("retromae", "encoder_mask_ratio"), ("retromae", "decoder_mask_ratio"),
}  # fmt: skip
"""Bounds the loss itself enforces when built; the others are stricter than the loss (a value it would take
and fail with later, or train nonsense with: 0 condition vectors, a zero or negative temperature or weight)."""


def _integer(name: str, arg: str) -> bool:
    return arg == "num_condition_vectors"


CONTEXT = {"encoder_mask_ratio": {"mlm_weight": 0, "self_weight": 0}}
"""XPRTLoss masks nothing at encoder_mask_ratio 0, which only the cross fill-in term accepts: MLM and self off."""


@pytest.mark.parametrize(("name", "arg"), BOUNDED)
def test_what_the_registry_accepts_the_loss_builds(name: str, arg: str, tiny_model) -> None:
    bound = OBJECTIVES[name].arg_bounds[arg]
    for value in _inside(bound):
        value = int(value) if _integer(name, arg) else value
        context = CONTEXT.get(arg, {}) if OBJECTIVES[name].arg_rules is not None else {}
        args, problems = bind_args(name, {**context, arg: value})
        assert problems == [], (arg, value)
        build_loss(name, tiny_model, args, data_args=_data_args(name))


def _data_args(name: str) -> dict[str, object] | None:
    """The arguments an objective counts from its training groups, from two passages (the hybrid teacher's BM25)."""
    from xprt_st.mining.bm25 import BM25Lexicon

    return {"lexicon": BM25Lexicon.fit(["a first passage", "another one"])} if OBJECTIVES[name].data_args else None


@pytest.mark.parametrize(("name", "arg"), sorted(LOSS_CHECKED))
def test_what_the_loss_refuses_the_registry_refuses_first(name: str, arg: str, tiny_model) -> None:
    bound = OBJECTIVES[name].arg_bounds[arg]
    for value in _outside(bound):
        with pytest.raises(ValueError):
            build_loss(name, tiny_model, {arg: value}, data_args=_data_args(name))
        loss_class = OBJECTIVES[name].loss_class.split(":")[1]
        expected = f"objective.args.{arg}: {value!r} is out of range; {loss_class} accepts a number {bound.describe()}"
        assert bind_args(name, {arg: value})[1] == [expected]


def test_reading_a_recipe_never_imports_the_training_package() -> None:
    # The registry sits below the recipe loader: validation does not reach up into the trainer's package.
    import subprocess

    code = (
        "import sys; from xprt_st.recipe import load_recipe; load_recipe('xprt'); load_recipe('tsdae'); "
        "print(sorted(m for m in sys.modules if m.startswith('xprt_st.training')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
