"""finetune-compare bookkeeping without training: folds, sub-domains, means, gains and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xprt_st.evaluation.readers import BEIRData, TaskLoadError, read_beir_folder
from xprt_st.finetune import (
    NO_DOMAIN,
    OVERALL,
    ROLES,
    FinetuneResult,
    FinetuneSettings,
    FoldPlan,
    LabelledPair,
    beir_train_pairs,
    compare_gains,
    domain_counts,
    domain_means,
    gain_intervals,
    plan_folds,
    query_domains,
    read_pairs,
    restrict_queries,
    split_queries,
)


def test_split_queries_is_deterministic_disjoint_and_sized() -> None:
    ids = [f"q{i:02d}" for i in range(20)]
    train, test = split_queries(ids, test_fraction=0.25, seed=3)
    assert (train, test) == split_queries(list(reversed(ids)), test_fraction=0.25, seed=3)
    assert len(test) == 5 and len(train) == 15
    assert set(train) | set(test) == set(ids) and not set(train) & set(test)
    assert split_queries(ids, test_fraction=0.25, seed=4) != (train, test)
    small_train, small_test = split_queries(["a", "b"], test_fraction=0.01)
    assert len(small_train) == 1 and len(small_test) == 1  # never an empty fold
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_queries(ids, test_fraction=1.0)
    with pytest.raises(ValueError, match="at least 2 queries"):
        split_queries(["only"])


def test_query_domains_from_field_metadata_or_id_pattern() -> None:
    data = BEIRData(
        corpus={},
        queries={"test-environment-x-pro01a": "q", "test-health-y-con02a": "q", "other": "q"},
        qrels={},
        query_records={
            "test-environment-x-pro01a": {"domain": "green"},
            "test-health-y-con02a": {"metadata": {"domain": "med"}},
            "other": {},
        },
    )
    assert query_domains(data, domain_field="domain") == {
        "test-environment-x-pro01a": "green",
        "test-health-y-con02a": "med",
        "other": NO_DOMAIN,
    }
    assert query_domains(data, domain_pattern=r"^test-([a-z]+)-") == {
        "test-environment-x-pro01a": "environment",
        "test-health-y-con02a": "health",
        "other": NO_DOMAIN,
    }
    assert set(query_domains(data).values()) == {NO_DOMAIN}


def test_train_pairs_and_folds_from_a_beir_folder(beir_folder: Path) -> None:
    data = read_beir_folder(beir_folder)
    pairs = beir_train_pairs(data, ["q-tea", "q-weather"], {"q-tea": "drinks"})
    # only positive judgements become pairs; d-snow (score 0) does not
    assert pairs == [
        LabelledPair("What temperature for green tea?", "Tea Green tea is brewed with water below boiling.", "drinks"),
        LabelledPair(
            "Why does rain fall from clouds?", "Rain Rain falls when droplets in clouds grow too heavy.", None
        ),
    ]
    plan, fold_pairs = plan_folds(data, test_fraction=0.5, seed=0)
    assert plan.source == "split of the task's queries"
    assert len(plan.test_query_ids) == 2 and len(plan.train_query_ids) == 2
    assert {p.query for p in fold_pairs} == {data.queries[q] for q in plan.train_query_ids}
    assert plan.n_train_pairs == len(fold_pairs)
    given = [LabelledPair("When do cats hunt?", "x")]
    plan, fold_pairs = plan_folds(data, train_pairs=given)
    assert plan.test_query_ids == sorted(data.qrels) and fold_pairs == given
    test_only = restrict_queries(data, ["q-tea"])
    assert list(test_only.qrels) == ["q-tea"] and test_only.corpus is data.corpus


def test_domain_means_and_counts_by_hand() -> None:
    per_query = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 0.25}
    domains = {"a": "x", "b": "x", "c": "y"}
    assert domain_means(per_query, domains) == {OVERALL: 1.75 / 4, "x": 0.75, "y": 0.0, NO_DOMAIN: 0.25}
    assert domain_counts(["a", "b", "c", "d"], domains) == {OVERALL: 4, "x": 2, "y": 1, NO_DOMAIN: 1}
    assert domain_means(per_query, {}) == {OVERALL: 1.75 / 4}
    assert domain_counts(["a", "b"], {}) == {OVERALL: 2}


def test_compare_gains_flags_losing_sub_domains() -> None:
    scores = {
        "base": {OVERALL: 0.40, "web": 0.50, "finance": 0.30},
        "pretrained": {OVERALL: 0.45, "web": 0.60, "finance": 0.28},
        "base+ft": {OVERALL: 0.55, "web": 0.60, "finance": 0.50},
        "pretrained+ft": {OVERALL: 0.57, "web": 0.66, "finance": 0.49},
    }
    rows = compare_gains(scores, {OVERALL: 10, "web": 6, "finance": 4})
    assert [r.domain for r in rows] == [OVERALL, "finance", "web"]
    overall, finance, web = rows
    assert overall.gain_before == pytest.approx(0.05) and overall.gain_after == pytest.approx(0.02)
    assert overall.flag == "" and overall.n_queries == 10
    assert finance.gain_before == pytest.approx(-0.02) and finance.gain_after == pytest.approx(-0.01)
    assert finance.flag == "loses before and after fine-tuning"
    assert web.flag == ""
    assert compare_gains(scores, tolerance=0.015)[1].flag == "loses before fine-tuning"
    with pytest.raises(KeyError, match=r"pretrained\+ft"):
        compare_gains({k: v for k, v in scores.items() if k != "pretrained+ft"})


def test_compare_result_writes_csv_and_json(tmp_path: Path) -> None:
    values = (0.1, 0.2, 0.3, 0.25)
    scores = {role: {OVERALL: value} for role, value in zip(ROLES, values, strict=True)}
    result = FinetuneResult(
        task="toy",
        plan=FoldPlan("given pairs", [], ["q"], 3, 0),
        settings=FinetuneSettings(),
        models={"base": "b"},
        rows=compare_gains(scores, {OVERALL: 1}),
    )
    payload = json.loads(result.to_json(tmp_path / "r.json").read_text())
    assert payload["rows"][0]["gain_after"] == pytest.approx(-0.05)
    assert payload["rows"][0]["flag"] == "loses after fine-tuning"
    assert "loses after fine-tuning" in result.to_csv(tmp_path / "r.csv").read_text()


def test_read_pairs_jsonl_tsv_and_bad_lines(tmp_path: Path) -> None:
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        '{"query": "q1", "positive": "p1", "topic": "t"}\n\n{"query": "q2", "positive": "p2", "topic": "u"}\n'
    )
    assert read_pairs(jsonl, domain_field="topic") == [LabelledPair("q1", "p1", "t"), LabelledPair("q2", "p2", "u")]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text('question\tanswer\nq "1"\tp1\n')
    assert read_pairs(tsv, query_field="question", positive_field="answer") == [LabelledPair('q "1"', "p1")]
    jsonl.write_text('{"query": "q1", "positive": "p1"}\n{"query": "q2"}\n')
    with pytest.raises(TaskLoadError, match=r"pairs\.jsonl, line 2: missing field\(s\) positive"):
        read_pairs(jsonl)
    with pytest.raises(TaskLoadError, match="does not exist"):
        read_pairs(tmp_path / "nope.jsonl")


# The sub-domains of ArguAna's test queries (``--domain-pattern '^test-([a-z]+)-'``), the longest first.
ARGUANA_DOMAINS = (
    "international",
    "environment",
    "philosophy",
    "education",
    "religion",
    "politics",
    "economy",
    "culture",
    "society",
    "digital",
    "science",
    "health",
    "sport",
    "free",
    "law",
)


def _per_query(domains: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per-query nDCG@10 of the four roles: pre-training gains on even queries, loses on odd ones."""
    per_query: dict[str, dict[str, float]] = {role: {} for role in ROLES}
    for index, qid in enumerate(sorted(domains)):
        base = 0.3 + 0.01 * (index % 7)
        per_query["base"][qid] = base
        per_query["pretrained"][qid] = base + (0.1 if index % 2 == 0 else -0.05)
        per_query["base+ft"][qid] = base + 0.2
        per_query["pretrained+ft"][qid] = base + 0.2 - 0.02  # loses 0.02 on every query after fine-tuning
    return per_query


def test_gain_intervals_pair_the_queries_of_each_sub_domain() -> None:
    domains = {"q1": "law", "q2": "law", "q3": "law", "q4": "sport", "q5": "free"}
    per_query = _per_query(domains)
    intervals = gain_intervals(per_query, domains)
    assert set(intervals) == {OVERALL, "law", "sport", "free"}
    before, after = intervals[OVERALL]
    # after fine-tuning every query loses exactly 0.02: the interval is exactly [-0.02, -0.02]
    assert (after.estimate, after.low, after.high) == pytest.approx((-0.02, -0.02, -0.02))
    assert after.verdict == "loss" and after.n_items == 5
    assert before.estimate == pytest.approx((3 * 0.1 - 2 * 0.05) / 5) and before.low < 0 < before.high
    assert intervals["sport"] == (None, None)  # one query: nothing to resample
    assert gain_intervals(per_query, None).keys() == {OVERALL}


def test_loss_flags_say_when_the_interval_includes_zero() -> None:
    domains = {f"q{i}": "law" if i < 4 else "sport" for i in range(8)}
    per_query = _per_query(domains)
    scores = {role: domain_means(per_query[role], domains) for role in ROLES}
    rows = compare_gains(scores, domain_counts(sorted(domains), domains), intervals=gain_intervals(per_query, domains))
    law = next(row for row in rows if row.domain == "law")
    # before: +0.1, -0.05, +0.1, -0.05 -> mean +0.025, no clear gain; after: a clear loss of 0.02
    assert law.verdict_before == "no clear difference" and law.before_low < 0 < law.before_high
    assert law.verdict_after == "loss" and law.after_high == pytest.approx(-0.02)
    assert law.flag == "loses after fine-tuning"
    scores["pretrained"]["law"] = scores["base"]["law"] - 0.01  # a small loss whose interval includes 0
    flagged = next(r for r in compare_gains(scores, intervals=gain_intervals(per_query, domains)) if r.domain == "law")
    assert flagged.flag == "loses before (95% CI includes 0) and after fine-tuning"


def test_result_table_is_readable_at_80_columns_with_every_arguana_domain() -> None:
    from rich.console import Console

    domains = {f"test-{name}-q{i}": name for name in ARGUANA_DOMAINS for i in range(3)}
    per_query = _per_query(domains)
    scores = {role: domain_means(per_query[role], domains) for role in ROLES}
    counts = domain_counts(sorted(domains), domains)
    result = FinetuneResult(
        task="arguana",
        plan=FoldPlan("split of the task's queries", [], sorted(domains), 0, 0, 0.5),
        settings=FinetuneSettings(),
        models={"base": "all-MiniLM-L6-v2"},
        rows=compare_gains(scores, counts, intervals=gain_intervals(per_query, domains)),
    )
    console = Console(width=80, record=True)
    console.print(result.rich_table())
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "..." not in text
    for row in result.rows:  # every name, gain cell and flag appears whole
        assert row.domain in text, row.domain
        assert f"{100 * row.gain_after:+.2f} [{100 * row.after_low:+.2f}, {100 * row.after_high:+.2f}]" in text
        assert f"{row.domain}: {row.flag}" in text
    assert "pretrained+ft" in text and "before fine-tuning" in text and "after fine-tuning: loss:" in text
    assert "[paired bootstrap 95% CI]" in text  # the title's brackets are text, not rich markup


def test_a_bad_pretrain_override_is_named_as_the_pretrain_set_key(tmp_path):
    # finetune-compare's --pretrain-set KEY=VALUE: a bad value is that flag's, found before any model loads
    from xprt_st.finetune import pretrain_from_recipe
    from xprt_st.recipe import RecipeError

    with pytest.raises(RecipeError) as caught:
        pretrain_from_recipe("xprt", tmp_path / "mined", None, tmp_path / "out", overrides={"training.max_steps": 0})
    assert str(caught.value) == "--pretrain-set training.max_steps: must be -1 (use epochs) or positive, got 0"
    assert not (tmp_path / "out").exists()


def test_fine_tuning_steps_and_the_pairs_too_few_to_fine_tune() -> None:
    settings = FinetuneSettings(batch_size=4)
    assert [settings.steps(n) for n in (3, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert FinetuneSettings(batch_size=4, epochs=2).steps(4) == 2
    assert FinetuneSettings(batch_size=4, epochs=0.5).steps(16) == 2
    with pytest.raises(ValueError) as caught:
        settings.check_pairs(3, "split of the task's queries")
    message = str(caught.value)
    assert message.startswith("3 training pairs (split of the task's queries), fewer than one batch of --batch-size 4")
    assert "learning rate 0 by the warm-up" in message and "give --batch-size 2" in message
    with pytest.raises(ValueError, match=r"make 1 fine-tuning step, taken at learning rate 0 .* give --epochs 2"):
        settings.check_pairs(4, "given pairs")  # one full batch, one epoch: the warm-up's first step only
    with pytest.raises(ValueError, match="need at least 2"):
        settings.check_pairs(1, "given pairs")
    settings.check_pairs(5, "given pairs")  # two steps: the second one moves the weights
    FinetuneSettings(batch_size=4, epochs=2).check_pairs(4, "given pairs")
    FinetuneSettings(batch_size=4, warmup_ratio=0.0).check_pairs(4, "given pairs")  # no warm-up: lr is the peak


def test_finetune_compare_with_fewer_pairs_than_a_batch_is_refused_before_any_model_loads(
    beir_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import xprt_st.models
    import xprt_st.pipeline.stages
    from xprt_st.cli import app
    from xprt_st.finetune import finetune_compare

    def started(*args, **kwargs):
        raise AssertionError("a model loaded (or pre-training started) before the pairs were counted")

    monkeypatch.setattr(xprt_st.models, "load_model", started)
    monkeypatch.setattr(xprt_st.pipeline.stages, "train_into", started)
    out = tmp_path / "out"
    for source in (["--pretrained", "default"], ["--recipe", "xprt", "--mined", str(tmp_path / "mined")]):
        result = CliRunner().invoke(app, ["finetune-compare", *source, "--task", str(beir_folder), "-o", str(out)])
        message = " ".join(result.output.split())
        assert result.exit_code == 2, message
        assert "2 training pairs (split of the task's queries), fewer than one batch of --batch-size 32" in message
        assert "give --batch-size 2" in message and "Traceback" not in message
        assert not (out / "finetune_compare.json").exists()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"q{i}", "positive": f"p{i}"}) + "\n" for i in range(5)))
    result = CliRunner().invoke(
        app,
        ["finetune-compare", "--pretrained", "default", "--task", str(beir_folder), "--train-pairs", str(pairs), "-o",
         str(out)],
    )  # fmt: skip
    assert result.exit_code == 2 and f"5 training pairs (--train-pairs {pairs})" in " ".join(result.output.split())
    with pytest.raises(ValueError, match="fewer than one batch"):  # the library refuses as the command does
        finetune_compare("default", "default", read_beir_folder(beir_folder), output_dir=tmp_path / "lib")
