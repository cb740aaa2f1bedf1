from __future__ import annotations

import pytest
import torch

from xprt_st.models import ModelLoadError, attach_mlm_head, frozen_copy, load_model, word_embeddings


def test_mlm_head_is_tied_to_the_token_embeddings(tiny_model):
    head = attach_mlm_head(tiny_model)
    embeddings = word_embeddings(tiny_model)
    logits = head(torch.randn(2, 3, 32))
    assert logits.shape == (2, 3, embeddings.num_embeddings)
    own = {name for name, _ in head.named_parameters()}
    assert own == {"dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias"}
    # A change of the shared table changes the head's output: the weights are one tensor.
    before = head(torch.ones(1, 32)).detach().clone()
    with torch.no_grad():
        embeddings.weight.add_(1.0)
    assert not torch.allclose(before, head(torch.ones(1, 32)))


def test_frozen_copy_has_no_trainable_parameters_and_leaves_the_original(tiny_model):
    teacher = frozen_copy(tiny_model)
    assert all(not p.requires_grad for p in teacher.parameters())
    assert all(p.requires_grad for p in tiny_model.parameters())


def test_a_missing_model_gives_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="could not load model"):
        load_model(tmp_path / "nowhere", device="cpu")


def test_offline_default_loads(minilm):
    assert minilm.get_embedding_dimension() == 384


def test_the_top_level_api_resolves_every_name():
    import xprt_st

    for name in xprt_st.__all__:
        assert getattr(xprt_st, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = xprt_st.nope
