"""XPRTLoss: the paper's weighted sum of terms, from one batched encoder pass, as a dict of named terms."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.losses._common import EncodedColumns, borrow, encode_columns, special_token_ids
from xprt_st.losses._grad_cache import cached_encode_columns, checked_mini_batch_size, grad_cache_applies
from xprt_st.losses.cross_passage import XPRT_CITATION, CrossPassageLoss, _document_ids
from xprt_st.losses.decoder import FillInDecoder
from xprt_st.losses.fill_in import DECODER_MINI_BATCH, CrossFillInLoss, SelfFillInLoss
from xprt_st.losses.mlm import BERT_CITATION, MLMLoss
from xprt_st.losses.retention import RetentionLoss, teacher_embeddings
from xprt_st.losses.uniformity import UNIFORMITY_CITATION, UniformityLoss
from xprt_st.models import attach_mlm_head, frozen_copy

ENCODER_MINI_BATCH = 16
"""Groups per GradCache mini-batch by default: 16 groups x 5 masked passages x 128 tokens hold about 2.4 GB of
all-MiniLM-L6-v2 activations (the whole 64-group step's encoder passes held 13 GB); batches of at most 16 groups
run uncut, at no extra cost."""


class XPRTLoss(nn.Module):
    def __init__(
        self,
        model: SentenceTransformer,
        teacher: SentenceTransformer | None = None,
        xp_weight: float = 1.0,
        cross_weight: float = 0.1,
        self_weight: float = 0.1,
        mlm_weight: float = 0.1,
        unif_weight: float = 0.1,
        retention_weight: float | None = 40.0,
        temperature: float = 0.05,
        encoder_mask_ratio: float = 0.15,
        decoder_mask_ratio: float = 0.6,
        num_condition_vectors: int = 4,
        retention_temperature: float = 0.05,
        uniformity_t: float = 2.0,
        gather_across_devices: bool = False,
        merge_columns: bool = True,
        prediction_ratio: float = 1.0,
        retention_columns: tuple[int, int] | None = None,
        mini_batch_size: int | None = ENCODER_MINI_BATCH,
        decoder_mini_batch_size: int | None = DECODER_MINI_BATCH,
        hard_negatives: int = 0,
    ) -> None:
        r"""
        The full xPRT objective: change the positive (``L_xp``), make the vector carry what the passages share
        (``L_cross``), plus the auxiliary self fill-in, MLM and uniformity terms and the retention term of
        continued pre-training:

        .. math::

            \mathcal{L} = \mathcal{L}_{xp} + 0.1\,\mathcal{L}_{cross} + 0.1\,\mathcal{L}_{self}
            + 0.1\,\mathcal{L}_{MLM} + 0.1\,\mathcal{L}_{unif} + w_{ret}(t)\,\mathcal{L}_{ret}

        The paper gives ``L_cross`` its weight 0.1 and no weight for ``L_self``, ``L_MLM`` or ``L_unif``; 0.1 each
        is our choice (see the arguments below), not unit weights.

        ``forward`` returns a dict of the weighted terms, ``{"xp", "cross", "self", "mlm", "unif", "retention"}``
        (only the enabled ones); SentenceTransformerTrainer sums them and logs each one.

        ``L_self``'s teacher is read only at the encoder pass's masked positions, where ``L_MLM`` trains it
        (see :class:`SelfFillInLoss`). The retention term's student vectors come from the UNMASKED anchor and
        positive, as the teacher's do and as :class:`WithRetention` embeds every baseline's: the paper counts
        "one more frozen-E5 pass" for retention, which suggests it reuses the 15%-masked student vectors, but
        then retention is far from 0 at step 0 (masking alone moves the vectors) and, at weight 40, would pull
        xPRT toward masking invariance, which no baseline is pulled toward. One unmasked student forward of the
        two columns per step buys a term that means the same thing for every recipe.

        Cost. With any of the cross/self/MLM terms on, the anchor and its 4 related passages go through the
        encoder ONCE, as one batched forward with 15% masking: the paper's "5 encoder passes per group", from
        which the L_xp vectors, the fill-in vectors and the self fill-in teacher all come. The 8 cross and 2 self
        decoder passes per group run as two batched one-layer passes. With only ``L_xp`` (and optionally
        ``L_ret``/``L_unif``) on, the loss reads only the anchor and positive columns, unmasked, in one forward:
        the paper's "change only the positive" configuration, costing what a MultipleNegativesRankingLoss
        step costs (plus the teacher pass when retention is on). With the masked pass and retention on, the
        anchor and positive also go through the encoder unmasked once, for the retention term's student side.

        Args:
            model: the SentenceTransformer being trained (mean pooling in the paper).
            teacher: the frozen starting model for retention; by default ``frozen_copy(model)`` taken now.
            xp_weight: weight of ``L_xp``; 1, the paper's main term.
            cross_weight: weight of ``L_cross``; 0.1 as in the paper.
            self_weight: weight of ``L_self``; 0.1 is OUR choice (the paper gives none): the same scale as the other
                decoder term.
            mlm_weight: weight of ``L_MLM``; 0.1 is OUR choice (the paper gives none): enough to keep the teacher a
                language model without letting token prediction dominate the contrastive term.
            unif_weight: weight of ``L_unif``; 0.1 is OUR choice (the paper gives none): ``L_unif`` is about -2..-4,
                so 0.1 keeps it a regularizer next to ``L_xp``.
            retention_weight: starting weight of ``L_ret``; 40 as in the paper, whose schedule lowers it to 0 (the
                schedule callback sets the float attribute ``retention_weight`` each step). ``None`` disables
                retention (no teacher is built), e.g. when pre-training from BERT rather than continuing from E5.
            temperature: :math:`\tau` of ``L_xp``; 0.05 as in the paper.
            encoder_mask_ratio: masking of the single encoder pass when a decoder or MLM term is on; 0.15.
            decoder_mask_ratio: masking of the fill-in decoder's input; 0.6 as in the paper.
            num_condition_vectors: vectors the sentence vector is mapped to; 4 as in the paper.
            retention_temperature: :math:`\tau` of the retention softmaxes; 0.05 (see :class:`RetentionLoss`).
            uniformity_t: the uniformity kernel's ``t``; 2 as in Wang and Isola.
            gather_across_devices: gather ``L_xp``'s negatives and document ids across devices.
            merge_columns: one batched encoder forward for all columns (default). False embeds each column on its
                own: same losses and gradients, slower; kept for the equivalence test and for debugging.
            prediction_ratio: share of the fill-in decoder's masked positions whose word is predicted; 1.0 (every
                one) as in the paper. The vocabulary projection at ~30k positions per 32 groups is the step's
                largest cost; 0.25 scores a uniform quarter of them, an unbiased estimate of the same loss
                (see ``docs/losses.md`` for the measured step times).
            retention_columns: None (default): the retention term reads the anchor and positive columns. Two column
                positions after the five group columns: it reads the (anchor, positive) text there instead, as
                ``xprt-st compare`` gives every recipe the mined pair (the random-positive ablation's own
                positive is another passage); see :class:`WithRetention`.
            mini_batch_size: groups per GradCache mini-batch (as ``CachedMultipleNegativesRankingLoss``) of the
                masked pass and of the retention term's unmasked student pass, when the batch is larger: both run
                first without graph, every term is computed on the whole batch (the negatives stay the full batch),
                and backward re-runs ``mini_batch_size`` groups at a time with their graph. The same loss and
                gradients (each mini-batch replays its dropout), with the encoder's activations held for one
                mini-batch. 16 by default (:data:`ENCODER_MINI_BATCH`): it costs one extra encoder forward per
                pass, and the default 64-group recipe does not fit 8 GB without it; None holds every pass's graph
                for the whole batch (see ``docs/losses.md``, "Memory"). Off under DDP (see ``_distributed``).
            decoder_mini_batch_size: decoder rows of the fill-in terms run at a time, each block's gradient taken at
                once; 64 by default, at no extra compute; None decodes all rows at once (see :class:`CrossFillInLoss`).
            hard_negatives: ``K`` columns ``negative_1 .. negative_K`` after the group columns (the last ``K`` text
                columns; mined from other documents by :mod:`xprt_st.mining.hard_negatives`) join each anchor's
                candidates in ``L_xp``'s anchor -> positive direction, as in :class:`CrossPassageLoss`. NOT in the
                paper, whose negatives are the batch's passages only: from a strong start the mined positive is
                already the nearest passage and ``L_xp`` is near 0 (docs/results/11-in-domain.md). They go through
                the same encoder pass as the group (15%-masked when that pass is), and feed ``L_xp`` only: the
                fill-in, MLM, uniformity and retention terms read the group's columns as without them. 0 (the
                default) is the paper's loss.

        References:
            - xPRT: Cross-Passage Retrieval Pretraining.
            - Wang and Isola 2020 (uniformity); Devlin et al. 2019 (MLM).

        Requirements:
            1. Groups mined by ``xprt_st.mining``; with the decoder terms on, a BERT-like encoder with a mask token.

        Inputs:
            +---------------------------------------------------------+---------------------+
            | Texts                                                   | Labels              |
            +=========================================================+=====================+
            | (anchor, positive, related_2, related_3, related_4)     | int64 document id   |
            +---------------------------------------------------------+---------------------+
            | (anchor, ..., related_4, negative_1, ..., negative_K)   | int64 document id   |
            | with ``hard_negatives=K``                               |                     |
            +---------------------------------------------------------+---------------------+

        Relations:
            - Each term is one class, usable alone and exposed here as an attribute (``None`` when its weight is 0):
              ``cross_passage`` (:class:`CrossPassageLoss`), ``cross_fill_in`` (:class:`CrossFillInLoss`),
              ``self_fill_in`` (:class:`SelfFillInLoss`), ``mlm`` (:class:`MLMLoss`), ``uniformity``
              (:class:`UniformityLoss`), ``retention`` (:class:`RetentionLoss`); ``terms`` maps the dict keys to them.
            - ``XPRTLoss(model, cross_weight=0, self_weight=0, mlm_weight=0, unif_weight=0)`` is "change only the
              positive"; add ``retention_weight=None`` to drop retention too.
            - :class:`RetroMAELoss` is the within-passage auto-encoding baseline on the same data.

        Example:
            ::

                from datasets import Dataset
                from sentence_transformers import SentenceTransformerTrainer
                from xprt_st.losses import XPRTLoss
                from xprt_st.models import load_model

                model = load_model(None)
                train_dataset = Dataset.from_dict({
                    "anchor": ["A perfect game allows no base runner.", "Ford builds the F-Series pickups."],
                    "positive": ["Only 24 perfect games were thrown.", "The F-150 is the best seller."],
                    "related_2": ["The pitcher retired every batter.", "The trucks sell across America."],
                    "related_3": ["No walks, no hits, no errors.", "The first model came out in 1948."],
                    "related_4": ["The crowd stood for the last out.", "Gas and diesel engines are offered."],
                    "label": [0, 1],
                })
                loss = XPRTLoss(model)
                trainer = SentenceTransformerTrainer(model=model, train_dataset=train_dataset, loss=loss)
                trainer.train()
        """
        super().__init__()
        for name, value in (
            ("xp_weight", xp_weight),
            ("cross_weight", cross_weight),
            ("self_weight", self_weight),
            ("mlm_weight", mlm_weight),
            ("unif_weight", unif_weight),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.model = model
        self.xp_weight = float(xp_weight)
        self.cross_weight = float(cross_weight)
        self.self_weight = float(self_weight)
        self.mlm_weight = float(mlm_weight)
        self.unif_weight = float(unif_weight)
        self.temperature = temperature
        self.encoder_mask_ratio = encoder_mask_ratio
        self.decoder_mask_ratio = decoder_mask_ratio
        self.num_condition_vectors = num_condition_vectors
        self.retention_temperature = retention_temperature
        self.uniformity_t = uniformity_t
        self.gather_across_devices = gather_across_devices
        self.merge_columns = merge_columns
        self.prediction_ratio = float(prediction_ratio)
        self.mini_batch_size = checked_mini_batch_size("mini_batch_size", mini_batch_size)
        self.decoder_mini_batch_size = checked_mini_batch_size("decoder_mini_batch_size", decoder_mini_batch_size)
        if retention_columns is not None and (len(retention_columns) != 2 or min(retention_columns) < 2):
            raise ValueError(f"retention_columns must be two positions after the first two, got {retention_columns}")
        self.retention_columns = None if retention_columns is None else tuple(int(i) for i in retention_columns)
        if isinstance(hard_negatives, bool) or int(hard_negatives) != hard_negatives or hard_negatives < 0:
            raise ValueError(f"hard_negatives must be a whole number >= 0, got {hard_negatives!r}")
        self.hard_negatives = int(hard_negatives)

        # Owned once here; the term objects below reach them through unregistered references.
        self.teacher = None if retention_weight is None else (teacher if teacher is not None else frozen_copy(model))
        uses_decoder = self.cross_weight > 0 or self.self_weight > 0
        self.decoder = FillInDecoder(model, num_condition_vectors) if uses_decoder else None
        self.mlm_head = attach_mlm_head(model) if uses_decoder or self.mlm_weight > 0 else None
        self.special_ids = special_token_ids(model) if self.mlm_head is not None else None
        self.mask_token_id = int(model.tokenizer.mask_token_id) if self.mlm_head is not None else None

        shared = {"decoder": self.decoder, "mlm_head": self.mlm_head}
        self.cross_passage = (
            CrossPassageLoss(model, temperature, gather_across_devices, hard_negatives=self.hard_negatives)
            if xp_weight > 0
            else None
        )
        fill_in_args = {
            "decoder_mask_ratio": decoder_mask_ratio,
            "encoder_mask_ratio": encoder_mask_ratio,
            "prediction_ratio": prediction_ratio,
            "decoder_mini_batch_size": self.decoder_mini_batch_size,
        }
        self.cross_fill_in = CrossFillInLoss(model, **fill_in_args, **shared) if cross_weight > 0 else None
        self.self_fill_in = SelfFillInLoss(model, **fill_in_args, **shared) if self_weight > 0 else None
        self.mlm = MLMLoss(model, encoder_mask_ratio, self.mlm_head) if mlm_weight > 0 else None
        self.uniformity = UniformityLoss(model, uniformity_t) if unif_weight > 0 else None
        self.retention = (
            None
            if self.teacher is None
            else RetentionLoss(model, self.teacher, float(retention_weight), retention_temperature)
        )
        for term in self.terms.values():
            for name in ("model", "teacher", "decoder", "mlm_head"):
                if name in term._modules:
                    borrow(term, name, getattr(self, name))

    @property
    def terms(self) -> dict[str, nn.Module]:
        """The enabled terms by the key they have in ``forward``'s dict."""
        named = {
            "xp": self.cross_passage,
            "cross": self.cross_fill_in,
            "self": self.self_fill_in,
            "mlm": self.mlm,
            "unif": self.uniformity,
            "retention": self.retention,
        }
        return {key: term for key, term in named.items() if term is not None}

    @property
    def retention_weight(self) -> float | None:
        """The retention term's current weight (None when retention is off); the schedule callback sets it."""
        return None if self.retention is None else self.retention.retention_weight

    @retention_weight.setter
    def retention_weight(self, value: float) -> None:
        if self.retention is None:
            raise ValueError("this XPRTLoss was built with retention_weight=None; it has no retention term")
        self.retention.retention_weight = float(value)

    @property
    def needs_masked_pass(self) -> bool:
        return self.cross_fill_in is not None or self.self_fill_in is not None or self.mlm is not None

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> dict[str, Tensor]:
        features = list(sentence_features)
        count = self.hard_negatives if self.cross_passage is not None else 0
        negatives = features[len(features) - count :] if count else []
        group = features[: len(features) - count]
        needed = 2 if self.cross_fill_in is None else 5
        if len(group) < needed:
            raise ValueError(
                f"XPRTLoss with these terms needs the columns anchor, positive"
                f"{', related_2, related_3, related_4' if needed == 5 else ''}"
                f"{f', then negative_1 .. negative_{count}' if count else ''}; got {len(features)} text column(s)"
            )
        # anchor + 4 related: one 15%-masked forward feeds every term (the paper's 5 passes per group); change only
        # the positive: anchor and positive, unmasked, like MultipleNegativesRankingLoss. Hard negatives join the pass.
        columns = group[:5] if self.needs_masked_pass else group[:2]
        encoded = self._encode(columns + negatives, masked=self.needs_masked_pass)
        negative_embeddings = encoded.embeddings[len(columns) :]
        if count:
            encoded = EncodedColumns(*(getattr(encoded, f.name)[: len(columns)] for f in dataclasses.fields(encoded)))
        pair = group[:2] if self.retention_columns is None else [features[i] for i in self.retention_columns]
        return self.compute_loss_from_encoded(
            encoded, labels, pair, own_pair=self.retention_columns is None, negatives=negative_embeddings
        )

    def _encode(self, features: list[dict[str, Tensor]], masked: bool) -> EncodedColumns:
        """One encoder pass over ``features`` (15%-masked or not); under GradCache when ``mini_batch_size`` is set
        and smaller than the batch."""
        masking = (
            {
                "mask_ratio": self.encoder_mask_ratio,
                "special_ids": self.special_ids,
                "mask_token_id": self.mask_token_id,
            }
            if masked
            else {}
        )
        if grad_cache_applies(self.mini_batch_size, features[0]["input_ids"].size(0)):
            return cached_encode_columns(
                self.model, features, self.mini_batch_size, batched=self.merge_columns, **masking
            )
        return encode_columns(self.model, features, batched=self.merge_columns, **masking)

    def compute_loss_from_encoded(
        self,
        encoded: EncodedColumns,
        labels: Tensor | None,
        unmasked_pair: list[dict[str, Tensor]],
        own_pair: bool = True,
        negatives: list[Tensor] | None = None,
    ) -> dict[str, Tensor]:
        """All enabled terms from one encoder pass (:class:`EncodedColumns`); the retention term's teacher and
        student both read ``unmasked_pair`` (the anchor and positive features before masking), the student
        reusing ``encoded`` when that pass was unmasked and ``own_pair`` (the pair is its first two columns).
        ``negatives``: the ``hard_negatives`` columns' embeddings from the same pass, read by ``L_xp`` only."""
        embeddings = encoded.embeddings  # each (batch, dim)
        terms: dict[str, Tensor] = {}
        if self.cross_passage is not None:
            negatives = list(negatives or [])
            if len(negatives) != self.hard_negatives:
                raise ValueError(f"L_xp takes {self.hard_negatives} hard-negative column(s), got {len(negatives)}")
            loss = self.cross_passage.compute_loss_from_embeddings(embeddings[:2] + negatives, _document_ids(labels))
            terms["xp"] = self.xp_weight * loss
        if self.cross_fill_in is not None:
            loss = self.cross_fill_in.compute_loss_from_embeddings(
                embeddings, encoded.input_ids, encoded.attention_mask
            )
            terms["cross"] = self.cross_weight * loss
        if self.self_fill_in is not None:
            loss = self.self_fill_in.compute_loss_from_token_states(
                embeddings[:2],
                encoded.token_states[:2],
                encoded.input_ids[:2],
                encoded.attention_mask[:2],
                encoded.masks[:2],
            )
            terms["self"] = self.self_weight * loss
        if self.mlm is not None:
            loss = self.mlm.compute_loss_from_token_states(encoded.token_states, encoded.input_ids, encoded.masks)
            terms["mlm"] = self.mlm_weight * loss
        if self.uniformity is not None:
            terms["unif"] = self.unif_weight * self.uniformity.compute_loss_from_embeddings(embeddings[:1])
        if self.retention is not None:
            if self.retention.retention_weight == 0:
                terms["retention"] = embeddings[0].new_zeros(())  # the schedule reached 0: skip the teacher pass
            else:
                teacher = teacher_embeddings(self.teacher, unmasked_pair)
                student = embeddings[:2]
                if not own_pair or any(mask.any() for mask in encoded.masks[:2]):
                    student = self._encode(unmasked_pair, masked=False).embeddings
                terms["retention"] = self.retention.compute_loss_from_embeddings(student, teacher)
        return terms

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "xp_weight": self.xp_weight,
            "cross_weight": self.cross_weight,
            "self_weight": self.self_weight,
            "mlm_weight": self.mlm_weight,
            "unif_weight": self.unif_weight,
            "retention_weight": self.retention_weight,
            "temperature": self.temperature,
            "encoder_mask_ratio": self.encoder_mask_ratio,
            "decoder_mask_ratio": self.decoder_mask_ratio,
            "num_condition_vectors": self.num_condition_vectors,
            "retention_temperature": self.retention_temperature,
            "uniformity_t": self.uniformity_t,
            "gather_across_devices": self.gather_across_devices,
            "prediction_ratio": self.prediction_ratio,
            "retention_columns": self.retention_columns,
            "mini_batch_size": self.mini_batch_size,
            "decoder_mini_batch_size": self.decoder_mini_batch_size,
            "hard_negatives": self.hard_negatives,
        }

    @property
    def citation(self) -> str:
        citations = [XPRT_CITATION]
        if self.uniformity is not None:
            citations.append(UNIFORMITY_CITATION)
        if self.mlm is not None:
            citations.append(BERT_CITATION)
        return "".join(citations)
