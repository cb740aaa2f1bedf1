"""Link texts as structure pairs (``mine --structure links``): a hand-written site, each pair checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from xprt_st.cli import app
from xprt_st.mining import is_held_out
from xprt_st.mining.link_targets import resolve, text_drop_reason
from xprt_st.mining.links import element_anchors, page_links
from xprt_st.mining.structure import positive_text

NAV = '<nav><a href="{up}index.html">Home</a> <a href="{up}guide/brewing.html">Brewing</a></nav>'


def _page(title: str, body: str, up: str = "") -> str:
    return (
        f"<html><head><title>{title} | Tea site</title></head><body>{NAV.format(up=up)}<article>{body}</article>"
        "<footer>Copyright the tea people</footer></body></html>"
    )


def _p(words: str) -> str:
    return f"<p>{words} This sentence adds enough plain words to keep the paragraph in the main text.</p>"


INDEX = _page(
    "Tea handbook",
    "<h1>Tea handbook</h1>"
    + _p('The handbook opens here. Read about <a href="guide/brewing.html">brewing tea at home</a> first.')
    + _p('Hot water matters: <a href="guide/brewing.html#water-temperature">the right water temperature</a> helps.')
    + _p('More words are <a href="other.html">here</a> and at <a href="https://example.com/tea">the tea society</a>.')
    + _p('Back to <a href="#">the top of this page</a> or <a href="guide/brewing.html#nowhere">a lost part</a>.')
    + _p('The <a href="secret.html">secret house blend</a> stays hidden from everyone who reads this.')
    + _p(
        'A <a href="guide/brewing.html">link whose text runs on for far too many words to be any kind of name '
        "for its target</a> ends here."
    )
    + _p('Once more, <a href="guide/brewing.html">brewing tea at home</a> is worth a second look.')
    + _p('One kind is <a href="green.html#sencha">a steamed green tea</a>, another is shaded before picking.')
    + '<h2 id="tea-kinds">Kinds of tea</h2>'
    + _p("KINDS-MARK Green, black and oolong teas differ by how long the leaves oxidise.")
    + "<h2>Buying tea</h2>"
    + _p("BUYING-MARK Loose leaves keep their taste better than dust in paper bags."),
)
BREWING = _page(
    "Brewing tea",
    "<h1>Brewing tea</h1>"
    + _p('BREWING-MARK Brewing starts with fresh leaves, see <a href="../index.html#tea-kinds">kinds of tea</a>.')
    + '<section id="water-temperature"><h2>Water temperature</h2>'
    + _p("WATER-MARK Green tea wants water well below the boil, black tea wants it boiling.")
    + "</section>"
    + '<h2><a name="steeping-time"></a>Steeping time</h2>'
    + _p('STEEP-MARK Three minutes suit most leaves; <a href="#storage">keeping leaves fresh</a> matters too.')
    + _p('Cooler water suits <a href="../green.html#gyokuro-note">tea grown in the shade</a> best of all.')
    + '<span id="storage"></span><!-- a comment --><h2>Storage</h2>'
    + _p("STORAGE-MARK Keep the leaves in a dark, dry tin away from spices."),
    up="../",
)
GREEN = _page(
    "Green tea",
    "<h1>Green tea</h1>"
    + _p(
        'GREEN-MARK Green tea is steamed or pan-fired; <a href="guide/brewing.html#steeping-time">how long to '
        "steep it</a> depends on the leaf."
    )
    + _p(
        'See also <a href="index.html">the tea handbook</a> for the other kinds, '
        'not <a href="gone.html">a gone page</a>.'
    )
    # an API-entry-like <dt id> and an empty Sphinx-like <span id> target before a paragraph: no heading names them
    + '<dl><dt id="sencha">Sencha leaves</dt><dd>'
    + _p("SENCHA-MARK Sencha is steamed right after picking, which keeps it grassy and bright.")
    + "</dd></dl>"
    + '<span class="target" id="gyokuro-note"></span>'
    + _p("GYOKURO-MARK Gyokuro grows under shade for weeks before the harvest, which makes it sweet."),
)
SECRET = _page(
    "Secret blend",
    "<h1>Secret blend</h1>"
    + _p('SECRET-MARK The blend mixes two teas; <a href="guide/brewing.html">brewing the blend</a> is easy.')
    + _p('Its <a href="green.html">green part</a> comes from the hills.'),
)
PAGES = {"index.html": INDEX, "guide/brewing.html": BREWING, "green.html": GREEN, "secret.html": SECRET}


def _site(folder: Path) -> Path:
    for name, html in PAGES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(html, encoding="utf-8")
    return folder


def test_resolve_relative_paths_folders_fragments_and_outside_links():
    assert resolve("site/guide/brewing.html", "../index.html#tea-kinds") == ("site/index.html", "tea-kinds")
    assert resolve("site/guide/brewing.html", "#storage") == ("site/guide/brewing.html", "storage")
    assert resolve("site/guide/brewing.html", "./") == ("site/guide/", "")
    assert resolve("site/a.html", "b%20c.html?x=1") == ("site/b c.html", "")
    assert resolve("site/a.html", "mailto:tea@example.com") == (None, "")
    assert resolve("site/a.html", "https://example.com/a.html") == (None, "")  # path ids: no URL names a page
    assert resolve("https://docs.example.com/a/b.html", "../c.html#x") == ("https://docs.example.com/c.html", "x")
    assert [text_drop_reason(t) for t in ("¶", "[1]", "Here", "next »", "the os module")] == [
        "empty",
        "empty",
        "generic",
        "generic",
        None,
    ]


def test_page_links_keep_targets_mark_navigation_and_name_headings():
    links, ids, elements = page_links(
        BREWING, "Brewing tea\n\nBREWING-MARK ... see kinds of tea. keeping leaves fresh tea grown in the shade"
    )
    assert [(link.text, link.target, link.navigation) for link in links] == [
        ("Home", "../index.html", True),  # in <nav>
        ("Brewing", "../guide/brewing.html", True),
        ("kinds of tea", "../index.html#tea-kinds", False),
        ("keeping leaves fresh", "#storage", False),
        ("tea grown in the shade", "../green.html#gyokuro-note", False),
    ]
    assert dict(ids)["Water temperature"] == ("water-temperature",)  # the <section id> it opens
    assert dict(ids)["Steeping time"] == ("steeping-time",)  # an <a name> inside it
    assert dict(ids)["Storage"] == ("storage",)  # an empty element just before it
    assert elements == []  # every id of the page names a heading


def test_element_ids_name_entries_and_empty_targets_but_not_navigation_or_headings():
    page = GREEN.replace("<nav>", '<nav id="site-nav"><span id="in-nav">Tea site</span>')
    _, ids, elements = page_links(page, "")
    assert dict(ids)["Green tea"] == ()
    assert elements == [
        ("sencha", "SENCHA-MARK Sencha is steamed right after picking, which"),  # the <dt id>'s <dd>
        ("gyokuro-note", "GYOKURO-MARK Gyokuro grows under shade for weeks before"),  # what follows the empty span
    ]


def test_element_anchors_find_the_passage_in_page_order_case_and_spacing_aside():
    text = "Intro words here.\n\nopen(file)  Opens it.\n\nMore on open(file) later.\n\nclose(file)\nCloses it."
    spans = [(0, 17), (19, 40), (42, 67), (69, len(text))]
    elements = [("open", "OPEN(file) Opens"), ("again", "open(file)"), ("close", "close(file)"), ("lost", "gone")]
    anchors = element_anchors(elements, text, spans, taken={"close"})
    assert [(anchor.id, anchor.first) for anchor in anchors] == [("open", 1), ("again", 1)]
    # from where the previous entry was found: the same words later in the page go to the later passage
    later = element_anchors([("open", "Opens it"), ("again", "open(file)")], text, spans)
    assert [(anchor.id, anchor.first) for anchor in later] == [("open", 1), ("again", 2)]


def test_mine_structure_links_on_a_small_site_each_pair_by_hand(tmp_path, tiny_model_path):
    site = _site(tmp_path / "site")
    paths = {name: str((site / name).resolve()) for name in PAGES}
    # a seed whose 0.25 hold-out draw keeps exactly secret.html out (the ids are the pages' absolute paths)
    seed = next(s for s in range(10_000) if [is_held_out(p, 0.25, s) for p in paths.values()] == [0, 0, 0, 1])
    base = ["mine", str(site), "--html", "--mining-model", str(tiny_model_path), "-q", "--max-tokens", "40"]
    base += ["--min-tokens", "4", "--holdout", "0.25", "--seed", str(seed)]
    plain = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "plain")])
    assert plain.exit_code == 0, plain.output
    out = tmp_path / "links"
    result = CliRunner().invoke(app, [*base, "-o", str(out), "--structure", "titles,headings,links"])
    assert result.exit_code == 0, result.output

    # what mining keeps is byte-identical with and without --structure links
    columns = ["label", "doc_id", "passage_index", "text", "held_out"]
    assert pq.read_table(out / "passages.parquet", columns=columns).equals(
        pq.read_table(tmp_path / "plain" / "passages.parquet", columns=columns)
    )
    assert datasets.load_from_disk(str(out)).to_dict() == datasets.load_from_disk(str(tmp_path / "plain")).to_dict()

    side = pq.read_table(out / "passages.parquet").to_pandas()
    label_of = {name: int(side.loc[side["doc_id"] == path, "label"].iloc[0]) for name, path in paths.items()}

    def passage(name: str, mark: str) -> str:
        own = side[(side["doc_id"] == paths[name]) & side["text"].str.contains(mark)]
        assert len(own) == 1, (name, mark)
        return own["text"].iloc[0]

    groups = datasets.load_from_disk(str(out / "structure")).to_pandas()
    titles_headings = {"Tea handbook", "Kinds of tea", "Buying tea", "Brewing tea", "Water temperature"}
    titles_headings |= {"Steeping time", "Storage", "Green tea"}
    links = groups[~groups["anchor"].isin(titles_headings)]
    found = {row.anchor: (row.label, row.positive) for row in links.itertuples()}
    expected = {
        # a page link: the target page's first passage
        "brewing tea at home": ("guide/brewing.html", "BREWING-MARK"),
        "the tea handbook": ("index.html", "The handbook opens here"),
        # a #fragment: the first passage of the section whose heading carries that id (<section id>, <a name>,
        # an empty <span id> before it, an <h2 id>), also on the linking page itself
        "the right water temperature": ("guide/brewing.html", "WATER-MARK"),
        "how long to steep it": ("guide/brewing.html", "STEEP-MARK"),
        "keeping leaves fresh": ("guide/brewing.html", "STORAGE-MARK"),
        "kinds of tea": ("index.html", "KINDS-MARK"),
        # a #fragment no heading carries: the passage that holds the element's text (a <dt id>), or, for an empty
        # <span id>, the text after it
        "a steamed green tea": ("green.html", "SENCHA-MARK"),
        "tea grown in the shade": ("green.html", "GYOKURO-MARK"),
    }
    assert set(found) == set(expected)
    for anchor, (name, mark) in expected.items():
        label, positive = found[anchor]
        assert label == label_of[name], anchor  # the target page's label: the same-document mask
        assert positive == positive_text(passage(name, mark), anchor), anchor
    assert found["kinds of tea"][1].startswith("KINDS-MARK")  # the heading it repeats is cut off the positive
    assert found["the right water temperature"][1].startswith("Water temperature")  # another text: kept
    assert label_of["secret.html"] not in set(groups["label"])  # the held-out page is no target ...
    assert not groups["anchor"].isin(["brewing the blend", "green part", "Secret blend"]).any()  # ... nor a source

    stats = json.loads((out / "stats.json").read_text())["structure"]
    assert stats["kept"]["link"] == 8
    assert stats["dropped"]["link"] == {
        "navigation": 6,  # Home and Brewing in each training page's <nav>
        "generic": 1,  # "here"
        "outside_corpus": 2,  # https://example.com/tea, gone.html (no such page; "here" is dropped as generic first)
        "same_page": 1,  # "#"
        "unknown_fragment": 1,  # #nowhere
        "held_out_target": 1,  # secret.html
        "too_long": 1,
        "duplicate": 1,  # "brewing tea at home" a second time
    }
    assert stats["links_found"] == 8 + sum(stats["dropped"]["link"].values())
    assert stats["heldout_links_skipped"] == 4  # secret.html's two links and its two <nav> links
    assert stats["groups"] == len(groups)


def test_links_of_a_folder_mined_before_links_were_kept_are_refused_before_work(tmp_path, tiny_model_path):
    site = _site(tmp_path / "site")
    out = tmp_path / "out"
    base = ["mine", str(site), "--html", "--mining-model", str(tiny_model_path), "-q", "-o", str(out)]
    assert CliRunner().invoke(app, base).exit_code == 0
    chunk = next(p for p in out.rglob("passages.parquet") if p.parent != out)  # a stored chunk, not the merge
    table = pq.read_table(chunk)
    pq.write_table(table.drop(["links", "anchors"]), chunk)  # as the split stage wrote them before links
    stats_before = (out / "stats.json").read_text()
    result = CliRunner().invoke(app, [*base, "--structure", "links"])
    assert result.exit_code == 2
    assert "was mined before the split stage kept link targets" in " ".join(result.output.split())
    assert (out / "stats.json").read_text() == stats_before and not (out / "structure").exists()


@pytest.mark.parametrize("kinds", ["links", "titles,links"])
def test_a_corpus_without_html_links_says_so(tmp_path, tiny_model_path, kinds):
    corpus = tmp_path / "notes.jsonl"
    rows = [{"id": f"n{i}", "text": " ".join(f"Note {i} says plain thing {j}." for j in range(12))} for i in range(4)]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = ["mine", str(corpus), "-o", str(tmp_path / kinds), "--mining-model", str(tiny_model_path), "-q"]
    result = CliRunner().invoke(app, [*args, "--structure", kinds, "--max-tokens", "16", "--min-tokens", "4"])
    assert result.exit_code == 0, result.output
    assert "links are read from HTML pages mined with --html" in " ".join(result.output.split())


def test_mine_help_shows_the_link_kind():
    shown = " ".join(CliRunner().invoke(app, ["mine", "--help"], terminal_width=200).output.split())
    assert "Kinds: titles,headings,links" in shown and "#fragment" in shown


def test_a_base_href_root_relative_links_and_dt_entries_reach_the_passage_a_browser_opens():
    """Before: ``<base href="sub/">`` was ignored (link text paired with target.html where a browser opens
    sub/target.html); a root-relative link (``/b.html``, as wget mirrors write them) to a page of the corpus was
    counted ``outside_corpus``; a link to a ``<dt id>`` got the passage ending at the signature, the description
    being in the next."""
    from xprt_st.mining.link_targets import Page, link_pairs

    page = (
        '<html><head><base href="sub/"></head><body><main><p>See <a href="target.html">the target page</a> and '
        '<a href="#top">this</a> and <a href="https://example.com/x.html">far</a>.</p></main></body></html>'
    )
    links, _, _ = page_links(page, "See the target page and this and far.")
    assert [link.target for link in links] == ["sub/target.html", "sub/#top", "https://example.com/x.html"]
    pages = {
        "site/a/c.html": Page(0, False, "C page."),
        "site/b.html": Page(1, False, "B page text."),
        "site/a/sub/target.html": Page(2, False, "Sub target text."),
        "site/a/target.html": Page(3, False, "The wrong target."),
    }
    found = [("site/a/c.html", links[0])]
    found += [
        ("site/a/c.html", link) for link in page_links('<p><a href="/b.html">the b page</a></p>', "the b page")[0]
    ]
    pairs, dropped = link_pairs(found, pages, lambda anchor, passage: False)
    assert [(pair.anchor, pair.positive) for pair in pairs] == [
        ("the target page", "Sub target text."),
        ("the b page", "B page text."),
    ]
    assert not dropped
    # a <dt id> signature that ends its passage: the passage of its description (the <dd>) is the link's target
    api = '<dl><dt id="eval">eval(expression)</dt><dd><p>Runs the expression and returns its value.</p></dd></dl>'
    text = "Functions of the module.\n\neval(expression)\n\nRuns the expression and returns its value."
    elements = page_links(f"<html><body><main><p>Functions of the module.</p>{api}</main></body></html>", text)[2]
    spans = [(0, 41), (43, len(text))]
    assert [(a.id, a.first) for a in element_anchors(elements, text, spans)] == [("eval", 1)]


def test_a_heading_whose_window_starts_in_the_section_before_gets_its_own_text():
    """Before, at ``--max-tokens 64`` (compare-cpu.yaml's value), 2 of 12 heading positives were the previous
    section's last sentence plus the heading line, solved by copying the heading."""
    from xprt_st.mining.headings import Section
    from xprt_st.mining.structure import document_pairs

    passages = [
        "Tea intro text.\n\nThe end of the brewing section.\n\n## Storage",
        "Keep leaves dry and dark, away from smells.",
        "Other text.\n\n## Cups\nPorcelain keeps tea hot.",
    ]
    sections = [Section("Storage", 2, 0, 2), Section("Cups", 2, 2, 3)]
    pairs, _ = document_pairs(passages, [0.5, 0.4, 0.3], sections, ("headings",))
    assert [(p.anchor, p.positive) for p in pairs] == [("Storage", 1), ("Cups", 2)]
    from xprt_st.mining.headings import from_heading

    assert positive_text(from_heading(passages[2], "Cups"), "Cups") == "Porcelain keeps tea hot."
