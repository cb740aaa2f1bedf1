"""The README and docs agree with the files their figures come from, and with the code they describe.

Every figure the README quotes is recomputed here from its source (``benchmarks/results/*.json``, the tables of
``docs/results.md`` and of the studies under ``docs/results/``), so a figure that drifts from its source, or a source
re-run without the README following, fails a test that names both.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
RESULTS = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
"""The current evidence: the at-a-glance table and one section per question a user asks."""
STUDIES = REPO / "docs" / "results"
"""The studies, one file per section of the former docs/results.md, kept as written, and their index (README.md)."""
STUDY_FILES = sorted(STUDIES.glob("*.md"))
EVERY_RESULT = "\n".join([RESULTS, *(path.read_text(encoding="utf-8") for path in STUDY_FILES)])
TRAINING = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
LOSSES = (REPO / "docs" / "losses.md").read_text(encoding="utf-8")
MINING = (REPO / "docs" / "mining.md").read_text(encoding="utf-8")
BENCH = REPO / "benchmarks" / "results"
USER_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *STUDY_FILES]


def _json(name: str) -> dict:
    return json.loads((BENCH / name).read_text(encoding="utf-8"))


def _section(text: str, heading: str) -> str:
    """The text from the heading line that starts with ``heading`` up to the next heading of its level or above."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
    assert start is not None, f"no heading starting with {heading!r}"
    level = len(heading) - len(heading.lstrip("#"))
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#") and len(lines[i]) - len(lines[i].lstrip("#")) <= level
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table of ``text`` as rows keyed by its header cells."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(block) >= 2:
            header, rows = block[0], block[2:]
            tables.append([dict(zip(header, row, strict=False)) for row in rows])
        block = []
    return tables


def _study(name: str, heading: str) -> str:
    """The section ``heading`` of the study ``docs/results/NAME``: where the table a test checks now lives."""
    return _section((STUDIES / name).read_text(encoding="utf-8"), heading)


def _table(text: str, first_column: str, containing: str | None = None) -> list[dict[str, str]]:
    """The first table whose first header cell is ``first_column`` (and which has a row naming ``containing``)."""
    for table in _tables(text):
        if table and next(iter(table[0])) == first_column:
            if containing is None or any(containing in next(iter(row.values())) for row in table):
                return table
    raise AssertionError(f"no table with first column {first_column!r}")


def _mean_table(text: str) -> list[dict[str, str]]:
    """The first table of ``text`` with a mean-over-seeds column: a section's "Average gain" table."""
    for table in _tables(text):
        if table and "mean" in table[0] and "spread (max-min)" in table[0]:
            return table
    raise AssertionError("no table with a mean and a spread column")


def _number(cell: str) -> float:
    match = re.search(r"[-+]?\d+(?:\.\d+)?", cell.replace("\u2212", "-"))
    assert match, f"no number in {cell!r}"
    return float(match.group())


def _means(table: list[dict[str, str]], key: str = "model") -> dict[str, float]:
    return {row[key]: _number(row["mean"]) for row in table}


def _readme_row(setting_start: str, exact: bool = False) -> dict[str, str]:
    """A row of the results-at-a-glance table (docs/results.md, which the README's section links to)."""
    table = _table(_section(RESULTS, "## At a glance"), "setting")
    rows = [
        row for row in table if (row["setting"] == setting_start if exact else row["setting"].startswith(setting_start))
    ]
    assert len(rows) == 1, f"the results-at-a-glance table has no single row starting with {setting_start!r}"
    return rows[0]


def _signed(values: str) -> list[float]:
    return [float(v) for v in re.findall(r"[-+]\d+\.\d+", values)]


# --- The README's shape -------------------------------------------------------------------------------


def test_readme_is_short_and_has_the_sections_users_look_for() -> None:
    assert len(README.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    for wanted in ("Install", "On your own documents", "Which recipe", "Results at a glance", "Citation", "License"):
        assert wanted in headings, f"README has no '## {wanted}' section"
    citation = _section(README, "## Citation").replace("{", "").replace("}", "")
    assert citation.count("@") >= 3 and "```bibtex" in citation and "Xiao, Shitao" in citation
    assert "RetroMAE: Pre-Training Retrieval-oriented Language Models Via Masked Auto-Encoder" in citation
    assert "Cross-Passage Retrieval Pretraining" in citation


def test_readme_first_screen_says_what_it_does_then_install_and_the_quickstart() -> None:
    lines = README.splitlines()
    assert any(line.startswith("pip install") and "xprt-st quickstart" in line for line in lines[:12])
    assert lines[0] == "# xprt-st" and "sentence-transformers" in " ".join(lines[1:6])
    results = " ".join(README.split("## Install")[0].split("\n\n")[2].split())  # between what it does and Install
    assert results.count(". ") == 0 and results.endswith("(docs/results.md).")  # one sentence and the link


def test_readme_has_no_line_over_120_characters() -> None:
    long = [f"{number}: {len(line)}" for number, line in enumerate(README.splitlines(), 1) if len(line) > 120]
    assert not long, f"README lines over 120 characters (line: length): {long}"


def test_the_two_setup_commands_stay_two_and_ci_runs_the_readme_test_command() -> None:
    block = re.search(r"## Install\n\n```bash\n(.*?)```", README, flags=re.S)
    assert block, "README's Install section must open with its bash block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("xprt-st quickstart") and "pip install" in commands[0]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines(), f".ci/run must run the README's test command {commands[1]!r}"


def test_minimum_versions_are_pyprojects_lower_bounds() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    bounds = dict(re.findall(r'"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9.]+)"', pyproject))
    quoted = re.findall(r"([A-Za-z][A-Za-z0-9_-]*) >= ([0-9][0-9.]*[0-9])", _section(README, "## Install"))
    assert len(quoted) >= 5
    for name, version in quoted:
        if name == "Python":
            assert f'requires-python = ">={version}"' in pyproject
        else:
            assert bounds.get(name) == version, f"README says {name} >= {version}, pyproject.toml {bounds.get(name)}"


def test_user_docs_name_no_issue_numbers_and_no_commit_hashes() -> None:
    for path in USER_DOCS:
        text = path.read_text(encoding="utf-8")
        issues = re.findall(r"\bissues? #?\d+", text, flags=re.I)
        assert not issues, f"{path.name} names {issues[:3]}"
        if path.name == "results.md" or path.parent == STUDIES:  # the runs keep the commit they ran on (provenance)
            continue
        hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", h) and re.search("[a-f]", h)]
        assert not hashes, f"{path.name} names commits {hashes[:3]}"


def test_readme_uses_the_cli_vocabulary() -> None:
    commands = "\n".join(re.findall(r"```bash\n(.*?)```", README, flags=re.S)) + "\n".join(
        re.findall(r"`(xprt-st [^`]+)`", README)
    )
    for old in ("--data ", "--output-dir", "--base ", "--no-progress", "--threshold-quantile 0.4"):
        assert old not in commands, f"README still uses {old.strip()!r}"
    assert "--mined mined/" in commands and " -o " in commands


def test_readme_links_point_at_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


# --- docs/results.md answers the questions; the studies under docs/results/ hold the runs --------------------


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(path: Path) -> list[tuple[Path, str]]:
    """Every relative link of a Markdown file: the file it names (resolved from the file's folder) and its anchor."""
    targets = re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))
    return [
        ((path.parent / target.split("#")[0]).resolve(), target.partition("#")[2])
        for target in targets
        if not target.startswith(("http://", "https://", "#"))
    ]


def test_results_is_short_and_links_every_study_which_links_back() -> None:
    assert len(RESULTS.splitlines()) <= 300, "docs/results.md is the current evidence: at most 300 lines"
    headings = re.findall(r"^## (.+)$", RESULTS, flags=re.M)
    assert len(headings) >= 8 and "At a glance" in headings
    index = STUDIES / "README.md"
    linked = {target for source in (REPO / "docs" / "results.md", index) for target, _ in _links(source)}
    unlinked = [path.name for path in STUDY_FILES if path.resolve() not in linked]
    assert not unlinked, f"docs/results/ files linked from neither docs/results.md nor its README.md: {unlinked}"
    for path in [REPO / "docs" / "results.md", *STUDY_FILES]:
        for target, anchor in _links(path):
            assert target.exists(), f"{path.relative_to(REPO)} links to {target}, which does not exist"
            if anchor and target.suffix == ".md":
                slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), flags=re.M)}
                assert anchor in slugs, f"{path.relative_to(REPO)} links to {target.name}#{anchor}: no such heading"
    for path in STUDY_FILES:
        first, second = path.read_text(encoding="utf-8").splitlines()[:2]
        assert "](../results.md)" in first, f"{path.name}: its first line links back to docs/results.md"
        assert path == index or second.startswith("#"), f"{path.name}: the moved section's heading follows that line"


def test_the_current_evidence_quotes_its_records() -> None:
    """The figures docs/results.md quotes from benchmarks/results/ (beside the studies' tables the tests above read)."""

    said = " ".join(RESULTS.split())  # line breaks read as spaces

    def interval(figure: dict) -> str:
        return f"{figure['difference']:+.2f} [{figure['low']:+.2f}, {figure['high']:+.2f}]"

    for corpus, recipe in (
        ("arguana", "hybrid-teacher-hard"),
        ("nfcorpus", "hybrid-teacher-hard"),
        ("python-docs", "inverse-cloze-hard"),
    ):
        models = _json(f"lexical-comparison/{corpus}.json")["models"]
        for seed in (42, 43):
            assert interval(models[f"seed-{seed}/{recipe}"]["vs_start"]) in said, (corpus, recipe, seed)
    arguana = _json("lexical-comparison/arguana.json")
    for seed in (42, 43):
        assert interval(arguana["models"][f"seed-{seed}/hybrid-teacher-hard"]["vs_change-only-positive-hard"]) in said
    assert interval(arguana["references_vs_start"]["hybrid"]) in said
    python_docs = _json("lexical-comparison/python-docs.json")["references_vs_start"]
    assert all(interval(python_docs[name]) in said for name in ("bm25", "hybrid"))
    runs = {run["variant"]: run for run in _json("bench-step-pace-cpu.json")["runs"]}
    assert f"{runs['neither']['step_s_median']:.2f} s a step" in said
    assert f"**{runs['both']['step_s_median']:.2f} s**" in said
    assert f"{runs['both']['train_texts_per_s']:.1f} texts/s" in said
    quickstart = _json("quickstart-step-pace-cpu.json")
    assert f"{round(quickstart['wall_s_time'])} s wall, peak RSS {quickstart['peak_rss_kb']:,} KB" in said
    tau = _json("label-free-evidence-minilm-3seeds.json")["kendall_overall"]
    claim = f"{tau['tau']:+.2f} [{tau['ci_low']:+.2f}, {tau['ci_high']:+.2f}] (continued from MiniLM, {tau['models']}"
    assert claim in " ".join(_section(RESULTS, "## Can I tell without labels?").split())


def _module_source(module: str) -> Path:
    base = REPO / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _definition(module: str, name: str) -> ast.FunctionDef:
    """Where ``from module import name`` leads, followed through re-exports, read from the source.

    Read rather than imported: importing the stages pulls in torch, transformers and mteb, which takes minutes
    on a loaded CI machine, and the source answers the question (does the call match the signature?) exactly.
    """
    path = _module_source(module)
    assert path.is_file(), f"no module {module}"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                source = ".".join(package[: len(package) - node.level + 1] + ([source] if source else []))
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return _definition(source, original)
    raise AssertionError(f"{module} defines or imports no {name}")


def _signature(function: ast.FunctionDef) -> inspect.Signature:
    args, kind = function.args, inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parameters = [
        kind(a.arg, kind.POSITIONAL_ONLY if i < len(args.posonlyargs) else kind.POSITIONAL_OR_KEYWORD)
        if default is None
        else kind(a.arg, kind.POSITIONAL_ONLY if i < len(args.posonlyargs) else kind.POSITIONAL_OR_KEYWORD, default=0)
        for i, (a, default) in enumerate(zip(positional, defaults, strict=True))
    ]
    if args.vararg:
        parameters.append(kind(args.vararg.arg, kind.VAR_POSITIONAL))
    for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        parameters.append(kind(a.arg, kind.KEYWORD_ONLY, **({} if default is None else {"default": 0})))
    if args.kwarg:
        parameters.append(kind(args.kwarg.arg, kind.VAR_KEYWORD))
    return inspect.Signature(parameters)


def test_readme_python_example_calls_match_the_functions() -> None:
    block = re.search(r"## From Python\n.*?```python\n(.*?)```", README, flags=re.S)
    assert block
    tree = ast.parse(block.group(1))
    names = {
        alias.asname or alias.name: _definition(node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    called = {call.func.id for call in calls if call.func.id in names}
    assert called == set(names), f"imported but not called: {set(names) - called}"
    for call in calls:
        if call.func.id in names:
            _signature(names[call.func.id]).bind(*call.args, **{kw.arg: kw.value for kw in call.keywords if kw.arg})


# --- The README's figures against their sources ---------------------------------------------------------


def _recipe_costs() -> dict[str, float]:
    """The step costs of the README's recipe table, checked equal to those of the full table in docs/training.md."""
    table = _table(_section(README, "## Which recipe"), "recipe")
    costs = {row["recipe"].strip("`"): _number(row["step cost"]) for row in table}
    full = _table(_section(TRAINING, "## Which recipe (every column)"), "recipe")
    assert costs == {row["recipe"].strip("`"): _number(row["step cost"]) for row in full}
    return costs


def test_recipe_table_lists_every_shipped_recipe() -> None:
    shipped = {path.stem for path in (REPO / "xprt_st" / "recipes").glob("*.yaml")}
    assert set(_recipe_costs()) == shipped


def test_recipe_step_costs_are_the_measured_ones() -> None:
    bench = _json("bench-losses-cpu.json")["results"]
    measured = {  # each recipe's own loss (benchmarks/bench_losses.py's configurations)
        "change-only-positive": bench["cross_passage"]["cpu_ratio"],
        "change-only-positive-hard": bench["cross_passage_hard"]["cpu_ratio"],
        "xprt": bench["xprt"]["cpu_ratio"],
        "xprt-hard": bench["xprt_hard"]["cpu_ratio"],
        "retromae": bench["retromae"]["cpu_ratio"],
    }
    costs = _recipe_costs()
    for recipe, ratio in measured.items():
        assert costs[recipe] == round(ratio, 1), f"{recipe}: README {costs[recipe]}x, benchmark {ratio:.2f}x"
    # the same losses: L_xp on other pairs or masked passes, xprt's objective on other positives
    assert costs["change-only-positive-masked"] == costs["random-span-contrastive"] == costs["change-only-positive"]
    assert costs["random-positive"] == costs["xprt"]
    # the structure recipes are change-only-positive-hard's loss on groups of the same shape (4 texts)
    assert costs["structure-positive"] == costs["structure-mixed"] == costs["change-only-positive-hard"]
    assert costs["lexical-positive-hard"] == costs["change-only-positive-hard"]  # the same loss, other positives
    assert costs["inverse-cloze-hard"] == costs["change-only-positive-hard"]  # the same loss, shorter anchors
    # the hybrid teacher: measured at the recipes' training shape (16 groups x 64 tokens), its own run
    hybrid = _json("bench-losses-hybrid-cpu.json")["results"]["hybrid_teacher_hard"]["cpu_ratio"]
    assert costs["hybrid-teacher-hard"] == round(hybrid, 1)
    # its lexical candidates: their cost against hybrid-teacher-hard's in one run of both, on the measured 1.3x
    both = _json("bench-losses-hybrid-lexical-cpu.json")["results"]
    lexical = both["hybrid_teacher_lexical"]["cpu_ratio"] / both["hybrid_teacher_hard"]["cpu_ratio"]
    assert costs["hybrid-teacher-lexical"] == costs["hybrid-teacher-cloze"] == round(hybrid * lexical, 1)
    # no step benchmark: training time relative to change-only-positive in the from-BERT run (seeds 42, 43)
    run_times = _table(_study("run-times.md", "## Run times"), "stage")
    times = {row["stage"]: float(row["wall seconds"]) for row in run_times if row["stage"].startswith("seed")}

    def mean(recipe: str) -> float:
        return (times[f"seed 42 train {recipe}"] + times[f"seed 43 train {recipe}"]) / 2

    for recipe in ("tsdae", "self-only"):
        assert costs[recipe] == round(mean(recipe) / mean("change-only-positive"), 1), recipe


def test_the_decoder_cost_is_one_figure_everywhere() -> None:
    figure = f"{_json('bench-losses-cpu.json')['results']['xprt']['cpu_ratio']:.1f}x"
    assert figure == "7.8x"
    notebook = (REPO / "notebooks" / "adoption.ipynb").read_text(encoding="utf-8")
    for name, text in (("notebook", notebook), ("results.md", RESULTS), ("losses.md", LOSSES)):
        assert figure in text, f"{name} does not quote the step cost {figure}"
    for stale in ("about 3x", "threefold", "about 10x", "about 8x", "6.7x a change-only", "6.7x an MNRL"):
        for name, text in (("notebook", notebook), ("docs/results", EVERY_RESULT), ("README", README)):
            assert stale not in text, f"{name} still says {stale!r}"


def _readme_summary() -> str:
    """The README's results summary (its "Results at a glance" prose), line breaks read as spaces."""
    return " ".join(_section(README, "## Results at a glance").split())


def test_headline_figures() -> None:
    headline = _readme_summary()
    head_to_head = _table(_study("04-positive-isolated.md", "## 4. "), "versus")
    positive = _means(head_to_head, key="versus")["change-only-random-positive"]
    assert f"{positive:.2f} points" in headline
    continued = [
        *_means(_mean_table(_study("01-toy-scale.md", "## 1. "))).values(),
        *_means(_mean_table(_study("02-longer-probe.md", "## 2. "))).values(),
    ]
    assert "about half a point" in headline and max(abs(v) for v in continued) <= 0.5


def test_results_at_a_glance() -> None:
    continued = {
        **{f"1:{k}": v for k, v in _means(_mean_table(_study("01-toy-scale.md", "## 1. "))).items()},
        **{f"2:{k}": v for k, v in _means(_mean_table(_study("02-longer-probe.md", "## 2. "))).items()},
    }
    assert _signed(_readme_row("continued")["result"]) == [min(continued.values()), max(continued.values())]

    rerun = _means(_mean_table(_study("03b-from-bert-shipped.md", "### 3b, re-run")))
    contrastive = [rerun[r] for r in ("xprt", "change-only-positive", "random-positive", "random-span-contrastive")]
    reconstruction = [rerun[r] for r in ("retromae", "tsdae", "self-only")]
    assert _signed(_readme_row("from an MLM-only")["result"]) == [
        min(contrastive),
        max(contrastive),
        min(reconstruction),
        max(reconstruction),
    ]

    positive = _table(_study("04-positive-isolated.md", "## 4. "), "versus")[0]
    assert (
        positive["versus"] == "change-only-random-positive" and positive["verdict for change-only-positive"] == "gain"
    )
    row = _readme_row("from BERT, 120 steps of L_xp")
    assert _signed(row["result"]) == [_number(positive["mean"])] and "gain in both seeds" in row["result"]

    fill_in = _table(_study("05-fill-in.md", "### 5, re-run"), "versus")[0]
    assert fill_in["versus"] == "change-only-positive-masked"
    row = _readme_row("from BERT, 120 steps", exact=True)
    assert _signed(row["result"]) == [_number(fill_in["mean"])] and fill_in["verdict for xprt"] in row["result"]

    unsupervised = _means(_mean_table(_study("07-unsupervised-start.md", "## 7. ")))
    assert _signed(_readme_row("from an unsupervised")["result"]) == [
        min(unsupervised.values()),
        max(unsupervised.values()),
    ]

    switch = {
        row["branch minus branch"]: row
        for row in _table(_study("09-switch-experiment.md", "## 9. "), "branch minus branch")
    }
    mined = switch["(b) mined positive - (a) random spans"]
    row = _readme_row("from BERT, switching")
    assert _signed(row["result"]) == [_number(mined["mean"])] and mined["verdict"] == "loss"


def _label_free_settings() -> dict[str, dict]:
    settings = {"continued (MiniLM)": _json("label-free-evidence-minilm-3seeds.json")["kendall_overall"]}
    for name, experiment in _json("label-free-settings-cpu.json")["experiments"].items():
        settings[name] = experiment["kendall"]
    return settings


def test_label_free_evidence_figures() -> None:
    settings = _label_free_settings()
    models = sum(s["models"] for s in settings.values())
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    claim = f"{models} models in {words[len(settings)]} settings"
    assert claim in _readme_row("label-free")["measured"], claim  # the at-a-glance table, moved to docs/results.md
    assert claim in RESULTS
    # the settings whose candidates differ in where their positives come from (all but the section 5 re-run)
    differ = [s["tau"] for name, s in settings.items() if name != "compare-from-bert-120-v2"]
    assert _signed(_readme_row("label-free")["result"]) == [round(min(differ), 2), round(max(differ), 2)]
    section10 = _study("10-label-free-check.md", "## 10. ")
    assert "Two settings were measured" not in section10
    assert f"{words[len(settings)].capitalize()} settings were measured" in section10


# --- Figures that appear in two docs files ---------------------------------------------------------------


def test_fill_in_terms_are_stated_one_way() -> None:
    fill_in = _table(_study("05-fill-in.md", "### 5, re-run"), "versus")[0]
    figure = f"+{_number(fill_in['mean']):.2f}"
    compared = _study("compared-with-the-paper.md", "## Compared with the paper")
    assert "does not show" not in compared and figure in compared
    assert figure in RESULTS  # the current evidence
    assert figure in _study("00-bottom-line.md", "# Results")  # the studies' own summary, as written
    assert "do not measurably help" not in EVERY_RESULT


def test_ray_two_worker_figures_are_the_recorded_ones() -> None:
    quiet = _json("bench-mining-ray-cpu.json")["workers"]["2"]["ratio"]
    later = _json("bench-mining-minilm-after-ray-merge-tasks-cpu.json")["workers"]["2"]["ratio"]
    ray = _section(MINING, "#### On Ray")
    two = next(row for row in _table(ray, "workers") if row["workers"] == "2")
    assert _number(two["ratio"]) == quiet
    assert f"**{later}**" in ray
    assert "0.995" not in README and "0.547" not in README  # the README links there instead of quoting either


def test_evaluation_examples_label_minilm_as_minilm() -> None:
    evaluation = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")
    for line in re.findall(r"xprt-st evaluate default[^\n]*\n?[^\n]*", evaluation):
        labels = re.findall(r"--label (\S+)", line)
        assert not labels or labels[0] != "e5", line


# --- docs/layout.md stays true ----------------------------------------------------------------------------


def _layout_paths() -> list[str]:
    block = re.search(r"```\n(xprt_st/.*?)```", (REPO / "docs" / "layout.md").read_text(encoding="utf-8"), flags=re.S)
    assert block
    paths, stack = [], []
    for line in block.group(1).splitlines():
        indent = (len(line) - len(line.lstrip(" "))) // 2
        head = line.strip().split("  ")[0]
        entries = [entry.strip() for entry in head.split(",")]
        if not entries[0] or not all(e.endswith((".py", "/", ".md")) or e == "recipes/" for e in entries if e):
            continue  # a continuation line of a description
        if not all(re.fullmatch(r"[A-Za-z0-9_.]+/?", e) for e in entries if e):
            continue
        del stack[indent:]
        for entry in entries:
            if entry:
                paths.append("".join(stack) + entry)
        if entries[-1].endswith("/"):
            stack.append(entries[-1])
    return paths


def test_layout_names_only_paths_that_exist_and_every_package() -> None:
    paths = _layout_paths()
    assert "xprt_st/mining/layout/folder.py" in paths
    for path in paths:
        assert (REPO / path).exists(), f"docs/layout.md lists {path}, which does not exist"
    packages = {
        str(init.parent.relative_to(REPO)) + "/"
        for init in (REPO / "xprt_st").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = packages - set(paths)
    assert not missing, f"docs/layout.md does not list {sorted(missing)}"


def test_layout_lists_every_module_of_the_package() -> None:
    """Every ``.py`` file of ``xprt_st/`` has its line (a package's ``__init__.py`` is its folder's line)."""
    paths = set(_layout_paths())
    modules = [
        str(path.relative_to(REPO))
        for path in (REPO / "xprt_st").rglob("*.py")
        if "__pycache__" not in path.parts and path.name != "__init__.py"
    ]
    missing = sorted(path for path in modules if path not in paths)
    assert not missing, f"docs/layout.md does not list {missing}"


@pytest.mark.parametrize("path", ["xprt_st/mining/layout.py"])
def test_layout_does_not_list_removed_modules(path: str) -> None:
    assert not (REPO / path).exists()
    assert path not in _layout_paths()


def test_encode_backend_figures_are_the_recorded_ones() -> None:
    summary = _json("bench-encode-backend-cpu.json")["summary"]
    table = _table(_section(MINING, "### Measured: speed and agreement"), "backend")
    names = {"torch fp32": "torch", "onnx": "onnx", "onnx int8": "onnx-int8", "openvino": "openvino"}
    assert [row["backend"] for row in table] == list(names)
    for row in table:
        run = summary[names[row["backend"]]]
        assert row["texts/s (median)"] == f"{run['texts_per_second_median']:.1f}"
        assert row["wall ratio to torch"] == f"{run['ratio_to_torch']:.2f}"
        assert row["CPU-time ratio to torch"] == f"{run['cpu_ratio_to_torch']:.2f}"
        assert row["nDCG@10"] == f"{run['ndcg_at_10']:.6f}"
        difference = run["ndcg_at_10_difference"]
        assert row["nDCG@10 - torch"] == (f"{difference:+.6f}" if difference else "0")
        cosine = run["max_one_minus_cosine"]
        assert row["max 1 - cos vs torch"] == (f"{cosine:.1e}" if cosine > 1e-15 else "0")
    # the default changes only for a backend at least 1.5x torch whose score agrees to 1e-4; none is
    offered = [n for n in ("onnx", "openvino") if summary[n]["ratio_to_torch"] >= 1.5]
    assert not [n for n in offered if abs(summary[n]["ndcg_at_10_difference"]) <= 1e-4]
    assert "**Decision: torch stays the default.**" in " ".join(MINING.split())
    from xprt_st.cli.mine import DEFAULTS

    assert DEFAULTS.encode_backend == "torch"
    cpu = [f"{summary[n]['cpu_ratio_to_torch']:.2f}x" for n in ("onnx", "openvino")]
    said = f"{cpu[0]} and {cpu[1]} torch's throughput, the same scores, so torch stays the default"
    assert said in " ".join(README.split())


# --- The quickstart's stage table (benchmarks/bench_quickstart_corpus.py) --------------------------------------

QUICKSTART_BENCH = "bench-quickstart-corpus-cpu.json"
SUMMARY_ROWS = {  # docs/mining.md's summary rows -> the ratios' keys
    "not training": "not_training",
    "not training, without the labelled evaluation": "not_training_nor_labelled_evaluation",
    "training steps": "training",
}


def _quickstart_turns() -> tuple[dict, dict, dict]:
    result = _json(QUICKSTART_BENCH)
    first = [next(t for t in result["turns"] if t["label"].startswith(label)) for label in ("reference", "code")]
    return result, first[0], first[1]


def test_the_quickstart_stage_table_is_the_benchmarks() -> None:
    result, before, now = _quickstart_turns()
    section = _section(MINING, "### The quickstart, stage by stage")
    rows = {row["stage"].strip("*`"): row for row in _table(section, "stage")}
    stages = {name: (next(r for r in before["stages"] if r["stage"] == name), r) for name, r in
              ((r["stage"], r) for r in now["stages"])}  # fmt: skip
    for name, (old, new) in stages.items():
        row = rows[name]
        assert _number(row["before: CPU s"]) == round(old["cpu_s"], 1), name
        assert _number(row["now: CPU s"]) == round(new["cpu_s"], 1), name
        assert _number(row["before: wall s"]) == round(old["wall_s"], 1), name
        assert _number(row["now: wall s"]) == round(new["wall_s"], 1), name
    for label, key in SUMMARY_ROWS.items():
        row = rows[label]
        for clock in ("cpu", "wall"):
            figures = result["ratios"][f"{key}_{clock}_s"]
            assert _number(row[f"before: {clock if clock == 'wall' else 'CPU'} s"]) == round(figures["reference"], 1)
            assert _number(row[f"now: {clock if clock == 'wall' else 'CPU'} s"]) == round(figures["code"], 1)
        assert _number(row["now / before, CPU"]) == round(result["ratios"][f"{key}_cpu_s"]["ratio"], 2), label
    whole = rows["whole process"]
    assert _number(whole["before: CPU s"]) == round(before["cpu_s"], 1)
    assert _number(whole["now: CPU s"]) == round(now["cpu_s"], 1)
    assert _number(whole["now / before, CPU"]) == round(result["ratios"]["whole_process_cpu_s"]["ratio"], 2)
    assert result["agreement"]["all_within_1e-6"] == ("the same groups, weights and scores" in section)


def test_the_readme_quickstart_stage_figures_are_the_benchmarks() -> None:
    result, before, now = _quickstart_turns()
    own = README.split("## On your own documents")[1].split("\n## ")[0]  # its bash block's "# 1." lines are no headings
    table = next(t for t in _tables(own) if "quickstart stages" in next(iter(t[0])))
    header = next(iter(table[0]))
    assert f"{result['documents']:,} NFCorpus abstracts, {result['max_steps']} steps, one thread, CPU s" in header
    rows = {row[header]: row for row in table}
    old, new = rows["every stage encoding its texts"], rows["each text once per model"]
    ratios = result["ratios"]
    for column, key in (("not training", "not_training_cpu_s"), ("training steps", "training_cpu_s")):
        assert _number(old[column]) == round(ratios[key]["reference"])
        assert _number(new[column]) == round(ratios[key]["code"])
    assert _number(old["whole run"]) == round(before["cpu_s"])
    assert _number(new["whole run"]) == round(now["cpu_s"])
    assert f"{ratios['not_training_cpu_s']['ratio']:.2f}x" in new["not training"]
    assert f"{ratios['whole_process_cpu_s']['ratio']:.2f}x" in new["whole run"]


def test_structure_figures_are_section_14s() -> None:
    section = _study("14-structure-positives.md", "## 14. ")

    def means(subsection: str) -> dict[str, float]:
        table = _table(_section(section, f"### {subsection}"), "recipe")
        return {row["recipe"]: _number(row["mean"]) for row in table if row["recipe"] != "start"}

    structure = [
        value
        for subsection in ("NFCorpus", "The Python documentation")
        for recipe, value in means(subsection).items()
        if recipe.startswith("structure")
    ]
    small_bert = means("From the small BERT")
    first = "gain over the start on held-out titles (nDCG@10 x100) [95% CI]"
    titles = [
        value
        for row in _table(_section(section, "### Did the structure pairs"), first)
        if not row[first].startswith("start")
        for value in _signed(" ".join(list(row.values())[1:]))[::3]  # each cell's gain, not its interval
    ]
    row = _readme_row("in-domain with titles")
    expected = [min(structure), max(structure), round(min(titles), 1), round(max(titles), 1)]
    expected += [min(small_bert.values()), max(small_bert.values())]
    assert _signed(row["result"]) == expected
    headline = _readme_summary()
    assert f"held-out titles {expected[2]:+.1f} to {expected[3]:+.1f}" in headline
    sp, hard = small_bert["structure-positive"], small_bert["change-only-positive-hard"]
    assert f"({sp:+.2f} against {hard:+.2f})" in headline


def test_precision_figures_are_the_benchmarks() -> None:
    section = _study("16-precision.md", "## 16. ")
    mining = json.loads((BENCH / "precision-mining-nfcorpus-cpu.json").read_text(encoding="utf-8"))
    agreement = mining["agreement"]
    rows = {row[""]: row for row in _table(section, "")}
    assert _number(rows["anchors"]["fp32"].replace(",", "")) == mining["groups"]["fp32"] == agreement["anchors_fp32"]
    assert _number(rows["anchors"]["bf16"].replace(",", "")) == agreement["anchors_bf16"]
    assert f"{100 * agreement['anchors_same']:.2f}%" in rows["anchors"]["agreement"]
    same = agreement["same_given_the_anchor"]
    assert f"{100 * same['positive']:.2f}%" in rows["positive, given the same anchor"]["agreement"]
    for column in ("negative_1", "negative_2"):
        assert f"{100 * same[column]:.2f}%" in rows["hard negative 1 / 2"]["agreement"]
    seconds = rows["wall seconds (mining and hard negatives)"]
    assert _number(seconds["fp32"].replace(",", "")) == mining["seconds"]["fp32"]
    assert f"{mining['speedup']:.2f}x" in seconds["agreement"]
    assert min(agreement["anchors_same"], same["positive"]) >= 0.99  # the bar the precision's default rests on

    run = json.loads((BENCH / "bench-quickstart-corpus-precision-cpu.json").read_text(encoding="utf-8"))
    assert run["machine"]["amx"] or run["machine"]["avx512_bf16"]
    stages = {row["stage"].strip("*"): row for row in _table(section, "stage")}
    ratios = run["ratios"]
    for label, key in (("not training", "not_training_cpu_s"), ("whole process", "whole_process_cpu_s")):
        assert _number(stages[label]["before: CPU s"]) == round(ratios[key]["reference"], 1)
        assert _number(stages[label]["now: CPU s"]) == round(ratios[key]["code"], 1)
        assert f"{ratios[key]['ratio']:.2f}" in stages[label]["now / before"]
    verdicts = {turn: record["tasks"]["nfcorpus-beir"][1] for turn, record in run["verdicts"].items()}
    assert len(set(verdicts.values())) == 1 and "no clear difference" in section


def test_precision_evaluation_figures_are_the_benchmarks() -> None:
    section = _study("16-precision.md", "## 16. ")
    run = json.loads((BENCH / "precision-evaluation-cpu.json").read_text(encoding="utf-8"))
    rows = {row["task"]: row for row in _table(section, "task")}
    for task, fp32 in run["scores"]["fp32"].items():
        bf16 = run["scores"]["bf16"][task]
        assert _number(rows[task]["fp32"]) == round(100 * fp32, 2), task
        assert _number(rows[task]["bf16"]) == round(100 * bf16, 2), task
        assert abs(bf16 - fp32) < 0.002, task  # the bar under which evaluation's default is auto
    arguana = json.loads((BENCH / "precision-evaluation-arguana-bf16" / "scores.json").read_text(encoding="utf-8"))
    assert arguana["precision"] == "bf16"
    assert _number(rows["arguana"]["bf16"]) == round(100 * arguana["scores"][0]["score"], 2)


def test_the_lexical_comparison_tables_are_the_records() -> None:
    """docs/results/17-corpus-words.md's rows are what benchmarks/lexical_comparison.py makes of its own records."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lexical_comparison", REPO / "benchmarks" / "lexical_comparison.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    section = _study("17-corpus-words.md", "## 17. ")
    for corpus in ("nfcorpus", "python-docs", "arguana"):
        for row in module.table(_json(f"lexical-comparison/{corpus}.json")):
            assert row in section, row


def test_step_pace_figures_are_the_recorded_ones() -> None:
    runs = {run["variant"]: run for run in _json("bench-step-pace-cpu.json")["runs"]}
    table = _table(_study("19-step-pace.md", "## 19. The step at the hardware's pace"), "variant")
    assert len(table) == len(runs) == 4
    for row in table:
        run = runs[row["variant"].split(" (")[0].removesuffix(" only")]
        parts = run["parts_s_per_step"]
        assert row["step (s)"] == f"{run['step_s_median']:.2f}"
        assert row["texts/s"] == f"{run['train_texts_per_s']:.1f}"
        assert row["student forward"] == f"{parts['student forward']:.2f}"
        assert row["frozen pass"] == f"{parts['frozen pass']:.2f}"
        assert row["backward"] == f"{parts['backward']:.2f}"
        assert row["step/forward"] == f"{run['step_over_forward']:.2f}"
