"""The mining model: loaded once on first need, its prompt, its token budget, batched (multi-GPU) encoding."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from xprt_st.mining.config import MiningConfig, MiningConfigError
from xprt_st.mining.passages import PassageSplitter

logger = logging.getLogger(__name__)


class MiningEncoder:
    """Encode passages with the mining model of ``config`` (or the already loaded ``model``).

    Args:
        config: the run's settings (model, device, prompt, batch size, passage lengths).
        model: an already loaded SentenceTransformer; else ``config.model`` is loaded on first use.
    """

    def __init__(self, config: MiningConfig, model: Any = None) -> None:
        self.config = config
        self._model = model
        self._pool: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            from xprt_st.models import load_model

            self._model = load_model(self.config.model, device=self.config.device)
        return self._model

    def prompt_text(self) -> str:
        """The prompt prepended to every passage ("" without one); checks a prompt name against the model."""
        if self.config.prompt_name is not None:
            prompts = getattr(self.model, "prompts", {}) or {}
            if self.config.prompt_name not in prompts:
                raise MiningConfigError(
                    f"prompt_name={self.config.prompt_name!r} is not a prompt of the model; it has {sorted(prompts)}. "
                    'Use --prompt "passage: " to give the text directly.'
                )
            return prompts[self.config.prompt_name]
        return self.config.prompt or ""

    def splitter(self) -> PassageSplitter:
        """The passage splitter, ``max_tokens`` capped to what the model reads after special and prompt tokens."""
        tokenizer = self.model.tokenizer
        budget = self.config.max_tokens
        max_length = getattr(self.model, "max_seq_length", None)
        if max_length:
            prompt = self.prompt_text()
            prompt_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
            special = tokenizer.num_special_tokens_to_add(pair=False)
            budget = min(budget, max_length - special - prompt_tokens)
            if budget < self.config.max_tokens:
                logger.info("max_tokens capped from %d to %d by the model", self.config.max_tokens, budget)
        return PassageSplitter(
            tokenizer,
            max_tokens=budget,
            min_tokens=min(self.config.min_tokens, budget),
            overlap_tokens=min(self.config.overlap_tokens, budget - 1),
            max_passages=self.config.max_passages,
        )

    def encode(self, passages: list[str]) -> np.ndarray:
        """L2-normalised passage vectors, batched; several GPUs encode in parallel through a process pool."""
        kwargs: dict[str, Any] = {
            "batch_size": self.config.batch_size,
            "convert_to_numpy": True,
            "normalize_embeddings": True,
            "show_progress_bar": False,
        }
        if self.config.prompt_name is not None:
            kwargs["prompt_name"] = self.config.prompt_name
        elif self.config.prompt is not None:
            kwargs["prompt"] = self.config.prompt
        if self._pool is None and self.config.device is None and cuda_device_count() > 1:
            self._pool = self.model.start_multi_process_pool()
        if self._pool is not None:
            kwargs["pool"] = self._pool
        return np.asarray(self.model.encode(passages, **kwargs), dtype=np.float32)

    def close(self) -> None:
        """Stop the multi-GPU pool, if one was started."""
        if self._pool is not None:
            self.model.stop_multi_process_pool(self._pool)
            self._pool = None


def cuda_device_count() -> int:
    """The number of CUDA devices torch sees; 0 without torch, CUDA or a working driver."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a CPU-only or broken CUDA install counts as no GPU
        return 0
