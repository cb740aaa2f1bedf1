"""Structure pairs (``mine --structure``): titles and headings of training documents paired with their passages."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.mining import GroupBuilder, MiningConfig, is_held_out
from xprt_st.mining.hard_negatives import add_hard_negatives
from xprt_st.mining.headings import Section
from xprt_st.mining.structure import (
    STRUCTURE_RULES,
    document_pairs,
    drop_reason,
    mixed_rows,
    parse_kinds,
    positive_text,
    write_mixed_groups,
    write_structure_groups,
)
from xprt_st.recipe import load_recipe
from xprt_st.training.data import MinedDataError
from xprt_st.training.run import train_recipe

PAGE = (
    "<html><head><title>Site &amp; Page</title></head><body><nav>Home About Contact</nav><article>"
    "<h1>Page {i} title</h1><p>First paragraph of page {i} that is long enough to be main text content here and "
    "there, with more words to pass the extraction threshold of the extractor.</p>"
    "<h2>Topic {i}</h2><p>Text of section A of page {i} goes here with many words so that it is kept by it.</p>"
    "<h3>Sub A1</h3><p>Sub section text of page {i} with plenty of words in it as well to be extracted, surely.</p>"
    "<h2>See also</h2><p>Text of section B of page {i}, another paragraph with lots of words to be kept too.</p>"
    "</article><footer>Copyright notice</footer></body></html>"
)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_document_pairs_title_to_the_central_passage_heading_to_its_first_and_drops_counted():
    passages = ["Tea is a drink.", "Green tea is not fermented.", "Black tea is."]
    sections = [
        Section("Tea", 0, 0, 3),
        Section("See also:", 2, 0, 1),
        Section("Green tea", 2, 1, 3),
        Section("Black tea is.", 3, 2, 3),
        Section(" ".join(["word"] * 30), 2, 2, 3),
    ]
    pairs, counts = document_pairs(passages, [0.5, 0.9, 0.7], sections, ("titles", "headings"))
    assert [(p.kind, p.anchor, p.positive) for p in pairs] == [("title", "Tea", 1), ("heading", "Green tea", 1)]
    assert counts == {
        "kept": {"title": 1, "heading": 1},
        "dropped": {"heading": {"generic": 1, "same_as_passage": 1, "too_long": 1}},
    }
    only_titles, _ = document_pairs(passages, [float("nan")] * 3, sections, ("titles",))
    assert [(p.kind, p.positive) for p in only_titles] == [("title", 0)]  # unscored: the first passage
    assert positive_text("## Green tea\nGreen tea is good.", "Green tea") == "Green tea is good."
    assert positive_text("Green tea", "Green tea") == "Green tea"  # nothing after it: kept whole
    assert positive_text("4.2. Naming¶ Names refer to objects.", "4.2. Naming") == "Names refer to objects."
    assert positive_text("glob — Unix style pathname expansion¶", "glob") == "Unix style pathname expansion¶"
    assert mixed_rows(10, 3, 0.25, 0)[1] and len(mixed_rows(10, 3, 0.25, 0)[1]) == 3  # 0.25 / 0.75 x 10
    assert sorted(mixed_rows(6, 4, 0.5, 1)[1][:4]) == [0, 1, 2, 3]  # each structure group once before a repeat
    with pytest.raises(ValueError, match="not in"):
        mixed_rows(6, 4, 1.0, 0)
    assert drop_reason("  ") == "empty" and drop_reason("Introduction") == "generic" and drop_reason("json") is None


def test_kinds_are_checked_in_one_line_naming_the_option():
    assert parse_kinds("links,headings, titles") == ("titles", "headings", "links")
    with pytest.raises(ValueError, match=r"--structure: anchors is not one of titles, headings, links; give e.g."):
        parse_kinds("titles,anchors")


def test_mine_structure_on_html_pages_each_pair_checked_and_held_out_pages_give_none(tmp_path, tiny_model_path):
    corpus = _jsonl(tmp_path / "pages.jsonl", [{"id": f"p{i}", "html": PAGE.format(i=i)} for i in range(12)])
    out = tmp_path / "out"
    args = ["mine", str(corpus), "-o", str(out), "--html", "--id-field", "id", "--model", str(tiny_model_path)]
    result = CliRunner().invoke(
        app,
        [*args, "--holdout", "0.5", "--max-tokens", "24", "--min-tokens", "4", "-q", "--structure", "titles,headings"],
    )
    assert result.exit_code == 0, result.output
    assert "train with --mined" in " ".join(result.output.split())
    held = {i for i in range(12) if is_held_out(f"p{i}", 0.5, 0)}
    train = set(range(12)) - held
    assert held and train
    side = pq.read_table(out / "passages.parquet").to_pandas()
    groups = datasets.load_from_disk(str(out / "structure")).to_pandas()
    assert set(groups["label"]) == train  # the label is the document's ordinal; held-out pages contribute none
    for i in train:
        own = side[side["label"] == i]
        mine = groups[groups["label"] == i].set_index("anchor")
        # "See also" dropped as generic, "Sub A1" as shared: every page has a section of that heading
        assert sorted(mine.index) == sorted([f"Page {i} title", f"Topic {i}"])
        assert mine.loc[f"Page {i} title", "positive"] == own.loc[own["centrality"].idxmax(), "text"]
        assert mine.loc[f"Topic {i}", "positive"].startswith(f"Text of section A of page {i}")
        assert (mine["related_4"] == mine["positive"]).all()
    stats = json.loads((out / "stats.json").read_text())["structure"]
    assert stats["kept"] == {"title": len(train), "heading": len(train)}
    assert stats["dropped"] == {"heading": {"generic": len(train), "shared": len(train)}}
    assert stats["heldout_documents_skipped"] == len(held)
    own_stats = json.loads((out / "structure" / "stats.json").read_text())
    assert own_stats["settings"]["pairs"] == "structure" and own_stats["groups"] == 2 * len(train)
    assert own_stats["settings"]["structure_rules"] == STRUCTURE_RULES


def _articles(documents: int, markdown: bool) -> list[dict]:
    rows = []
    for i in range(documents):
        parts = [f"# Guide {i} to rivers"] if markdown else []
        for j in range(3):
            if markdown:
                parts.append(f"## River {i} part {j}" if j else "## Introduction")
            parts.append(
                f"The river story part {j} of document {i} mentions river facts and history number {i * 10 + j}. "
                f"Experts on river {i} add detail {j} about floods, banks and the water of the valley."
            )
        rows.append({"id": f"doc-{i}", "text": "\n\n".join(parts)})
    return rows


def _config(**overrides) -> MiningConfig:
    settings = {"max_tokens": 32, "min_tokens": 8, "batch_size": 16, "threshold_quantile": 0.5, "id_field": "id"}
    return MiningConfig(**(settings | overrides))


def test_markdown_structure_with_hard_negatives_from_other_documents(tmp_path, tiny_model, tiny_model_path):
    out = tmp_path / "md"
    corpus = _jsonl(tmp_path / "md.jsonl", _articles(10, markdown=True))
    GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    counts = write_structure_groups(out, ("titles", "headings"), hard_negatives=2, model=tiny_model)
    assert counts["kept"] == {"title": 10, "heading": 20} and counts["dropped"] == {"heading": {"generic": 10}}
    groups = datasets.load_from_disk(str(out / "structure")).to_pandas()
    side = pq.read_table(out / "passages.parquet").to_pandas()
    for row in groups.itertuples():
        own = set(side.loc[side["label"] == row.label, "text"])
        assert any(text.endswith(row.positive) for text in own)  # its own passage, less a leading heading
        assert not row.positive.startswith(("#", row.anchor))
        assert row.negative_1 not in own and row.negative_2 not in own  # negatives from other documents only
        if row.anchor.startswith("River"):
            part = row.anchor.split()[-1]
            assert f"part {part} of document {row.label}" in row.positive
    stats = json.loads((out / "structure" / "stats.json").read_text())
    assert stats["settings"]["hard_negatives"] == 2 and stats["structure"]["hard_negatives"]["groups"] == 30
    # the same merge and settings again: the stored pairs are kept (the model, which could not encode, is not used)
    assert write_structure_groups(out, ("titles", "headings"), hard_negatives=2, model=object()) == counts
    # written under the rules before shared titles and headings were dropped: written again, not reused
    own = out / "structure" / "stats.json"
    older = json.loads(own.read_text())
    del older["settings"]["structure_rules"]
    own.write_text(json.dumps(older))
    assert write_structure_groups(out, ("titles", "headings"), hard_negatives=2, model=tiny_model) == counts
    assert json.loads(own.read_text())["settings"]["structure_rules"] == STRUCTURE_RULES
    # the mix: every mined group once and as many structure groups (share 0.5), negatives in both or neither
    with pytest.raises(ValueError, match="give both the same --hard-negatives"):
        write_mixed_groups(out / "structure", out, tmp_path / "mixed", 0.5)
    add_hard_negatives(out, 2, model=tiny_model)
    mined = datasets.load_from_disk(str(out))
    mixed_stats = write_mixed_groups(out / "structure", out, tmp_path / "mixed", 0.5)
    mixed = datasets.load_from_disk(str(tmp_path / "mixed")).to_pandas()
    assert len(mixed) == 2 * len(mined) and mixed_stats["settings"]["structure_mix"] == 0.5
    assert set(mixed["anchor"][len(mined) :]) <= set(groups["anchor"]) and list(mixed["anchor"][: len(mined)]) == list(
        mined["anchor"]
    )
    # recipe structure-positive trains on it (and refuses the mined groups, which are not structure pairs)
    settings = {"training.model": str(tiny_model_path), "training.max_steps": 2, "training.batch_size": 4}
    settings |= {"training.max_seq_length": 32, "training.save_steps": 2, "retention.enabled": False}
    recipe = load_recipe("structure-positive", overrides=settings)
    assert (train_recipe(recipe, out / "structure", tmp_path / "run", progress=False) / "config.json").is_file()
    with pytest.raises(MinedDataError, match="pairs='structure'"):
        train_recipe(recipe, out, tmp_path / "run-mined", progress=False)


def test_plain_text_corpus_has_no_structure_and_says_so(tmp_path, tiny_model_path):
    rows = [{"id": f"doc-{i}", "text": row["text"]} for i, row in enumerate(_articles(10, markdown=False))]
    corpus = _jsonl(tmp_path / "plain.jsonl", rows)
    out = tmp_path / "plain"
    args = ["mine", str(corpus), "-o", str(out), "--id-field", "id", "--model", str(tiny_model_path), "-q"]
    result = CliRunner().invoke(
        app, [*args, "--max-tokens", "32", "--min-tokens", "8", "--structure", "titles,headings"]
    )
    assert result.exit_code == 0, result.output
    assert "has no titles or headings to pair" in " ".join(result.output.split())
    assert not (out / "structure").exists()
    assert json.loads((out / "stats.json").read_text())["structure"]["groups"] == 0
    mix = CliRunner().invoke(app, [*args[:4], "--structure", "titles", "--structure-mix", "1.5"])
    assert mix.exit_code != 0 and "--structure-mix 1.5: give a share in (0, 1)" in " ".join(mix.output.split())
    # before: a share in (0, 1) without --structure was told it is out of (0, 1)
    alone = CliRunner().invoke(app, [*args[:4], "--structure-mix", "0.5"])
    flat = " ".join(alone.output.split())
    assert (
        alone.exit_code != 0 and "--structure-mix 0.5 mixes the structure pairs" in flat and "give --structure" in flat
    )
    bad = CliRunner().invoke(app, [*args[:4], "--structure", "anchors"])
    assert bad.exit_code != 0 and "--structure: anchors is not one of" in " ".join(bad.output.split())


def test_structure_negatives_encode_no_passage_mining_encoded(tmp_path, tiny_model, counted):
    """The structure pairs' hard-negative pool is the training passages: their vectors come from mining's stored
    ones (before, every training passage was encoded again), and the negatives are those a fresh encoding gives."""
    corpus = _jsonl(tmp_path / "md.jsonl", _articles(10, markdown=True))
    fresh, reused = tmp_path / "fresh", tmp_path / "reused"
    for out in (fresh, reused):
        GroupBuilder([corpus], out, _config(), model=tiny_model, progress=False).run()
    (fresh / "embeddings.npy").unlink()  # no stored vectors: every passage is encoded
    write_structure_groups(fresh, ("titles", "headings"), hard_negatives=2, model=tiny_model)
    already = len(counted)
    write_structure_groups(reused, ("titles", "headings"), hard_negatives=2, model=tiny_model)
    seen = [text for _, text in counted[already:]]
    groups = datasets.load_from_disk(str(reused / "structure")).to_pandas()
    passages = set(pq.read_table(reused / "passages.parquet").column("text").to_pylist())
    assert seen and set(seen) <= set(groups["anchor"]) | set(groups["positive"])
    assert not (set(seen) - set(groups["positive"])) & passages  # no passage encoded but the pairs' positives
    baseline = datasets.load_from_disk(str(fresh / "structure")).to_pandas()
    assert list(groups["negative_1"]) == list(baseline["negative_1"])
    assert list(groups["negative_2"]) == list(baseline["negative_2"])


def test_derived_folders_record_real_document_ids_and_a_changed_draw_refuses_them(tmp_path, tiny_model_path):
    """Before: a model trained on DIR/structure(-mixed) recorded stand-in ids (#0, #1 ...), so the held-out contract
    never saw its overlap; after a re-merge with another --holdout the old DIR/structure-mixed was still recommended
    ("which this folder's mining wrote") and trained on documents DIR now held out."""
    from xprt_st.training.data import load_mined
    from xprt_st.training.heldout_contract import folder_documents

    corpus = _jsonl(tmp_path / "md.jsonl", _articles(12, markdown=True))
    out = tmp_path / "md"
    args = ["mine", str(corpus), "-o", str(out), "--id-field", "id", "--mining-model", str(tiny_model_path), "-q"]
    args += ["--max-tokens", "32", "--min-tokens", "8", "--holdout", "0.5", "--seed", "1"]
    result = CliRunner().invoke(app, [*args, "--structure", "titles,headings", "--structure-mix", "0.5"])
    assert result.exit_code == 0, result.output
    for derived in ("structure", "structure-mixed"):
        documents = folder_documents(out / derived)
        assert documents.trained and all(doc.startswith("doc-") for doc in documents.trained), documents.trained
        assert documents.heldout == folder_documents(out).heldout and documents.heldout
    load_mined(out / "structure-mixed")
    remerge = ["mine", "--merge", str(out), "--holdout", "0.2", "-q"]
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, remerge)  # wide enough that no path is wrapped
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"note: {out / 'structure-mixed'} was written under another held-out draw" in flat
    for derived in ("structure", "structure-mixed"):
        with pytest.raises(MinedDataError, match=r"another held-out draw .* \(--holdout 0.5 -> 0.2\)"):
            load_mined(out / derived)
    with pytest.raises(MinedDataError, match=r"Write it again with `xprt-st mine --merge .* --structure-mix 0.5`"):
        load_mined(out, requires={"pairs": "structure-mixed"})
    # titles:, mined: and inspect on a derived folder name its source (before: "re-mine with --title-field", "no
    # stats.json")
    from xprt_st.evaluation.label_free import HeldOutError, load_heldout_task
    from xprt_st.evaluation.titles import load_titles_task
    from xprt_st.mining import MiningError
    from xprt_st.mining.report import write_report

    for load, task in ((load_titles_task, "titles"), (load_heldout_task, "mined")):
        with pytest.raises(HeldOutError, match=rf"derived from the mined folder {out}.* Give {task}:{out}$"):
            load(out / "structure")
    with pytest.raises(MiningError, match=rf"Give xprt-st inspect {out}$"):
        write_report(out / "structure-mixed")
