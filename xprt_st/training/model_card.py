"""The xPRT section of a trained model's card: the recipe, the mining statistics, every loss term.

sentence-transformers writes the model card (``README.md``) on every save; :class:`~xprt_st.training.trainer.
XPRTTrainer` adds this section before its "Training Details", so the card names every term with its settings
and citation (``get_config_dict`` and ``citation``, as the library's own model card reads them).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from sentence_transformers.base.model import BaseModel
from torch import nn

from xprt_st.training.checkpoints import TRAINING_STATE_DIR

logger = logging.getLogger(__name__)

CARD_SECTION_TITLE = "## xPRT pre-training"
TRAINING_DETAILS = "## Training Details"


def loss_terms(loss: nn.Module) -> list[tuple[str, nn.Module]]:
    """The loss and every loss term inside it (modules with ``citation`` or ``get_config_dict``).

    Submodules of sentence-transformers models (the trained model, the teacher) are skipped.
    """
    skipped: set[int] = set()
    terms = []
    for name, module in loss.named_modules():
        if isinstance(module, BaseModel):
            skipped.update(id(sub) for sub in module.modules())
        if id(module) in skipped:
            continue
        if module is loss or hasattr(type(module), "citation") or hasattr(module, "get_config_dict"):
            terms.append((name or type(loss).__name__, module))
    return terms


def pretraining_section(starting_model: str, loss_tensors: int, metadata: dict[str, Any], loss: nn.Module) -> str:
    """Markdown stating the start, the recipe, the mining statistics and every loss term with its citation.

    Args:
        starting_model: the model the run started from.
        loss_tensors: how many loss-owned tensors the run keeps in its training state (not in the model).
        metadata: the trainer's ``training_metadata`` (``recipe``, ``data``, ``mining_stats``).
        loss: the run's loss (its terms are listed).
    """
    lines = [CARD_SECTION_TITLE, ""]
    lines.append(f"- **Starting model:** `{starting_model}`")
    lines.append(
        f"- **Loss-owned modules** (not part of this model; in `{TRAINING_STATE_DIR}/`): "
        f"{loss_tensors} tensors. A new run from this folder takes its MLM head and builds "
        "the rest fresh; resuming this run uses its `checkpoint-N` folders."
    )
    recipe = metadata.get("recipe")
    if recipe:
        import yaml

        lines += ["", "### Recipe", "", "```yaml", yaml.safe_dump(recipe, sort_keys=False).rstrip(), "```"]
    stats = metadata.get("mining_stats")
    if stats:
        lines += ["", "### Mining statistics of the training data", ""]
        if metadata.get("data"):
            lines.append(f"Data folder: `{metadata['data']}`")
            lines.append("")
        lines += ["| statistic | value |", "|---|---|"]
        for key, value in _flatten(stats):
            lines.append(f"| {key} | {value} |")
    documents = metadata.get("documents")
    if documents:
        holdout = documents.get("holdout") or {}
        lines += [
            "",
            f"Held-out contract: trained on {documents['trained']} documents (fingerprint "
            f"`{documents['trained_fingerprint']}`); {documents['heldout']} held out (fingerprint "
            f"`{documents['heldout_fingerprint']}`, holdout fraction {holdout.get('fraction')}, seed "
            f"{holdout.get('seed')}).",
        ]
    lines += ["", "### Loss terms", ""]
    for name, module in loss_terms(loss):
        config = config_dict(module)
        shown = ", ".join(f"{key}={value!r}" for key, value in config.items() if not isinstance(value, nn.Module))
        lines.append(f"- `{name}`: `{type(module).__name__}`" + (f" ({shown})" if shown else ""))
        citation = _citation(module)
        if citation:
            lines += ["", "  ```bibtex", *("  " + line for line in citation.strip().splitlines()), "  ```", ""]
    return "\n".join(lines).rstrip() + "\n"


def insert_pretraining_section(readme: Path, section: str) -> None:
    """Put ``section`` into the card ``readme`` before its "Training Details" (replacing an earlier one)."""
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if CARD_SECTION_TITLE in text:
        text = text.split(CARD_SECTION_TITLE)[0].rstrip() + "\n\n"
    if TRAINING_DETAILS in text:
        before, after = text.split(TRAINING_DETAILS, 1)
        text = before + section + "\n" + TRAINING_DETAILS + after
    else:
        text = text + ("\n" if text else "") + section
    readme.write_text(text, encoding="utf-8")


def config_dict(module: nn.Module) -> dict[str, Any]:
    """``module.get_config_dict()``, or {} when it has none or it fails (the card is informative only)."""
    getter = getattr(module, "get_config_dict", None)
    if getter is None:
        return {}
    try:
        return dict(getter())
    except Exception as error:  # a term's config is informative only; the card must still be written
        logger.warning("could not read %s.get_config_dict(): %s", type(module).__name__, error)
        return {}


def _citation(module: nn.Module) -> str | None:
    try:
        citation = getattr(module, "citation", None)
    except Exception as error:
        logger.warning("could not read %s.citation: %s", type(module).__name__, error)
        return None
    return citation if isinstance(citation, str) and citation.strip() else None


def _flatten(stats: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += _flatten(value, prefix=f"{name}.")
        elif isinstance(value, float):
            rows.append((name, f"{value:.4g}" if math.isfinite(value) else str(value)))
        elif isinstance(value, list):
            rows.append((name, ", ".join(map(str, value[:10])) + (" ..." if len(value) > 10 else "")))
        else:
            rows.append((name, value))
    return rows
