"""embed_by_length: the merged forward's vectors and gradients, each chunk of like-length rows cut to its width."""

from __future__ import annotations

import pytest
import torch
from sentence_transformers.base.losses.merged_forward import embed_columns

from xprt_st.losses._length_buckets import embed_by_length, rows_of

# Lengths far apart, so that sorting and cutting change the chunks' widths.
TEXTS = [
    "a pitch",
    "the pitcher retired every batter he faced in the ninth inning of the final game of the long season",
    "ford trucks",
    "carbon dioxide is pressed into deep rock layers where it stays for thousands of years, the plan says",
    "a slider",
    "the crowd stood for the final out",
]


def _columns(model, columns: int = 3) -> list[dict[str, torch.Tensor]]:
    return [dict(model.preprocess(TEXTS[column:] + TEXTS[:column])) for column in range(columns)]


def test_chunks_give_the_merged_forwards_vectors_in_the_batchs_order(tiny_model) -> None:
    tiny_model.eval()
    columns = _columns(tiny_model)
    with torch.no_grad():
        expected = embed_columns(tiny_model, _columns(tiny_model), separate_first=False)
        chunked = embed_by_length(tiny_model, columns, rows=4)
    assert [tuple(vectors.shape) for vectors in chunked] == [tuple(vectors.shape) for vectors in expected]
    for got, want in zip(chunked, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the rows are not all alike: a swap of two rows would not pass
    assert not torch.allclose(chunked[0][0], chunked[0][1], atol=1e-3)


def test_chunks_give_the_merged_forwards_gradients(tiny_model) -> None:
    tiny_model.eval()  # no dropout: the two passes draw none
    weights = torch.randn(3, len(TEXTS), 32, generator=torch.Generator().manual_seed(0))

    def gradients(embed) -> dict[str, torch.Tensor]:
        tiny_model.zero_grad()
        vectors = embed(tiny_model, _columns(tiny_model))
        (torch.stack(vectors) * weights).sum().backward()
        return {name: p.grad.clone() for name, p in tiny_model.named_parameters() if p.grad is not None}

    merged = gradients(lambda model, columns: embed_columns(model, columns, separate_first=False))
    chunked = gradients(lambda model, columns: embed_by_length(model, columns, rows=4))
    assert merged.keys() == chunked.keys() and merged
    for name, grad in merged.items():
        torch.testing.assert_close(chunked[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_a_chunk_is_cut_to_its_longest_row() -> None:
    features = {
        "input_ids": torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]),
        "prompt_length": torch.tensor([0, 0, 0]),
    }
    picked = rows_of(features, [2, 1])
    assert picked["input_ids"].tolist() == [[7, 0], [5, 6]]
    assert picked["attention_mask"].tolist() == [[1, 0], [1, 1]]
    assert picked["prompt_length"] is features["prompt_length"]  # batch metadata, not rows


@pytest.mark.parametrize("case", ["few rows", "left padded"])
def test_it_falls_back_to_one_merged_forward(tiny_model, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    tiny_model.eval()
    columns = _columns(tiny_model, columns=2)
    if case == "left padded":
        for column in columns:
            for key in ("input_ids", "attention_mask"):
                column[key] = column[key].flip(1)
    rows = 16 if case == "few rows" else 4
    calls: list[int] = []
    forward = tiny_model.forward
    monkeypatch.setattr(tiny_model, "forward", lambda features, **kw: calls.append(1) or forward(features, **kw))
    with torch.no_grad():
        embed_by_length(tiny_model, columns, rows=rows)
    assert len(calls) == 1  # one merged forward, not ceil(12 / rows) chunks
