"""Passage splitting: token windows that never cut a word and prefer sentence and block ends."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from xprt_st.mining.passages import PassageSplitter
from xprt_st.models import resolve_model_name


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_name(None))


def _tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_paragraphs_become_passages_and_headings_join_the_next_block(tokenizer):
    para = " ".join(f"Sentence {i} talks about the harbour and its boats." for i in range(4))
    text = f"The harbour\n\n{para}\n\n{para.replace('harbour', 'market')}\n\nShort tail."
    result = PassageSplitter(tokenizer, max_tokens=64, min_tokens=16).split(text)
    assert result.passages[0].startswith("The harbour\nSentence 0")  # heading joined to its paragraph
    assert "market" in result.passages[1] and "harbour" not in result.passages[1]
    assert result.passages[-1].endswith("Short tail.")  # tiny tail joins the previous passage
    assert len(result.passages) == 2


def test_long_blocks_cut_at_sentence_ends_and_never_cut_words(tokenizer):
    sentences = [f"Number {i} is a sentence about extraordinary anthropological considerations." for i in range(30)]
    text = " ".join(sentences)
    result = PassageSplitter(tokenizer, max_tokens=40, min_tokens=10).split(text)
    assert len(result.passages) > 3
    words = set(text.split())
    for passage, count in zip(result.passages, result.token_counts, strict=True):
        assert _tokens(tokenizer, passage) <= 40
        assert count <= 40
        assert passage.endswith(".")  # sentence ends preferred
        assert set(passage.split()) <= words  # whole words only
    assert " ".join(result.passages) == text


def test_a_sentence_longer_than_the_window_is_cut_between_words(tokenizer):
    words = [f"incomprehensibilities{i}" for i in range(60)]
    result = PassageSplitter(tokenizer, max_tokens=20, min_tokens=5).split(" ".join(words))
    assert len(result.passages) > 5
    assert all(_tokens(tokenizer, p) <= 20 for p in result.passages)
    assert [w for p in result.passages for w in p.split()] == words


def test_overlap_repeats_whole_trailing_sentences(tokenizer):
    text = " ".join(f"Fact number {i} is here." for i in range(20))
    plain = PassageSplitter(tokenizer, max_tokens=30, min_tokens=5).split(text)
    overlapped = PassageSplitter(tokenizer, max_tokens=30, min_tokens=5, overlap_tokens=8).split(text)
    assert len(overlapped.passages) > len(plain.passages)
    last_sentence = plain.passages[0].split(". ")[-1]
    assert overlapped.passages[1].startswith(last_sentence.rstrip("."))


def test_duplicates_removed_and_giant_documents_capped(tokenizer):
    block = "This navigation block repeats on the page and should be kept only once here."
    text = "\n\n".join([block, "Body text about rivers and the fish living in them, long enough here.", block])
    result = PassageSplitter(tokenizer, max_tokens=20, min_tokens=1).split(text)
    assert result.duplicates_removed == 1
    assert len(result.passages) == 2
    paragraphs = [f"Paragraph {i} has unique words w{i}a w{i}b w{i}c." for i in range(50)]
    capped = PassageSplitter(tokenizer, max_tokens=20, min_tokens=1, max_passages=10).split("\n\n".join(paragraphs))
    assert capped.passages == paragraphs[:10] and capped.truncated
    # Exact: every non-space character of the 40 dropped paragraphs, not just "at least one passage".
    assert capped.characters_over_cap == sum(len("".join(p.split())) for p in paragraphs[10:])


def test_empty_text_gives_no_passage(tokenizer):
    assert PassageSplitter(tokenizer).split("  \n\n \t ").passages == []
    with pytest.raises(ValueError, match="min_tokens"):
        PassageSplitter(tokenizer, max_tokens=10, min_tokens=20)
