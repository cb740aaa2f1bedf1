"""The mining model: loaded once on first need, its prompt, its token budget, batched (multi-GPU) encoding.

Passages arrive with the token ids the splitter already computed where those are exact
(:mod:`xprt_st.mining.token_ids`); the encoder then builds the model's batches from them instead of
tokenizing the text again, with sentence-transformers' own order (longest text first) and batch
size, so the vectors are those of ``model.encode(passages)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.mining.config import MiningConfig, MiningConfigError
from xprt_st.mining.passages import PassageSplitter
from xprt_st.mining.token_ids import TokenPlan, token_plan, unsafe_characters
from xprt_st.stage_timing import count_texts, stage

logger = logging.getLogger(__name__)


class MiningEncoder:
    """Encode passages with the mining model of ``config`` (or the already loaded ``model``).

    Args:
        config: the run's settings (model, device, prompt, batch size, passage lengths, encode backend).
        model: an already loaded SentenceTransformer (a non-torch ``config.encode_backend`` runs it in place);
            else ``config.model`` is loaded on first use.
        cache_root: the folder whose ``.onnx-cache`` keeps the export of a non-torch ``config.encode_backend``
            (the mining folder).
    """

    def __init__(self, config: MiningConfig, model: Any = None, cache_root: Path | None = None) -> None:
        self.config = config
        self._model = model
        self._cache_root = cache_root
        self._backend_set = False
        self._pool: Any = None
        self._plan: TokenPlan | None = None
        self._planned = False
        self._checked = False
        self._identity: dict[str, Any] | None = None
        self._precision = "fp32"

    @property
    def model(self) -> Any:
        if self._model is None:
            from xprt_st.models import load_model

            self._model = load_model(self.config.model, device=self._device())
        if not self._backend_set:
            self._backend_set = True
            if self.config.encode_backend != "torch":
                from xprt_st.encode_backend import use_encode_backend

                if self._cache_root is None:
                    raise MiningConfigError(f"encode_backend={self.config.encode_backend!r} needs the mining folder")
                use_encode_backend(self._model, self.config.encode_backend, self._cache_root)
            from xprt_st.precision import resolve_precision

            # applied around each encoding only (:meth:`encode`): a model the caller gave stays as it was
            resolved = resolve_precision(self.config.precision, self._model.device.type, self.config.encode_backend)
            self._precision = resolved.precision
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
        keep_ids = self.config.encodes and not self._uses_pool() and self.plan() is not None
        return PassageSplitter(
            tokenizer,
            max_tokens=budget,
            min_tokens=min(self.config.min_tokens, budget),
            overlap_tokens=min(self.config.overlap_tokens, budget - 1),
            max_passages=self.config.max_passages,
            keep_token_ids=keep_ids,
            unsafe_characters=unsafe_characters(tokenizer) if keep_ids else (),
        )

    def identity(self) -> dict[str, Any]:
        """What the vectors depend on besides the text (:func:`~xprt_st.mining.layout.embeddings.encoder_identity`)."""
        if self._identity is None:
            from xprt_st.mining.layout.embeddings import encoder_identity
            from xprt_st.precision import applied_precision

            with applied_precision(self.model, self._precision) as model:
                self._identity = encoder_identity(model, self.prompt_text())
        return self._identity

    def plan(self) -> TokenPlan | None:
        """How passage ids become the model's batches; None where the text must be tokenized again."""
        if not self._planned:
            self._plan = token_plan(self.model, self.prompt_text() or None)
            self._planned = True
            if self._plan is None:
                logger.info("the mining model tokenizes passages itself (its tokenizer or prompt needs the text)")
        return self._plan

    def _device(self) -> str | None:
        """The configured device; the CPU for a non-torch backend (it runs there) when none is given."""
        return self.config.device or (None if self.config.encode_backend == "torch" else "cpu")

    def _uses_pool(self) -> bool:
        return self._pool is not None or (self._device() is None and cuda_device_count() > 1)

    def encode(self, passages: list[str], token_ids: list[np.ndarray | None] | None = None) -> np.ndarray:
        """L2-normalised passage vectors, batched; several GPUs encode in parallel through a process pool.

        ``token_ids[i]`` (optional) are passage ``i``'s ids from the splitter (None: tokenize its text);
        with them, and a model :func:`~xprt_st.mining.token_ids.token_plan` accepts, the text is not
        tokenized again. The first batch of an encoder is also built the text way and compared: at any
        difference the encoder keeps the text path from then on (with a warning).
        """
        from xprt_st.precision import applied_precision

        with stage("encode for mining"), applied_precision(self.model, self._precision):
            count_texts(len(passages))
            return self._encode(passages, token_ids)

    def _encode(self, passages: list[str], token_ids: list[np.ndarray | None] | None) -> np.ndarray:
        if token_ids is not None and passages and not self._uses_pool() and self.plan() is not None:
            vectors = self._encode_ids(passages, token_ids)
            if vectors is not None:
                return vectors
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
        if self._pool is None and self._device() is None and cuda_device_count() > 1:
            self._pool = self.model.start_multi_process_pool()
        if self._pool is not None:
            kwargs["pool"] = self._pool
        return np.asarray(self.model.encode(passages, **kwargs), dtype=np.float32)

    def _encode_ids(self, passages: list[str], token_ids: list[np.ndarray | None]) -> np.ndarray | None:
        import torch
        from sentence_transformers.util import batch_to_device

        plan, model = self._plan, self.model
        assert plan is not None
        missing = [i for i, ids in enumerate(token_ids) if ids is None]
        ids = list(token_ids)
        if missing:
            found = model.tokenizer([passages[i] for i in missing], add_special_tokens=False, verbose=False)
            for i, row in zip(missing, found["input_ids"], strict=True):
                ids[i] = np.asarray(row, dtype=np.int32)
        order = np.argsort([-len(p) for p in passages])  # sentence-transformers' own order: longest text first
        size = self.config.batch_size
        if not self._checked:
            head = order[:size]
            self._checked = True
            if not plan.check(model, [passages[i] for i in head], [ids[i] for i in head], self.prompt_text() or None):
                logger.warning("token ids differ from the model's own tokenization; tokenizing passages again")
                self._plan = None
                return None
        model.eval()
        vectors: np.ndarray | None = None
        with torch.inference_mode():
            for start in range(0, len(order), size):
                batch = order[start : start + size]
                features = batch_to_device(plan.features([ids[i] for i in batch]), model.device)
                embeddings = torch.nn.functional.normalize(model(features)["sentence_embedding"], p=2, dim=1)
                embeddings = embeddings.float().cpu().numpy()
                if vectors is None:
                    vectors = np.empty((len(passages), embeddings.shape[1]), dtype=np.float32)
                vectors[batch] = embeddings
        assert vectors is not None
        return vectors

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
