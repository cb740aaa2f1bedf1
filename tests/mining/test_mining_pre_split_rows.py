"""The groups are the same rows as the pre-split code's (commit b8da5f5) on BBC and Debian samples.

``tests/mining/data/pre_split_rows.json`` holds, per corpus sample, a fingerprint of what the
one-module ``builder.py`` of commit b8da5f5 (``main`` before the mining package was split into
stages and engines and the merge made to stream) mined: the number of groups and passages, the
effective threshold rounded to 6 decimals, and two SHA-256 digests: of the sorted training rows
(label, anchor, positive, related_2..4) and of the sorted ``groups_meta.jsonl`` entries (doc id,
anchor index, related indices). No text of the corpora is stored.

The mining model is a 2-layer, 32-wide BERT with all-MiniLM-L6-v2's vocabulary whose weights are
drawn from numpy's seeded PCG64 generator (:func:`fixed_model`), not from torch's RNG or
transformers' initialisation, so the fingerprint does not move when either changes how it
initialises. What can still move it is float arithmetic: a torch build that sums differently can
flip a passage whose centrality ties the threshold, or two near-equal cosines. The threshold is
compared to 6 decimals and the rows exactly; on such a failure, regenerate with the old code as
below and compare the counts before suspecting the mining code.

Regenerate (from the repository root, with ``../shared/data`` present)::

    git worktree add /tmp/old b8da5f5
    PYTHONPATH=/tmp/old python tests/mining/test_mining_pre_split_rows.py --write tests/mining/data/pre_split_rows.json
    git worktree remove /tmp/old

The script prints which ``xprt_st`` it imported, so check it is ``/tmp/old``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

FINGERPRINTS = Path(__file__).with_name("data") / "pre_split_rows.json"
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
ROW_COLUMNS = ["label", "anchor", "positive", "related_2", "related_3", "related_4"]


def fixed_model(folder: Path):
    """The mining model: a tiny BERT with MiniLM's vocabulary and weights from ``numpy.random.default_rng(0)``.

    Word embeddings are N(0, 1), every other matrix N(0, 0.02); biases, position and token-type
    embeddings are 0 and LayerNorm scales 1, so a passage's mean-pooled vector follows its words
    (centralities spread over 0.6-0.9 on BBC articles, as MiniLM's do, rather than all near 1, where
    float noise would reorder them).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from xprt_st.models import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(None))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    bert = BertModel(config)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for name, parameter in sorted(bert.named_parameters()):
            if name.endswith("LayerNorm.weight"):
                parameter.fill_(1.0)
            elif name.endswith("bias") or "position_embeddings" in name or "token_type_embeddings" in name:
                parameter.zero_()
            else:
                std = 1.0 if "word_embeddings" in name else 0.02
                parameter.copy_(torch.from_numpy(rng.normal(0.0, std, tuple(parameter.shape)).astype(np.float32)))
    bert.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    return SentenceTransformer(
        modules=[Transformer(str(folder), max_seq_length=256), Pooling(32, "mean")], device="cpu"
    )


def bbc_sample(folder: Path, source: Path) -> Path:
    """16 BBC articles, evenly spaced in name order."""
    path = folder / "bbc-sample.zip"
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(path, "w") as sample:
        names = sorted(n for n in archive.namelist() if n.endswith(".txt"))
        for name in names[:: len(names) // 16][:16]:
            sample.writestr(name, archive.read(name))
    return path


def debian_sample(folder: Path, source: Path) -> Path:
    """6 Debian pages: lines 0, 16, 32, ... of the file."""
    path = folder / "debian-sample.jsonl.gz"
    with gzip.open(source, "rt", encoding="utf-8") as handle, gzip.open(path, "wt", encoding="utf-8") as sample:
        kept = 0
        for i, line in enumerate(handle):
            if i % 16 == 0 and kept < 6:
                sample.write(line)
                kept += 1
    return path


SAMPLES = {
    "bbc": (("bbc-news", "bbc-fulltext.zip"), bbc_sample, {}),
    "debian": (("debian-docs-html", "pages.jsonl.gz"), debian_sample, {"html": True, "id_field": "id"}),
}


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(lines)).encode("utf-8")).hexdigest()


def fingerprint(model, corpus: Path, out: Path, settings: dict) -> dict:
    """Mine ``corpus`` with whichever ``xprt_st`` is imported and fingerprint the groups."""
    import datasets

    from xprt_st.mining import GroupBuilder, MiningConfig

    # the fingerprints are of the fp32 code: mine in fp32 where the code has a precision (older code has none)
    fp32 = {"precision": "fp32"} if "precision" in {f.name for f in dataclasses.fields(MiningConfig)} else {}
    config = MiningConfig(threshold_quantile=0.5, batch_size=32, max_passages=40, chunk_size=4, **settings, **fp32)
    stats = GroupBuilder([corpus], out, config, model=model, progress=False).run()
    dataset = datasets.load_from_disk(str(out))
    rows = [json.dumps([row[c] for c in ROW_COLUMNS], ensure_ascii=False) for row in dataset]
    meta = []
    for line in (out / "groups_meta.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        meta.append(json.dumps([entry["doc_id"], entry["anchor_index"], entry["related_indices"]]))
    return {
        "groups": stats["groups"],
        "passages": stats["passages"],
        "threshold": round(float(stats["threshold"]), 6),
        "rows_sha256": _digest(rows),
        "groups_meta_sha256": _digest(meta),
    }


@pytest.mark.parametrize("corpus_name", sorted(SAMPLES))
def test_groups_are_the_pre_split_codes_rows(tmp_path, corpus_name):
    from tests.conftest import shared_data

    parts, sample, settings = SAMPLES[corpus_name]
    corpus = sample(tmp_path, shared_data(*parts))
    expected = json.loads(FINGERPRINTS.read_text())[corpus_name]
    got = fingerprint(fixed_model(tmp_path / "model"), corpus, tmp_path / "out", settings)
    assert got == expected


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the fingerprints with the imported xprt_st.")
    parser.add_argument("--write", type=Path, required=True)
    args = parser.parse_args()
    import xprt_st

    print("xprt_st from", xprt_st.__file__)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = fixed_model(work / "model")
        for name, (parts, sample, settings) in sorted(SAMPLES.items()):
            corpus = sample(work, SHARED_DATA.joinpath(*parts))
            result[name] = fingerprint(model, corpus, work / f"out-{name}", settings)
            print(name, result[name])
    result["made_with"] = "commit b8da5f5 (pre-split builder.py); see tests/mining/test_mining_pre_split_rows.py"
    args.write.parent.mkdir(parents=True, exist_ok=True)
    args.write.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
