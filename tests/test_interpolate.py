"""Weight interpolation: the two ends exact, the middle the average, other architectures refused, and the
label-free choice of alpha through the real CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from typer.testing import CliRunner

from tests.heldout_helpers import write_heldout
from xprt_st.cli import app
from xprt_st.interpolate import ArchitectureMismatchError, interpolate, interpolate_state, parse_alphas

TEXTS = ["the cat sat on the mat", "rain falls on the plain", "tea is served at four"]


def _trained(model: SentenceTransformer) -> SentenceTransformer:
    """The model with every weight moved, as training would move it."""
    moved = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return moved


def _encode(model: SentenceTransformer) -> np.ndarray:
    return model.encode(TEXTS, convert_to_numpy=True)


def test_alpha_0_and_1_are_the_ends_exactly_and_0_5_the_average(tiny_model):
    trained = _trained(tiny_model)
    assert np.array_equal(_encode(interpolate(tiny_model, trained, 0.0)), _encode(tiny_model))
    assert np.array_equal(_encode(interpolate(tiny_model, trained, 1.0)), _encode(trained))
    half = interpolate(tiny_model, trained, 0.5).state_dict()
    start, end = tiny_model.state_dict(), trained.state_dict()
    for name, tensor in half.items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, (start[name] + end[name]) / 2, rtol=0, atol=1e-7), name
        else:
            assert torch.equal(tensor, start[name]), name
    assert not np.allclose(_encode(tiny_model), _encode(trained))  # the ends differ, so the checks above bite


def test_interpolate_state_is_the_formula_on_plain_tensors():
    mixed = interpolate_state({"w": torch.tensor([0.0, 2.0])}, {"w": torch.tensor([4.0, -2.0])}, 0.25)
    assert mixed["w"].tolist() == [1.0, 1.0]


def test_other_architectures_are_refused(tiny_model, tiny_model_path):
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    cls_pooled = SentenceTransformer(
        modules=[Transformer(str(tiny_model_path), max_seq_length=64), Pooling(32, "cls")], device="cpu"
    )
    with pytest.raises(ArchitectureMismatchError, match="pooling_mode: 'mean' vs 'cls'"):
        interpolate(tiny_model, cls_pooled, 0.5)
    shorter = copy.deepcopy(tiny_model)
    del shorter[0].auto_model.encoder.layer[1]
    with pytest.raises(ArchitectureMismatchError, match="tensors only in the start"):
        interpolate(tiny_model, shorter, 0.5)


def test_alphas_are_parsed_and_checked():
    assert parse_alphas("0, 0.25,0.5,0.5,1") == [0.0, 0.25, 0.5, 1.0]
    with pytest.raises(ValueError, match="outside"):
        parse_alphas("0,1.5")
    with pytest.raises(ValueError, match="'x' is not a number"):
        parse_alphas("0,x")


@pytest.fixture
def two_models(tmp_path, tiny_model) -> tuple[Path, Path]:
    start, trained = tmp_path / "start", tmp_path / "run"
    tiny_model.save(str(start))
    _trained(tiny_model).save(str(trained))
    # a trained run folder holds the loss-owned modules beside the model: they must never travel
    (trained / "training_state").mkdir()
    (trained / "training_state" / "loss_modules.safetensors").write_bytes(b"not a model part")
    return start, trained


def test_cli_writes_a_plain_model_without_loss_modules(tmp_path, two_models):
    start, trained = two_models
    out = tmp_path / "half"
    result = CliRunner().invoke(app, ["interpolate", str(start), str(trained), "--alpha", "0.5", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert not (out / "training_state").exists()
    expected = interpolate(SentenceTransformer(str(start)), SentenceTransformer(str(trained)), 0.5)
    assert np.array_equal(_encode(SentenceTransformer(str(out))), _encode(expected))
    assert "alpha = 0.5" in (out / "README.md").read_text()


def test_cli_refuses_other_architectures_before_writing(tmp_path, two_models, tiny_model_path):
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    start, _ = two_models
    other = tmp_path / "cls"
    SentenceTransformer(modules=[Transformer(str(tiny_model_path), max_seq_length=64), Pooling(32, "cls")]).save(
        str(other)
    )
    out = tmp_path / "never"
    result = CliRunner().invoke(app, ["interpolate", str(start), str(other), "--alpha", "0.5", "--output", str(out)])
    assert result.exit_code == 2
    assert "do not share an architecture" in " ".join(result.output.split())
    assert not (out / "modules.json").exists()


def test_cli_selects_alpha_by_the_label_free_task(tmp_path, two_models):
    start, trained = two_models
    texts = {label: [f"note {label} part {i} on subject {label + i}" for i in range(4)] for label in range(3)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2]), (1, 2, [3, 0]), (2, 1, [0, 3])])
    out = tmp_path / "picked"
    result = CliRunner().invoke(
        app,
        [
            "interpolate",
            str(start),
            str(trained),
            "--alphas",
            "0,0.5,1",
            "--select",
            f"mined:{mined}",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads((out / "interpolation.json").read_text())
    scores = {row["alpha"]: row["score"] for row in record["alphas"]}
    assert list(scores) == [0.0, 0.5, 1.0]
    best = max(scores.values())
    assert record["selected_alpha"] == min(alpha for alpha, score in scores.items() if score == best)
    assert record["alphas"][0]["difference"] == 0.0 and record["alphas"][0]["knn_overlap_at_10"] == 1.0
    assert f"picked alpha = {record['selected_alpha']:g}" in " ".join(result.output.split())
    expected = interpolate(SentenceTransformer(str(start)), SentenceTransformer(str(trained)), record["selected_alpha"])
    assert np.array_equal(_encode(SentenceTransformer(str(out))), _encode(expected))


def test_cli_needs_a_heldout_part_to_select(tmp_path, two_models):
    start, trained = two_models
    (tmp_path / "plain").mkdir()
    out = tmp_path / "x"
    args = ["interpolate", str(start), str(trained), "--alphas", "0,1", "--select", f"mined:{tmp_path / 'plain'}"]
    result = CliRunner().invoke(app, [*args, "--output", str(out)])
    assert result.exit_code == 2
    assert "has no held-out part" in " ".join(result.output.split())
    assert not out.exists()


def test_cli_refuses_a_folder_of_the_users_files_or_a_mined_folder_before_loading_models(tmp_path, two_models):
    start, trained = two_models
    user = tmp_path / "u"
    user.mkdir()
    (user / "README.md").write_text("# my notes\n")
    (user / "config.json").write_text('{"mine": true}')
    mined = write_heldout(tmp_path / "m", {0: ["a b", "c d"], 1: ["e f", "g h"]}, [(0, 0, [1]), (1, 1, [0])])
    (mined / "stats.json").write_text("{}")
    mined_before = sorted(p.relative_to(mined) for p in mined.rglob("*"))
    for out in (user, mined):
        result = CliRunner().invoke(app, ["interpolate", str(start), str(trained), "--alpha", "0.5", "-o", str(out)])
        assert result.exit_code == 2, result.output
        assert "holds files that xprt-st interpolate did not write" in " ".join(result.output.split())
        assert "Traceback" not in result.output
    assert (user / "README.md").read_text() == "# my notes\n" and (user / "config.json").read_text() == '{"mine": true}'
    assert sorted(p.relative_to(mined) for p in mined.rglob("*")) == mined_before


def test_cli_replaces_its_own_model_only_with_overwrite(tmp_path, two_models):
    """A rerun with another alpha reuses nothing: it is refused (the model there stays alpha 0's) or, with
    --overwrite, mixes the weights again; interpolate has no stage a rerun could take stale."""
    start, trained = two_models
    out = tmp_path / "mix"
    args = ["interpolate", str(start), str(trained), "-o", str(out)]
    assert CliRunner().invoke(app, [*args, "--alpha", "0"]).exit_code == 0
    refused = CliRunner().invoke(app, [*args, "--alpha", "1"])
    assert refused.exit_code == 2 and "pass --overwrite" in " ".join(refused.output.split())
    assert np.array_equal(_encode(SentenceTransformer(str(out))), _encode(SentenceTransformer(str(start))))
    assert CliRunner().invoke(app, [*args, "--alpha", "1", "--overwrite"]).exit_code == 0
    expected = SentenceTransformer(str(trained))
    assert np.array_equal(_encode(SentenceTransformer(str(out))), _encode(expected))


def test_cli_refuses_a_trained_model_whose_record_names_another_start(tmp_path, two_models):
    """Before: ``interpolate START TRAINED`` averaged a trained model whose record names another starting model."""
    start, trained = two_models
    other = tmp_path / "other-start"
    other.mkdir()
    record = trained / "training_state" / "config.json"
    record.write_text(json.dumps({"format": 1, "starting_model": str(other)}))
    out = tmp_path / "mixed"
    result = CliRunner().invoke(app, ["interpolate", str(start), str(trained), "--alpha", "0.5", "--output", str(out)])
    assert result.exit_code == 2, result.output
    flat = "".join(result.output.split("\n"))
    assert f"was trained from {other}" in flat and f"Give START {other}" in flat and not out.exists()
    # the record names the start (another spelling of its path): mixed
    record.write_text(json.dumps({"format": 1, "starting_model": str(start / ".." / start.name)}))
    result = CliRunner().invoke(app, ["interpolate", str(start), str(trained), "--alpha", "0.5", "--output", str(out)])
    assert result.exit_code == 0, result.output
