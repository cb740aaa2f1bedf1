"""`xprt-st inspect`: the paper's adoption step 2, "check the filter on your own corpus".

One self-contained HTML page (plots embedded as base64 PNG) built from a mined folder, with no
re-encoding: it reads the per-passage centralities and rankings the builder stored.

- a centrality histogram with the threshold marked;
- a threshold sweep: passage coverage and groups per document as the threshold moves, next to the
  paper's 68% and 7.0;
- a sample of documents: every passage with its centrality, anchors and excluded passages (in no
  group) marked, and each anchor's related passages with the embedding cosine, TF-IDF cosine and
  fused score.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.mining.config import MiningError, MiningOutputError
from xprt_st.mining.derived import derived_folder_problem
from xprt_st.mining.layout import (
    META_FILE,
    PASSAGES_FILE,
    REPORT_FILE,
    STATS_FILE,
    MiningLayout,
    atomic_write_text,
    read_stats,
)
from xprt_st.mining.quantiles import exact_quantiles
from xprt_st.mining.stats import SUMMARY_KEYS
from xprt_st.output_folder import OutputFolderError, check_output_file

logger = logging.getLogger(__name__)

REPORT_SIGNATURE = "<!doctype html><html><head><meta charset='utf-8'><title>xPRT mining report</title>"
"""How every report page begins: a file that begins otherwise is not inspect's, and is never replaced."""
PAPER_PASSAGE_COVERAGE = 0.68
PAPER_GROUPS_PER_DOCUMENT = 7.0


def sweep_counts(
    labels: np.ndarray,
    centralities: np.ndarray,
    related: list[list[int]],
    passage_index: np.ndarray,
    thresholds: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per threshold: covered passages, groups and documents with groups, plus the passages and documents.

    Counts of whole documents add up: the counts of a corpus are the sums of its chunks' counts.
    """
    labels = np.asarray(labels, dtype=np.int64)
    centralities = np.asarray(centralities, dtype=np.float64)
    row_of = {(int(lab), int(idx)): r for r, (lab, idx) in enumerate(zip(labels, passage_index, strict=True))}
    pair_anchor, pair_related = [], []
    for r, rel in enumerate(related):
        for j in rel:
            pair_anchor.append(r)
            pair_related.append(row_of[(int(labels[r]), int(j))])
    pair_anchor_arr = np.asarray(pair_anchor, dtype=np.int64)
    pair_related_arr = np.asarray(pair_related, dtype=np.int64)
    has_related = np.array([len(rel) > 0 for rel in related], dtype=bool)
    covered_counts, group_counts, documents_with = [], [], []
    for t in thresholds:
        anchors = (centralities >= t) & has_related
        covered = anchors.copy()
        if len(pair_anchor_arr):
            covered[pair_related_arr[anchors[pair_anchor_arr]]] = True
        groups = int(anchors.sum())
        covered_counts.append(int(covered.sum()))
        group_counts.append(groups)
        documents_with.append(len(np.unique(labels[anchors])) if groups else 0)
    return {
        "covered": np.asarray(covered_counts, dtype=np.int64),
        "groups": np.asarray(group_counts, dtype=np.int64),
        "documents_with_groups": np.asarray(documents_with, dtype=np.int64),
        "passages": np.int64(len(labels)),
        "documents": np.int64(len(np.unique(labels)) if len(labels) else 0),
    }


def sweep_from_counts(counts: dict[str, np.ndarray], thresholds: np.ndarray) -> dict[str, np.ndarray]:
    """Passage coverage, groups per document with groups and document coverage from (summed) counts."""
    passages, documents = int(counts["passages"]), int(counts["documents"])
    coverage, per_doc, doc_coverage = [], [], []
    for covered, groups, docs_with in zip(
        counts["covered"].tolist(), counts["groups"].tolist(), counts["documents_with_groups"].tolist(), strict=True
    ):
        coverage.append(covered / passages if passages else 0.0)
        per_doc.append(groups / docs_with if docs_with else 0.0)
        doc_coverage.append(docs_with / documents if documents else 0.0)
    return {
        "threshold": np.asarray(thresholds, dtype=np.float64),
        "passage_coverage": np.asarray(coverage),
        "groups_per_document": np.asarray(per_doc),
        "document_coverage": np.asarray(doc_coverage),
    }


def threshold_sweep(
    labels: np.ndarray,
    centralities: np.ndarray,
    related: list[list[int]],
    passage_index: np.ndarray,
    thresholds: np.ndarray,
) -> dict[str, np.ndarray]:
    """Coverage, groups per document with groups, and document coverage for each threshold.

    ``related[r]`` are the passage indices (within its document) ranked for row ``r`` as an anchor.
    The definitions are those of ``stats.json``: passage coverage counts passages that are an anchor
    or a related passage of an anchor, over all passages.
    """
    counts = sweep_counts(labels, centralities, related, passage_index, thresholds)
    return sweep_from_counts(counts, thresholds)


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plots(
    histogram_counts: tuple[np.ndarray, np.ndarray] | None, threshold: float | None, sweep: dict[str, np.ndarray]
) -> tuple[str, str]:
    """The two plots; ``histogram_counts`` are the centrality histogram's (counts, 51 edges), None without values."""
    # A bare Figure draws without pyplot's global state, so a notebook's inline backend is left alone.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.2))
    ax = fig.subplots()
    if histogram_counts is None:
        ax.hist(np.zeros(0), bins=50, color="#4c72b0")
    else:  # the bars ``ax.hist(values, bins=50)`` draws, from counts summed chunk by chunk
        counts, edges = histogram_counts
        ax.hist(edges[:-1], bins=edges, weights=counts, color="#4c72b0")
    if threshold is not None:
        ax.axvline(threshold, color="#c44e52", linestyle="--", label=f"threshold {threshold:.3f}")
        ax.legend()
    ax.set_xlabel("centrality (cosine to the document's mean vector)")
    ax.set_ylabel("passages")
    histogram = _png(fig)

    fig = Figure(figsize=(6.5, 3.2))
    left = fig.subplots()
    left.plot(sweep["threshold"], sweep["passage_coverage"], color="#4c72b0", label="passage coverage")
    left.plot(sweep["threshold"], sweep["document_coverage"], color="#55a868", label="document coverage")
    left.axhline(PAPER_PASSAGE_COVERAGE, color="#4c72b0", linestyle=":", label="paper: 68% of passages")
    left.set_ylim(0, 1.02)
    left.set_xlabel("threshold")
    left.set_ylabel("share")
    right = left.twinx()
    right.plot(sweep["threshold"], sweep["groups_per_document"], color="#dd8452", label="groups per document")
    right.axhline(PAPER_GROUPS_PER_DOCUMENT, color="#dd8452", linestyle=":", label="paper: 7.0 groups/doc")
    right.set_ylabel("groups per document with groups")
    if threshold is not None:
        left.axvline(threshold, color="#c44e52", linestyle="--")
    lines = left.get_legend_handles_labels()
    lines2 = right.get_legend_handles_labels()
    left.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="lower left")
    return histogram, _png(fig)


HISTOGRAM_BINS = 50


@dataclass
class _Scan:
    """What the report needs from every stored passage, gathered chunk by chunk."""

    grid: np.ndarray
    sweep: dict[str, np.ndarray]
    histogram: tuple[np.ndarray, np.ndarray] | None
    candidates: list[int]


def _scan(layout: MiningLayout, num_shards: int) -> _Scan:
    """The sweep's counts, the centrality histogram and the documents of 2+ passages, one chunk in memory at a time.

    Pass 1 reads labels and centralities (range, and documents as runs of equal labels, in row
    order); the 1% and 99% quantiles bounding the sweep are exact (:mod:`~xprt_st.mining.quantiles`,
    ``numpy.quantile``'s values); pass 2 reads the rankings and adds up each chunk's counts, which
    hold whole documents. Memory: one chunk plus one integer per document of 2+ passages.
    """
    low, high, finite_values = np.inf, -np.inf, 0
    runs: list[list[int]] = []  # [label, rows] of each document, in row order
    for table in layout.iter_passages(num_shards, ["label", "centrality"]):
        values = table.column("centrality").to_numpy(zero_copy_only=False).astype(np.float64)
        values = values[np.isfinite(values)]
        if len(values):
            finite_values += len(values)
            low, high = min(low, float(values.min())), max(high, float(values.max()))
        labels = table.column("label").to_numpy()
        if not len(labels):
            continue
        starts = np.flatnonzero(np.concatenate([[True], labels[1:] != labels[:-1]]))
        sizes = np.diff(np.concatenate([starts, [len(labels)]]))
        for label, size in zip(labels[starts].tolist(), sizes.tolist(), strict=True):
            if runs and runs[-1][0] == label:
                runs[-1][1] += size
            else:
                runs.append([label, size])
    candidates = [label for label, size in runs if size >= 2]
    del runs
    if finite_values:
        quantiles = exact_quantiles(lambda: layout.centralities(num_shards), [0.01, 0.99])
        grid = np.linspace(float(quantiles[0.01]), float(quantiles[0.99]), 41)
        first, last = (low - 0.5, high + 0.5) if low == high else (low, high)
        edges = np.linspace(first, last, HISTOGRAM_BINS + 1)
    else:
        grid, edges = np.linspace(0.0, 1.0, 41), None
    histogram = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
    totals: dict[str, Any] = {}
    for table in layout.iter_passages(num_shards, ["label", "passage_index", "centrality", "related"]):
        columns = table.to_pydict()
        centralities = np.asarray(columns["centrality"], dtype=np.float64)
        counts = sweep_counts(
            np.asarray(columns["label"]), centralities, columns["related"], np.asarray(columns["passage_index"]), grid
        )
        totals = {k: totals[k] + v for k, v in counts.items()} if totals else counts
        if edges is not None:
            histogram += np.histogram(centralities[np.isfinite(centralities)], bins=edges)[0]
    if not totals:
        totals = sweep_counts(np.zeros(0), np.zeros(0), [], np.zeros(0), grid)
    return _Scan(grid, totals, (histogram, edges) if edges is not None else None, candidates)


def _sampled_rows(
    layout: MiningLayout, num_shards: int, chosen: set[int]
) -> tuple[dict[str, list[Any]], dict[int, list[int]]]:
    """The stored rows of the chosen documents only (text read from the chunks that hold one), by label."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = ["label", "doc_id", "passage_index", "text", "centrality"]
    table: dict[str, list[Any]] = {name: [] for name in names}
    if chosen:
        wanted = pa.array(sorted(chosen), type=pa.int64())
        for shard, chunk in layout.chunks(num_shards):
            labels = layout.read_chunk(shard, num_shards, chunk, ["label"]).column("label")
            if not pc.any(pc.is_in(labels, value_set=wanted)).as_py():
                continue
            rows = layout.read_chunk(shard, num_shards, chunk, names)
            rows = rows.filter(pc.is_in(rows.column("label"), value_set=wanted)).to_pydict()
            for name in names:
                table[name].extend(rows[name])
    documents: dict[int, list[int]] = {}
    for row, label in enumerate(table["label"]):
        documents.setdefault(label, []).append(row)
    return table, documents


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;width:100%;margin:.5em 0}td,th{border:1px solid #ddd;padding:4px 6px;
vertical-align:top;font-size:13px}th{background:#f4f4f4}.anchor{background:#e7f5e7}.related{background:#eef3fb}
.excluded{background:#fbeaea;color:#777}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.doc{border:1px solid #ccc;border-radius:6px;padding:.5em 1em;margin:1.5em 0}pre{white-space:pre-wrap;margin:0}
.small{font-size:12px;color:#555}
"""


def write_report(
    output_dir: str | Path,
    path: str | Path | None = None,
    sample: int = 30,
    seed: int = 0,
    threshold: float | None = None,
) -> Path:
    """Write the HTML report of a mined folder; returns its path (default ``DIR/report.html``).

    Args:
        output_dir: a folder written by ``xprt-st mine``.
        path: where to write the page.
        sample: number of documents shown passage by passage (random, seeded).
        threshold: threshold drawn on the plots and used for the marks; default the effective one of
            ``stats.json``.

    Raises:
        MiningOutputError: before any work, when ``path`` is a folder, a name too long, or an existing file that is
            not a report (a corpus, the folder's ``stats.json``): it is never replaced.
        MiningError: ``output_dir`` holds no merged mining run.
    """
    output_dir = Path(output_dir)
    path = Path(path) if path is not None else output_dir / REPORT_FILE
    try:  # before any work: the page must not replace a file inspect did not write (a corpus, stats.json)
        check_output_file(path, "--output", is_report, "an HTML report")
    except OutputFolderError as error:
        raise MiningOutputError(str(error)) from error
    stats_path = output_dir / STATS_FILE
    derived = derived_folder_problem(output_dir, "xprt-st inspect {}")
    if derived is not None:
        raise MiningError(derived)
    if not stats_path.is_file() or not (output_dir / PASSAGES_FILE).exists():
        raise MiningError(f"{output_dir} has no {STATS_FILE} / {PASSAGES_FILE}: run xprt-st mine (and its merge) first")
    stats = read_stats(output_dir) or {}  # refuses a folder whose last merge was stopped midway
    layout = MiningLayout(output_dir)
    num_shards = int(layout.require_run()["num_shards"])
    if threshold is None:
        threshold = stats.get("threshold")
    scan = _scan(layout, num_shards)
    chosen = []
    if scan.candidates:
        rng = np.random.default_rng(seed)
        chosen = sorted(rng.choice(scan.candidates, size=min(sample, len(scan.candidates)), replace=False).tolist())
    sweep = sweep_from_counts(scan.sweep, scan.grid)
    histogram, sweep_png = _plots(scan.histogram, threshold, sweep)
    table, documents = _sampled_rows(layout, num_shards, set(chosen))
    meta: dict[tuple[int, int], dict[str, Any]] = {}
    meta_path = output_dir / META_FILE
    if meta_path.is_file() and chosen:
        wanted = set(chosen)
        with meta_path.open(encoding="utf-8") as lines:
            for line in lines:
                record = json.loads(line)
                if "anchor_index" in record and record["label"] in wanted:
                    meta[(record["label"], record["anchor_index"])] = record

    parts = [
        REPORT_SIGNATURE,
        f"<style>{_CSS}</style></head><body>",
        f"<h1>xPRT mining report: {html.escape(str(output_dir))}</h1>",
        "<p>The paper's adoption step 2: check that anchors are body text and that navigation, footers and "
        "widgets are excluded. Retune with <code>xprt-st mine --merge DIR --threshold X</code> or "
        "<code>--threshold-quantile Q</code> (no re-encoding).</p>",
        _stats_table(stats),
        "<h2>Centrality histogram</h2>",
        f"<img alt='centrality histogram' src='data:image/png;base64,{histogram}'>",
        "<h2>Threshold sweep</h2>",
        f"<img alt='threshold sweep' src='data:image/png;base64,{sweep_png}'>",
        _sweep_table(sweep),
        f"<h2>{len(chosen)} sampled documents</h2>",
        "<p class='small'>green: anchor (centrality &ge; threshold); blue: related passage of an anchor only; "
        "red: excluded (in no group).</p>",
    ]
    for label in chosen:
        parts.append(_document_html(label, documents[label], table, meta, threshold))
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(parts))
    logger.info("wrote the mining report to %s", path)
    return path


def is_report(path: Path) -> bool:
    """Whether the file ``path`` is a page written by :func:`write_report` (it begins with the signature)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(REPORT_SIGNATURE)) == REPORT_SIGNATURE.encode()
    except OSError:
        return False


def _stats_table(stats: dict[str, Any]) -> str:
    keys = (*SUMMARY_KEYS, "centrality_quantiles", "skipped", *(["holdout"] if "holdout" in stats else []))
    rows = "".join(f"<tr><th>{k}</th><td>{html.escape(json.dumps(stats.get(k)))}</td></tr>" for k in keys)
    return f"<h2>stats.json</h2><table>{rows}</table>"


def _sweep_table(sweep: dict[str, np.ndarray]) -> str:
    rows = []
    for i in range(0, len(sweep["threshold"]), 4):
        rows.append(
            f"<tr><td class='num'>{sweep['threshold'][i]:.3f}</td><td class='num'>{sweep['passage_coverage'][i]:.1%}"
            f"</td><td class='num'>{sweep['groups_per_document'][i]:.2f}</td>"
            f"<td class='num'>{sweep['document_coverage'][i]:.1%}</td></tr>"
        )
    head = "<tr><th>threshold</th><th>passage coverage</th><th>groups / document</th><th>document coverage</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _document_html(
    label: int, rows: list[int], table: dict[str, list[Any]], meta: dict[tuple[int, int], Any], threshold: Any
) -> str:
    anchors = {table["passage_index"][r] for r in rows if (label, table["passage_index"][r]) in meta}
    related_of_any = {j for a in anchors for j in meta[(label, a)]["related_indices"]}
    out = [f"<div class='doc'><h3>{html.escape(str(table['doc_id'][rows[0]]))} <span class='small'>label {label}"]
    out.append(f", {len(rows)} passages, {len(anchors)} anchors</span></h3><table>")
    out.append("<tr><th>#</th><th>centrality</th><th>status</th><th>passage / its related passages</th></tr>")
    for r in rows:
        index = table["passage_index"][r]
        if index in anchors:
            status, css = "anchor", "anchor"
        elif index in related_of_any:
            status, css = "related", "related"
        else:
            status, css = "excluded", "excluded"
        cell = f"<pre>{html.escape(table['text'][r])}</pre>"
        if index in anchors:
            info = meta[(label, index)]
            related_rows = []
            for rank, j in enumerate(info["related_indices"]):
                scores = ""
                if "fused_scores" in info:
                    scores = (
                        f"cos {info['embedding_scores'][rank]:.3f} &middot; tfidf {info['tfidf_scores'][rank]:.3f} "
                        f"&middot; fused {info['fused_scores'][rank]:.4f}"
                    )
                name = "positive" if rank == 0 else f"related_{rank + 1}"
                related_rows.append(f"<li>{name}: passage #{j} <span class='small'>{scores}</span></li>")
            cell += f"<ul class='small'>{''.join(related_rows)}</ul>"
        value = table["centrality"][r]
        shown = "-" if value is None or not np.isfinite(value) else f"{value:.3f}"
        out.append(
            f"<tr class='{css}'><td class='num'>{index}</td><td class='num'>{shown}</td><td>{status}</td>"
            f"<td>{cell}</td></tr>"
        )
    out.append("</table></div>")
    return "".join(out)
