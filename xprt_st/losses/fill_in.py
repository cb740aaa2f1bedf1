"""L_cross and L_self: a one-layer decoder fills in masked passages from a sentence vector."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import apply_mask, encode_columns, pad_cat, sample_token_mask, special_token_ids
from xprt_st.losses._grad_cache import row_slices
from xprt_st.losses._micro_batch import micro_batched_sum
from xprt_st.losses._vocab import vocab_cross_entropy, vocab_kl_divergence
from xprt_st.losses.cross_passage import XPRT_CITATION
from xprt_st.losses.decoder import FillInDecoder
from xprt_st.models import MLMHead, attach_mlm_head

__all__ = ["CrossFillInLoss", "FillInDecoder", "SelfFillInLoss", "sample_scored_positions"]

DECODER_MINI_BATCH = 64
"""Decoder rows per block of the fill-in terms (:func:`micro_batched_sum`): 64 rows of 128 tokens hold about
0.35 GB of one-layer activations on all-MiniLM-L6-v2 (384 wide, 12 heads), against 3.5 GB for the 640 rows of
64 groups at once; blocks this large keep the matrix products as fast as the whole batch's."""


def sample_scored_positions(mask: Tensor, prediction_ratio: float) -> Tensor:
    """The masked positions whose word the loss predicts: every one, or a uniform sample of the batch's.

    ``mask``: (rows, seq) bool, the decoder's masked positions. With ``prediction_ratio = r < 1`` exactly
    ``max(1, round(r * |M|))`` of the ``|M|`` masked positions are kept, uniformly without replacement over
    the whole batch. The decoder still sees all of ``M`` masked; only the vocabulary projection, the step's
    dominant cost, shrinks by ``r``. The mean loss over the sample is an unbiased estimate of the mean over
    ``M``, so the objective is the paper's, with more gradient noise.
    """
    if prediction_ratio >= 1:
        return mask
    positions = mask.flatten().nonzero().squeeze(1)  # (|M|,)
    if positions.numel() == 0:
        return mask
    keep = max(1, round(prediction_ratio * positions.numel()))
    chosen = positions[torch.randperm(positions.numel(), device=mask.device)[:keep]]  # (keep,)
    scored = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    scored[chosen] = True
    return scored.view_as(mask)


def _check_ratio(name: str, value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


class _FillInBase(nn.Module):
    """Shared set-up: the encoder, the decoder and the MLM head (created here unless shared by a composite)."""

    def __init__(
        self,
        model: SentenceTransformer,
        decoder: FillInDecoder | None,
        mlm_head: MLMHead | None,
        decoder_mask_ratio: float,
        encoder_mask_ratio: float,
        num_condition_vectors: int,
        prediction_ratio: float = 1.0,
        decoder_mini_batch_size: int | None = DECODER_MINI_BATCH,
    ) -> None:
        super().__init__()
        _check_ratio("decoder_mask_ratio", decoder_mask_ratio)
        if decoder_mini_batch_size is not None and decoder_mini_batch_size < 1:
            raise ValueError(f"decoder_mini_batch_size must be at least 1 (or None), got {decoder_mini_batch_size}")
        _check_ratio("encoder_mask_ratio", encoder_mask_ratio)
        if not 0 < prediction_ratio <= 1:
            raise ValueError(f"prediction_ratio must be in (0, 1], got {prediction_ratio}")
        self.model = model
        self.decoder = decoder if decoder is not None else FillInDecoder(model, num_condition_vectors)
        self.mlm_head = mlm_head if mlm_head is not None else attach_mlm_head(model)
        self.decoder_mask_ratio = decoder_mask_ratio
        self.encoder_mask_ratio = encoder_mask_ratio
        self.prediction_ratio = float(prediction_ratio)
        self.decoder_mini_batch_size = decoder_mini_batch_size
        self.num_condition_vectors = self.decoder.num_condition_vectors
        self.special_ids = special_token_ids(model)
        self.mask_token_id = int(model.tokenizer.mask_token_id)

    def _encode(self, features: list[dict[str, Tensor]]):
        return encode_columns(
            self.model,
            features,
            mask_ratio=self.encoder_mask_ratio,
            special_ids=self.special_ids,
            mask_token_id=self.mask_token_id,
        )

    def _fill_in_loss(
        self,
        vectors: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        score: Callable[[Tensor, Tensor, slice], Tensor],
        targets: Tensor | None = None,
    ) -> Tensor:
        """Mask ``decoder_mask_ratio`` of the tokens, decode from ``vectors`` and score the scored positions.

        ``scored`` (rows, seq) marks the masked positions whose word is predicted: all of them, or a uniform
        sample of ``round(prediction_ratio * masked)`` when ``prediction_ratio < 1``. With ``targets``
        ((rows, seq) bool) the decoder's mask contains them, topped up uniformly to ``decoder_mask_ratio``,
        and only they are scored. ``score(states, scored, rows)`` is the mean vocabulary loss of the decoder's
        states at the scored positions of the rows ``rows`` (``scored`` is those rows' part of the mask).

        The masks are drawn for all rows at once. With ``decoder_mini_batch_size`` (default
        :data:`DECODER_MINI_BATCH`) the rows are decoded that many at a time, each block's gradient taken at
        once (:func:`~xprt_st.losses._micro_batch.micro_batched_sum`), so only one block's decoder activations
        exist at a time; the loss is the mean over all scored positions either way, at no extra compute.
        """
        mask = sample_token_mask(
            input_ids, attention_mask, self.special_ids, self.decoder_mask_ratio, include=targets
        )  # (rows, seq)
        masked_ids = apply_mask(input_ids, mask, self.mask_token_id)
        scored = sample_scored_positions(mask if targets is None else mask & targets, self.prediction_ratio)
        rows = input_ids.size(0)
        size = self.decoder_mini_batch_size
        if size is None or size >= rows:
            states = self.decoder.fill_in(masked_ids, attention_mask, vectors)
            return score(states[scored], scored, slice(None))  # states (scored, hidden)
        total = scored.sum().clamp_min(1)

        def block(rows_: slice) -> Callable[[Tensor], Tensor]:
            def loss_of_block(leaf: Tensor) -> Tensor:
                part = scored[rows_]
                states = self.decoder.fill_in(masked_ids[rows_], attention_mask[rows_], leaf[rows_])
                return score(states[part], part, rows_) * (part.sum() / total)

            return loss_of_block

        parameters = [
            *self.decoder.parameters(),
            self.decoder._word_embeddings.weight,
            self.decoder._position_embeddings.weight,
            *self.mlm_head.parameters(),
            self.mlm_head.embeddings.weight,
        ]
        blocks = [block(rows_) for rows_ in row_slices(rows, size) if scored[rows_].any()]
        if not blocks:  # nothing scored anywhere: the whole-batch path's zero with a graph
            states = self.decoder.fill_in(masked_ids[:1], attention_mask[:1], vectors[:1])
            return score(states[scored[:1]], scored[:1], slice(0, 1))
        return micro_batched_sum(blocks, vectors, parameters)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "decoder_mask_ratio": self.decoder_mask_ratio,
            "encoder_mask_ratio": self.encoder_mask_ratio,
            "num_condition_vectors": self.num_condition_vectors,
            "prediction_ratio": self.prediction_ratio,
            "decoder_mini_batch_size": self.decoder_mini_batch_size,
        }

    @property
    def citation(self) -> str:
        return XPRT_CITATION


class CrossFillInLoss(_FillInBase):
    def __init__(
        self,
        model: SentenceTransformer,
        decoder_mask_ratio: float = 0.6,
        encoder_mask_ratio: float = 0.15,
        num_condition_vectors: int = 4,
        decoder: FillInDecoder | None = None,
        mlm_head: MLMHead | None = None,
        prediction_ratio: float = 1.0,
        decoder_mini_batch_size: int | None = DECODER_MINI_BATCH,
    ) -> None:
        r"""
        xPRT's fill-in term ``L_cross``: the anchor's vector must let a one-layer decoder rebuild a related
        passage whose tokens are mostly masked, and each related passage's vector must rebuild the anchor.

        The sentence vector :math:`e` is mapped linearly to 4 conditioning vectors inserted right after
        [CLS] of the other passage, whose tokens are 60% masked (never [CLS], [SEP] or padding) and embedded
        with the encoder's own token and position tables; the decoder's states at the masked positions go
        through the encoder's MLM head:

        .. math::

            \mathcal{L}_{cross} = \frac{1}{|M|}\sum_{k=1}^{4}\Big(
            \sum_{i \in M(s_k)} -\log p_{dec}(x^{s_k}_i \mid e_a, \tilde s_k)
            + \sum_{i \in M(a \mid k)} -\log p_{dec}(x^{a}_i \mid e_{s_k}, \tilde a)\Big)

        a mean over all masked tokens of the 8 decoder passes per group (run as one batched pass).
        One layer cannot recover 60% of a passage from the remaining 40%, so the vector has to carry what
        the two passages share.

        Args:
            model: the SentenceTransformer being trained.
            decoder_mask_ratio: share of the decoded passage's tokens masked; 0.6 as in the paper.
            encoder_mask_ratio: masking of the encoder pass that makes the vectors when the loss is used alone;
                0.15 as in the paper (XPRTLoss passes its own 15%-masked embeddings instead).
            num_condition_vectors: conditioning vectors per sentence vector; 4 as in the paper.
            decoder: a :class:`FillInDecoder` to share; by default a new one (one layer, the encoder's head count),
                registered as ``self.decoder``.
            mlm_head: an MLM head to share; by default ``attach_mlm_head(model)``, registered as ``self.mlm_head``.
            prediction_ratio: share of the masked positions whose word is predicted; 1.0 (every one) as in the
                paper. Below 1, a uniform sample of them (see :func:`sample_scored_positions`): the same objective
                in expectation at a fraction of the vocabulary projection's cost, the step's largest.
            decoder_mini_batch_size: decoder rows run at a time, each block's gradient taken at once (no extra
                compute; the loss and gradients equal the whole batch's, see :func:`micro_batched_sum`); 64 by
                default, None decodes every row at once (the decoder's activations of the whole batch live until
                backward, gigabytes at 64 groups).

        References:
            - xPRT: Cross-Passage Retrieval Pretraining (``L_cross``, weight 0.1 in the full objective).

        Requirements:
            1. A BERT-like encoder with a mask token; its token (and, if it has them, position) embeddings are shared.

        Inputs:
            +----------------------------------------------------------+------------+
            | Texts                                                    | Labels     |
            +==========================================================+============+
            | (anchor, positive, related_2, related_3, related_4)      | ignored    |
            +----------------------------------------------------------+------------+

            Fewer related columns work too: every column after the anchor is a related passage.

        Relations:
            - :class:`SelfFillInLoss` uses the same decoder to rebuild a passage from its own vector.
            - Part of :class:`~xprt_st.losses.XPRTLoss` (``cross``).

        Example:
            ::

                from xprt_st.losses import CrossFillInLoss
                from xprt_st.models import load_model

                model = load_model(None)
                loss = CrossFillInLoss(model)
                columns = ["A perfect game allows no runner.", "Only a few perfect games were thrown."]
                value = loss([model.preprocess([text]) for text in columns], None)
        """
        super().__init__(
            model,
            decoder,
            mlm_head,
            decoder_mask_ratio,
            encoder_mask_ratio,
            num_condition_vectors,
            prediction_ratio,
            decoder_mini_batch_size,
        )

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        if len(features) < 2:
            raise ValueError("CrossFillInLoss needs an anchor and at least one related column")
        encoded = self._encode(features)
        return self.compute_loss_from_embeddings(encoded.embeddings, encoded.input_ids, encoded.attention_mask)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], input_ids: list[Tensor], attention_mask: list[Tensor]
    ) -> Tensor:
        """``embeddings[0]`` is the anchor's (batch, dim), the rest the related passages'; ids/masks (batch, seq_c)."""
        related = len(embeddings) - 1
        # rows: anchor -> related_k for every k, then related_k -> anchor for every k
        vectors = torch.cat([embeddings[0]] * related + embeddings[1:])  # (2 * related * batch, dim)
        ids = pad_cat(input_ids[1:] + [input_ids[0]] * related)  # (2 * related * batch, seq)
        mask = pad_cat(attention_mask[1:] + [attention_mask[0]] * related)  # (2 * related * batch, seq)

        def score(states: Tensor, scored: Tensor, rows: slice) -> Tensor:
            return vocab_cross_entropy(self.mlm_head, states, ids[rows][scored])  # chunked over the vocabulary

        return self._fill_in_loss(vectors, ids, mask, score)


class SelfFillInLoss(_FillInBase):
    def __init__(
        self,
        model: SentenceTransformer,
        decoder_mask_ratio: float = 0.6,
        encoder_mask_ratio: float = 0.15,
        num_condition_vectors: int = 4,
        decoder: FillInDecoder | None = None,
        mlm_head: MLMHead | None = None,
        prediction_ratio: float = 1.0,
        decoder_mini_batch_size: int | None = DECODER_MINI_BATCH,
    ) -> None:
        r"""
        xPRT's auxiliary ``L_self``: the fill-in decoder rebuilds the anchor's and the top related passage's own
        masked words from their own vectors, with the encoder's word distribution as a soft target.

        The teacher is the MLM head's softmax over the encoder's token states of the 15%-masked pass
        (detached), read at the positions the ENCODER masked, :math:`M_{enc}(p)`; the decoder's mask always
        contains them (topped up uniformly to ``decoder_mask_ratio``), so the decoder must fill in exactly the
        words whose distribution it distils:

        .. math::

            \mathcal{L}_{self} = \frac{1}{|M|}\sum_{p \in \{a, s_1\}}\sum_{i \in M_{enc}(p)}
            \mathrm{KL}\big(\mathrm{softmax}(\mathrm{head}(h^{enc}_{p,i}))\,\|\,p_{dec}(\cdot \mid e_p, \tilde p)_i\big)

        Why only the encoder-masked positions: the paper adds ``L_MLM`` "so the teacher itself does not drift",
        i.e. the teacher is the distribution ``L_MLM`` trains, and ``L_MLM`` trains the head at the [MASK]
        positions of this very pass. At a position the encoder saw, the head is never trained (with a fresh
        head, as all-MiniLM-L6-v2 has, its distribution there is near-uniform noise), so reading it there would
        distil noise. The alternatives (BERT's 80/10/10 split, which trains visible positions at only 1.5% of
        tokens; ``L_MLM`` at every position, which changes the paper's MLM term) keep the teacher weak or change
        another term. The cost: about 15% of each passage is scored rather than 60%.

        KL rather than soft cross-entropy: same gradient, but the value reads 0 when the decoder matches the
        teacher.

        Args:
            model: the SentenceTransformer being trained.
            decoder_mask_ratio: share of tokens the decoder must fill in; 0.6, the cross fill-in's (our choice: the
                paper says "the same decoder" and gives no separate ratio).
            encoder_mask_ratio: the teacher pass's masking; 0.15 as in the paper. Must be above 0: the teacher is
                read at the masked positions.
            num_condition_vectors: 4, as for the cross fill-in (the decoder is shared).
            decoder: a :class:`FillInDecoder` to share; by default a new one, registered as ``self.decoder``.
            mlm_head: an MLM head to share; by default ``attach_mlm_head(model)``, registered as ``self.mlm_head``.
            prediction_ratio: share of the masked positions whose word is predicted; 1.0 (every one) as in the
                paper. Below 1, a uniform sample of them (see :func:`sample_scored_positions`): the same objective
                in expectation at a fraction of the vocabulary projection's cost, the step's largest.
            decoder_mini_batch_size: decoder rows run at a time, each block's gradient taken at once (no extra
                compute; the loss and gradients equal the whole batch's, see :func:`micro_batched_sum`); 64 by
                default, None decodes every row at once (the decoder's activations of the whole batch live until
                backward, gigabytes at 64 groups).

        References:
            - xPRT: Cross-Passage Retrieval Pretraining (``L_self``).

        Requirements:
            1. A BERT-like encoder with a mask token. Pair it with :class:`~xprt_st.losses.MLMLoss` so the teacher
               distribution stays a language model.

        Inputs:
            +------------------------------------+-----------+
            | Texts                              | Labels    |
            +====================================+===========+
            | (anchor, positive, ...) columns    | ignored   |
            +------------------------------------+-----------+

            Only the first two columns are used.

        Relations:
            - :class:`CrossFillInLoss` is the cross-passage version; :class:`~xprt_st.losses.MLMLoss` anchors the
              teacher. All three are part of :class:`~xprt_st.losses.XPRTLoss`.

        Example:
            ::

                from xprt_st.losses import SelfFillInLoss
                from xprt_st.models import load_model

                model = load_model(None)
                loss = SelfFillInLoss(model)
                columns = ["A perfect game allows no runner.", "Only a few perfect games were thrown."]
                value = loss([model.preprocess([text]) for text in columns], None)
        """
        if encoder_mask_ratio <= 0:
            raise ValueError(
                f"SelfFillInLoss reads its teacher at the encoder's masked positions; encoder_mask_ratio must be "
                f"above 0, got {encoder_mask_ratio}"
            )
        super().__init__(
            model,
            decoder,
            mlm_head,
            decoder_mask_ratio,
            encoder_mask_ratio,
            num_condition_vectors,
            prediction_ratio,
            decoder_mini_batch_size,
        )

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)[:2]
        encoded = self._encode(features)
        return self.compute_loss_from_token_states(
            encoded.embeddings, encoded.token_states, encoded.input_ids, encoded.attention_mask, encoded.masks
        )

    def compute_loss_from_token_states(
        self,
        embeddings: list[Tensor],
        token_states: list[Tensor],
        input_ids: list[Tensor],
        attention_mask: list[Tensor],
        encoder_masks: list[Tensor],
    ) -> Tensor:
        """Per passage: (batch, dim) vector, (batch, seq_c, hidden) encoder states, (batch, seq_c) ids, attention
        mask and the encoder's masked positions (the teacher is read there only)."""
        vectors = torch.cat(embeddings)  # (passages * batch, dim)
        ids = pad_cat(input_ids)  # (passages * batch, seq)
        mask = pad_cat(attention_mask)  # (passages * batch, seq)
        targets = pad_cat(encoder_masks, value=False)  # (passages * batch, seq)
        teacher = pad_cat([states.detach() for states in token_states])  # (passages * batch, seq, hidden)

        def score(states: Tensor, scored: Tensor, rows: slice) -> Tensor:
            return vocab_kl_divergence(self.mlm_head, states, teacher[rows][scored])  # chunked over the vocabulary

        return self._fill_in_loss(vectors, ids, mask, score, targets)
