"""L_xp: symmetric InfoNCE between each anchor and its top related passage, with same-document masking."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import encode_columns, in_fp32, special_token_ids
from xprt_st.losses._distributed import gather_across_devices, local_rows
from xprt_st.losses._grad_cache import cached_encode_columns, checked_mini_batch_size, grad_cache_applies
from xprt_st.losses._length_buckets import embed_by_length

XPRT_CITATION = """
@misc{xprt,
    title = {{xPRT}: Cross-Passage Retrieval Pretraining},
    note = {Cross-passage positives mined inside each document, plus a one-layer fill-in decoder},
}
"""


@in_fp32
def cross_passage_loss(
    anchors: Tensor,
    positives: Tensor,
    labels: Tensor | None = None,
    temperature: float = 0.05,
    gather_across_devices_: bool = False,
    negatives: Tensor | None = None,
) -> Tensor:
    """Symmetric InfoNCE with cosine similarity, masking every other group of the same document.

    Row ``i`` scores anchor ``a_i`` against every positive ``s_j`` of the (possibly gathered) batch;
    the target is ``s_i``. Entries with ``label_j == label_i`` and ``j != i`` are set to ``-inf``,
    so a same-document group is never a negative. The positive itself always stays, so a row with
    no negative left scores ``log(1) = 0``: finite, with zero gradient. The reverse direction
    (``s_i`` picks ``a_i`` among the anchors) is computed the same way and the two are averaged.

    Args:
        anchors: ``(batch, dim)`` anchor embeddings of this device.
        positives: ``(batch, dim)`` top-related-passage embeddings of this device.
        labels: ``(batch,)`` int64 document ids, or None to mask nothing.
        temperature: divides the cosines.
        gather_across_devices_: use the anchors, positives and ids of every device as candidates.
        negatives: ``(batch, K, dim)`` hard negatives of each anchor (passages of other documents), or None
            (the paper's loss). Anchor ``a_i`` also scores its own ``K`` negatives, appended after the
            positives in the anchor -> positive direction only; the reverse direction is unchanged. A row's
            negatives are never another anchor's candidates (another anchor's negative may come from its
            document).
    """
    batch_size = anchors.size(0)
    if gather_across_devices_:
        (all_anchors, all_positives), all_labels, offset = gather_across_devices([anchors, positives], labels)
    else:
        all_anchors, all_positives, all_labels, offset = anchors, positives, labels, 0
    own = local_rows(batch_size, offset, anchors.device)  # (batch,)
    rows = torch.arange(batch_size, device=anchors.device)

    anchors_n = F.normalize(anchors, dim=-1)
    positives_n = F.normalize(positives, dim=-1)
    forward = anchors_n @ F.normalize(all_positives, dim=-1).T / temperature  # (batch, world * batch)
    backward = positives_n @ F.normalize(all_anchors, dim=-1).T / temperature  # (batch, world * batch)

    if all_labels is not None:
        same_document = labels[:, None] == all_labels[None, :]  # (batch, world * batch)
        same_document[rows, own] = False  # keep the positive itself
        forward = forward.masked_fill(same_document, float("-inf"))
        backward = backward.masked_fill(same_document, float("-inf"))

    if negatives is not None and negatives.size(1) > 0:
        hard = torch.einsum("bd,bkd->bk", anchors_n, F.normalize(negatives, dim=-1)) / temperature  # (batch, K)
        forward = torch.cat([forward, hard], dim=1)

    loss_forward = F.cross_entropy(forward, own)
    loss_backward = F.cross_entropy(backward, own)
    return (loss_forward + loss_backward) / 2


class CrossPassageLoss(nn.Module):
    def __init__(
        self,
        model: SentenceTransformer,
        temperature: float = 0.05,
        gather_across_devices: bool = False,
        encoder_mask_ratio: float = 0.0,
        hard_negatives: int = 0,
        mini_batch_size: int | None = None,
    ):
        r"""
        xPRT's main term ``L_xp``: each anchor must pick out its top related passage (``positive``) among
        the positives of the other groups in the batch, and each positive must pick out its anchor
        among the other anchors; the two directions are averaged.

        .. math::

            \mathcal{L}_{xp} = \tfrac12\Big(
            -\log\frac{e^{\cos(a_i, s_i)/\tau}}{\sum_{j \notin D(i)} e^{\cos(a_i, s_j)/\tau}}
            -\log\frac{e^{\cos(s_i, a_i)/\tau}}{\sum_{j \notin D(i)} e^{\cos(s_i, a_j)/\tau}}\Big)

        where :math:`D(i)` is the set of *other* groups from the same document as group :math:`i`
        (removed from the denominator, not down-weighted). Hand check (the paper's example): 3 groups,
        cosine 0.8 to the own positive and 0.5 to the other two give the positive probability
        :math:`e^{16}/(e^{16}+2e^{10}) \approx 99.5\%`.

        Args:
            model: the SentenceTransformer being trained (its pooling, mean for the paper, gives the vectors).
            temperature: :math:`\tau`; 0.05 as in the paper (``scale = 20`` in MultipleNegativesRankingLoss terms).
            gather_across_devices: with several devices, use every device's positives, anchors and document ids
                as candidates (gradients flow to the local rows). Off by default, as in sentence-transformers.
            encoder_mask_ratio: share of each passage's tokens replaced by [MASK] before the vectors are taken; 0
                (default): unmasked text, the paper's "change only the positive" and a MultipleNegativesRankingLoss
                step. Inside full xPRT, ``L_xp`` reads the one 15%-masked encoder pass that also feeds the fill-in
                terms; 0.15 here reads exactly that pass (the same per-token masks, drawn in the same order, see
                :func:`~xprt_st.losses._common.encode_columns`), so "xPRT vs L_xp alone" then differs only in
                the fill-in, MLM and uniformity terms, not also in masking (recipe ``change-only-positive-masked``).
            hard_negatives: ``K`` columns ``negative_1 .. negative_K`` after ``positive`` (mined from other
                documents, :mod:`xprt_st.mining.hard_negatives`) join each anchor's candidates in the anchor ->
                positive direction; 0 (default): the paper's loss, in-batch negatives only (recipe
                ``change-only-positive-hard`` uses 2).
            mini_batch_size: groups per GradCache mini-batch (Gao et al. 2021, as sentence-transformers'
                ``CachedMultipleNegativesRankingLoss``): every column is embedded without a graph, the loss is taken
                over the whole batch, and backward re-runs ``mini_batch_size`` groups at a time with their graph, so
                the encoder's activations are held for that many groups, not the batch; the loss and its gradient
                are the uncut batch's (up to float summation order; dropout draws the same masks in the re-run).
                Cost: one more forward without graph; measured 1.65x the uncut step's CPU time (hard negatives,
                32 groups in mini-batches of 16, MiniLM, ``docs/losses.md``). None (default): the whole batch
                in one pass, the paper's and MultipleNegativesRankingLoss's step. Off under multi-process
                training, as in :class:`~xprt_st.losses.XPRTLoss`. In :class:`~xprt_st.losses.WithRetention` the
                student's (anchor, positive) come from the same cached pass (retention adds only the teacher's
                forward, without graph) unless ``encoder_mask_ratio`` is above 0.

        References:
            - xPRT: Cross-Passage Retrieval Pretraining (this package's reference paper).
            - van den Oord et al. 2018, Representation Learning with Contrastive Predictive Coding.
            - Gao et al. 2021, Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup (GradCache).

        Requirements:
            1. Groups mined by ``xprt_st.mining``: an anchor and its most related passage of the same document.
            2. Document ids as labels so that same-document groups are not negatives (labels may be None).

        Inputs:
            +-----------------------------------------------+-------------------------+
            | Texts                                         | Labels                  |
            +===============================================+=========================+
            | (anchor, positive[, related_2, ...]) columns  | int64 document id       |
            +-----------------------------------------------+-------------------------+

            Columns after ``positive`` are accepted and ignored: they only feed the fill-in terms.

        Relations:
            - Equals ``MultipleNegativesRankingLoss(model, scale=1/temperature, directions=("query_to_doc",
              "doc_to_query"), partition_mode="per_direction")`` when every group comes from a different document.
            - :class:`~xprt_st.losses.XPRTLoss` adds the fill-in, MLM, uniformity and retention terms.
            - :class:`~xprt_st.losses.WithRetention` adds the paper's retention term to this loss.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformerTrainer
                from xprt_st.losses import CrossPassageLoss
                from xprt_st.models import load_model

                model = load_model(None)
                train_dataset = Dataset.from_dict({
                    "anchor": ["A perfect game is a game with no batter reaching base.", "Ford builds the F-Series."],
                    "positive": ["Only 24 perfect games were thrown in MLB.", "The F-150 is its best seller."],
                    "label": [0, 1],
                })
                loss = CrossPassageLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if not 0 <= encoder_mask_ratio < 1:
            raise ValueError(f"encoder_mask_ratio must be in [0, 1), got {encoder_mask_ratio}")
        self.model = model
        self.temperature = temperature
        self.gather_across_devices = gather_across_devices
        self.encoder_mask_ratio = float(encoder_mask_ratio)
        if hard_negatives < 0:
            raise ValueError(f"hard_negatives must be >= 0, got {hard_negatives}")
        self.hard_negatives = int(hard_negatives)
        self.mini_batch_size = checked_mini_batch_size("mini_batch_size", mini_batch_size)
        self.special_ids = special_token_ids(model) if encoder_mask_ratio > 0 else None
        self.mask_token_id = int(model.tokenizer.mask_token_id) if encoder_mask_ratio > 0 else None

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> Tensor:
        features = list(sentence_features)
        needed = 2 + self.hard_negatives
        if len(features) < needed:
            raise ValueError(
                f"CrossPassageLoss needs (anchor, positive{', negative_1 ..' if self.hard_negatives else ''}) "
                f"columns: {needed}, got {len(features)} column(s)"
            )
        cached = self.cached_embeddings(features[:needed])
        if cached is not None:
            return self.compute_loss_from_embeddings(cached, labels)
        if self.encoder_mask_ratio > 0:
            # xPRT's encoder pass: per-token masks drawn per column (anchor first), then one merged forward
            encoded = encode_columns(self.model, features[:needed], **self._masking())
            return self.compute_loss_from_embeddings(encoded.embeddings, labels)
        # One merged forward over anchor and positive: both are passages of the same kind and width.
        embeddings = embed_by_length(self.model, features[:needed])
        return self.compute_loss_from_embeddings(embeddings, labels)

    def cached_embeddings(self, features: list[dict[str, Tensor]]) -> list[Tensor] | None:
        """Every column's embeddings under GradCache, or None when it is off for this batch (``mini_batch_size``
        unset or not smaller than the batch, or several processes train): then the caller embeds as usual."""
        if not grad_cache_applies(self.mini_batch_size, features[0]["input_ids"].size(0)):
            return None
        return cached_encode_columns(self.model, features, self.mini_batch_size, **self._masking()).embeddings

    def _masking(self) -> dict[str, Any]:
        """The encoder-masking arguments of ``encode_columns``: none when ``encoder_mask_ratio`` is 0."""
        if self.encoder_mask_ratio == 0:
            return {}
        return {
            "mask_ratio": self.encoder_mask_ratio,
            "special_ids": self.special_ids,
            "mask_token_id": self.mask_token_id,
        }

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        negatives = torch.stack(embeddings[2 : 2 + self.hard_negatives], dim=1) if self.hard_negatives else None
        return cross_passage_loss(
            embeddings[0],
            embeddings[1],
            _document_ids(labels),
            self.temperature,
            self.gather_across_devices,
            negatives=negatives,
        )

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "gather_across_devices": self.gather_across_devices,
            "encoder_mask_ratio": self.encoder_mask_ratio,
            "hard_negatives": self.hard_negatives,
            "mini_batch_size": self.mini_batch_size,
        }

    @property
    def citation(self) -> str:
        return XPRT_CITATION


def _document_ids(labels: Tensor | None) -> Tensor | None:
    """The label column as document ids, or None when the dataset has none (then nothing is masked)."""
    if labels is None:
        return None
    if labels.dtype.is_floating_point:
        raise TypeError(
            f"the label column must hold int64 document ids (see xprt_st.columns.LABEL), got dtype {labels.dtype}"
        )
    return labels.view(-1)
