"""Mining statistics: one way to add up counts, the ``stats.json`` figures, the skip diagnosis, the summary table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from xprt_st.mining.config import MiningConfig
from xprt_st.mining.layout import INPUTS_KEY, describe_inputs
from xprt_st.mining.records import SKIP_FIXES


def sum_counts(counts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts of shards, units, chunks or merge parts added up, the one way every engine does it.

    Numbers are summed, and so are dictionaries of numbers (``skipped`` and ``repairs`` by reason,
    ``text_fields``); booleans and other values are left out.
    """
    total: Counter[str] = Counter()
    by_key: dict[str, Counter[str]] = {}
    for part in counts:
        for key, value in part.items():
            if isinstance(value, dict):
                by_key.setdefault(key, Counter()).update(value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                total[key] += value
    return {**total, **{key: dict(value) for key, value in by_key.items()}}


def _share(merged: dict[str, Any], part: str, whole: str) -> float | None:
    """``merged[part] / merged[whole]`` rounded to 4 places; None when nothing was counted (a random positive,
    random spans, or chunks scored before the nearest passage was kept)."""
    total = int(merged.get(whole, 0))
    return round(int(merged.get(part, 0)) / total, 4) if total else None


def build_stats(
    *,
    counts: dict[str, Any],
    merged: dict[str, Any],
    config: MiningConfig,
    stored: dict[str, Any],
    threshold: float | None,
    quantiles: dict[str, float],
) -> dict[str, Any]:
    """``stats.json``: ``counts`` from the split and scoring stages, ``merged`` from the merge parts."""
    documents = int(counts.get("documents", 0))
    groups = int(merged.get("groups", 0))
    with_groups = int(merged.get("documents_with_groups", 0))
    passages = int(merged.get("passages", 0))
    # the coverages are of the training documents: held-out ones can never have a training group
    trained_on = documents - int(merged.get("heldout_documents", 0))
    mined = config.pairs in ("mined", "inverse-cloze")  # query-shaped groups keep the mined anchors
    merge_settings = {name: getattr(config, name) for name in MiningConfig.MERGE_FIELDS}
    stats = {
        "documents": documents,
        "documents_with_passages": int(counts.get("documents_with_passages", 0)),
        "documents_with_groups": with_groups,
        "document_coverage": round(with_groups / trained_on, 4) if trained_on else 0.0,
        "groups": groups,
        "groups_per_document": round(groups / with_groups, 3) if with_groups else 0.0,
        "groups_per_input_document": round(groups / trained_on, 3) if trained_on else 0.0,
        "passages": passages,
        "anchors": int(merged.get("anchors", 0)) if mined else None,
        "passage_coverage": round(int(merged.get("covered", 0)) / passages, 4) if passages and mined else None,
        "groups_with_padded_related": int(merged.get("padded_groups", 0)),
        # issue 52's diagnostic: how often the positive is not the passage the start's own cosine ranks first
        "positives_not_nearest": _share(merged, "positives_not_nearest", "positives_checked"),
        "threshold": round(threshold, 6) if mined and threshold is not None else None,
        "threshold_source": threshold_source(config, threshold),
        "centrality_quantiles": quantiles,
        "duplicate_passages_removed": int(counts.get("duplicate_passages_removed", 0)),
        "duplicate_documents": int(counts.get("duplicate_documents", 0)),
        "duplicate_ids": int(counts.get("duplicate_ids", 0)),
        "documents_truncated": int(counts.get("documents_truncated", 0)),
        "characters_over_cap": int(counts.get("characters_over_cap", 0)),
        "skipped": counts.get("skipped", {}),
        "repairs": counts.get("repairs", {}),
        "text_fields": counts.get("text_fields", {}),
        "encode_seconds": round(float(counts.get("encode_seconds", 0.0)), 3),
        "settings": {**{k: v for k, v in stored.items() if k != INPUTS_KEY}, **merge_settings},
    }
    if config.pairs == "inverse-cloze":  # what the query-shaped groups are (xprt_st.mining.inverse_cloze)
        stats["inverse_cloze"] = {
            "queries_of_words": _share(merged, "cloze_word_span", "groups"),  # no query-shaped sentence to cut
            "positives_own_passage": _share(merged, "cloze_own_passage", "groups"),
            "sentence_removed": _share(merged, "cloze_removed", "groups"),
            "mean_query_words": round(int(merged.get("cloze_query_words", 0)) / groups, 2) if groups else 0.0,
        }
    if config.holdout > 0:
        stats["holdout"] = {
            "fraction": config.holdout,
            "documents": int(merged.get("heldout_documents", 0)),
            "groups": int(merged.get("heldout_groups", 0)),
            "passages": int(merged.get("heldout_passages", 0)),
        }
        titles, headings = int(merged.get("heldout_titles", 0)), int(merged.get("heldout_headings", 0))
        if titles or headings or config.title_field:
            stats["holdout"] |= {"titles": titles, "headings": headings}
        # the ids were read when the passages were scored: the stored setting, not a re-merge's (--merge has none)
        stats["holdout"] |= holdout_draw(stored.get("id_field", config.id_field))
    return stats


DRAWN_BY_PATHS = "file paths and positions (no --id-field)"
"""``stats.json``'s ``holdout.drawn_by`` when the documents have no ids of their own (:func:`holdout_draw`)."""


def holdout_draw(id_field: str | None) -> dict[str, str]:
    """What the held-out draw hashes (``drawn_by``), and without ``--id-field`` the ``draw_caveat`` that says what
    follows: a document's id is then its file path and line (or row), so the draw moves with them.

    Example:
        >>> holdout_draw("id")
        {'drawn_by': 'ids (--id-field id)'}
        >>> holdout_draw(None)["draw_caveat"].split(":")[0]
        'the held-out draw follows file paths and positions (no --id-field)'
    """
    if id_field:
        return {"drawn_by": f"ids (--id-field {id_field})"}
    return {
        "drawn_by": DRAWN_BY_PATHS,
        "draw_caveat": (
            "the held-out draw follows file paths and positions (no --id-field): a later re-mine of this corpus from "
            "other paths, or with its files or lines reordered, holds out other documents, possibly ones a model "
            "trained on here, and the held-out contract (which compares ids) cannot see it; give --id-field FIELD "
            "where the records have ids, else re-mine from the same paths in the same order"
        ),
    }


def threshold_source(config: MiningConfig, threshold: float | None) -> str | None:
    """How the threshold was set; says so when a quantile had no centralities to be taken of."""
    if config.pairs != "mined":
        return None
    if threshold is None and config.anchor_quantile is not None:
        return f"{config.threshold_source}: none, no passage was scored"
    return config.threshold_source


def skip_diagnosis(stats: dict[str, Any], scored: int, stored: dict[str, Any]) -> str | None:
    """A sentence naming the dominant skip reason and its fix when (almost) no document could be scored.

    "Almost": fewer than 1 in 10 of the documents read had the 2 passages that scoring needs. None
    when enough documents were scored, so a problem that remains is the threshold's.
    """
    documents = stats["documents"]
    if documents and scored * 10 >= documents:
        return None
    if documents == 0:
        inputs = describe_inputs(stored.get(INPUTS_KEY, []))
        return f"the input held no document (read from {inputs}): are the files empty?"
    skipped = {reason: count for reason, count in stats.get("skipped", {}).items() if count}
    if not skipped:
        return None
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(skipped.items(), key=lambda kv: -kv[1]))
    dominant = max(skipped, key=lambda reason: skipped[reason])
    fix = SKIP_FIXES.get(dominant, dominant)
    return (
        f"{scored} of {documents} documents had passages to score; skipped by reason: {reasons}. Most skips are {fix}."
    )


SUMMARY_KEYS = (
    "documents",
    "documents_with_groups",
    "document_coverage",
    "groups",
    "groups_per_document",
    "passages",
    "anchors",
    "passage_coverage",
    "threshold",
    "threshold_source",
    "groups_with_padded_related",
    "positives_not_nearest",
    "duplicate_passages_removed",
    "documents_truncated",
    "characters_over_cap",
)
"""The ``stats.json`` figures a mining summary shows, in order (the CLI table and the HTML report)."""


def summary_table(stats: dict[str, Any]) -> Any:
    """The ``stats.json`` figures next to the paper's, as a rich table (the CLI prints it)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="xPRT mining summary")
    table.add_column("figure")
    table.add_column("this run", justify="right")
    table.add_column("paper (100K FineWeb, E5)", justify="right")
    paper = {"document_coverage": "99%", "groups_per_document": "7.0", "passage_coverage": "68%"}
    percent = {"document_coverage", "passage_coverage", "positives_not_nearest"}
    for key in SUMMARY_KEYS:
        value = stats.get(key)
        shown = "-" if value is None else (f"{value:.1%}" if key in percent else str(value))
        table.add_row(key, shown, paper.get(key, ""))
    for reason, count in sorted((stats.get("skipped") or {}).items()):
        table.add_row(f"skipped: {escape(reason)}", str(count), "")
    for repair, count in sorted((stats.get("repairs") or {}).items()):
        table.add_row(f"repaired: {escape(repair)}", str(count), "")
    for name, count in sorted((stats.get("text_fields") or {}).items()):
        table.add_row(f"text read from field: {escape(name)}", str(count), "")
    holdout = stats.get("holdout")
    if holdout:
        table.add_row("held out (never trained on)", _held_out_share(holdout, stats.get("documents")), "")
        for key in ("documents", "groups", "passages", "titles", "headings"):
            if key in holdout:
                table.add_row(f"held out: {key}", str(holdout[key]), "")
        if "drawn_by" in holdout:
            table.add_row("held out: drawn by", str(holdout["drawn_by"]), "")
        found = holdout.get("contamination") or {}
        if found.get("documents") or found.get("passages"):
            shown = f"{found.get('documents', 0)} documents, {found.get('passages', 0)} passages"
            table.add_row("held out but also in training (same text, other id)", shown, "")
    return table


def _held_out_share(holdout: dict[str, Any], documents: Any) -> str:
    """The documents the draw really held out, beside the fraction asked for: on a small corpus the hash draw of
    ``--holdout 0.5`` can hold out none of 2 documents, and "50.0% of documents" would say otherwise."""
    asked = f"--holdout {holdout['fraction']:.1%}"
    held = holdout.get("documents")
    if not isinstance(held, int):
        return f"{holdout['fraction']:.1%} of documents"
    of_total = f" of {documents}" if isinstance(documents, int) else ""
    return f"{held}{of_total} documents ({asked})"
