"""L_ret: keep the anchor-by-positive similarity structure of the frozen starting model (KL, both directions)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.losses.merged_forward import embed_columns
from torch import Tensor, nn

from xprt_st.losses._common import borrow, in_fp32
from xprt_st.losses._length_buckets import embed_by_length
from xprt_st.losses.cross_passage import XPRT_CITATION
from xprt_st.models import frozen_copy


@in_fp32
def retention_loss(
    student_anchors: Tensor,
    student_positives: Tensor,
    teacher_anchors: Tensor,
    teacher_positives: Tensor,
    temperature: float = 0.05,
) -> Tensor:
    """KL(teacher || student) of the row and column softmaxes of the cosine matrices, averaged.

    Rows: for each anchor, the distribution over the batch's positives; columns: for each positive,
    the distribution over the batch's anchors. Each KL is averaged over rows, then the two are averaged.
    The teacher side carries no gradient.
    """
    student = F.normalize(student_anchors, dim=-1) @ F.normalize(student_positives, dim=-1).T / temperature  # (b, b)
    with torch.no_grad():
        teacher = F.normalize(teacher_anchors, dim=-1) @ F.normalize(teacher_positives, dim=-1).T / temperature
    rows = F.kl_div(
        F.log_softmax(student, dim=1), F.log_softmax(teacher, dim=1), reduction="batchmean", log_target=True
    )
    columns = F.kl_div(
        F.log_softmax(student.T, dim=1), F.log_softmax(teacher.T, dim=1), reduction="batchmean", log_target=True
    )
    return (rows + columns) / 2


MODEL_OUTPUTS = frozenset({"sentence_embedding", "token_embeddings", "all_layer_embeddings"})
"""Keys a SentenceTransformer forward adds to its input dict (Transformer and Pooling modules)."""


def teacher_embeddings(teacher: SentenceTransformer, features: list[dict[str, Tensor]]) -> list[Tensor]:
    """The frozen teacher's embeddings of unmasked columns: length-sorted chunks of rows, no gradient, eval mode."""
    if teacher.training:
        teacher.eval()  # a trainer's loss.train() would otherwise turn the teacher's dropout on
    with torch.no_grad():
        # The model writes its outputs into its input dict: a column the student already embedded on its own
        # (its anchor) carries them, and the columns would no longer merge. The teacher reads the inputs only.
        copies = [{k: v for k, v in column.items() if k not in MODEL_OUTPUTS} for column in features]
        return embed_by_length(teacher, copies)


_RETENTION_DOC = r"""
        The retention term pulls the trained model toward the frozen starting model. The student and the
        teacher each compute the anchor-by-positive cosine matrix of the batch; each row (an anchor over
        all positives) and each column (a positive over all anchors) becomes a softmax, and

        .. math::

            \mathcal{L}_{ret} = \tfrac12\Big(\tfrac1B\sum_i \mathrm{KL}\big(p^T_{i\cdot}\,\|\,p^S_{i\cdot}\big)
            + \tfrac1B\sum_j \mathrm{KL}\big(p^T_{\cdot j}\,\|\,p^S_{\cdot j}\big)\Big),
            \qquad p_{i\cdot} = \mathrm{softmax}_j\big(\cos(a_i, s_j)/\tau\big)

        The cosines are divided by :math:`\tau = 0.05` (our choice; the paper does not state one): raw
        cosines in [-1, 1] give almost uniform softmaxes and so almost no signal, and 0.05 is the
        temperature the contrastive term uses, so both terms see the batch at the same sharpness.
        The teacher runs without gradient on the unmasked text. The term is multiplied by
        ``retention_weight``, a plain float that the schedule callback sets each step (40 -> 0 in the paper).
"""


class RetentionLoss(nn.Module):
    def __init__(
        self,
        model: SentenceTransformer,
        teacher: SentenceTransformer | None = None,
        retention_weight: float = 40.0,
        temperature: float = 0.05,
    ) -> None:
        super().__init__()
        self.model = model
        self.teacher = teacher if teacher is not None else frozen_copy(model)
        self.retention_weight = float(retention_weight)
        self.temperature = temperature

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)[:2]
        if len(features) < 2:
            raise ValueError("RetentionLoss needs (anchor, positive) columns")
        student = embed_by_length(self.model, features)
        return self.compute_loss_from_embeddings(student, teacher_embeddings(self.teacher, features))

    def compute_loss_from_embeddings(self, student: list[Tensor], teacher: list[Tensor]) -> Tensor:
        return self.retention_weight * retention_loss(student[0], student[1], teacher[0], teacher[1], self.temperature)

    def get_config_dict(self) -> dict[str, Any]:
        return {"retention_weight": self.retention_weight, "temperature": self.temperature}

    @property
    def citation(self) -> str:
        return XPRT_CITATION


RetentionLoss.__doc__ = (
    """Retention toward the frozen starting model, usable alone (``L_ret`` times ``retention_weight``).
"""
    + _RETENTION_DOC
    + r"""
    Args:
        model: the SentenceTransformer being trained.
        teacher: the frozen starting model; by default ``xprt_st.models.frozen_copy(model)`` taken at construction
            (so construct the loss before training starts).
        retention_weight: the term's weight, 40.0 as at the start of the paper's schedule; the schedule callback
            overwrites this float attribute each step.
        temperature: :math:`\tau` dividing the cosines before the softmaxes; 0.05 (see above).

    References:
        - xPRT: Cross-Passage Retrieval Pretraining, "retention term" (every method gets the same one).

    Requirements:
        1. (anchor, positive) columns; a teacher that shares the student's tokenizer.

    Inputs:
        +---------------------------------+--------------------------+
        | Texts                           | Labels                   |
        +=================================+==========================+
        | (anchor, positive, ...) columns | ignored (document ids)   |
        +---------------------------------+--------------------------+

    Relations:
        - :class:`WithRetention` adds this term to any loss with anchor and positive columns.
        - :class:`~xprt_st.losses.XPRTLoss` includes it (``retention`` in its dict of terms).

    Example:
        ::

            from xprt_st.losses import RetentionLoss
            from xprt_st.models import load_model

            model = load_model(None)
            loss = RetentionLoss(model)  # the teacher is a frozen copy of model, taken now
            features = [model.preprocess(["An anchor passage."]), model.preprocess(["Its related passage."])]
            value = loss(features, None)  # 0 before any update: the student still equals the teacher
"""
)


class WithRetention(nn.Module):
    def __init__(
        self,
        loss: nn.Module,
        teacher: SentenceTransformer | None = None,
        retention_weight: float = 40.0,
        temperature: float = 0.05,
        retention_columns: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        if retention_columns is not None and (len(retention_columns) != 2 or min(retention_columns) < 2):
            raise ValueError(
                f"retention_columns must be two column positions after the first two, got {retention_columns}"
            )
        self.retention_columns = None if retention_columns is None else tuple(int(i) for i in retention_columns)
        self.model = loss.model
        self.teacher = teacher if teacher is not None else frozen_copy(loss.model)
        self.loss = loss
        # The wrapped loss reaches the encoder through ``self.model`` only: registering it twice would save
        # the encoder a second time under ``loss.model.`` in the loss-owned state.
        borrow(self.loss, "model", self.model)
        self.retention_weight = float(retention_weight)
        self.temperature = temperature

    @property
    def student_shares_base_pass(self) -> bool:
        """Whether the retention term's student vectors are the wrapped loss's own (anchor, positive) embeddings:
        only when that loss reads unmasked text from the first two columns and can score given embeddings;
        otherwise the student embeds its pair in one more pass, with graph, for the whole batch (what
        :func:`xprt_st.training.memory.plan_of` counts)."""
        return (
            self.retention_columns is None
            and hasattr(self.loss, "compute_loss_from_embeddings")
            and not getattr(self.loss, "encoder_mask_ratio", 0)
        )

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        features = list(sentence_features)
        if len(features) < 2:
            raise ValueError("WithRetention needs (anchor, positive) columns")
        if self.retention_columns is None:
            pair, features_of_loss = features[:2], features
        else:  # the retention text sits in its own two columns after the wrapped loss's
            pair = [features[position] for position in self.retention_columns]
            features_of_loss = features[: min(self.retention_columns)]
        # The trainer may have swapped self.model for a DDP/compiled wrapper; the wrapped loss must use it too.
        borrow(self.loss, "model", self.model)
        if self.student_shares_base_pass:
            # Reuse the base loss's embeddings (only when it reads unmasked text, as the retention term's student
            # must): retention then costs only the teacher pass. Under the base loss's GradCache
            # (CrossPassageLoss(mini_batch_size=...)) they come from its cached pass, so the memory cap holds.
            cached = getattr(self.loss, "cached_embeddings", None)
            embeddings = (cached(features) if cached is not None else None) or embed_columns(self.model, features)
            base = self.loss.compute_loss_from_embeddings(embeddings, labels)
            student = embeddings[:2]
        else:
            base = self.loss(features_of_loss, labels)
            student = embed_by_length(self.model, pair)
        terms = dict(base) if isinstance(base, dict) else {"base": base}
        if self.retention_weight == 0:
            terms["retention"] = student[0].new_zeros(())
            return terms
        teacher = teacher_embeddings(self.teacher, pair)
        terms["retention"] = self.retention_weight * retention_loss(
            student[0], student[1], teacher[0], teacher[1], self.temperature
        )
        return terms

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "loss": self.loss,
            "retention_weight": self.retention_weight,
            "temperature": self.temperature,
            "retention_columns": self.retention_columns,
        }

    @property
    def citation(self) -> str:
        return XPRT_CITATION


WithRetention.__doc__ = (
    """Add the paper's retention term to ANY loss whose first two columns are anchor and positive.

    The paper gives every method, baselines included, the same retention term; this wrapper does that
    for any sentence-transformers loss (MultipleNegativesRankingLoss, CrossPassageLoss, RetroMAELoss, ...).
    It returns a dict ``{"base": <wrapped loss>, "retention": <weighted L_ret>}`` (or the wrapped loss's own
    dict plus ``"retention"``), which SentenceTransformerTrainer sums and logs term by term.
"""
    + _RETENTION_DOC
    + r"""
    When the wrapped loss has ``compute_loss_from_embeddings`` (MultipleNegativesRankingLoss and the xprt_st
    contrastive terms do), the student embeddings are computed once and shared (by the wrapped loss's GradCache
    pass when it has one, ``CrossPassageLoss(mini_batch_size=...)``); otherwise the wrapped loss runs as is and
    the student embeds anchor and positive once more.

    Args:
        loss: the base loss; it must hold the model at ``loss.model``.
        teacher: the frozen starting model; by default ``frozen_copy(loss.model)`` taken at construction.
        retention_weight: 40.0 as at the start of the paper's schedule; the schedule callback overwrites it.
        temperature: :math:`\tau` of the retention softmaxes, 0.05 (see above).
        retention_columns: None (default): the retention term reads the first two columns, (anchor, positive).
            Two positions after the wrapped loss's columns: it reads those instead, and the wrapped loss sees only
            the columns before them. ``xprt-st compare`` puts the mined (anchor, positive) there for the recipes
            whose own pair is another (random positives, random spans), so every recipe of one comparison gets the
            same retention term on the same text, as in the paper.

    References:
        - xPRT: Cross-Passage Retrieval Pretraining, "retention term".

    Requirements:
        1. The wrapped loss's first two columns are (anchor, positive).

    Inputs:
        +---------------------------------------+--------------------------------+
        | Texts                                 | Labels                         |
        +=======================================+================================+
        | whatever the wrapped loss takes       | whatever the wrapped loss takes|
        +---------------------------------------+--------------------------------+

    Relations:
        - :class:`RetentionLoss` is the term alone.

    Example:
        ::

            from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
            from xprt_st.losses import WithRetention
            from xprt_st.models import load_model

            model = load_model(None)
            loss = WithRetention(MultipleNegativesRankingLoss(model), retention_weight=40.0)
            features = [model.preprocess(["An anchor passage.", "Another one."]),
                        model.preprocess(["Its related passage.", "Its own partner."])]
            terms = loss(features, None)  # {"base": ..., "retention": ...}
"""
)
