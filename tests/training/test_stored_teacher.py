"""The frozen start reads mining's stored vectors: the same loss and the same training as encoding every step.

Mining the tests' corpus with the tiny BERT at fp32 stores the start's vector of every passage of a document with
two or more passages; training from that start with the hybrid teacher (hard negatives, retention) then reads them
instead of running the frozen model. A text mining never encoded (a one-passage document, a text of no passage)
is encoded; at another token limit only the rows whose token ids both limits leave whole are read; a folder mined
by another start is not read at all.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer

from tests.mining.test_mining_merge import _corpus
from xprt_st.mining import mine
from xprt_st.mining.hard_negatives import add_hard_negatives
from xprt_st.training.stored_teacher import StoredVectorTeacher, stored_vector_teacher, token_key

SETTINGS = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "id_field": "id", "holdout": 0.25}
STEPS = 4
OVERRIDES = {
    "training.max_steps": STEPS,
    "training.batch_size": 4,
    "training.learning_rate": 1e-3,
    "training.max_seq_length": 64,  # the tiny model's own limit: mining's vectors were made at it
    "training.precision": "fp32",
    "training.logging_steps": 1,
    "training.save_steps": STEPS,
    "training.seed": 3,
}


@pytest.fixture
def mined(tmp_path: Path, tiny_model) -> Path:
    out = tmp_path / "mined"
    mine(_corpus(tmp_path / "c.jsonl", 16), out, model=tiny_model, progress=False, precision="fp32", **SETTINGS)
    add_hard_negatives(out, 2, model=tiny_model, batch_size=16)
    return out


def _texts(folder: Path) -> list[str]:
    import datasets

    groups = datasets.load_from_disk(str(folder))
    return sorted({text for column in groups.column_names if column != "label" for text in groups[column]})


def test_the_stored_vectors_are_the_frozen_models_and_the_rest_is_encoded(mined: Path, tiny_model) -> None:
    teacher = copy.deepcopy(tiny_model).eval()
    texts = _texts(mined)
    wrapped, note = stored_vector_teacher(teacher, mined, texts)
    assert isinstance(wrapped, StoredVectorTeacher), note
    assert "reads" in note
    batch = [*texts[:6], "a sentence that is no passage of the corpus at all"]
    features = teacher.tokenize(batch)
    with torch.no_grad():
        expected = F.normalize(teacher(dict(features))["sentence_embedding"], dim=-1)
        got = wrapped(dict(features))["sentence_embedding"]
    stored = len(wrapped.rows)
    assert 0 < stored < len(texts) + 1
    assert wrapped.read + wrapped.encoded == len(batch)
    assert wrapped.encoded >= 1  # at least the text of no passage
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(batch)), atol=1e-5)  # every row a unit vector

    # a row is found by its token ids: the same ids give the same key, one token more another key
    ids = features["input_ids"][0][features["attention_mask"][0].bool()]
    assert token_key(ids) == token_key(ids.tolist()) != token_key([*ids.tolist(), 0])


def test_another_token_limit_reads_the_rows_it_does_not_cut(mined: Path, tiny_model) -> None:
    # the vectors were made at 64 tokens; at a limit that leaves every row whole the stored rows are read, at one that
    # cuts every row (other token ids than mining's) every row is encoded: each vector equals the shorter model's own
    texts = _texts(mined)
    lengths = [len(ids) for ids in tiny_model.tokenizer(texts)["input_ids"]]
    assert max(lengths) < 64
    batch = texts[:8]
    for limit, reads_some in ((max(lengths), True), (min(lengths) - 1, False)):
        shorter = copy.deepcopy(tiny_model).eval()
        shorter.max_seq_length = limit
        wrapped, note = stored_vector_teacher(shorter, mined, texts)
        assert isinstance(wrapped, StoredVectorTeacher), note
        features = shorter.tokenize(batch)
        with torch.no_grad():
            expected = F.normalize(shorter(dict(features))["sentence_embedding"], dim=-1)
            got = wrapped(dict(features))["sentence_embedding"]
        stored = sum(
            token_key(row[mask.bool()]) in wrapped.rows
            for row, mask in zip(features["input_ids"], features["attention_mask"], strict=True)
        )
        assert (wrapped.read, wrapped.encoded) == (stored, len(batch) - stored)
        assert (stored > 0) == reads_some, (limit, stored)
        assert torch.allclose(got, expected, atol=1e-5), (limit, (got - expected).abs().max())


def test_another_start_reads_nothing(mined: Path, tiny_model) -> None:
    other = copy.deepcopy(tiny_model).eval()
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    wrapped, note = stored_vector_teacher(other, mined, _texts(mined))
    assert wrapped is other
    assert "another model" in note


def _train(mined: Path, model: Path, output: Path) -> tuple[list[float], dict[str, torch.Tensor], object]:
    from xprt_st import XPRTTrainer, load_recipe, trainer_setup

    setup = trainer_setup(load_recipe("hybrid-teacher-hard", overrides=OVERRIDES), data=mined, output=output,
                          model=str(model))  # fmt: skip
    trainer = XPRTTrainer(**setup.trainer_kwargs())
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, {k: v.clone() for k, v in setup.model.state_dict().items()}, setup.loss.teacher


def test_training_on_stored_vectors_matches_encoding_every_step(
    mined: Path, tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored_losses, stored_weights, teacher = _train(mined, tiny_model_path, tmp_path / "stored")
    assert isinstance(teacher, StoredVectorTeacher)
    assert teacher.read > 0  # the steps read stored vectors ...
    assert teacher.read > teacher.encoded  # ... for most of their texts

    import xprt_st.training.stored_teacher as stored_teacher

    monkeypatch.setattr(stored_teacher, "stored_vector_teacher", lambda teacher, folder, texts: (teacher, "off"))
    losses, weights, teacher = _train(mined, tiny_model_path, tmp_path / "encoded")
    assert isinstance(teacher, SentenceTransformer)

    assert len(stored_losses) == len(losses) == STEPS
    for step, (a, b) in enumerate(zip(stored_losses, losses, strict=True)):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), (step, a, b)
    assert stored_weights.keys() == weights.keys()
    moved = max((stored_weights[k] - weights[k]).abs().max().item() for k in weights)
    assert moved < 1e-4, moved
