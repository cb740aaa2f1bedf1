"""Shared fixtures: a tiny random BERT built from a config, and the real offline default model."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""The benchmark data beside the checkout (``../shared/data``); tests that need it skip without it."""


def shared_data(*parts: str) -> Path:
    """Path under ``../shared/data``, or skip the calling test with the reason when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared benchmark data not present: {path}")
    return path


def bbc_sample(folder: Path, articles: int) -> Path:
    """An evenly spread sample of ``articles`` BBC News articles as a zip in ``folder`` (skips without the data)."""
    import zipfile

    source = shared_data("bbc-news", "bbc-fulltext.zip")
    path = folder / "bbc-sample.zip"
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(path, "w") as sample:
        names = sorted(n for n in archive.namelist() if n.endswith(".txt"))
        for name in names[:: len(names) // articles][:articles]:
            sample.writestr(name, archive.read(name))
    return path


def debian_sample(folder: Path, pages: int) -> Path:
    """Every 16th raw Debian HTML page, ``pages`` of them, as JSONL.gz in ``folder`` (skips without the data)."""
    import gzip

    source = shared_data("debian-docs-html", "pages.jsonl.gz")
    path = folder / "debian-sample.jsonl.gz"
    with gzip.open(source, "rt", encoding="utf-8") as handle, gzip.open(path, "wt", encoding="utf-8") as sample:
        for i, line in enumerate(handle):
            if i % 16 == 0:
                sample.write(line)
                pages -= 1
                if not pages:
                    break
    return path


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide random BERT with the offline default's BERT vocabulary, saved to disk."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from xprt_st.models import resolve_model_name

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(None))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def _tiny_model_session(tiny_model_path: Path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    return SentenceTransformer(
        modules=[Transformer(str(tiny_model_path), max_seq_length=64), Pooling(32, "mean")], device="cpu"
    )


@pytest.fixture
def tiny_model(_tiny_model_session):
    """A fresh deep copy of the tiny model for each test (tests may train it)."""
    return copy.deepcopy(_tiny_model_session)


@pytest.fixture(scope="session")
def minilm():
    """The real offline default model (all-MiniLM-L6-v2), loaded once per session; do not train it."""
    from xprt_st.models import load_model

    return load_model(None, device="cpu")


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the quickstart starts, or any model loads (a refusal must come before any work)."""

    def started(*args, **kwargs):
        raise AssertionError("work started before the inputs (or the rerun's settings) were checked")

    import xprt_st.models
    import xprt_st.quickstart.run

    monkeypatch.setattr(xprt_st.quickstart.run, "run_quickstart", started)
    monkeypatch.setattr(xprt_st.models, "load_model", started)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder outside the repository, without ../shared/data."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("XPRT_DATA_DIR", raising=False)
    return work


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every text ``SentenceTransformer.encode`` is given from now on in the test, with a hash of the weights that
    encoded it (``(weights_sha256, text)``); this process's held-out encodings are forgotten before and after."""
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation import heldout_vectors
    from xprt_st.mining.layout.embeddings import encoder_identity

    seen: list[tuple[str, str]] = []
    original = SentenceTransformer.encode

    def counting(self, sentences, *args, **kwargs):
        weights = encoder_identity(self, "")["weights_sha256"]
        seen.extend((weights, text) for text in ([sentences] if isinstance(sentences, str) else sentences))
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformer, "encode", counting)
    heldout_vectors.forget()
    yield seen
    heldout_vectors.forget()
