"""L_unif on hand-computable inputs, its gradient at collapse, and a few downhill steps."""

from __future__ import annotations

import math

import pytest
import torch

from xprt_st.losses import UniformityLoss
from xprt_st.losses.uniformity import uniformity_loss


def test_orthogonal_pair_gives_minus_2t() -> None:
    assert uniformity_loss(torch.eye(2), t=2.0).item() == pytest.approx(-4.0)


def test_three_vectors_by_hand() -> None:
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # squared distances: 2, 4, 2
    expected = math.log((math.exp(-4) + math.exp(-8) + math.exp(-4)) / 3)
    assert uniformity_loss(vectors).item() == pytest.approx(expected, rel=1e-6)


def test_collapse_is_the_maximum_and_has_a_finite_gradient() -> None:
    vectors = torch.ones(3, 4, requires_grad=True)
    value = uniformity_loss(vectors)
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(vectors.grad).all()


def test_single_anchor_gives_zero() -> None:
    assert uniformity_loss(torch.ones(1, 4)).item() == 0.0


def test_spreads_a_tiny_model_apart(tiny_model, group_batch) -> None:
    torch.manual_seed(0)
    features, _ = group_batch(tiny_model)
    loss = UniformityLoss(tiny_model)
    optimizer = torch.optim.AdamW(tiny_model.parameters(), lr=1e-3)
    values = []
    for _ in range(5):
        value = loss([dict(features[0])], None)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        values.append(value.item())
    assert values[-1] < values[0]
