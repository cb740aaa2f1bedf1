"""The dependency bounds are the tested versions: each lower bound is what CI installs, and this run satisfies it.

CI installs with ``-c .ci/constraints.txt``, which pins every dependency of ``pyproject.toml`` (direct and
extras) to its lower bound; a bound lowered without its pin (or a pin without its bound) is caught here.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return list({Requirement(r).name: Requirement(r) for r in listed}.values())


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[_normal(name)] = pinned.strip()
    return pins


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lower_bound(requirement: Requirement) -> str:
    bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    assert len(bounds) == 1, f"{requirement}: give exactly one >= lower bound"
    return bounds[0]


def test_every_lower_bound_is_the_version_ci_pins() -> None:
    pins = _pins()
    requirements = _requirements()
    for requirement in requirements:
        name = _normal(requirement.name)
        assert name in pins, f"{requirement} has no pin in .ci/constraints.txt: CI would test another version"
        assert pins[name] == _lower_bound(requirement), (
            f"{requirement}: CI pins {pins[name]}, so the lower bound {_lower_bound(requirement)} is untested"
        )
    assert set(pins) == {_normal(r.name) for r in requirements}, "a pin without a requirement in pyproject.toml"


def test_this_run_uses_allowed_versions() -> None:
    for requirement in _requirements():
        try:
            installed = Version(version(requirement.name))
        except PackageNotFoundError:
            continue  # an extra that this environment does not install (e.g. ray outside the test extra)
        assert installed >= Version(_lower_bound(requirement)), f"{requirement.name} {installed} is below {requirement}"


def test_transformers_reads_a_float_warmup_as_a_ratio() -> None:
    # training/recipe_setup.py passes warmup_steps=warmup_ratio; transformers 4.x would read 0.1 as 0.1 steps
    # (tests/training/test_warmup.py checks the rate at step 1).
    transformers = next(r for r in _requirements() if r.name == "transformers")
    assert Version(_lower_bound(transformers)) >= Version("5.0")
