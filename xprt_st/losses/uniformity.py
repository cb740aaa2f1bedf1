"""L_unif: the uniformity loss of Wang and Isola over the batch's normalized anchor vectors."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import in_fp32

UNIFORMITY_CITATION = """
@inproceedings{wang2020understanding,
    title = {Understanding Contrastive Representation Learning through Alignment and Uniformity on the Hypersphere},
    author = {Wang, Tongzhou and Isola, Phillip},
    booktitle = {Proceedings of the 37th International Conference on Machine Learning},
    pages = {9929--9939},
    year = {2020},
}
"""


@in_fp32
def uniformity_loss(embeddings: Tensor, t: float = 2.0) -> Tensor:
    """``log mean_{i<j} exp(-t ||u_i - u_j||^2)`` with ``u = normalize(embeddings)``.

    Squared distances come from ``2 - 2 u_i . u_j`` (not ``torch.pdist``, whose gradient is NaN for two
    identical vectors, exactly the collapse this term is there to penalize). A batch of one has no
    pair and gives 0.
    """
    count = embeddings.size(0)
    if count < 2:
        return embeddings.sum() * 0.0
    unit = F.normalize(embeddings, dim=-1)
    squared = (2 - 2 * unit @ unit.T).clamp_min(0)  # (batch, batch)
    upper = torch.triu_indices(count, count, offset=1, device=embeddings.device)
    pairs = squared[upper[0], upper[1]]  # (batch * (batch - 1) / 2,)
    return torch.logsumexp(-t * pairs, dim=0) - math.log(pairs.numel())


class UniformityLoss(nn.Module):
    def __init__(self, model: SentenceTransformer, t: float = 2.0) -> None:
        r"""
        Uniformity (Wang and Isola, 2020): the closer any two anchors' normalized vectors, the larger the
        penalty, so the embeddings do not collapse into one cluster.

        .. math::

            \mathcal{L}_{unif} = \log \frac{2}{B(B-1)} \sum_{i<j} e^{-t\,\|u_i - u_j\|^2},
            \qquad u_i = a_i / \|a_i\|

        Hand check: two orthogonal unit vectors are at squared distance 2, so the loss is ``-2t = -4``; two
        identical vectors give 0, the maximum.

        Args:
            model: the SentenceTransformer being trained.
            t: the kernel's sharpness; 2 as in Wang and Isola and in the xPRT paper.

        References:
            - Wang and Isola 2020, https://arxiv.org/abs/2005.10242
            - xPRT: Cross-Passage Retrieval Pretraining (``L_unif``, an auxiliary term).

        Requirements:
            1. A batch of at least two anchors (a batch of one gives 0).

        Inputs:
            +-----------------------------+------------------+
            | Texts                       | Labels           |
            +=============================+==================+
            | (anchor, ...) columns       | ignored          |
            +-----------------------------+------------------+

            Only the first column is used.

        Relations:
            - Part of :class:`~xprt_st.losses.XPRTLoss` (``unif``). Alone it only spreads vectors apart, so use it
              next to a term that pulls related passages together.

        Example:
            ::

                from xprt_st.losses import UniformityLoss
                from xprt_st.models import load_model

                model = load_model(None)
                loss = UniformityLoss(model)
                value = loss([model.preprocess(["A passage.", "Another passage.", "A third one."])], None)
        """
        super().__init__()
        if not t > 0:
            raise ValueError(f"t must be positive, got {t}")
        self.model = model
        self.t = t

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        anchors = self.model(next(iter(sentence_features)))["sentence_embedding"]  # (batch, dim)
        return self.compute_loss_from_embeddings([anchors], labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Tensor:
        return uniformity_loss(embeddings[0], self.t)

    def get_config_dict(self) -> dict[str, Any]:
        return {"t": self.t}

    @property
    def citation(self) -> str:
        return UNIFORMITY_CITATION
