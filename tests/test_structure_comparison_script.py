"""benchmarks/structure_comparison.py: prepare here, train in parallel processes, pack without weights."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from tests.test_compare import _config

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "structure_comparison.py"


def _run(*args: str) -> int:
    """The script as a user runs it (its workers are spawned processes that import it by path)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False).returncode


def test_prepare_then_parallel_training_gives_compares_report_and_a_pack_without_weights(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    config = _config(tmp_path, tiny_model_path)
    raw = yaml.safe_load(config.read_text())
    raw["seeds"] = [1, 2]
    config.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    assert _run("prepare", f"{config}:{run}") == 0
    assert (run / "mined" / "stats.json").is_file() and (run / "data" / "pairs-random-span" / "stats.json").is_file()
    assert not (run / "seed-1").exists()  # nothing trained by prepare
    assert _run("train", f"{config}:{run}", "--workers", "2", "--threads", "1") == 0
    for seed in (1, 2):
        for recipe in ("change-only-positive", "random-span-contrastive"):
            marker = json.loads((run / f"seed-{seed}" / recipe / "COMPLETE").read_text())
            assert marker["seed"] == seed and marker["recipe"] == recipe
    report = (run / "compare.md").read_text()
    assert "### Seed 1" in report and "### Seed 2" in report and "random-span-contrastive" in report
    # the same folder with another mining setting: refused in one message before any work, as compare refuses it
    raw["mining"]["threshold_quantile"] = 0.5
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(raw))
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "prepare", f"{changed}:{run}"], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr
    assert "was made with other settings" in refused.stderr
    packed = tmp_path / "out" / "results.tar.gz"
    assert _run("pack", f"{config}:{run}", "--output", str(packed)) == 0
    with tarfile.open(packed) as archive:
        names = archive.getnames()
    assert any(name.endswith("/compare.md") for name in names)
    scores = [name for name in names if name.endswith(".json") and "/scores/" in name]
    assert len(scores) == 2 * (1 + 4)  # the start and 4 models, each alone and fused with BM25 (scores/KEY/hybrid/)
    assert sum("/hybrid/" in name for name in scores) == 1 + 4
    assert any(name.endswith("/seed-2/random-span-contrastive/COMPLETE") for name in names)
    assert not [name for name in names if name.endswith((".safetensors", ".bin", ".pt", "vocab.txt"))]
