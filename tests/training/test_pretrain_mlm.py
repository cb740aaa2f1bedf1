"""The from-scratch MLM pre-training that the from-BERT comparison starts from."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer

from xprt_st.models import attach_mlm_head, resolve_model_name
from xprt_st.training.pretrain_mlm import SmallBertConfig, pretrain_small_bert, token_windows

TINY = SmallBertConfig(
    layers=1, hidden=32, heads=2, intermediate=64, max_seq_length=32, steps=30, batch_size=4, learning_rate=1e-2
)
TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank. " * 12,
    "Debian is a free operating system that ships thousands of packages. " * 12,
]


def test_windows_never_mix_documents_and_carry_cls_and_sep() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(None))
    windows = token_windows(["one two three four five six seven eight nine ten", "alpha beta"], tokenizer, 8)
    assert all(w[0] == tokenizer.cls_token_id and w[-1] == tokenizer.sep_token_id for w in windows)
    assert [len(w) for w in windows] == [8, 6, 4]  # 10 words -> 6 + 4 ids; "alpha beta" -> 2 ids (the tail kept: >= 1)
    assert tokenizer.decode(windows[2][1:-1]) == "alpha beta"
    with pytest.raises(ValueError, match="at least 8"):
        token_windows(["text"], tokenizer, 4)


def test_pretraining_lowers_the_held_out_loss_and_saves_a_loadable_encoder_with_its_head(tmp_path) -> None:
    record = pretrain_small_bert(TEXTS, tmp_path / "bert", TINY, device="cpu", progress=False)
    assert record["held_out_mlm_loss_end"] < record["held_out_mlm_loss_start"] - 1.0  # random start: ~ln(30522)
    assert record["held_out_mlm_loss_start"] == pytest.approx(torch.log(torch.tensor(30522.0)).item(), abs=0.6)
    model = SentenceTransformer(str(tmp_path / "bert"), device="cpu")  # plain loading: mean pooling
    assert model.encode(["a sentence"]).shape == (1, 32)
    # positions past the training windows are untrained: the loaded model reads one window at most
    assert model.max_seq_length == TINY.max_seq_length
    head = attach_mlm_head(model)
    saved = load_file(str(tmp_path / "bert" / "model.safetensors"))
    assert torch.equal(head.bias.detach(), saved["cls.predictions.bias"])  # the trained head, not a fresh one
    assert torch.equal(head.dense.weight.detach(), saved["cls.predictions.transform.dense.weight"])
    assert (tmp_path / "bert" / "pretraining.json").is_file()


def test_pretraining_refuses_a_non_empty_folder_and_empty_text(tmp_path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not empty"):
        pretrain_small_bert(TEXTS, tmp_path / "taken", TINY, progress=False)
    assert (tmp_path / "taken" / "keep.txt").read_text() == "precious"
    with pytest.raises(ValueError, match="window"):
        pretrain_small_bert(["", "  "], tmp_path / "empty", TINY, progress=False)
