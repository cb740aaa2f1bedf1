"""Batches spread documents by default, deterministically; rows left without any negative are warned about."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from datasets import Dataset, load_from_disk
from sentence_transformers import SentenceTransformerTrainingArguments
from training_helpers import cpu_training_args, make_groups

from xprt_st.training.trainer import XPRTTrainer


def _args(output: Path, batch_size: int = 4, **overrides) -> SentenceTransformerTrainingArguments:
    values = dict(max_steps=2, per_device_train_batch_size=batch_size, save_strategy="no")
    return cpu_training_args(output, **{**values, **overrides})


def _batches(sampler, epoch: int = 0) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return [list(batch) for batch in sampler]


def test_sampler_puts_distinct_documents_in_every_batch_and_is_seeded() -> None:
    from xprt_st.training.sampler import DocumentSpreadBatchSampler

    # 24 groups of 6 documents (4 groups each), batch 6: a full batch must take one group of every document
    rows = make_groups(24)
    rows["label"] = [index % 6 for index in range(24)]
    data = Dataset.from_dict(rows)
    sampler = DocumentSpreadBatchSampler(data, batch_size=6, drop_last=True, generator=torch.Generator(), seed=3)

    batches = _batches(sampler)
    assert len(batches) == len(sampler) == 4
    assert all(len({rows["label"][row] for row in batch}) == 6 for batch in batches)
    assert sorted(row for batch in batches for row in batch) == list(range(24))  # one pass: every group once
    again = DocumentSpreadBatchSampler(data, batch_size=6, drop_last=True, generator=torch.Generator(), seed=3)
    assert _batches(again) == batches  # a resumed run draws the same batches
    assert _batches(again, epoch=1) != batches  # and a new order every epoch
    other_seed = DocumentSpreadBatchSampler(data, batch_size=6, drop_last=True, generator=torch.Generator(), seed=4)
    assert _batches(other_seed) != batches


def test_trainer_spreads_documents_by_default(tiny_model, toy_loss_class, mined_dir, tmp_path) -> None:
    data = load_from_disk(str(mined_dir))  # 16 groups of 4 documents
    trainer = XPRTTrainer(
        model=tiny_model, args=_args(tmp_path / "out"), train_dataset=data, loss=toy_loss_class(tiny_model)
    )
    loader = trainer.get_train_dataloader()
    labels = [batch["label"].tolist() for batch in loader]
    assert len(labels) == 4
    assert all(len(set(batch)) == len(batch) == 4 for batch in labels), labels


def test_rows_without_any_negative_are_warned_about(tiny_model, toy_loss_class, tmp_path, caplog) -> None:
    rows = make_groups(8)
    rows["label"] = [0] * 8  # one document: every other group in a batch is masked
    data = Dataset.from_dict(rows).select_columns(["anchor", "positive", "label"])
    trainer = XPRTTrainer(
        model=tiny_model,
        args=_args(tmp_path / "out", batch_size=2, max_steps=1),
        train_dataset=data,
        loss=toy_loss_class(tiny_model),
    )
    with caplog.at_level(logging.WARNING, logger="xprt_st.training.trainer"):
        trainer.train()
    messages = [record.getMessage() for record in caplog.records]
    assert any("fewer documents than the 2 groups of a batch" in message for message in messages), messages
    assert any("2 of the 2 rows trained so far (100%) had no negative" in message for message in messages), messages
