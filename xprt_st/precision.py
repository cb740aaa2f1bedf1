"""``--precision auto|fp32|bf16``: which float format runs a model's matrix products, chosen from the hardware.

bf16 autocast cuts the cost of an encoder's matrix products where the device computes bf16 natively:
CUDA devices that support it, and CPUs with AMX or AVX512-BF16. Elsewhere (most laptops, older
servers) PyTorch emulates bf16 and autocast runs far slower than fp32, so ``auto`` asks torch what the
device computes and never guesses from a name. Only the matrix products change: the transformer's
outputs come back as fp32, and pooling, normalisation, similarities, softmaxes and every loss run in
fp32 (the rankings bf16 would tie are decided at full precision).

A model set to bf16 carries the precision on its transformer (:func:`precision_of`), so every record of
a vector it made (stored embeddings, evaluation caches, fingerprints) names it, and a vector of one
precision never stands for another's.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xprt_st.errors import XPRTError

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

PRECISIONS = ("auto", "fp32", "bf16")
"""``--precision`` values of the commands that run a model."""

OPTION_HELP = (
    "auto | fp32 | bf16. auto runs bf16 autocast where the device computes bf16 natively (a CUDA GPU that "
    "supports it, a CPU with AMX or AVX512-BF16) and fp32 elsewhere; similarities and losses stay fp32."
)
"""The help of every command's ``--precision``."""

PRECISION_ATTRIBUTE = "xprt_precision"
"""Attribute a transformer module set to bf16 carries (absent: fp32)."""


class PrecisionError(XPRTError, ValueError):
    """``--precision`` names an unknown value, or bf16 where it cannot run (a non-torch encode backend)."""


@dataclass(frozen=True)
class ResolvedPrecision:
    """The precision that runs and why: what a command prints and records."""

    precision: str
    """fp32 or bf16."""
    reason: str
    """One line: what was asked and what the device computes."""

    def record(self) -> dict[str, str]:
        """The JSON form kept in stats.json, training records, scores and summary.json."""
        return {"precision": self.precision, "precision_reason": self.reason}


def _cpu_bf16_features() -> list[str]:
    """The native bf16 features torch reports for this CPU: AMX tiles, AVX512-BF16 (empty: none)."""
    import torch

    found = []
    cpu = getattr(torch, "cpu", None)
    for name, label in (("_is_amx_tile_supported", "AMX"), ("_is_avx512_bf16_supported", "AVX512-BF16")):
        probe = getattr(cpu, name, None)
        if probe is not None and probe():
            found.append(label)
    return found


def native_bf16(device: str | None = None) -> tuple[bool, str]:
    """Whether ``device`` (None: CUDA when present, else the CPU) computes bf16 natively, and what says so."""
    import torch

    kind = str(device).split(":")[0] if device else ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return True, f"{torch.cuda.get_device_name()} supports bf16"
        return False, "this CUDA device has no native bf16"
    if kind == "cpu":
        features = _cpu_bf16_features()
        if features:
            return True, f"the CPU has {' and '.join(features)}"
        return False, "the CPU has neither AMX nor AVX512-BF16 (bf16 would be emulated, slower than fp32)"
    return False, f"device {device} is not a CPU or CUDA device"


def check_precision(value: str, option: str = "--precision") -> None:
    """Refuse an unknown ``--precision`` value in one line, naming the valid ones, before any work."""
    if value not in PRECISIONS:
        raise PrecisionError(f"{option} {value!r} is not one of {list(PRECISIONS)}")


def resolve_precision(
    requested: str, device: str | None = None, encode_backend: str = "torch", option: str = "--precision"
) -> ResolvedPrecision:
    """The precision that runs for ``requested`` on ``device``: auto follows :func:`native_bf16`.

    A non-torch ``encode_backend`` (ONNX Runtime, OpenVINO) runs its fp32 export: auto picks fp32
    there and an explicit bf16 is refused.

    Raises:
        PrecisionError: an unknown value, or bf16 with a non-torch encode backend.
    """
    check_precision(requested, option)
    if encode_backend != "torch":
        if requested == "bf16":
            raise PrecisionError(f"{option} bf16 runs on torch; --encode-backend {encode_backend} runs fp32")
        return ResolvedPrecision("fp32", f"--encode-backend {encode_backend} runs fp32")
    if requested == "fp32":
        return ResolvedPrecision("fp32", "asked for fp32")
    native, why = native_bf16(device)
    if requested == "bf16":
        return ResolvedPrecision("bf16", f"asked for bf16 ({why})")
    return ResolvedPrecision("bf16" if native else "fp32", f"auto: {why}")


def precision_of(model: SentenceTransformer) -> str:
    """The precision ``model``'s transformer runs in: bf16 after :func:`use_precision`, else fp32."""
    try:
        return getattr(model[0], PRECISION_ATTRIBUTE, "fp32")
    except (TypeError, AttributeError, IndexError, KeyError):
        return "fp32"


INNER_FORWARD = "xprt_inner_forward"
"""Attribute keeping a ``forward`` the module had of its own (an instance attribute) before bf16 wrapped it."""


def _bf16_forward(module: torch.nn.Module, features: dict[str, Any], **kwargs: object) -> dict[str, Any]:
    """The module's forward under bf16 autocast on its device, floating outputs cast back to fp32.

    Bound to the module with :class:`types.MethodType`, so a deep copy of the model (fine-tuning copies its start)
    calls the copy's own forward, never the original's. A forward the module had of its own runs inside."""
    import torch

    inner = getattr(module, INNER_FORWARD, None)
    device_type = next(module.parameters()).device.type
    with torch.autocast(device_type, dtype=torch.bfloat16):
        out = inner(features, **kwargs) if inner is not None else type(module).forward(module, features, **kwargs)
    return {
        key: value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value
        for key, value in out.items()
    }


def use_precision(model: SentenceTransformer, precision: str) -> SentenceTransformer:
    """Run ``model``'s transformer module under ``precision`` from now on (in place; returns ``model``).

    bf16 runs the first module's ``forward`` in ``torch.autocast`` on the model's device and casts its floating
    outputs back to fp32, so pooling, normalisation and everything after run in fp32. fp32 undoes it. Meant for
    stages that only encode; training sets precision through the trainer.
    """
    if precision not in ("fp32", "bf16"):
        raise PrecisionError(f"precision must be fp32 or bf16 here (resolve 'auto' first), got {precision!r}")
    module = model[0]
    if precision_of(model) == precision:
        return model
    if precision == "fp32":
        inner = module.__dict__.pop(INNER_FORWARD, None)
        del module.forward  # the bound wrapper set below
        if inner is not None:
            module.forward = inner
        delattr(module, PRECISION_ATTRIBUTE)
        return model
    if "forward" in module.__dict__:  # a forward of the module's own (a test's probe, another wrapper) runs inside
        setattr(module, INNER_FORWARD, module.__dict__["forward"])
    module.forward = types.MethodType(_bf16_forward, module)
    setattr(module, PRECISION_ATTRIBUTE, precision)
    return model


@contextlib.contextmanager
def applied_precision(model: SentenceTransformer, precision: str) -> Iterator[SentenceTransformer]:
    """``model`` under ``precision`` (:func:`use_precision`) inside the block, its own precision again after it: for
    a stage that encodes with a model its caller owns and keeps using (a model given to ``mine(model=...)``)."""
    before = precision_of(model)
    use_precision(model, precision)
    try:
        yield model
    finally:
        use_precision(model, before)
