"""A comparison's data variants hold out the documents its mined folder holds out, whatever the corpus seed."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.compare.variants import prepare_variant
from xprt_st.mining.layout import load_heldout

runner = CliRunner(env={"COLUMNS": "250"})


def _heldout_labels(folder: Path) -> set[int]:
    heldout = load_heldout(folder)
    assert heldout is not None
    return set(heldout[1]["label"])


def test_a_variant_holds_out_the_mined_folders_documents_with_another_corpus_seed(tmp_path, tiny_model_path):
    rows = []
    for i in range(12):
        paragraphs = [
            f"Paragraph {j} of document {i} is about boats, rivers and weather {i * 9 + j}." for j in range(4)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"d{i}"}))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(rows) + "\n", encoding="utf-8")
    mined = tmp_path / "RUN" / "mined"
    args = ["mine", str(corpus), "--mining-model", str(tiny_model_path), "--id-field", "id", "--max-tokens", "32"]
    result = runner.invoke(app, [*args, "--min-tokens", "8", "-q", "--holdout", "0.4", "-o", str(mined)])
    assert result.exit_code == 0, result.output
    expected = _heldout_labels(mined)
    assert 0 < len(expected) < 12

    variant = tmp_path / "RUN" / "data" / "positive-random"
    prepare_variant(mined, variant, {"positive": "random", "pairs": "mined"}, seed=7, progress=False)
    # seed 7 alone holds out other documents: the variant must not train on any the mined folder holds out
    assert _heldout_labels(variant) == expected
