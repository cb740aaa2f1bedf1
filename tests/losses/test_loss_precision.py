"""Each loss under bf16 autocast against fp32: the similarity math runs in fp32, the encoder's products in bf16."""

from __future__ import annotations

import pytest
import torch

from xprt_st.losses import CrossPassageLoss, RetentionLoss, UniformityLoss
from xprt_st.losses.cross_passage import cross_passage_loss
from xprt_st.losses.retention import retention_loss
from xprt_st.losses.uniformity import uniformity_loss


def _vectors(seed: int, rows: int = 8, dim: int = 32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # near-duplicate rows: their cosines differ in the 3rd-4th digit, which bf16 (8-bit mantissa) rounds away
    base = torch.randn(1, dim, generator=generator)
    return base + 0.05 * torch.randn(rows, dim, generator=generator)


MATH = {
    "cross_passage": lambda a, b: cross_passage_loss(a, b, torch.arange(a.size(0)), temperature=0.05),
    "retention": lambda a, b: retention_loss(a, b, b, a, temperature=0.05),
    "uniformity": lambda a, b: uniformity_loss(torch.cat([a, b])),
}


@pytest.mark.parametrize("name", sorted(MATH))
def test_the_math_under_autocast_equals_fp32(name: str) -> None:
    anchors, positives = (
        _vectors(0),
        _vectors(0) + 0.02 * torch.randn(8, 32, generator=torch.Generator().manual_seed(1)),
    )
    expected = MATH[name](anchors, positives)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = MATH[name](anchors, positives)
        from_bf16_inputs = MATH[name](anchors.bfloat16(), positives.bfloat16())
    assert under_autocast.dtype == torch.float32
    assert under_autocast.item() == pytest.approx(expected.item(), rel=1e-6, abs=1e-7)
    # bf16 inputs (a bf16 pooling output) are only rounded once, then computed in fp32
    rounded = MATH[name](anchors.bfloat16().float(), positives.bfloat16().float())
    assert from_bf16_inputs.item() == pytest.approx(rounded.item(), rel=1e-6, abs=1e-7)


def test_bf16_similarities_would_move_the_infonce_value() -> None:
    # what in_fp32 prevents: the same InfoNCE computed by bf16 matrix products is off by far more than 1e-6
    anchors, positives = (
        _vectors(0),
        _vectors(0) + 0.02 * torch.randn(8, 32, generator=torch.Generator().manual_seed(1)),
    )
    a = torch.nn.functional.normalize(anchors, dim=-1).bfloat16()
    b = torch.nn.functional.normalize(positives, dim=-1).bfloat16()
    logits = (a @ b.T).float() / 0.05
    bf16_value = torch.nn.functional.cross_entropy(logits, torch.arange(8))
    exact = cross_passage_loss(anchors, positives, None, temperature=0.05)
    assert abs(bf16_value.item() - exact.item()) > 1e-4


@pytest.mark.parametrize("loss_class", [CrossPassageLoss, RetentionLoss, UniformityLoss])
def test_each_loss_on_a_model_under_bf16_autocast_is_near_fp32(tiny_model, group_batch, loss_class) -> None:
    features, labels = group_batch(tiny_model)
    loss = loss_class(tiny_model)
    loss.model.eval()
    if loss_class is RetentionLoss:
        with torch.no_grad():
            for parameter in tiny_model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter, generator=None))
    with torch.no_grad():
        fp32 = loss(features, labels).item()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = loss(features, labels)
    assert bf16.dtype == torch.float32
    # the encoder's bf16 products move each vector's cosine to fp32's by ~1e-4: the loss by a few per cent at most
    assert bf16.item() == pytest.approx(fp32, rel=0.05, abs=0.02)
