"""L_MLM: masked-language modelling on the encoder's own masked pass, through the shared MLM head."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import encode_columns, special_token_ids
from xprt_st.losses._vocab import vocab_cross_entropy
from xprt_st.models import MLMHead, attach_mlm_head

BERT_CITATION = """
@inproceedings{devlin-etal-2019-bert,
    title = "{BERT}: Pre-training of Deep Bidirectional Transformers for Language Understanding",
    author = "Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, Kristina",
    booktitle = "Proceedings of NAACL-HLT 2019",
    year = "2019",
    pages = "4171--4186",
    url = "https://aclanthology.org/N19-1423/",
}
"""


def mlm_loss(head: nn.Module, token_states: list[Tensor], input_ids: list[Tensor], masks: list[Tensor]) -> Tensor:
    """Cross-entropy of the original ids at the masked positions, averaged over all masked tokens.

    Only the masked positions go through the head (the vocabulary projection is the costly part).
    """
    states = torch.cat([state[mask] for state, mask in zip(token_states, masks, strict=True)])  # (masked, hidden)
    targets = torch.cat([ids[mask] for ids, mask in zip(input_ids, masks, strict=True)])  # (masked,)
    return vocab_cross_entropy(head, states, targets)  # chunked: never the full (masked, vocab) logits


class MLMLoss(nn.Module):
    def __init__(self, model: SentenceTransformer, mask_ratio: float = 0.15, mlm_head: MLMHead | None = None) -> None:
        r"""
        Masked-language modelling on the encoder: mask ``mask_ratio`` of each passage's tokens (never [CLS],
        [SEP] or padding; masked tokens become [MASK]) and predict them from the encoder's last-layer
        token states through the MLM head, whose output layer is tied to the token embeddings.

        .. math::

            \mathcal{L}_{MLM} = -\frac{1}{|M|}\sum_{(p, i) \in M}
            \log \mathrm{softmax}\big(\mathrm{head}(h_{p,i})\big)_{x_{p,i}}

        In xPRT it keeps the self fill-in teacher (the encoder's own word distribution) from drifting.

        Args:
            model: the SentenceTransformer being trained (a BERT-like encoder with a mask token).
            mask_ratio: share of maskable tokens masked per passage; 0.15, BERT's and the paper's.
            mlm_head: an existing head to share; by default ``xprt_st.models.attach_mlm_head(model)``
                (the checkpoint's pre-trained head when it ships one), registered as ``self.mlm_head``.

        References:
            - Devlin et al. 2019, BERT.
            - xPRT: Cross-Passage Retrieval Pretraining (``L_MLM``).

        Requirements:
            1. A tokenizer with a mask token.

        Inputs:
            +-----------------------------+-----------+
            | Texts                       | Labels    |
            +=============================+===========+
            | any number of text columns  | ignored   |
            +-----------------------------+-----------+

            Every column is masked and predicted; all columns go through one batched forward.

        Relations:
            - Part of :class:`~xprt_st.losses.XPRTLoss` (``mlm``) and of :class:`~xprt_st.losses.RetroMAELoss`.

        Example:
            ::

                from xprt_st.losses import MLMLoss
                from xprt_st.models import load_model

                model = load_model(None)
                loss = MLMLoss(model)
                value = loss([model.preprocess(["A perfect game allows no base runner at all."])], None)
        """
        super().__init__()
        if not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
        self.model = model
        self.mask_ratio = mask_ratio
        self.mlm_head = mlm_head if mlm_head is not None else attach_mlm_head(model)
        self.special_ids = special_token_ids(model)
        self.mask_token_id = int(model.tokenizer.mask_token_id)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        encoded = encode_columns(
            self.model,
            list(sentence_features),
            mask_ratio=self.mask_ratio,
            special_ids=self.special_ids,
            mask_token_id=self.mask_token_id,
        )
        return self.compute_loss_from_token_states(encoded.token_states, encoded.input_ids, encoded.masks)

    def compute_loss_from_token_states(
        self, token_states: list[Tensor], input_ids: list[Tensor], masks: list[Tensor]
    ) -> Tensor:
        return mlm_loss(self.mlm_head, token_states, input_ids, masks)

    def get_config_dict(self) -> dict[str, Any]:
        return {"mask_ratio": self.mask_ratio}

    @property
    def citation(self) -> str:
        return BERT_CITATION
