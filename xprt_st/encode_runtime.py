"""Export a sentence-transformers model's transformer to ONNX and run it with ONNX Runtime or OpenVINO.

The machinery of :mod:`xprt_st.encode_backend` (which chooses and checks a backend, and imports this module when
a model is handed to a runtime): the export, cached by a hash of the weights; the runtime sessions; the stand-in
for the transformer's ``forward``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

RUNTIMES = ("onnx", "openvino")
"""The runtimes this module runs an export with; :mod:`xprt_st.encode_backend` checks a user's choice before any
export, and this module, the floor below it, imports nothing of it."""
EXPORT_FILE = "model.onnx"
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


def export_onnx(model: SentenceTransformer, cache: Path) -> Path:
    """The ONNX export of ``model``'s transformer, ``cache/<weights hash>/model.onnx``; exported once.

    The graph takes the inputs the model's tokenizer gives (of :data:`INPUT_NAMES`) with any batch size
    and length, and returns ``last_hidden_state``. It is written to a temporary name and renamed, so an
    interrupted export is never read as a finished one.
    """
    transformer = model[0].auto_model
    folder = Path(cache) / transformer_sha256(transformer)
    path = folder / EXPORT_FILE
    if path.is_file():
        logger.info("encode backend: reusing the export %s", path)
        return path
    folder.mkdir(parents=True, exist_ok=True)
    sample = model.preprocess(["an example passage", "a second, longer example passage to export with"])
    names = [name for name in INPUT_NAMES if name in sample]
    body = _LastHiddenState(transformer, names).eval()
    tmp = folder / f"{EXPORT_FILE}.tmp-{os.getpid()}"
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
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return (lambda feeds: session.run(None, feeds)[0]), [node.name for node in session.get_inputs()]
    if backend == "openvino":
        import openvino

        compiled = openvino.Core().compile_model(
            str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
        )
        request = compiled.create_infer_request()
        names = [node.get_any_name() for node in compiled.inputs]
        return (lambda feeds: request.infer(feeds)[compiled.output(0)].copy()), names
    raise ValueError(f"no runtime for backend {backend!r}; use one of {list(RUNTIMES)}")


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
