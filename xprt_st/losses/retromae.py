"""RetroMAELoss: masked auto-encoding with a one-layer enhanced decoder (Xiao et al. 2022), as a baseline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import (
    EncodedColumns,
    continuation_pieces,
    encode_columns,
    pad_cat,
    special_token_ids,
)
from xprt_st.losses._vocab import vocab_cross_entropy
from xprt_st.losses.decoder import FillInDecoder
from xprt_st.losses.mlm import mlm_loss
from xprt_st.models import MLMHead, attach_mlm_head

RETROMAE_CITATION = """
@inproceedings{xiao-etal-2022-retromae,
    title = "{R}etro{MAE}: Pre-Training Retrieval-oriented Language Models Via Masked Auto-Encoder",
    author = "Xiao, Shitao and Liu, Zheng and Shao, Yingxia and Cao, Zhao",
    booktitle = "Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing",
    year = "2022",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/2022.emnlp-main.35/",
    doi = "10.18653/v1/2022.emnlp-main.35",
    pages = "538--548",
}
"""


def sample_enhanced_decoding_mask(
    attention_mask: Tensor,
    maskable: Tensor,
    mask_ratio: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    """RetroMAE's position-specific attention mask for enhanced decoding (pure; True = may attend).

    For every query position ``i`` of a passage, an independent uniform sample of ``round(mask_ratio * n)``
    of the passage's ``n`` maskable tokens is hidden, and so is ``i`` itself. Everything else inside the
    attention mask stays visible: in particular position 0, which holds the sentence vector, is always
    visible (it is never maskable), and padding never is.

    Args:
        attention_mask: (batch, seq) 1 for real tokens.
        maskable: (batch, seq) bool, the tokens that may be hidden (real, non-special).
        mask_ratio: share of maskable tokens hidden per query row; 0.5 is RetroMAE's decoder ratio.
        generator: optional RNG for reproducible masks.

    Returns:
        (batch, seq, seq) bool: ``[b, i, j]`` says whether query ``i`` may attend to context position ``j``.
    """
    real = attention_mask.bool()  # (batch, seq)
    maskable = maskable.bool() & real
    batch, length = real.shape
    count = maskable.sum(dim=1)  # (batch,)
    hidden_count = torch.minimum((count.float() * mask_ratio).round().long(), count)  # (batch,)
    scores = torch.rand((batch, length, length), generator=generator, device=real.device)  # (batch, q, k)
    scores = scores.masked_fill(~maskable[:, None, :], 2.0)
    rank = scores.argsort(dim=-1).argsort(dim=-1)  # (batch, q, k)
    hidden = rank < hidden_count[:, None, None]  # (batch, q, k)
    allowed = real[:, None, :].expand(batch, length, length) & ~hidden
    allowed = allowed & ~torch.eye(length, dtype=torch.bool, device=real.device)  # never the token itself
    allowed[:, :, 0] = True  # the sentence vector
    return allowed


def decoding_targets(attention_mask: Tensor) -> Tensor:
    """(rows, seq) bool: the tokens the decoder rebuilds, every real token but the first and the last.

    Position 0 holds the sentence vector and the last real token is [SEP]; RetroMAE's official
    implementation scores neither.
    """
    real = attention_mask.bool()
    positions = torch.arange(real.size(1), device=real.device)[None, :]  # (1, seq)
    last = real.long().sum(dim=1, keepdim=True) - 1  # (rows, 1)
    return real & (positions > 0) & (positions < last)


def served_pooling(model: SentenceTransformer) -> str:
    """The pooling mode of the model's Pooling module (``"mean"``, ``"cls"`` ...), the vector it serves."""
    for module in model:
        mode = getattr(module, "pooling_mode", None)
        if isinstance(mode, str):
            return mode
    return "unknown"


def context_scale(decoder: FillInDecoder, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """() tensor, no gradient: the median norm of the decoder's context tokens ``LN(e(x_j) + p_j)``, ``j >= 1``.

    ``input_ids``/``attention_mask``: (rows, seq). Only real tokens count; position 0 is where the sentence
    vector goes. At initialisation the decoder's LayerNorm makes this ``sqrt(hidden)`` (19.6 for MiniLM).
    """
    with torch.no_grad():
        tokens = decoder.embed(input_ids)[:, 1:]  # (rows, seq - 1, hidden)
        return tokens[attention_mask[:, 1:].bool()].norm(dim=-1).median()


def at_context_scale(vectors: Tensor, scale: Tensor) -> Tensor:
    """(rows, hidden): each vector's direction at norm ``scale`` (the gradient reaches the direction only)."""
    return F.normalize(vectors, dim=-1) * scale


def enhanced_decode(decoder: FillInDecoder, vectors: Tensor, input_ids: Tensor, allowed: Tensor) -> Tensor:
    """Two-stream decoding: query ``h + p_i``, context ``[h, LN(e(x_j) + p_j)]``, attention ``allowed``.

    ``vectors``: (rows, hidden); ``input_ids``: (rows, seq) original ids; ``allowed``: (rows, seq, seq).
    Returns (rows, seq, hidden) states, one per query position (position 0's is not a prediction).
    """
    positions = decoder.positions(input_ids.size(1), input_ids.device)  # (seq, hidden)
    query = vectors[:, None, :] + positions[None]  # (rows, seq, hidden)
    tokens = decoder.embed(input_ids)  # (rows, seq, hidden)
    context = torch.cat([vectors[:, None, :], tokens[:, 1:]], dim=1)  # (rows, seq, hidden)
    return decoder.layer(query, allowed, context=context)


class RetroMAELoss(nn.Module):
    def __init__(
        self,
        model: SentenceTransformer,
        encoder_mask_ratio: float = 0.3,
        decoder_mask_ratio: float = 0.5,
        pooling: Literal["cls", "model"] = "model",
        mlm_weight: float = 1.0,
        decoder: FillInDecoder | None = None,
        mlm_head: MLMHead | None = None,
    ) -> None:
        r"""
        RetroMAE (Xiao et al. 2022): the encoder reads a lightly masked passage, and a one-layer decoder must
        rebuild every token of the passage from the sentence vector and a heavily masked, position-specific
        view of it (enhanced decoding). Loss: decoder reconstruction plus the encoder's own MLM,
        :math:`\mathcal{L} = \mathcal{L}_{dec} + \mathcal{L}_{enc}`.

        Enhanced decoding, for a passage of tokens :math:`x_1..x_N` and sentence vector :math:`h`:

        .. math::

            H_1 = [h + p_0, \ldots, h + p_N], \quad H_2 = [h, e(x_1) + p_1, \ldots, e(x_N) + p_N], \quad
            \mathcal{L}_{dec} = -\frac{1}{N}\sum_{i=1}^{N} \log p\big(x_i \mid \mathrm{Attn}(H_1^{(i)}, H_2, M_i)\big)

        where the attention mask :math:`M_i` lets query :math:`i` see position 0 (the vector) and a sampled
        50% of the other tokens, never :math:`x_i` itself (see :func:`sample_enhanced_decoding_mask`). As in the
        paper and the official code, the decoder's masking is this attention mask: the context stream carries
        the original token embeddings (:math:`H_2`).

        The vector's scale at the decoder. The official code (``src/pretrain/modeling.py`` of staoxiao/RetroMAE)
        feeds the raw last-layer [CLS] state, at the scale of the encoder's token stream (norm about 8 for
        MiniLM), in both streams: as context position 0 and added to the raw position embeddings as the query.
        Its context tokens leave BERT's embedding LayerNorm at a comparable norm, so the vector is not drowned.
        Here, with ``pooling="model"``, the vector is the served embedding, and a model that ends in
        ``Normalize`` (all-MiniLM-L6-v2, E5) serves ``|h| = 1`` while the context tokens leave the decoder's
        LayerNorm with norm about 19.6: the bottleneck would be some 20x weaker than designed (swapping ``h``
        between two passages moved the decoder's predictions by KL 0.11 at initialisation, against 1.20 at token
        scale). Even the mean-pooled state before ``Normalize`` is only 4.4-5.0 for MiniLM. So the loss owns a
        scale: the decoder receives the served direction at the median norm of this batch's context tokens,
        :math:`\hat h = \rho\, h / \lVert h\rVert` with :math:`\rho` = median
        :math:`\lVert \mathrm{LN}(e(x_j) + p_j)\rVert` (no gradient; see :func:`context_scale`), in both streams.
        The served vector is compared by cosine, so its norm carries nothing served and only its direction is
        trained. With ``pooling="cls"`` the raw [CLS] state enters as it is, as in the official code.

        Details that follow the official implementation (github.com/staoxiao/RetroMAE) where the paper is silent:

        - Decoding targets: every token but the first and the last ([CLS] and [SEP]); the official code
          excludes both from the decoder's labels.
        - Encoder masking: whole words (a word's ``##`` pieces are masked together), and BERT's 80/10/10 split
          of the masked positions ([MASK] / random token / unchanged), all of them MLM targets, as the
          official code's whole-word collator does. The decoder's per-query hiding stays per token.

        Args:
            model: the SentenceTransformer being trained.
            encoder_mask_ratio: 0.3, RetroMAE's default (paper range 15-30%).
            decoder_mask_ratio: share of tokens each decoder row cannot see; 0.5, RetroMAE's default (50-70%).
            pooling: the sentence vector given to the decoder. ``"model"`` (default): the model's own pooling
                (mean for all-MiniLM-L6-v2, E5 and the small BERT), the vector the SentenceTransformer serves, so
                the vector trained is the vector evaluated; its direction enters the decoder at the context tokens'
                scale (above). ``"cls"``: the encoder's last-layer [CLS] state, unscaled, as in
                the paper, whose published models are served with [CLS]; it is accepted only for a model whose own
                pooling is CLS (there the two are the same vector): training [CLS] and serving a mean would
                evaluate a vector the objective never shaped.
            mlm_weight: weight of the encoder MLM term; 1, the paper's plain sum.
            decoder: a :class:`~xprt_st.losses.FillInDecoder` to use; by default a new one-layer decoder with the
                encoder's head count (no conditioning projection), registered as ``self.decoder``.
            mlm_head: by default ``attach_mlm_head(model)``, registered as ``self.mlm_head``; the decoder predicts
                through the same head (as the official code shares the BERT LM head).

        References:
            - Xiao et al. 2022, RetroMAE, https://aclanthology.org/2022.emnlp-main.35/

        Requirements:
            1. A BERT-like encoder with a mask token.

        Inputs:
            +------------------------------------+-----------+
            | Texts                              | Labels    |
            +====================================+===========+
            | one or more passage columns        | ignored   |
            +------------------------------------+-----------+

            Every text column is a set of passages (the xPRT comparison feeds the ``anchor`` column); all columns
            go through one batched encoder forward and one batched decoder pass.

        Relations:
            - :class:`~xprt_st.losses.MLMLoss` is the encoder term alone.
            - :class:`~xprt_st.losses.XPRTLoss` replaces self-reconstruction by cross-passage supervision.
            - Wrap in :class:`~xprt_st.losses.WithRetention` for the paper's baseline setting.

        Example:
            ::

                from xprt_st.losses import RetroMAELoss
                from xprt_st.models import load_model

                model = load_model(None)
                loss = RetroMAELoss(model)  # trains the model's own (mean) pooling, the served vector
                terms = loss([model.preprocess(["A perfect game allows no base runner at all."])], None)
        """
        super().__init__()
        if pooling not in ("cls", "model"):
            raise ValueError(f"pooling must be 'cls' or 'model', got {pooling!r}")
        served = served_pooling(model)
        if pooling == "cls" and served != "cls":
            raise ValueError(
                f"RetroMAELoss(pooling='cls') trains the [CLS] state, but this model serves {served!r} pooling, "
                "so the trained vector would not be the evaluated one; use pooling='model' (trains the served "
                "vector) or give the model a CLS Pooling module"
            )
        for name, value in (("encoder_mask_ratio", encoder_mask_ratio), ("decoder_mask_ratio", decoder_mask_ratio)):
            if not 0 < value < 1:
                raise ValueError(f"{name} must be in (0, 1), got {value}")
        self.model = model
        self.encoder_mask_ratio = encoder_mask_ratio
        self.decoder_mask_ratio = decoder_mask_ratio
        self.pooling = pooling
        self.mlm_weight = float(mlm_weight)
        self.decoder = decoder if decoder is not None else FillInDecoder(model, num_condition_vectors=0)
        self.mlm_head = mlm_head if mlm_head is not None else attach_mlm_head(model)
        self.special_ids = special_token_ids(model)
        self.mask_token_id = int(model.tokenizer.mask_token_id)
        self.continuations = continuation_pieces(model)  # (vocab,) bool, for whole-word masking
        self.vocab_size = len(model.tokenizer)

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        encoded = encode_columns(
            self.model,
            list(sentence_features),
            mask_ratio=self.encoder_mask_ratio,
            special_ids=self.special_ids,
            mask_token_id=self.mask_token_id,
            whole_words=self.continuations,
            bert_corruption_vocab=self.vocab_size,
        )
        vectors = encoded.embeddings if self.pooling == "model" else [state[:, 0] for state in encoded.token_states]
        return self.compute_loss_from_encoded(vectors, encoded)

    def compute_loss_from_encoded(self, vectors: list[Tensor], encoded: EncodedColumns) -> dict[str, Tensor]:
        """``vectors``: (batch, hidden) sentence vectors per column (the served embedding under ``pooling="model"``,
        rescaled here; the raw [CLS] state under ``"cls"``); ``encoded``: the encoder's masked pass."""
        ids = pad_cat(encoded.input_ids)  # (rows, seq)
        attention = pad_cat(encoded.attention_mask)  # (rows, seq)
        maskable = attention.bool() & ~torch.isin(ids, self.special_ids.to(ids.device))  # (rows, seq)
        allowed = sample_enhanced_decoding_mask(attention, maskable, self.decoder_mask_ratio)  # (rows, seq, seq)
        vectors = torch.cat(vectors)  # (rows, hidden)
        if self.pooling == "model":  # the served direction at the context tokens' scale (see the class docstring)
            vectors = at_context_scale(vectors, context_scale(self.decoder, ids, attention))
        states = enhanced_decode(self.decoder, vectors, ids, allowed)  # (rows, seq, hidden)
        targets = decoding_targets(attention)  # (rows, seq)
        decoder_loss = vocab_cross_entropy(self.mlm_head, states[targets], ids[targets])
        terms = {"decoder": decoder_loss}
        if self.mlm_weight > 0:
            terms["mlm"] = self.mlm_weight * mlm_loss(
                self.mlm_head, encoded.token_states, encoded.input_ids, encoded.masks
            )
        return terms

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "encoder_mask_ratio": self.encoder_mask_ratio,
            "decoder_mask_ratio": self.decoder_mask_ratio,
            "pooling": self.pooling,
            "mlm_weight": self.mlm_weight,
        }

    @property
    def citation(self) -> str:
        return RETROMAE_CITATION
