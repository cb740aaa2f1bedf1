"""Tokenize once: the splitter's token ids made into the very features ``model.encode`` would build.

The passage splitter tokenizes each document once (with character offsets) to count tokens; the
mining model used to tokenize every passage again inside ``model.encode``. When the ids of a
passage are provably the ids that tokenizing its text gives, the splitter keeps them and the
encoder builds the model's input from them (:class:`TokenPlan`), so each passage is tokenized once.

When is that exact? A passage's text is its document's sentences and words with each run of
whitespace replaced by one space or newline (:func:`~xprt_st.mining.passages._join`), so its ids
equal the ids of those spans in the whole document when the tokenizer (1) normalizes character
by character and (2) never lets a token cross whitespace: :func:`whitespace_compositional` checks the
tokenizer's own pipeline for that (a BERT/WordPiece tokenizer such as all-MiniLM-L6-v2's qualifies;
a byte-level BPE whose tokens carry their leading space does not, and keeps the text path). A
document is tokenized from its passages' text after all (its ids not kept) when it holds a character
that Python splits on but the tokenizer does not treat as a space (BERT drops control characters such
as ``\\x1c`` or ``\\x85``, which joins the words beside them; found by probing the tokenizer,
:func:`unsafe_characters`) or the text of an added token (``[SEP]``), whose offsets may take in
whitespace.

The plan then reproduces sentence-transformers' preprocessing of a batch: special tokens around
the (prompt + passage) ids, right truncation at ``max_seq_length``, right padding, token type ids;
:meth:`TokenPlan.check` compares its features with ``model.preprocess`` of the same texts and the
encoder falls back to the text path for good at the first difference.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFD", "NFC", "StripAccents", "Strip"}
"""Normalizers that map characters one by one (so a word's normalization does not depend on its neighbours)."""
_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"}
_SPLITS_ON_WHITESPACE = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_PYTHON_WHITESPACE = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
_TENSORS = ("input_ids", "attention_mask", "token_type_ids")


def _types(component: dict[str, Any] | None, key: str) -> list[str]:
    if component is None:
        return []
    if component.get("type") == "Sequence":
        return [t for member in component.get(key, []) for t in _types(member, key)]
    return [str(component.get("type"))]


def whitespace_compositional(tokenizer: Any) -> bool:
    """Whether the ids of a text are the ids of its whitespace-separated pieces, concatenated.

    True for a fast tokenizer whose normalizer works character by character and whose
    pre-tokenizer splits on whitespace (and punctuation or digits) before the model sees a word.
    """
    if not getattr(tokenizer, "is_fast", False):
        return False
    try:
        pipeline = json.loads(tokenizer.backend_tokenizer.to_str())
    except Exception:  # a tokenizer without a serialisable backend: keep the text path
        return False
    normalizers = _types(pipeline.get("normalizer"), "normalizers")
    pre_tokenizers = _types(pipeline.get("pre_tokenizer"), "pretokenizers")
    return (
        all(t in _NORMALIZERS for t in normalizers)
        and bool(pre_tokenizers)
        and all(t in _PRE_TOKENIZERS for t in pre_tokenizers)
        and any(t in _SPLITS_ON_WHITESPACE for t in pre_tokenizers)
    )


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def unsafe_characters(tokenizer: Any) -> tuple[str, ...]:
    """Strings whose presence in a document makes its offset-sliced ids differ from its passages' own ids.

    The Python whitespace characters the tokenizer does not treat as a space (``"a" + c + "b"`` does
    not tokenize as ``"a b"``), and the text of every added token.
    """
    reference = _ids(tokenizer, "a b")
    unsafe = [c for c in _PYTHON_WHITESPACE if _ids(tokenizer, f"a{c}b") != reference]
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    unsafe += sorted({str(token) for token in added.values() if str(token)})
    return tuple(unsafe)


@dataclass
class TokenPlan:
    """How to turn passage ids into the model's batch features, as ``model.preprocess`` would.

    Args:
        prefix: special ids before the text (``[CLS]``).
        suffix: special ids after the text (``[SEP]``).
        prompt: the prompt's ids, placed before the passage's.
        max_length: the model's ``max_seq_length``; longer inputs lose their right end.
        pad_id: the padding id.
        token_type: the token type id of a single sequence, or None when the model takes none.
        extra: the non-tensor features ``model.preprocess`` adds (``modality``, ``prompt_length``).
    """

    prefix: list[int]
    suffix: list[int]
    prompt: list[int]
    max_length: int
    pad_id: int
    token_type: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    def features(self, passage_ids: Sequence[np.ndarray]) -> dict[str, Any]:
        """The padded batch (``input_ids``, ``attention_mask``, ``token_type_ids``) of the passages."""
        import torch

        room = self.max_length - len(self.prefix) - len(self.suffix)
        rows = []
        for ids in passage_ids:
            body = np.concatenate([np.asarray(self.prompt, dtype=np.int64), np.asarray(ids, dtype=np.int64)])
            rows.append(np.concatenate([self.prefix, body[: max(room, 0)], self.suffix]).astype(np.int64))
        width = max(len(row) for row in rows)
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        features: dict[str, Any] = {"input_ids": torch.from_numpy(input_ids)}
        if self.token_type is not None:
            features["token_type_ids"] = torch.full((len(rows), width), self.token_type, dtype=torch.long)
        features["attention_mask"] = torch.from_numpy(mask)
        features.update(self.extra)
        return features

    def check(self, model: Any, texts: list[str], passage_ids: Sequence[np.ndarray], prompt: str | None) -> bool:
        """Whether :meth:`features` equals ``model.preprocess(texts, prompt=prompt)`` exactly."""
        import torch

        expected = model.preprocess(texts, prompt=prompt)
        built = self.features(passage_ids)
        if set(expected) != set(built):
            return False
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                if not (built[key].shape == value.shape and torch.equal(built[key], value.to(built[key].dtype))):
                    return False
            elif built[key] != value:
                return False
        return True


def token_plan(model: Any, prompt: str | None) -> TokenPlan | None:
    """The plan for ``model`` and ``prompt``, or None where passage ids cannot stand for the text.

    None when the tokenizer is not whitespace-compositional, the prompt does not end in a space
    (its last word would run into the passage's first), the tokenizer truncates or pads on the
    left, the model has a default prompt, truncates its output dimension, packs inputs without
    padding, or its preprocessing gives features beyond ids, mask and token types.
    """
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None or not whitespace_compositional(tokenizer):
        return None
    if prompt and not prompt[-1].isspace():
        return None
    if getattr(tokenizer, "truncation_side", "right") != "right" or getattr(tokenizer, "padding_side", "") != "right":
        return None
    if getattr(model, "default_prompt_name", None) or getattr(model, "truncate_dim", None) is not None:
        return None
    can_flatten = getattr(model, "_can_flatten_inputs", None)
    max_length = getattr(model, "max_seq_length", None)
    if (can_flatten is not None and can_flatten()) or not max_length or tokenizer.pad_token_id is None:
        return None
    probe = "a b"
    inner = _ids(tokenizer, probe)
    encoded = tokenizer(probe, add_special_tokens=True, verbose=False)
    full = list(encoded["input_ids"])
    at = next((i for i in range(len(full) - len(inner) + 1) if full[i : i + len(inner)] == inner), None)
    if at is None:
        return None
    token_types = set(encoded.get("token_type_ids", []) or [])
    if len(token_types) > 1:
        return None
    try:
        expected = model.preprocess([probe], prompt=prompt)
    except Exception:  # a model whose preprocessing this plan cannot mirror keeps the text path
        return None
    if any(key not in _TENSORS for key, value in expected.items() if hasattr(value, "shape")):
        return None
    plan = TokenPlan(
        prefix=full[:at],
        suffix=full[at + len(inner) :],
        prompt=_ids(tokenizer, prompt) if prompt else [],
        max_length=int(max_length),
        pad_id=int(tokenizer.pad_token_id),
        token_type=next(iter(token_types)) if "token_type_ids" in expected else None,
        extra={key: value for key, value in expected.items() if key not in _TENSORS},
    )
    probes = [probe, "word " * (2 * int(max_length))]
    if not plan.check(model, probes, [np.asarray(_ids(tokenizer, p)) for p in probes], prompt):
        return None
    return plan
