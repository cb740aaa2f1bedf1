"""Faster CPU encoding for the stages that only encode: the model's transformer run by ONNX Runtime or OpenVINO.

sentence-transformers offers ``SentenceTransformer(..., backend="onnx" | "openvino")``, but that path
loads through ``optimum-onnx`` (which needs transformers < 4.58) or ``optimum-intel`` (transformers
< 5.6), and this project needs transformers >= 5.24: neither extra of sentence-transformers installs
beside it. So the transformer is exported here with ``torch.onnx.export`` and run by the runtime
itself, and only the transformer's ``forward`` is replaced: tokenization, sentence-transformers' own
``encode`` (its batching, its length order), pooling and normalisation stay the torch model's, so the
vectors differ from torch's only by the runtime's arithmetic (docs/mining.md gives the measured
difference).

The export is cached beside the run (``OUTPUT/.onnx-cache/<weights hash>/model.onnx``), so a second
run, or a second stage of the same run, loads it instead of exporting again. Training always uses
torch: a replaced ``forward`` refuses to run where gradients are on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from xprt_st.errors import XPRTError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

ENCODE_BACKENDS = ("torch", "onnx", "openvino")
"""``--encode-backend`` values: torch (the default), ONNX Runtime, OpenVINO (both on the CPU)."""

EXTRAS = {"onnx": ("onnxruntime", "onnx"), "openvino": ("openvino", "onnx")}
"""The modules each backend needs (``onnx`` writes the export), installed by ``pip install "xprt-st[NAME]"``."""

OPTION_HELP = (
    "What runs the model for encoding only (never training): torch | onnx | openvino, on the CPU; onnx and "
    'openvino are extras (pip install "xprt-st[onnx]"), export the model once into the run\'s .onnx-cache and '
    "differ from torch by float rounding (docs/mining.md)."
)
"""The help of every command's ``--encode-backend``."""

CACHE_DIR = ".onnx-cache"
"""Folder of the run's output that keeps the exports, one sub-folder per weights hash."""

BACKEND_ATTRIBUTE = "xprt_encode_backend"
"""Attribute a replaced transformer carries: the backend's name (absent: torch)."""


class EncodeBackendError(XPRTError, ValueError):
    """``--encode-backend`` names an unknown backend, one whose extra is not installed, or a GPU device."""


def check_encode_backend(backend: str, device: str | None = None, option: str = "--encode-backend") -> None:
    """Refuse, in one line and before any model loads, a backend that cannot run here.

    Raises:
        EncodeBackendError: an unknown name (with the valid ones), a missing extra (with its pip
            command), or a non-CPU ``device`` for onnx/openvino (they run on the CPU).
    """
    if backend not in ENCODE_BACKENDS:
        raise EncodeBackendError(f"{option} {backend!r} is not one of {list(ENCODE_BACKENDS)}")
    if backend == "torch":
        return
    missing = [name for name in EXTRAS[backend] if importlib.util.find_spec(name) is None]
    if missing:
        raise EncodeBackendError(
            f'{option} {backend} needs {" and ".join(missing)} (not installed): pip install "xprt-st[{backend}]"'
        )
    if device is not None and not str(device).startswith("cpu"):
        raise EncodeBackendError(
            f"{option} {backend} encodes on the CPU; with --device {device} use {option} torch (the GPU is faster)"
        )


def backend_of(model: SentenceTransformer) -> str:
    """The backend that runs ``model``'s transformer: ``torch`` unless :func:`use_encode_backend` replaced it."""
    try:
        return getattr(model[0].auto_model, BACKEND_ATTRIBUTE, "torch")
    except (TypeError, AttributeError, IndexError, KeyError):
        return "torch"


def load_encoder(
    spec: str | Path | SentenceTransformer | None,
    backend: str,
    cache_root: Path,
    device: str | None = None,
    precision: str = "fp32",
) -> SentenceTransformer:
    """A model for an inference-only stage: ``spec`` loaded (a name, a path, None; a loaded model is used as it is),
    run by ``backend`` (:func:`use_encode_backend`, its export cached under ``cache_root``) in ``precision``
    (auto, fp32 or bf16: :func:`xprt_st.precision.resolve_precision` on the model's device)."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.models import load_model
    from xprt_st.precision import resolve_precision, use_precision

    on = device if device is not None or backend == "torch" else "cpu"  # the other backends run on the CPU
    model = spec if isinstance(spec, SentenceTransformer) else load_model(spec, device=on)
    model = use_encode_backend(model, backend, cache_root)
    return use_precision(model, resolve_precision(precision, model.device.type, backend).precision)


def use_encode_backend(
    model: SentenceTransformer, backend: str, cache_root: Path, export: Path | None = None
) -> SentenceTransformer:
    """Run ``model``'s transformer with ``backend`` from now on (in place; returns ``model``); torch does nothing.

    ``export`` is an ONNX file to run instead of the cached export of the model's weights (the
    benchmark's int8 variant). The weights stay in the model, so its identity (a hash of them) is
    unchanged; the backend is recorded on the transformer (:func:`backend_of`).
    """
    check_encode_backend(backend, model.device.type)
    if backend == "torch" or backend_of(model) == backend:
        return model
    import torch

    from xprt_st.encode_runtime import RuntimeForward, export_onnx, runtime_session

    transformer = model[0].auto_model
    path = export if export is not None else export_onnx(model, Path(cache_root) / CACHE_DIR)
    run, names = runtime_session(path, backend, torch.get_num_threads())
    transformer.forward = RuntimeForward(run, names, backend)
    setattr(transformer, BACKEND_ATTRIBUTE, backend)
    return model
