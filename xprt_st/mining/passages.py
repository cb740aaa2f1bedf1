"""Document -> passages: token windows of the mining model's tokenizer that follow the page's blocks.

The paper's passages are short paragraphs. A passage here is built from whole sentences of the
document's blocks (paragraphs, headings, list items: one per line, or per blank-line-separated
paragraph when the text has blank lines):

- a passage holds at most ``max_tokens`` tokens (default :data:`DEFAULT_MAX_TOKENS` = 128, and never
  more than the model's ``max_seq_length`` minus special and prompt tokens);
- it closes at the end of a block once it has ``min_tokens`` tokens (default 32), so a paragraph of
  32-128 tokens is one passage and a heading or one-line block joins the text after it;
- a block longer than ``max_tokens`` is cut at sentence ends, and a sentence longer than
  ``max_tokens`` at word boundaries: a word is never cut;
- ``overlap_tokens`` (default 0) carries the last whole sentences of a passage cut inside a block into
  the next one. The default is 0 because overlapping neighbours share words and would be trivially
  "related" to each other by TF-IDF;
- a trailing remainder shorter than ``min_tokens`` joins the previous passage when it fits;
- passages are de-duplicated within the document (case- and whitespace-insensitive), and at most
  ``max_passages`` (default 256) are kept per document: giant documents are cut, and counted (the
  document, and the characters of its text after the last kept passage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_MAX_TOKENS = 128
DEFAULT_MIN_TOKENS = 32
DEFAULT_OVERLAP_TOKENS = 0
DEFAULT_MAX_PASSAGES = 256

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+")
_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class SplitResult:
    """The passages of one document and what was dropped on the way."""

    passages: list[str]
    token_counts: list[int]
    duplicates_removed: int = 0
    truncated: bool = False
    characters_over_cap: int = 0
    """Non-space characters of the text after the last kept passage (0 unless ``truncated``). Exact, unlike
    a count of the passages past the cap, which would need the whole giant document tokenised."""
    token_ids: np.ndarray | None = None
    """The kept passages' token ids end to end (``token_counts[i]`` each, no special tokens), the ids
    tokenizing each passage's text gives; None unless the splitter keeps ids and they are exact for
    this document (see :mod:`xprt_st.mining.token_ids`)."""
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Each kept passage's ``(start, end)`` character span in the text given to :meth:`PassageSplitter.split`:
    what maps a title or heading to the passages of its section (:func:`~xprt_st.mining.headings.sections`)."""


@dataclass(slots=True)
class _Unit:
    start: int
    end: int
    tokens: int
    block: int
    block_end: bool


@dataclass
class PassageSplitter:
    """Cut documents into passages with the mining model's tokenizer (see the module docstring for the rules).

    Args:
        tokenizer: a Hugging Face tokenizer; a fast one is used with character offsets (one call per document).
        max_tokens: most tokens in a passage (default 128).
        min_tokens: a passage closes at a block end once it has this many tokens (default 32).
        overlap_tokens: tokens of whole trailing sentences repeated after a cut inside a block (default 0).
        max_passages: most passages kept per document (default 256); the rest are dropped and counted.
        keep_token_ids: also return the passages' token ids (:attr:`SplitResult.token_ids`), so the encoder
            need not tokenize them again; only for a tokenizer that
            :func:`~xprt_st.mining.token_ids.whitespace_compositional` accepts.
        unsafe_characters: strings that, found in a document, make its ids inexact (its ids are then not kept).
    """

    tokenizer: Any
    max_tokens: int = DEFAULT_MAX_TOKENS
    min_tokens: int = DEFAULT_MIN_TOKENS
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS
    max_passages: int = DEFAULT_MAX_PASSAGES
    keep_token_ids: bool = False
    unsafe_characters: tuple[str, ...] = ()
    _fast: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        if not 0 <= self.overlap_tokens < self.max_tokens:
            raise ValueError(f"overlap_tokens must be in [0, max_tokens), got {self.overlap_tokens}")
        if self.max_passages < 1:
            raise ValueError(f"max_passages must be >= 1, got {self.max_passages}")
        self._fast = bool(getattr(self.tokenizer, "is_fast", False))
        if self.keep_token_ids and not self._fast:
            raise ValueError("keep_token_ids needs a fast tokenizer (character offsets)")

    def split(self, text: str) -> SplitResult:
        """The de-duplicated passages of ``text``, in document order."""
        # Tokenising a giant document in full is wasted work: keep a generous prefix (10 chars per token).
        char_cap = self.max_passages * self.max_tokens * 10
        full_text = text
        cut_chars = len(text) > char_cap
        if cut_chars:
            text = text[:char_cap].rsplit(None, 1)[0]
        tokens = self._tokens(text)
        units = self._units(text, tokens)
        spans = self._pack(units)
        passages: list[str] = []
        counts: list[int] = []
        kept: list[list[_Unit]] = []
        seen: set[str] = set()
        duplicates = 0
        kept_end = 0
        for group in spans:
            passage = _join(text, group)
            key = " ".join(passage.lower().split())
            if not key:
                continue
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            passages.append(passage)
            counts.append(sum(u.tokens for u in group))
            if len(passages) <= self.max_passages:
                kept_end = max(kept_end, group[-1].end)
                kept.append(group)
        truncated = cut_chars or len(passages) > self.max_passages
        return SplitResult(
            passages=passages[: self.max_passages],
            token_counts=counts[: self.max_passages],
            duplicates_removed=duplicates,
            truncated=truncated,
            characters_over_cap=sum(map(len, full_text[kept_end:].split())) if truncated else 0,
            token_ids=_passage_ids(kept, *tokens) if tokens is not None and tokens[1] is not None else None,
            spans=[(group[0].start, group[-1].end) for group in kept],
        )

    def _tokens(self, text: str) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Start offsets of the text's tokens, and their ids where kept and exact; None for a slow tokenizer."""
        if not self._fast:
            return None
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        real = offsets[:, 1] > offsets[:, 0]
        starts = offsets[real, 0]
        exact = self.keep_token_ids and bool(real.all()) and not any(c in text for c in self.unsafe_characters)
        return starts, (np.asarray(encoded["input_ids"], dtype=np.int32) if exact else None)

    def _token_counter(self, text: str, tokens: tuple[np.ndarray, np.ndarray | None] | None):
        if tokens is not None:
            starts = tokens[0]

            def count(start: int, end: int) -> int:
                return int(np.searchsorted(starts, end) - np.searchsorted(starts, start))

            return count

        def count_slow(start: int, end: int) -> int:
            return len(self.tokenizer.tokenize(text[start:end]))

        return count_slow

    def _units(self, text: str, tokens: tuple[np.ndarray, np.ndarray | None] | None) -> list[_Unit]:
        count = self._token_counter(text, tokens)
        units: list[_Unit] = []
        for block_index, (b_start, b_end) in enumerate(_blocks(text)):
            pieces: list[_Unit] = []
            for s_start, s_end in _sentences(text, b_start, b_end):
                tokens = count(s_start, s_end)
                if tokens <= self.max_tokens:
                    pieces.append(_Unit(s_start, s_end, tokens, block_index, False))
                    continue
                pieces.extend(self._split_words(text, s_start, s_end, block_index, count))
            if pieces:
                pieces[-1].block_end = True
                units.extend(pieces)
        return units

    def _split_words(self, text: str, start: int, end: int, block: int, count) -> list[_Unit]:
        """Cut an over-long sentence at word boundaries into pieces of at most ``max_tokens``."""
        pieces: list[_Unit] = []
        piece_start, piece_end, piece_tokens = None, None, 0
        for match in _WORD.finditer(text, start, end):
            tokens = count(match.start(), match.end())
            if piece_start is not None and piece_tokens + tokens > self.max_tokens:
                pieces.append(_Unit(piece_start, piece_end, piece_tokens, block, False))
                piece_start, piece_tokens = None, 0
            if piece_start is None:
                piece_start = match.start()
            piece_end = match.end()
            piece_tokens += tokens
        if piece_start is not None:
            pieces.append(_Unit(piece_start, piece_end, piece_tokens, block, False))
        return pieces

    def _pack(self, units: list[_Unit]) -> list[list[_Unit]]:
        passages: list[list[_Unit]] = []
        current: list[_Unit] = []
        tokens = 0
        for unit in units:
            if current and tokens + unit.tokens > self.max_tokens:
                passages.append(current)
                current = self._overlap(current) if not current[-1].block_end else []
                tokens = sum(u.tokens for u in current)
                if current and tokens + unit.tokens > self.max_tokens:
                    current, tokens = [], 0
            current.append(unit)
            tokens += unit.tokens
            if unit.block_end and tokens >= self.min_tokens:
                passages.append(current)
                current, tokens = [], 0
            if len(passages) > self.max_passages:
                break
        if current:
            if (
                passages
                and tokens < self.min_tokens
                and sum(u.tokens for u in passages[-1]) + tokens <= self.max_tokens
            ):
                passages[-1] = passages[-1] + current
            else:
                passages.append(current)
        return passages

    def _overlap(self, emitted: list[_Unit]) -> list[_Unit]:
        if self.overlap_tokens == 0:
            return []
        carried: list[_Unit] = []
        total = 0
        for unit in reversed(emitted):
            if unit.block != emitted[-1].block or total + unit.tokens > self.overlap_tokens:
                break
            carried.insert(0, unit)
            total += unit.tokens
        return carried


def _passage_ids(passages: list[list[_Unit]], starts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The ids of the tokens that start inside each unit of each passage, passage after passage."""
    bounds = np.array([(u.start, u.end) for group in passages for u in group], dtype=np.int64).reshape(-1, 2)
    first = np.searchsorted(starts, bounds[:, 0])
    last = np.searchsorted(starts, bounds[:, 1])
    lengths = last - first
    if not lengths.sum():
        return np.zeros(0, dtype=np.int32)
    # index of every kept token: each unit's run first..last-1, runs laid end to end
    steps = np.ones(int(lengths.sum()), dtype=np.int64)
    runs = np.flatnonzero(lengths)
    heads = np.concatenate([[0], np.cumsum(lengths[runs])[:-1]])
    steps[heads] = first[runs] - np.concatenate([[0], last[runs][:-1] - 1])
    return ids[np.cumsum(steps)]


def _blocks(text: str) -> list[tuple[int, int]]:
    """Character spans of the blocks: blank-line paragraphs when the text has blank lines, else lines."""
    separator = _BLANK_LINE if _BLANK_LINE.search(text) else re.compile(r"\n")
    spans: list[tuple[int, int]] = []
    start = 0
    for match in separator.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    position = start
    for match in _SENTENCE_END.finditer(text, start, end):
        spans.append((position, match.end()))
        position = match.end()
    if position < end:
        spans.append((position, end))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _join(text: str, units: list[_Unit]) -> str:
    """Sentences of one block joined by a space, blocks by a newline (so passages keep the page's layout)."""
    parts: list[str] = []
    previous_block = None
    for unit in units:
        piece = " ".join(text[unit.start : unit.end].split())
        if previous_block is not None:
            parts.append("\n" if unit.block != previous_block else " ")
        parts.append(piece)
        previous_block = unit.block
    return "".join(parts).strip()
