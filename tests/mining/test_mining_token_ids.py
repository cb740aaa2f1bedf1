"""Tokenize once: the splitter's token ids stand for the passage text, to the last id and the last float.

Each test fails if the id path diverges from the text path: the passages must be those of a splitter
that keeps no ids, every kept id list must be the tokenizer's ids of the passage text, and the
vectors must be ``model.encode(passages)``'s while the encoder really used the ids (its plan still
standing after the first-batch check, and the model's own preprocessing called for that check alone).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import bbc_sample, debian_sample
from xprt_st.mining import MiningConfig
from xprt_st.mining.encoder import MiningEncoder
from xprt_st.mining.reader import iter_corpus
from xprt_st.mining.records import RawRecord
from xprt_st.mining.stages import DocumentSplitter
from xprt_st.mining.token_ids import token_plan, unsafe_characters, whitespace_compositional

TRICKY = [
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9. \u4e2d\u6587\u5b57 and \u00bd a \u00a0non-breaking space.\n\n"
    + "Second block, with [SEP] written out and a URL https://example.org/"
    + "x" * 300
    + " inside.",
    "Record\x1cseparator joins these words for BERT, so this document's ids are not kept.\n\nMore text here.",
    "Tab\tand\u2003em space. " * 12 + "\n\n" + "Word " * 90,
    "Short.\n\nAnother short block that will join.\n\n" + "A sentence that repeats itself. " * 20,
]


def _encoder(model, **settings) -> MiningEncoder:
    # fp32: the id path is compared with the model's own (fp32) encode of the text
    options = {"max_tokens": 40, "min_tokens": 8, "batch_size": 4, "precision": "fp32", **settings}
    return MiningEncoder(MiningConfig(**options), model)


def _assert_ids_equal_text_path(encoder: MiningEncoder, records, html: bool, monkeypatch) -> list[bool]:
    """Check the id path against the text path; returns which documents kept their ids."""
    model = encoder.model
    splitter = encoder.splitter()
    assert splitter.keep_token_ids
    documents = list(DocumentSplitter(splitter, html=html).run(records()))
    plain = list(DocumentSplitter(dataclasses.replace(splitter, keep_token_ids=False), html=html).run(records()))
    assert [d.passages for d in documents] == [d.passages for d in plain]  # boundaries unchanged
    assert [d.token_counts for d in documents] == [d.token_counts for d in plain]
    assert all(d.token_ids is None for d in plain)

    passages = [p for d in documents for p in d.passages]
    ids = [i for d in documents for i in d.passage_ids()]
    kept = [(p, i) for p, i in zip(passages, ids, strict=True) if i is not None]
    for passage, passage_ids in kept:
        assert passage_ids.tolist() == model.tokenizer(passage, add_special_tokens=False)["input_ids"], passage

    prompt = encoder.prompt_text() or None
    expected = model.encode(
        passages, prompt=prompt, batch_size=encoder.config.batch_size, normalize_embeddings=True, convert_to_numpy=True
    )
    calls = {"preprocess": 0}
    original = model.preprocess

    def preprocess(*args, **kwargs):
        calls["preprocess"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "preprocess", preprocess)
    vectors = encoder.encode(passages, ids)
    assert encoder.plan() is not None  # the first-batch check passed: the ids path ran
    assert calls["preprocess"] == 1  # that check; every other batch was built from ids
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    return [d.token_ids is not None for d in documents]


def test_tiny_texts_tokenize_once_with_a_prompt(tiny_model, monkeypatch):
    encoder = _encoder(tiny_model, prompt="passage: ", overlap_tokens=6)

    def records():
        return iter([RawRecord(ordinal=i, doc_id=str(i), origin="t", text=t) for i, t in enumerate(TRICKY * 3)])

    kept = _assert_ids_equal_text_path(encoder, records, html=False, monkeypatch=monkeypatch)
    assert kept == [False, False, True, True] * 3  # "[SEP]" and "\x1c" documents are tokenized from their text


def test_a_document_with_a_character_bert_drops_keeps_no_ids(tiny_model):
    tokenizer = tiny_model.tokenizer
    assert whitespace_compositional(tokenizer)
    assert "\x1c" in unsafe_characters(tokenizer) and " " not in unsafe_characters(tokenizer)
    splitter = _encoder(tiny_model).splitter()
    assert splitter.split(TRICKY[1]).token_ids is None
    # what the guard prevents: sliced from the document, "Record\x1cseparator" is one word for BERT
    unguarded = dataclasses.replace(splitter, unsafe_characters=())
    split = unguarded.split(TRICKY[1])
    first = split.token_ids[: split.token_counts[0]].tolist()
    assert first != tokenizer(split.passages[0], add_special_tokens=False)["input_ids"]


def test_ids_that_differ_from_the_text_fall_back_to_the_text_path(tiny_model):
    encoder = _encoder(tiny_model)
    passages = ["the first passage of a document", "a second, longer passage of the same document here"]
    wrong = [np.asarray(tiny_model.tokenizer(p, add_special_tokens=False)["input_ids"][::-1]) for p in passages]
    vectors = encoder.encode(passages, wrong)
    assert encoder.plan() is None
    expected = tiny_model.encode(passages, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-6, rtol=0)


def test_a_prompt_that_runs_into_the_text_keeps_the_text_path(tiny_model):
    assert token_plan(tiny_model, "Represent") is None  # "Represent" + "this" would be one word
    assert token_plan(tiny_model, "passage: ") is not None


def test_a_byte_level_tokenizer_is_not_whitespace_compositional():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel()
    assert not whitespace_compositional(PreTrainedTokenizerFast(tokenizer_object=backend))


@pytest.mark.parametrize("corpus_name", ["bbc", "debian"])
def test_real_corpora_tokenize_once_to_the_same_passages_and_vectors(tmp_path, tiny_model, corpus_name, monkeypatch):
    if corpus_name == "bbc":
        corpus, html, field = bbc_sample(tmp_path, 30), False, "text"
    else:
        corpus, html, field = debian_sample(tmp_path, 12), True, "html"
    encoder = _encoder(tiny_model, max_tokens=128, min_tokens=32, batch_size=16)

    def records():
        return iter_corpus([corpus], text_field=field, fallback_text_field="text" if html else None)

    kept = _assert_ids_equal_text_path(encoder, records, html=html, monkeypatch=monkeypatch)
    assert sum(kept) >= 0.9 * len(kept)  # the ids path covers (nearly) every real document
