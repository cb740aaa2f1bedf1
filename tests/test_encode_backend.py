"""--encode-backend: onnx and openvino encode as torch does, export once per weights, refuse training, record
themselves in the stored vectors and the evaluation cache key, and a missing extra is one line before any work.

The runtime tests need the extras (``pip install -e ".[onnx,openvino]"``), which CI installs (.ci/run).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.evaluation.conftest import write_beir
from tests.mining.test_mining_merge import _corpus
from xprt_st.cli import app
from xprt_st.encode_backend import (
    CACHE_DIR,
    EXTRAS,
    EncodeBackendError,
    backend_of,
    check_encode_backend,
    use_encode_backend,
)
from xprt_st.encode_runtime import ExportCacheError
from xprt_st.mining import mine
from xprt_st.mining.hard_negatives import add_hard_negatives

runner = CliRunner(env={"COLUMNS": "250"})  # wide enough that rich wraps no message
SETTINGS = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.25}
TEXTS = [
    "a",
    "Cats sleep most of the day and hunt at night.",
    "Green tea is brewed with water below boiling, and black tea with boiling water. " * 6,  # past 64 tokens
    "Why does rain fall from clouds?",
    "Snow forms from ice crystals in cold clouds when the air below is freezing too.",
]


def _runtime(backend: str) -> None:
    pytest.importorskip("onnx", reason='the export needs the extra: pip install "xprt-st[onnx]"')
    pytest.importorskip("onnxruntime" if backend == "onnx" else "openvino", reason=f'pip install "xprt-st[{backend}]"')


@pytest.mark.parametrize(
    ("command", "backend", "missing"),
    [
        (["mine", "CORPUS", "--output", "OUT"], "onnx", ["onnxruntime"]),
        (["evaluate", "default", "--output", "OUT"], "openvino", ["openvino", "onnx"]),
        (["quickstart", "--output", "OUT"], "onnx", ["onnxruntime", "onnx"]),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_option_and_the_pip_command_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_work, command, backend, missing
) -> None:
    for name in EXTRAS[backend]:  # None: what importlib finds for a module that is not installed
        if name in missing:
            monkeypatch.setitem(sys.modules, name, None)
        elif not _installed(name):  # without the extras every module of it is missing
            missing = [*missing, name]
    corpus = _corpus(tmp_path / "c.jsonl", 4)
    out = tmp_path / "out"
    args = [str(corpus) if a == "CORPUS" else str(out) if a == "OUT" else a for a in command]
    result = runner.invoke(app, [*args, "--encode-backend", backend])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    needs = " and ".join(missing)
    assert lines == [
        f'error: --encode-backend {backend} needs {needs} (not installed): pip install "xprt-st[{backend}]"'
    ]
    assert not out.exists()  # nothing written, nothing loaded (no_work fails any model load)


def test_an_unknown_backend_or_a_gpu_device_is_refused_with_the_valid_choice(no_work, tmp_path: Path) -> None:
    with pytest.raises(EncodeBackendError, match=r"--encode-backend 'tensorrt' is not one of \['torch', 'onnx', 'o"):
        check_encode_backend("tensorrt")
    result = runner.invoke(app, ["evaluate", "default", "-o", str(tmp_path / "o"), "--encode-backend", "tensorrt"])
    assert result.exit_code == 2 and "is not one of ['torch', 'onnx', 'openvino']" in result.output
    check_encode_backend("torch", "cuda")  # torch runs anywhere
    if "onnxruntime" in sys.modules or _installed("onnxruntime"):
        with pytest.raises(
            EncodeBackendError, match="encodes on the CPU; with --device cuda use --encode-backend torch"
        ):
            check_encode_backend("onnx", "cuda")


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_a_backend_encodes_as_torch_does_and_exports_once(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    _runtime(backend)
    reference = copy.deepcopy(tiny_model).encode(TEXTS, batch_size=2, normalize_embeddings=True)
    use_encode_backend(tiny_model, backend, tmp_path)
    assert backend_of(tiny_model) == backend
    vectors = tiny_model.encode(TEXTS, batch_size=2, normalize_embeddings=True)  # batches of other shapes
    cosines = np.sum(vectors.astype(np.float64) * reference, axis=1)
    assert np.abs(1 - cosines).max() < 1e-5 and np.abs(vectors - reference).max() < 1e-4
    exports = list((tmp_path / CACHE_DIR).glob("*/model.onnx"))
    assert len(exports) == 1
    written = exports[0].stat().st_mtime_ns

    calls: list[object] = []
    monkeypatch.setattr(torch.onnx, "export", lambda *args, **kwargs: calls.append(args))
    fresh = _fresh(tiny_model)
    use_encode_backend(fresh, backend, tmp_path)
    assert calls == [] and exports[0].stat().st_mtime_ns == written  # the second run loads the cached export
    assert np.array_equal(fresh.encode(TEXTS, batch_size=2, normalize_embeddings=True), vectors)


def _fresh(model):
    """A torch copy of ``model`` (its weights; the replaced forward is an instance attribute, dropped here)."""
    clone = copy.deepcopy(model)
    transformer = clone[0].auto_model
    del transformer.forward
    del transformer.xprt_encode_backend
    return clone


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_a_backend_model_refuses_training(tiny_model, tmp_path: Path, backend: str) -> None:
    _runtime(backend)
    use_encode_backend(tiny_model, backend, tmp_path)
    features = tiny_model.preprocess(TEXTS[:2])
    with pytest.raises(RuntimeError, match=f"--encode-backend {backend}, which only encodes; training uses torch"):
        tiny_model(features)
    with torch.inference_mode():
        assert tiny_model(features)["sentence_embedding"].shape == (2, 32)


def test_stored_vectors_record_the_backend_and_are_not_reused_across_backends(tmp_path: Path, tiny_model) -> None:
    _runtime("onnx")
    corpus = _corpus(tmp_path / "c.jsonl", 12)
    by_torch, by_onnx = tmp_path / "torch", tmp_path / "onnx"
    # torch in fp32, the precision ONNX Runtime runs: the backends alone differ
    mine(corpus, by_torch, model=copy.deepcopy(tiny_model), progress=False, precision="fp32", **SETTINGS)
    mine(corpus, by_onnx, model=copy.deepcopy(tiny_model), progress=False, encode_backend="onnx", **SETTINGS)
    assert json.loads((by_torch / "embeddings.json").read_text())["encode_backend"] == "torch"
    assert json.loads((by_onnx / "embeddings.json").read_text())["encode_backend"] == "onnx"
    assert list((by_onnx / CACHE_DIR).glob("*/model.onnx")) and not (by_torch / CACHE_DIR).exists()
    _assert_same_groups(by_torch, by_onnx)  # the backends' vectors differ by float rounding only

    def reused(folder: Path, backend: str) -> int:
        return add_hard_negatives(folder, 1, model=copy.deepcopy(tiny_model), batch_size=16, encode_backend=backend)[
            "reused_vectors"
        ]

    assert reused(by_torch, "onnx") == 0 and reused(by_onnx, "torch") == 0  # never across backends
    assert reused(by_onnx, "onnx") > 0 and reused(by_torch, "torch") > 0


def _assert_same_groups(first: Path, second: Path) -> None:
    """The same anchors and related passages in both folders, their scores equal to 1e-6."""
    rows = [[json.loads(line) for line in (f / "groups_meta.jsonl").read_text().splitlines()] for f in (first, second)]
    assert len(rows[0]) == len(rows[1]) > 0
    for one, other in zip(*rows, strict=True):
        assert one.keys() == other.keys()
        for key, value in one.items():
            if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
                assert np.allclose(value, other[key], rtol=0, atol=1e-6), key
            else:
                assert value == other[key], key


def test_the_evaluation_cache_key_names_a_non_torch_backend_only(tiny_model, tmp_path: Path) -> None:
    _runtime("onnx")
    from xprt_st.evaluation.run import model_fingerprint

    torch_key = model_fingerprint(tiny_model)
    assert model_fingerprint(copy.deepcopy(tiny_model)) == torch_key  # torch keys are those of before
    assert model_fingerprint(use_encode_backend(tiny_model, "onnx", tmp_path)) != torch_key


def test_mine_and_evaluate_cli_with_onnx_agree_with_torch(tiny_model_path: Path, tmp_path: Path) -> None:
    _runtime("onnx")
    corpus = _corpus(tmp_path / "c.jsonl", 12)
    common = ["--mining-model", str(tiny_model_path), "--max-tokens", "32", "--min-tokens", "8", "--id-field", "id"]
    common += ["--precision", "fp32"]  # torch at the precision ONNX Runtime runs: the backends alone differ
    for backend in ("torch", "onnx"):
        result = runner.invoke(
            app, ["mine", str(corpus), "-o", str(tmp_path / backend), *common, "-q", "--encode-backend", backend]
        )
        assert result.exit_code == 0, result.output
    _assert_same_groups(tmp_path / "torch", tmp_path / "onnx")
    export = next((tmp_path / "onnx" / CACHE_DIR).glob("*/model.onnx"))
    written = export.stat().st_mtime_ns
    again = [
        "mine",
        str(corpus),
        "-o",
        str(tmp_path / "onnx"),
        *common,
        "-q",
        "--encode-backend",
        "onnx",
        "--overwrite",
    ]
    result = runner.invoke(app, again)  # mines again from scratch: the export is kept and loaded
    assert result.exit_code == 0, result.output
    assert export.stat().st_mtime_ns == written

    beir = write_beir(tmp_path / "tinybeir")
    scores = {}
    for backend in ("torch", "onnx", "onnx"):  # the second onnx run reuses its --output (the cache is its own)
        out = tmp_path / f"eval-{backend}"
        args = ["evaluate", str(tiny_model_path), "--tasks", str(beir), "-o", str(out), "--no-cache", "-q"]
        args += ["--precision", "fp32"]
        result = runner.invoke(app, [*args, "--encode-backend", backend])
        assert result.exit_code == 0, result.output
        scores[backend] = json.loads((out / "scores.json").read_text())
    assert (tmp_path / "eval-onnx" / CACHE_DIR).is_dir()
    torch_score = scores["torch"]["scores"][0]["score"]
    assert abs(scores["onnx"]["scores"][0]["score"] - torch_score) < 1e-4


def test_quickstart_with_onnx_trains_on_torch_and_scores_as_torch(tiny_model_path: Path, tmp_path: Path) -> None:
    _runtime("onnx")
    from safetensors.numpy import load_file

    summaries = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / backend
        args = ["quickstart", "-o", str(out), "--model", str(tiny_model_path), "--max-documents", "12"]
        # fp32 in both: the backends are compared, torch's encodings at the precision ONNX Runtime runs
        result = runner.invoke(
            app,
            [*args, "--max-steps", "2", "--batch-size", "8", "-q", "--encode-backend", backend, "--precision", "fp32"],
        )
        assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
        summaries[backend] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    torch_run, onnx_run = summaries["torch"], summaries["onnx"]
    assert torch_run["scores"] and torch_run["titles"]["queries"] > 0  # python-faq and titles:DIR were scored
    assert onnx_run["config"]["encode_backend"] == "onnx"
    # the start and the trained model were both exported (mining, hard negatives and scoring share the cache)
    assert len(list((tmp_path / "onnx" / "mined" / CACHE_DIR).glob("*/model.onnx"))) == 2
    weights = [load_file(str(tmp_path / b / "model" / "model.safetensors")) for b in ("torch", "onnx")]
    assert weights[0].keys() == weights[1].keys()
    assert all(np.allclose(weights[0][k], weights[1][k], rtol=0, atol=1e-6) for k in weights[0])  # torch trained
    for model, scores in torch_run["scores"].items():
        for task, score in scores.items():
            assert abs(onnx_run["scores"][model][task] - score) < 1e-4, (model, task)
    for key in ("label_free", "titles"):
        for field in ("start", "model"):
            assert abs(onnx_run[key][field] - torch_run[key][field]) < 1e-4, (key, field)


def test_the_export_follows_the_config_and_a_damaged_cache_is_exported_again_or_named(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the cache was keyed by the weights alone (an edited ``hidden_act`` reused the old export and its
    scores); a truncated ``model.onnx`` was an 89-line InvalidProtobuf traceback, ``.onnx-cache`` as a file or
    ``model.onnx`` as a folder a traceback, and a killed export's temporary file stayed forever."""
    _runtime("onnx")
    import onnxruntime

    from xprt_st.encode_runtime import EXPORT_FILE, export_onnx

    cache = tmp_path / CACHE_DIR
    first = export_onnx(tiny_model, cache)
    relu = copy.deepcopy(tiny_model)
    relu[0].auto_model.config.hidden_act = "relu"
    assert export_onnx(relu, cache).parent != first.parent  # the same weights, another graph
    # truncated: exported again (not an InvalidProtobuf traceback)
    whole = first.read_bytes()
    first.write_bytes(whole[: len(whole) // 3])
    dead = first.parent / f"{EXPORT_FILE}.tmp-999999999"  # left by a killed export
    dead.write_bytes(b"partial")
    assert export_onnx(tiny_model, cache) == first and first.read_bytes() == whole and not dead.exists()
    # damaged with its size kept: the runtime's error is one line naming the file and the fix
    first.write_bytes(b"\0" * len(whole))
    with pytest.raises(ExportCacheError, match=r"onnx cannot read the export .*model.onnx .*delete it"):
        use_encode_backend(copy.deepcopy(tiny_model), "onnx", tmp_path)
    # a folder where the export goes, a file where the cache goes: one line each, nothing deleted
    first.unlink()
    first.mkdir()
    with pytest.raises(ExportCacheError, match=r"model.onnx is not a file, where the ONNX export is kept"):
        export_onnx(tiny_model, cache)
    other = tmp_path / "other"
    other.mkdir()
    (other / CACHE_DIR).write_text("mine")
    with pytest.raises(ExportCacheError, match=r"\.onnx-cache is not a folder"):
        use_encode_backend(copy.deepcopy(tiny_model), "onnx", other)
    assert (other / CACHE_DIR).read_text() == "mine" and first.is_dir()
    # ONNX Runtime's session telemetry is off too (what its import writes is kept off by the variable: next test)
    calls: list[bool] = []
    monkeypatch.setattr(onnxruntime, "disable_telemetry_events", lambda: calls.append(True), raising=False)
    use_encode_backend(copy.deepcopy(relu), "onnx", tmp_path)
    assert calls


def test_the_runtimes_write_nothing_in_the_users_home(tiny_model_path: Path, tmp_path: Path) -> None:
    """Before: ONNX Runtime wrote a device id and an event store under ~/.cache/Microsoft/DeveloperTools, and
    OpenVINO a client id and counters under ~/intel (its import sends a usage event), without a word."""
    import os
    import subprocess

    _runtime("onnx")
    _runtime("openvino")
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import sys\n"
        "from xprt_st.encode_backend import load_encoder\n"
        "for backend in ('onnx', 'openvino'):\n"
        "    load_encoder(sys.argv[1], backend, sys.argv[2]).encode(['a passage'])\n"
    )
    env = {**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    env.setdefault("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tiny_model_path), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(str(path.relative_to(home)) for path in home.rglob("*")) == []
