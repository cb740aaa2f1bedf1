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


def test_structure_recipes_read_the_structure_folder_and_the_mix_the_comparison_builds(tmp_path, tiny_model_path):
    from xprt_st.compare.variants import data_variant, prepare_mixed
    from xprt_st.mining import mine
    from xprt_st.recipe import load_recipe

    assert data_variant(load_recipe("structure-positive").data.requires)[0] == "structure"
    variant, options = data_variant(load_recipe("structure-mixed").data.requires)
    assert variant == "structure-mixed-0.5-2" and options == {"structure_mix": "0.5", "hard_negatives": "2"}
    rows = []
    for i in range(12):
        parts = [f"# Boats {i}"] + [
            f"## Part {j}\n\nParagraph {j} of document {i} on rivers {i * 9 + j}." for j in range(3)
        ]
        rows.append(json.dumps({"text": "\n\n".join(parts), "id": f"d{i}"}))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(rows) + "\n", encoding="utf-8")
    run = tmp_path / "RUN"
    settings = {"max_tokens": 32, "min_tokens": 4, "id_field": "id", "holdout": 0.3, "progress": False}
    mine(
        corpus,
        run / "mined",
        model=str(tiny_model_path),
        structure=["titles", "headings"],
        structure_hard_negatives=2,
        **settings,
    )
    structure = json.loads((run / "mined" / "structure" / "stats.json").read_text())
    assert structure["structure"]["kept"]["title"] == 12 - structure["structure"]["heldout_documents_skipped"]
    stats = prepare_mixed(run, run / "mined", run / "data" / variant, options, 0, False, str(tiny_model_path))
    assert stats["settings"]["pairs"] == "structure-mixed" and stats["settings"]["hard_negatives"] == 2
    assert (run / "data" / "hard-negatives-2" / "stats.json").is_file()  # the mined groups' negatives, shared
