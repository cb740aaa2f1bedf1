"""Export a sentence-transformers model's transformer to ONNX and run it with ONNX Runtime or OpenVINO.

The machinery of :mod:`xprt_st.encode_backend` (which chooses and checks a backend): the export, cached
by a hash of the weights and of what else decides the graph (:func:`export_key`); the runtime sessions (ONNX
Runtime's and OpenVINO's telemetry off); the stand-in for the transformer's ``forward``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from xprt_st.errors import XPRTError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)


class ExportCacheError(XPRTError, ValueError):
    """The export cache of ``--encode-backend`` cannot be used: a file where its folder should be, a folder where
    the export should be, or an export the runtime cannot read (the message says what to delete or move)."""


RUNTIMES = ("onnx", "openvino")
"""The runtimes this module runs an export with; :mod:`xprt_st.encode_backend` checks a user's choice before any
export, and this module, the floor below it, imports nothing of it."""
EXPORT_FILE = "model.onnx"
EXPORT_RECORD = "export.json"
"""Beside the export: its size, written after it, so a truncated file is told from a finished one."""
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
"""The transformer inputs an export can take; a model's export takes those its tokenizer gives."""


def transformer_sha256(transformer: nn.Module) -> str:
    """A hash of the transformer's weights (names and bytes): the key of its cached export."""
    digest = hashlib.sha256()
    for name, tensor in sorted(transformer.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def export_key(model: SentenceTransformer, names: list[str]) -> str:
    """The key of ``model``'s cached export: a hash of everything that decides the graph and its numbers.

    The weights (:func:`transformer_sha256`), the transformer's configuration (an edited ``hidden_act`` or attention
    setting exports another graph from the same weights; its path and the library version that wrote it left out),
    the inputs the tokenizer gives, the opset and the exporter's (torch's) version.
    """
    transformer = model[0].auto_model
    config = transformer.config.to_dict() if hasattr(transformer, "config") else {}
    for volatile in ("_name_or_path", "transformers_version"):
        config.pop(volatile, None)
    config["_attn_implementation"] = getattr(getattr(transformer, "config", None), "_attn_implementation", None)
    decided = {"config": config, "inputs": names, "opset": OPSET, "torch": torch.__version__.split("+")[0]}
    digest = hashlib.sha256(transformer_sha256(transformer).encode())
    digest.update(json.dumps(decided, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _check_cache(cache: Path, folder: Path, path: Path) -> None:
    """Refuse, in one line, a cache path that is not what the export writes (a file where its folder goes, a folder
    where the export goes): neither is deleted, as neither is provably the cache's."""
    for where in (cache, folder):
        if where.exists() and not where.is_dir():
            raise ExportCacheError(
                f"{where} is not a folder, where the ONNX exports of --encode-backend are kept; move it away "
                "(the export is written again there)"
            )
    if path.exists() and not path.is_file():
        raise ExportCacheError(
            f"{path} is not a file, where the ONNX export is kept; move it away (the export is written again there)"
        )


def _remove_killed_exports(folder: Path) -> None:
    """Delete the temporary files of exports whose process is gone (a killed export), so none stays forever."""
    for tmp in folder.glob(f"{EXPORT_FILE}.tmp-*"):
        try:
            os.kill(int(tmp.name.rsplit("-", 1)[1]), 0)
        except ValueError:
            continue  # not a name this module writes
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
            logger.info("encode backend: removed %s, left by a killed export", tmp)
        except PermissionError:
            continue  # another user's live process


def export_onnx(model: SentenceTransformer, cache: Path) -> Path:
    """The ONNX export of ``model``'s transformer, ``cache/<export key>/model.onnx``; exported once.

    The graph takes the inputs the model's tokenizer gives (of :data:`INPUT_NAMES`) with any batch size
    and length, and returns ``last_hidden_state``. It is written to a temporary name and renamed, with its size in
    ``export.json`` beside it: an interrupted export is never read as a finished one, a cached file of another
    size (truncated) is exported again, and a killed export's temporary file is removed by the next one.

    Raises:
        ExportCacheError: the cache, its sub-folder or the export's name is of another kind (one line).
    """
    transformer = model[0].auto_model
    sample = model.preprocess(["an example passage", "a second, longer example passage to export with"])
    names = [name for name in INPUT_NAMES if name in sample]
    cache = Path(cache)
    folder = cache / export_key(model, names)
    path = folder / EXPORT_FILE
    _check_cache(cache, folder, path)
    record = folder / EXPORT_RECORD
    if path.is_file():
        try:
            size = json.loads(record.read_text(encoding="utf-8")).get("bytes")
        except (OSError, ValueError, AttributeError):
            size = None
        if size == path.stat().st_size:
            logger.info("encode backend: reusing the export %s", path)
            return path
        logger.warning("encode backend: %s is incomplete or unrecorded (%s bytes); exporting again", path, size)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_killed_exports(folder)
    body = _LastHiddenState(transformer, names).eval()
    tmp = folder / f"{EXPORT_FILE}.tmp-{os.getpid()}"
    try:
        with torch.no_grad():
            torch.onnx.export(
                body,
                tuple(sample[name] for name in names),
                str(tmp),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={name: {0: "batch", 1: "length"} for name in [*names, "last_hidden_state"]},
                opset_version=OPSET,
                dynamo=False,
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    record.write_text(json.dumps({"bytes": path.stat().st_size}) + "\n", encoding="utf-8")
    logger.info("encode backend: exported the transformer to %s", path)
    return path


def runtime_session(
    path: Path, backend: str, threads: int
) -> tuple[Callable[[dict[str, np.ndarray]], np.ndarray], list[str]]:
    """A function from the export's inputs (int64 arrays) to ``last_hidden_state``, run by ``backend``, and their names.

    Both runtimes use ``threads`` threads (torch's count, so a comparison is like for like); OpenVINO
    is held to float32 arithmetic (on CPUs with bfloat16 it would otherwise compute in bfloat16).
    """
    if backend == "onnx":
        # ONNX Runtime's telemetry is on by default: at import it writes a device id and an event store under
        # ~/.cache/Microsoft/DeveloperTools, and sessions log events. Off unless the user set the variable.
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import onnxruntime

        if hasattr(onnxruntime, "disable_telemetry_events"):
            onnxruntime.disable_telemetry_events()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime's own classes (InvalidProtobuf, Fail ...), not importable by name
            raise ExportCacheError(_unreadable(path, backend, error)) from error
        return (lambda feeds: session.run(None, feeds)[0]), [node.name for node in session.get_inputs()]
    if backend == "openvino":
        openvino = _import_openvino()
        try:
            compiled = openvino.Core().compile_model(
                str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
            )
        except RuntimeError as error:
            raise ExportCacheError(_unreadable(path, backend, error)) from error
        request = compiled.create_infer_request()
        names = [node.get_any_name() for node in compiled.inputs]
        return (lambda feeds: request.infer(feeds)[compiled.output(0)].copy()), names
    raise ValueError(f"no runtime for backend {backend!r}; use one of {list(RUNTIMES)}")


def _import_openvino() -> ModuleType:
    """``import openvino`` with its telemetry declined: on import, OpenVINO's model-conversion tools send a usage event
    and write a client id and counters under ``~/intel`` unless a consent file there says no. The consent check is
    answered "declined" for that import only; a user's own consent file is neither read nor changed."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # a version without it sends nothing
        import openvino

        return openvino
    check = OptInChecker.check
    OptInChecker.check = lambda self, *args, **kwargs: ConsentCheckResult.DECLINED
    try:
        import openvino
    finally:
        OptInChecker.check = check
    return openvino


def _unreadable(path: Path, backend: str, error: BaseException) -> str:
    """The one line naming an export the runtime cannot read."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    return f"{backend} cannot read the export {path} ({reason}); delete it and run again to export it anew"


class _LastHiddenState(nn.Module):
    """The transformer as a function of positional input tensors to its last hidden state (what is exported)."""

    def __init__(self, transformer: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.transformer = transformer
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.names, inputs, strict=True))
        return self.transformer(**features, return_dict=True).last_hidden_state


class RuntimeForward:
    """Stands in for a transformer's ``forward``: the same named inputs, ``last_hidden_state`` from the runtime."""

    def __init__(self, run: Callable[[dict[str, np.ndarray]], np.ndarray], names: list[str], backend: str) -> None:
        self.run = run
        self.names = names
        self.backend = backend

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **kwargs: object,
    ) -> dict[str, torch.Tensor]:
        """``last_hidden_state`` of the batch; refuses gradients (training) and requests for other outputs."""
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"this model encodes with --encode-backend {self.backend}, which only encodes; training uses torch"
            )
        if kwargs.get("output_hidden_states"):
            raise RuntimeError(f"--encode-backend {self.backend} gives the last hidden state only; use torch")
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        missing = [name for name in self.names if feeds.get(name) is None]
        if missing:
            raise RuntimeError(f"--encode-backend {self.backend}: the export needs {missing}, which the batch lacks")
        arrays = {name: feeds[name].cpu().numpy().astype(np.int64) for name in self.names}
        return {"last_hidden_state": torch.from_numpy(self.run(arrays))}
