"""--precision: auto follows what torch reports of the device (mocked both ways), bf16 encodes near fp32, records."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from xprt_st import precision as precision_module
from xprt_st.precision import (
    PrecisionError,
    check_precision,
    native_bf16,
    precision_of,
    resolve_precision,
    use_precision,
)


@pytest.fixture
def cpu_features(monkeypatch):
    """``set(amx, avx512_bf16)``: what torch's CPU probes answer from now on."""

    def set_features(amx: bool, avx512_bf16: bool) -> None:
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)

    return set_features


@pytest.mark.parametrize(
    ("amx", "avx512_bf16", "expected"),
    [(True, True, "bf16"), (False, True, "bf16"), (True, False, "bf16"), (False, False, "fp32")],
)
def test_auto_on_the_cpu_follows_amx_or_avx512_bf16(cpu_features, amx, avx512_bf16, expected) -> None:
    cpu_features(amx, avx512_bf16)
    resolved = resolve_precision("auto", "cpu")
    assert resolved.precision == expected
    if expected == "fp32":
        assert "neither AMX nor AVX512-BF16" in resolved.reason
    else:
        assert ("AMX" in resolved.reason) == amx and ("AVX512-BF16" in resolved.reason) == avx512_bf16


def test_explicit_values_and_backends_do_not_follow_the_hardware(cpu_features) -> None:
    cpu_features(False, False)
    assert resolve_precision("fp32", "cpu").precision == "fp32"
    assert resolve_precision("bf16", "cpu").precision == "bf16"  # asked for: runs, emulated, and the reason says so
    assert "neither" in resolve_precision("bf16", "cpu").reason
    cpu_features(True, True)
    assert resolve_precision("auto", "cpu", encode_backend="onnx").precision == "fp32"
    with pytest.raises(PrecisionError, match="--encode-backend onnx runs fp32"):
        resolve_precision("bf16", "cpu", encode_backend="onnx")


def test_an_unknown_value_names_the_valid_ones() -> None:
    with pytest.raises(PrecisionError, match=r"--precision 'fp8' is not one of \['auto', 'fp32', 'bf16'\]"):
        check_precision("fp8")


def test_cuda_without_a_device_is_not_native(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    native, why = native_bf16("cuda")
    assert not native and "no native bf16" in why


def test_auto_without_a_device_asks_the_cpu_when_there_is_no_cuda(monkeypatch, cpu_features) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_features(True, False)
    assert native_bf16(None) == (True, "the CPU has AMX")


def test_bf16_encodes_near_fp32_with_fp32_outputs_and_undoes(tiny_model) -> None:
    texts = ["a perfect game is a game in which no batter reaches base", "the ford f series is a line of trucks"]
    fp32 = tiny_model.encode(texts, convert_to_numpy=True)
    use_precision(tiny_model, "bf16")
    assert precision_of(tiny_model) == "bf16"
    bf16 = tiny_model.encode(texts, convert_to_numpy=True)
    assert bf16.dtype == np.float32
    cosine = (fp32 * bf16).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cosine.min() > 0.999
    assert not np.array_equal(fp32, bf16)  # the products did run in bf16
    use_precision(tiny_model, "fp32")
    assert precision_of(tiny_model) == "fp32"
    np.testing.assert_array_equal(tiny_model.encode(texts, convert_to_numpy=True), fp32)


def test_a_deep_copy_runs_its_own_weights(tiny_model) -> None:
    # fine-tuning deep-copies its start: the copy's forward must be the copy's, not the original's
    use_precision(tiny_model, "bf16")
    twin = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for parameter in twin.parameters():
            parameter.add_(0.5)
    assert precision_of(twin) == "bf16"
    assert not np.allclose(twin.encode(["hello"]), tiny_model.encode(["hello"]), atol=1e-3)


def test_use_precision_wants_a_resolved_value(tiny_model) -> None:
    with pytest.raises(PrecisionError, match="resolve 'auto' first"):
        use_precision(tiny_model, "auto")


def test_the_record_names_precision_and_reason() -> None:
    record = precision_module.ResolvedPrecision("bf16", "auto: the CPU has AMX").record()
    assert json.loads(json.dumps(record)) == {"precision": "bf16", "precision_reason": "auto: the CPU has AMX"}


def test_a_bf16_score_is_kept_apart_from_an_fp32_one(tiny_model) -> None:
    from xprt_st.evaluation.run import model_fingerprint
    from xprt_st.mining.layout.embeddings import encoder_identity

    fp32_key, fp32_identity = model_fingerprint(tiny_model), encoder_identity(tiny_model, "")
    use_precision(tiny_model, "bf16")
    assert model_fingerprint(tiny_model) != fp32_key
    assert encoder_identity(tiny_model, "") == fp32_identity | {"precision": "bf16"}
    use_precision(tiny_model, "fp32")
    assert model_fingerprint(tiny_model) == fp32_key  # fp32 keys stay those of earlier runs


def test_evaluate_refuses_a_bad_precision_before_any_model_loads(tmp_path) -> None:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    result = CliRunner().invoke(app, ["evaluate", "/nonexistent-model", "--precision", "half", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "--precision 'half' is not one of" in result.output


def test_train_fp16_on_a_cpu_warns_what_it_costs_before_any_work(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from xprt_st.recipe import load_recipe
    from xprt_st.training.run import resolved_precision

    recipe = load_recipe("self-only", overrides={"training.precision": "fp16"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level("WARNING", logger="xprt_st.training.run"):
        _, resolved = resolved_precision(recipe)
    assert resolved.precision == "fp16"  # as asked: a warning, not a refusal
    assert any("--precision fp16 on a CPU" in record.getMessage() for record in caplog.records)
    caplog.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level("WARNING", logger="xprt_st.training.run"):
        resolved_precision(recipe)
    assert not caplog.records  # on a GPU fp16 is what the user chose it for
