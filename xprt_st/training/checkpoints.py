"""Checkpoint folders: which ones a run can resume from, and whether the next one fits on its disk.

A ``checkpoint-N`` folder is usable when every file the Trainer and :class:`~xprt_st.training.trainer.XPRTTrainer`
write is there and reads back: ``trainer_state.json`` (written last) and ``training_state/config.json`` parse
as JSON, the first naming the step of the folder's name; ``optimizer.pt`` and ``scheduler.pt`` exist; every
``*.safetensors`` file is as long as its header says (a file cut by a kill or a full disk is shorter); the
optimizer, scheduler, scaler and RNG files load with a weights-only ``torch.load`` (memory-mapped, so an optimizer
file is not read into memory). A folder that fails gets a one-line reason naming the file, so
``--resume last`` can skip it with a warning and a rerun can say exactly what to delete.

Before the first training step, :func:`space_problem` compares the free space of the output folder's disk with
the size of one checkpoint (:func:`checkpoint_bytes`: model, loss-owned modules and the AdamW moments of
everything trained); a write that fails anyway is reported by :class:`CheckpointWriteError` naming the folder,
the disk and the bytes.
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
from collections.abc import Iterable
from pathlib import Path

import torch

from xprt_st.disk import describe_disk, format_bytes, mount_point
from xprt_st.errors import XPRTError

logger = logging.getLogger(__name__)

TRAINING_STATE_DIR = "training_state"
"""Folder beside the serving model that holds what continuing pre-training needs and serving does not."""
LOSS_STATE_FILE = "loss_modules.safetensors"
TRAINING_CONFIG_FILE = "config.json"
TRAINER_STATE_FILE = "trainer_state.json"
TORCH_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt")
"""Checkpoint files the Trainer reloads with ``torch.load(weights_only=True)``, besides ``rng_state*.pth``."""
REQUIRED_STATE_FILES = ("optimizer.pt", "scheduler.pt")
"""Of those, the ones every xprt-st checkpoint holds: without them the Trainer resumes AdamW and the learning-rate
schedule from scratch without a word (``scaler.pt`` exists only with fp16, the RNG files are optional to it)."""
CHECKPOINT_MARGIN_BYTES = 1 << 20
"""Added to a checkpoint's tensor and tokenizer bytes for the configs, model card, scheduler and RNG files (a
checkpoint of the tests' tiny BERT holds 60 kB of them)."""
ADAM_MOMENTS = 2
"""Tensors of optimizer state per trained parameter (AdamW's first and second moments), saved in each checkpoint."""


class CheckpointSpaceError(XPRTError, OSError):
    """The output folder's disk has less free space than one checkpoint needs; nothing was trained."""


class CheckpointWriteError(XPRTError, OSError):
    """A checkpoint or the final model could not be written; the message names the folder and its disk."""

    exit_code = 1  # stopped after work that is kept
    heading = "training stopped"


def checkpoint_folders(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir``, newest (highest N) first."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        prefix, _, step = child.name.partition("-")
        if child.is_dir() and prefix == "checkpoint" and step.isdigit():
            found.append((int(step), child))
    return [child for _, child in sorted(found, reverse=True)]


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (one line naming the file); None when complete and readable."""
    folder = Path(checkpoint)
    for name in (TRAINER_STATE_FILE, f"{TRAINING_STATE_DIR}/{TRAINING_CONFIG_FILE}"):
        path = folder / name
        if not path.is_file():
            return f"no {name} (a checkpoint interrupted while it was being written)"
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"{name} is not readable JSON ({error})"
    missing = [name for name in REQUIRED_STATE_FILES if not (folder / name).is_file()]
    if missing:
        return f"no {' and no '.join(missing)} (resuming would restart the optimizer and its schedule from scratch)"
    prefix, _, number = folder.name.partition("-")
    try:
        step = json.loads((folder / TRAINER_STATE_FILE).read_text(encoding="utf-8")).get("global_step")
    except AttributeError:
        step = None
    if prefix == "checkpoint" and number.isdigit() and step != int(number):
        return (
            f"{TRAINER_STATE_FILE} says step {step}, not {number} as the folder's name does (a copied or edited "
            "file): the run would resume at another step than the one its weights were saved at"
        )
    for path in sorted(folder.rglob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem is not None:
            return f"{path.relative_to(folder)} {problem}"
    torch_files = [folder / name for name in TORCH_STATE_FILES] + sorted(folder.glob("rng_state*.pth"))
    for path in torch_files:
        if path.is_file():
            problem = torch_file_problem(path)
            if problem is not None:
                return f"{path.name} {problem}"
    return None


def safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file ``path`` is broken (shorter than its header says, or no header), else None.

    Reads only the header: 8 bytes of header length, then the JSON that gives every tensor's byte range.
    """
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            (header_length,) = struct.unpack("<Q", handle.read(8))
            if header_length > size - 8:
                return f"is cut short ({size} bytes, less than its {header_length}-byte header)"
            header = json.loads(handle.read(header_length))
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError, OSError) as error:
        return f"has no readable safetensors header ({type(error).__name__}: {error})"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_length + max(ends, default=0)
    if size < expected:
        return f"is cut short ({size} of {expected} bytes)"
    return None


def torch_file_problem(path: Path) -> str | None:
    """Why the Trainer's ``torch.load(path, weights_only=True)`` would fail (cut short, or pickled objects), else None.

    Loads memory-mapped under the globals the Trainer itself allows, so the check costs little and refuses
    exactly what resuming would refuse.
    """
    from transformers.trainer_pt_utils import safe_globals

    try:
        with safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError...: all mean "unreadable"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "weights_only" in str(error).lower() or type(error).__name__ == "UnpicklingError":
            return f"holds pickled objects that a weights-only load refuses ({first[:160]})"
        return f"cannot be loaded ({type(error).__name__}: {first[:160]})"
    return None


def last_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` in ``output_dir`` that is complete and readable, or None.

    Each newer folder that is not (see :func:`checkpoint_problem`) is skipped with a warning that names it and
    says why.
    """
    for folder in checkpoint_folders(output_dir):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        logger.warning("skipping checkpoint %s: %s", folder, problem)
    return None


def continuation(output_dir: str | Path) -> str:
    """How a stage that trains into ``output_dir`` goes on from what an earlier run of the same settings left there
    (the caller has compared the settings, e.g. by the stage's fingerprint): ``"kept"`` a finished model,
    ``"resume"`` from the newest whole checkpoint (a run stopped before its final save), ``"restart"`` over what a
    run stopped before a whole checkpoint left (nothing to keep: train's ``--overwrite`` deletes it), ``"train"`` an
    empty or missing folder."""
    folder = Path(output_dir)
    if (folder / "modules.json").is_file():
        return "kept"
    if last_complete_checkpoint(folder) is not None:
        return "resume"
    return "restart" if folder.is_dir() and any(folder.iterdir()) else "train"


def unusable_checkpoints_message(output_dir: str | Path, option: str = "--output") -> str:
    """What to do with an ``output_dir`` whose checkpoints are all unusable: each named with its reason, and the fix.

    The same text answers a plain rerun and ``--resume last``, so neither sends the user to the other.
    """
    folders = checkpoint_folders(output_dir)
    reasons = "; ".join(f"{folder.name}: {checkpoint_problem(folder)}" for folder in folders)
    paths = " ".join(str(folder) for folder in folders)
    return (
        f"{output_dir} holds no complete checkpoint to resume from ({reasons}). Nothing in it can be resumed: "
        f"delete it (rm -r {paths}) and rerun the same command without --resume to start again, or choose another "
        f"{option}."
    )


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of ``tensors`` as saved (element count times element size)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def checkpoint_bytes(
    model_tensors: Iterable[torch.Tensor],
    loss_tensors: Iterable[torch.Tensor],
    trained_parameters: Iterable[torch.Tensor],
    tokenizer_bytes: int = 0,
) -> int:
    """Bytes one ``checkpoint-N`` takes: the model, the loss-owned tensors, AdamW's two moments of every trained
    parameter (in its dtype), the tokenizer's files, and :data:`CHECKPOINT_MARGIN_BYTES` for the small files.
    """
    moments = ADAM_MOMENTS * tensor_bytes(p for p in trained_parameters if p.requires_grad)
    return (
        tensor_bytes(model_tensors) + tensor_bytes(loss_tensors) + moments + tokenizer_bytes + CHECKPOINT_MARGIN_BYTES
    )


def saved_tokenizer_bytes(tokenizer: object) -> int:
    """Bytes of the files ``tokenizer.save_pretrained`` writes (measured in a temporary folder; 0 without a tokenizer).

    Tokenizers range from under 1 MB (BERT's vocabulary) to tens of MB (multilingual ones), so they are measured,
    not guessed.
    """
    import tempfile

    save = getattr(tokenizer, "save_pretrained", None)
    if save is None:
        return 0
    with tempfile.TemporaryDirectory() as folder:
        save(folder)
        return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def space_problem(output_dir: str | Path, one_checkpoint: int, whole_run: int | None = None) -> str | None:
    """Why training into ``output_dir`` would fail for lack of space (one checkpoint does not fit), else None.

    When one checkpoint fits but ``whole_run`` bytes (the checkpoints the run keeps at once plus the final model)
    do not, a warning says so and training goes on: the first checkpoints will be written.
    """
    mount = mount_point(output_dir)
    free = shutil.disk_usage(mount).free
    if free < one_checkpoint:
        return (
            f"{output_dir} is on the disk mounted at {mount}, which has {format_bytes(free)} ({free} bytes) free; "
            f"one checkpoint of this run needs about {format_bytes(one_checkpoint)} ({one_checkpoint} bytes: model, "
            "loss modules and optimizer state). Free space there or choose an --output on a larger disk; nothing was "
            "trained."
        )
    if whole_run is not None and free < whole_run:
        logger.warning(
            "%s is on the disk mounted at %s with %s free; this run's checkpoints and final model need about %s. "
            "Checkpoint less often (a larger --save-steps), keep fewer (training.save_total_limit), or free space "
            "before it fills up.",
            output_dir,
            mount,
            format_bytes(free),
            format_bytes(whole_run),
        )
    return None


def write_error(folder: str | Path, error: BaseException, one_checkpoint: int | None = None) -> CheckpointWriteError:
    """A :class:`CheckpointWriteError` for a failed write of ``folder``: the folder, its disk, free bytes, the fix."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    needed = f"; a checkpoint needs about {format_bytes(one_checkpoint)}" if one_checkpoint else ""
    return CheckpointWriteError(
        f"could not write {folder} on {describe_disk(folder)}{needed}: {type(error).__name__}: {first}. Free space "
        "on that disk (or choose another --output), then rerun with --resume last: a half-written checkpoint is "
        "skipped."
    )
