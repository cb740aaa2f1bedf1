"""L_hyb: distil the fused ranking of BM25 and the frozen start over each batch's candidates, beside L_xp."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import in_fp32
from xprt_st.losses._length_buckets import embed_by_length
from xprt_st.losses.cross_passage import XPRT_CITATION, _document_ids, cross_passage_loss
from xprt_st.losses.retention import retention_loss, teacher_embeddings
from xprt_st.mining.bm25 import BM25Lexicon
from xprt_st.models import frozen_copy

SPREAD_FLOOR = 1e-6
"""A row whose scores spread less than this carries no ranking: its standardised scores are all 0."""


def _standardised(scores: Tensor) -> tuple[Tensor, Tensor]:
    """Each row centred and divided by its standard deviation (0 for a flat row), and that deviation ``(rows, 1)``."""
    centred = scores - scores.mean(dim=1, keepdim=True)
    spread = centred.pow(2).mean(dim=1, keepdim=True).sqrt()  # (rows, 1), the population deviation
    return torch.where(spread > SPREAD_FLOOR, centred / spread.clamp_min(SPREAD_FLOOR), 0.0), spread


def hybrid_teacher_logits(start_logits: Tensor, lexical: Tensor, lexical_weight: float = 1.0) -> Tensor:
    """The hybrid teacher's logits: the z-scored sum of the start's logits and BM25, on the start's own scale.

    Row ``i`` (an anchor over its candidates): ``z(z(start_i) + w * z(bm25_i)) * std(start_i)``, where ``z``
    centres a row and divides it by its standard deviation. The fusion gives each ranker equal say whatever its
    units (BM25 sums IDFs, the start's logits are cosines over the temperature); the last factor puts the fused
    ranking back on the spread of the start's own logits at the student's temperature, so the teacher is exactly as
    sharp as the start. A row without lexical signal (BM25 equal for every candidate) is the start's row, centred:
    the start reproduces its own distribution, and the term is then the retention term's row direction.

    Args:
        start_logits: ``(rows, candidates)`` the frozen start's cosines divided by the temperature.
        lexical: ``(rows, candidates)`` BM25 of each candidate for the row's anchor.
        lexical_weight: ``w``, BM25's weight in the fusion; 0 gives the start's own logits (centred).

    Example:
        >>> start = torch.tensor([[2.0, 0.0, -2.0]], dtype=torch.float64)
        >>> bm25 = torch.tensor([[0.0, 0.0, 6.0]], dtype=torch.float64)
        >>> hybrid_teacher_logits(start, bm25).round(decimals=3).tolist()  # the third candidate moves up
        [[1.633, -2.231, 0.598]]
        >>> hybrid_teacher_logits(start, torch.ones(1, 3)).round(decimals=3).tolist()  # no lexical signal: the start
        [[2.0, 0.0, -2.0]]
    """
    z_start, spread = _standardised(start_logits)
    z_lexical, _ = _standardised(lexical.to(start_logits.dtype))
    fused, _ = _standardised(z_start + lexical_weight * z_lexical)
    return fused * spread


@in_fp32
def hybrid_teacher_loss(
    student_anchors: Tensor,
    student_candidates: Tensor,
    teacher_anchors: Tensor,
    teacher_candidates: Tensor,
    lexical: Tensor,
    temperature: float = 0.05,
    lexical_weight: float = 1.0,
) -> Tensor:
    """KL(hybrid teacher || student) of each anchor's softmax over the batch's candidates, averaged over anchors.

    Args:
        student_anchors: ``(batch, dim)`` the trained model's anchors.
        student_candidates: ``(candidates, dim)`` its candidates: the batch's positives, then its hard negatives.
        teacher_anchors: ``(batch, dim)`` the frozen start's anchors (no gradient).
        teacher_candidates: ``(candidates, dim)`` the frozen start's candidates.
        lexical: ``(batch, candidates)`` BM25 of each candidate for each anchor.
        temperature: divides both models' cosines (the student's and the start's scale).
        lexical_weight: BM25's weight in the fusion (:func:`hybrid_teacher_logits`).
    """
    student = F.normalize(student_anchors, dim=-1) @ F.normalize(student_candidates, dim=-1).T / temperature
    with torch.no_grad():
        start = F.normalize(teacher_anchors, dim=-1) @ F.normalize(teacher_candidates, dim=-1).T / temperature
        teacher = hybrid_teacher_logits(start, lexical.to(start.device), lexical_weight)
    return F.kl_div(
        F.log_softmax(student, dim=1), F.log_softmax(teacher, dim=1), reduction="batchmean", log_target=True
    )


def corpus_lexicon(passages: Iterable[str], model: SentenceTransformer) -> BM25Lexicon:
    """The BM25 statistics of ``passages`` (each counted once) as the loss reads them: each passage cut to the model's
    ``max_seq_length`` tokens and decoded again, the text the loss recovers from a batch's token ids."""
    unique = list(dict.fromkeys(passages))
    if not unique:
        raise ValueError("the hybrid teacher needs the corpus's passages to count its words; none were given")
    tokenizer = model.tokenizer
    decoded: list[str] = []
    for start in range(0, len(unique), 1024):
        ids = tokenizer(unique[start : start + 1024], truncation=True, max_length=model.max_seq_length)["input_ids"]
        decoded += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return BM25Lexicon.fit(decoded)


class HybridTeacherLoss(nn.Module):
    def __init__(
        self,
        model: SentenceTransformer,
        lexicon: BM25Lexicon,
        teacher: SentenceTransformer | None = None,
        retention_weight: float | None = 40.0,
        temperature: float = 0.05,
        hard_negatives: int = 0,
        hybrid_weight: float = 1.0,
        lexical_weight: float = 1.0,
        retention_columns: tuple[int, int] | None = None,
        lexical_candidates: int = 0,
    ) -> None:
        r"""
        ``L_xp`` plus a hybrid teacher: each anchor's distribution over the batch's candidates (every positive and
        hard negative of the batch) is pulled toward the fused ranking of the corpus's BM25 and the frozen start,

        .. math::

            \mathcal{L} = \mathcal{L}_{xp} + \lambda_{hyb}\,\tfrac1B\sum_i
            \mathrm{KL}\big(\mathrm{softmax}(t_i)\,\|\,\mathrm{softmax}(\cos(a_i, c_\cdot)/\tau)\big)
            + \lambda_{ret}\,\mathcal{L}_{ret},
            \qquad t_i = z\big(z(\cos_0(a_i, c_\cdot)/\tau) + w\,z(\mathrm{bm25}(a_i, c_\cdot))\big)\,
            \sigma\big(\cos_0(a_i, c_\cdot)/\tau\big)

        where :math:`\cos_0` is the frozen start, :math:`z` standardises a row and :math:`\sigma` is its standard
        deviation (:func:`hybrid_teacher_logits`). Sources and where this differs:

        - GPL (Wang et al. 2022) distils a cross-encoder's score margins (MarginMSE) on generated queries; its own
          table credits the teacher's scores, not the queries, with the gain. Here the teacher is the offline
          ranker a team has, BM25 fused with the start (the fusion beats both on NFCorpus and ArguAna,
          docs/results/15-lexical-references.md), and the target is a listwise softmax (KL, the shape of
          ``L_ret``) over the batch's candidates, not pairwise margins; the anchors are mined passages, not
          generated queries.
        - SPAR (Chen et al. 2022) trains a dense model to imitate BM25 alone; here BM25 is half of the teacher and
          the start the other half, so the teacher never asks the student to forget what the start ranks well.
        - The scale: the fused ranking is put back on the start's own spread at the student's temperature, so at
          step 0 the teacher is as sharp as the start and differs from it only where BM25 reorders the candidates.
          A teacher on another scale (temperature 1 against the student's 0.05) flattens the student's
          similarities.
        - The fusion is a z-score sum inside the batch's candidates, not the reciprocal-rank fusion over the corpus
          that ``hybrid:MODEL`` evaluates with: RRF's scores carry no scale to distil, and a batch holds 16 to 48
          candidates, not the corpus.
        - Lexical candidates (``lexical_candidates: L``): beside the batch's positives and the start's hard
          negatives, each anchor's BM25 top passages of other documents across the corpus (mined once,
          :mod:`xprt_st.mining.lexical_candidates`) join the candidates of the hybrid term only, not ``L_xp``'s
          negatives: a passage BM25 finds may be relevant, and the teacher, not the contrastive term, says how much.
          GPL's teacher likewise scores negatives retrieved from the whole corpus; here they come from BM25 rather
          than from dense retrievers, since the start's own neighbours are the hard negatives already.
        - BM25 reads the text back from the batch's token ids (the model's tokenizer decoded; lower-cased and cut at
          ``max_seq_length``), scored with :class:`~xprt_st.mining.bm25.BM25Lexicon`'s hashed words, ``k1 = 1.2``,
          ``b = 0.75``, its statistics counted over the training groups' passages (:func:`corpus_lexicon`).

        Args:
            model: the SentenceTransformer being trained.
            lexicon: the corpus's BM25 statistics (:func:`corpus_lexicon` of the training passages; ``xprt-st
                train`` counts them from the mined groups).
            teacher: the frozen start; by default ``frozen_copy(model)`` taken at construction. It is both the
                retention teacher and the dense half of the hybrid teacher.
            retention_weight: ``L_ret``'s weight, 40 at the start of the paper's schedule (the schedule callback
                sets it each step); None: no retention term (the start still teaches through the hybrid term).
            temperature: :math:`\tau` of ``L_xp``, of the student's and the start's softmaxes, and of ``L_ret``.
            hard_negatives: ``K`` columns ``negative_1 .. negative_K`` after ``positive``: ``L_xp``'s hard negatives
                and candidates of every anchor in the hybrid term.
            hybrid_weight: :math:`\lambda_{hyb}`; 0 leaves ``L_xp`` and retention.
            lexical_weight: :math:`w`, BM25's weight in the fusion; 0 makes the teacher the start alone.
            lexical_candidates: ``L`` columns ``lexical_1 .. lexical_L`` after the hard negatives: candidates of
                the hybrid term only (BM25's top passages of other documents for the anchor).
            retention_columns: None (default): ``L_ret`` reads the (anchor, positive) columns. Two column positions
                after the loss's own: ``L_ret`` reads those instead (``xprt-st compare`` puts the mined pair there so
                every recipe of a comparison gets the same retention text, as
                :class:`~xprt_st.losses.WithRetention` does).

        References:
            - Wang et al. 2022, GPL: Generative Pseudo Labeling for Unsupervised Domain Adaptation of Dense Retrieval.
            - Chen et al. 2022, Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a Sparse One?
            - xPRT: Cross-Passage Retrieval Pretraining (``L_xp`` and ``L_ret``).

        Requirements:
            1. Groups mined by ``xprt_st.mining`` (``anchor``, ``positive`` and ``K`` hard negatives), document ids
               as labels.
            2. Not with GradCache or several processes: the batch is embedded in one pass on one device.

        Inputs:
            +------------------------------------------------+-------------------------+
            | Texts                                          | Labels                  |
            +================================================+=========================+
            | (anchor, positive[, negative_1 .. K]) columns  | int64 document id       |
            +------------------------------------------------+-------------------------+

        Relations:
            - :class:`~xprt_st.losses.CrossPassageLoss` is ``L_xp`` alone (``hybrid_weight=0``, same data).
            - :class:`~xprt_st.losses.RetentionLoss`: with ``lexical_weight=0`` the hybrid term is its row
              direction over the batch's candidates.

        Example:
            ::

                from xprt_st.losses import HybridTeacherLoss
                from xprt_st.losses.hybrid_teacher import corpus_lexicon
                from xprt_st.models import load_model

                model = load_model(None)
                passages = ["A perfect game has no batter reaching base.", "Only 24 perfect games were thrown."]
                loss = HybridTeacherLoss(model, corpus_lexicon(passages, model))
        """
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if hard_negatives < 0 or lexical_candidates < 0:
            raise ValueError(
                f"hard_negatives and lexical_candidates must be >= 0, got {hard_negatives}, {lexical_candidates}"
            )
        if hybrid_weight < 0 or lexical_weight < 0:
            raise ValueError(f"hybrid_weight and lexical_weight must be >= 0, got {hybrid_weight}, {lexical_weight}")
        self.model = model
        self.teacher = teacher if teacher is not None else frozen_copy(model)
        self.lexicon = lexicon
        self.retention_weight = 0.0 if retention_weight is None else float(retention_weight)
        self.retention = retention_weight is not None
        self.temperature = temperature
        self.hard_negatives = int(hard_negatives)
        self.hybrid_weight = float(hybrid_weight)
        self.lexical_weight = float(lexical_weight)
        self.lexical_candidates = int(lexical_candidates)
        needed = 2 + self.hard_negatives + self.lexical_candidates
        if retention_columns is not None and (len(retention_columns) != 2 or min(retention_columns) < needed):
            raise ValueError(f"retention_columns must be two column positions after the loss's {needed}")
        self.retention_columns = None if retention_columns is None else tuple(int(i) for i in retention_columns)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        columns = list(sentence_features)
        negatives_end = 2 + self.hard_negatives
        needed = negatives_end + self.lexical_candidates
        if len(columns) < needed:
            raise ValueError(
                f"HybridTeacherLoss needs anchor, positive, {self.hard_negatives} negative and "
                f"{self.lexical_candidates} lexical columns"
            )
        features = columns[:needed]
        student = embed_by_length(self.model, features)
        teacher = teacher_embeddings(self.teacher, features)
        negatives = torch.stack(student[2:negatives_end], dim=1) if self.hard_negatives else None
        terms = {
            "xp": cross_passage_loss(
                student[0], student[1], _document_ids(labels), self.temperature, negatives=negatives
            )
        }
        if self.hybrid_weight > 0:
            lexical = torch.as_tensor(
                self.lexicon.scores(self._texts(features[:1]), self._texts(features[1:])), dtype=torch.float32
            )  # (batch, batch * (1 + K + L)): positives, then each negative column, then each lexical one
            terms["hybrid"] = self.hybrid_weight * hybrid_teacher_loss(
                student[0], torch.cat(student[1:]), teacher[0], torch.cat(teacher[1:]), lexical,
                self.temperature, self.lexical_weight,
            )  # fmt: skip
        if self.retention:
            terms["retention"] = self._retention(columns, student, teacher)
        return terms

    def _retention(self, columns: list[dict[str, Tensor]], student: list[Tensor], teacher: list[Tensor]) -> Tensor:
        """The weighted ``L_ret`` on the (anchor, positive) pair, or on ``retention_columns`` when given."""
        if not self.retention_weight:
            return student[0].new_zeros(())
        if self.retention_columns is not None:
            pair = [columns[position] for position in self.retention_columns]
            student = embed_by_length(self.model, pair)
            teacher = teacher_embeddings(self.teacher, pair)
        loss = retention_loss(student[0], student[1], teacher[0], teacher[1], self.temperature)
        return self.retention_weight * loss

    def _texts(self, columns: Sequence[dict[str, Tensor]]) -> list[str]:
        """The columns' texts as their token ids say (special tokens and padding dropped), column after column."""
        decode = self.model.tokenizer.batch_decode
        return [text for column in columns for text in decode(column["input_ids"].tolist(), skip_special_tokens=True)]

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "hard_negatives": self.hard_negatives,
            "hybrid_weight": self.hybrid_weight,
            "lexical_weight": self.lexical_weight,
            "lexical_candidates": self.lexical_candidates,
            "lexicon": self.lexicon.describe(),
            "retention_columns": self.retention_columns,
        }

    @property
    def citation(self) -> str:
        return XPRT_CITATION
