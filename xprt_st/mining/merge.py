"""The merge: stored passage scores -> the training groups, the held-out part, the side files, ``stats.json``.

It streams: memory is bounded by one stored chunk, never by the corpus.

1. The threshold: the fixed value, or the exact quantile of every stored centrality, found by
   passes over that one float column (:func:`~xprt_st.mining.quantiles.exact_quantiles`).
2. Parts: each stored chunk, read alone, becomes its groups (or an ablation's), its
   ``groups_meta`` lines, its passages with their flags, and its held-out documents, written as
   Arrow and Parquet files of its own (:class:`~xprt_st.mining.layout.MergedParts`). Parts are
   independent: the local engine writes them in a loop, the Ray engine in its workers, and the
   process that finishes only adds up their counts.
3. Finish: the parts are moved into place (the dataset's ``state.json`` last but one, ``stats.json``
   last). Because the merge reads only stored scores, a new threshold, quantile, ablation or
   holdout needs no re-encoding (``xprt-st mine --merge DIR``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xprt_st.columns import ANCHOR, LABEL
from xprt_st.mining.ablations import document_rng, random_related, random_spans, span_group_count
from xprt_st.mining.bm25 import bm25_idf
from xprt_st.mining.config import MiningConfig, MiningConfigError, NoGroupsError
from xprt_st.mining.duplicates import heldout_contamination
from xprt_st.mining.groups import MIN_PASSAGES
from xprt_st.mining.holdout import is_held_out
from xprt_st.mining.inverse_cloze import inverse_cloze_group
from xprt_st.mining.layout import (
    DATASET_STATE,
    HELDOUT_DIR,
    HELDOUT_GROUPS,
    HELDOUT_PASSAGES,
    HELDOUT_TITLES,
    MERGE_UNFINISHED,
    META_FILE,
    PASSAGES_FILE,
    STATS_FILE,
    MergedParts,
    MiningLayout,
    atomic_write_json,
    concatenate_text,
    part_name,
    publish_dataset,
    publish_passages,
    write_arrow,
)
from xprt_st.mining.layout.embeddings import publish_embeddings
from xprt_st.mining.quantiles import exact_quantiles
from xprt_st.mining.stages import sections_of
from xprt_st.mining.stats import build_stats, skip_diagnosis, sum_counts
from xprt_st.mining.write_failure import raise_write_failure

logger = logging.getLogger(__name__)

QUANTILES = (0.1, 0.5, 0.9)
"""Centrality quantiles reported in ``stats.json``."""


def related_columns(top_k: int) -> list[str]:
    """``positive, related_2, ..., related_{top_k}`` (the column contract of :mod:`xprt_st.columns` for k = 4)."""
    return ["positive", *[f"related_{i}" for i in range(2, top_k + 1)]]


def group_features(top_k: int, heldout: bool = False) -> Any:
    """The ``datasets`` features of the training groups, or of the held-out groups (with passage indices)."""
    import datasets

    features = {name: datasets.Value("string") for name in [ANCHOR, *related_columns(top_k)]}
    features[LABEL] = datasets.Value("int64")
    if heldout:
        features["anchor_index"] = datasets.Value("int64")
        features["related_index"] = datasets.List(datasets.Value("int64"))
    return datasets.Features(features)


def heldout_passage_features() -> Any:
    """The ``datasets`` features of ``heldout/passages``: document label, passage index, text."""
    import datasets

    return datasets.Features(
        {"label": datasets.Value("int64"), "passage": datasets.Value("int64"), "text": datasets.Value("string")}
    )


def heldout_title_features() -> Any:
    """The ``datasets`` features of ``heldout/titles``: document label, kind, level, text, covered passages."""
    import datasets

    return datasets.Features(
        {
            "label": datasets.Value("int64"),
            "kind": datasets.Value("string"),
            "level": datasets.Value("int64"),
            "text": datasets.Value("string"),
            "passages": datasets.List(datasets.Value("int64")),
        }
    )


def effective_threshold(centralities: np.ndarray, config: MiningConfig) -> float | None:
    """The fixed threshold, or the quantile of the finite ``centralities``; None when there is none to take."""
    quantile = config.anchor_quantile
    if quantile is None:
        return float(config.threshold) if config.threshold is not None else None
    return exact_quantiles(lambda: [centralities], [quantile])[quantile]


@dataclass
class MergePlan:
    """What every merge part needs to know; plain values, so it travels to other processes."""

    output_dir: str
    staging: str
    config: MiningConfig
    num_shards: int
    top_k: int
    threshold: float | None
    encoded: bool


def plan_merge(output_dir: str | Path, config: MiningConfig | None = None) -> tuple[MergePlan, dict[str, Any]]:
    """The threshold and settings of a merge of ``output_dir``'s complete shards; also the stored settings."""
    layout = MiningLayout(output_dir)
    stored = layout.require_run()
    if config is None:
        fields = {f.name for f in dataclasses.fields(MiningConfig)}
        config = MiningConfig(**{k: v for k, v in stored.items() if k in fields})
    encoded = bool(stored.get("encodes", True))
    if config.pairs != "random-span" and not encoded:
        raise MiningConfigError(
            f"{output_dir} was mined with pairs='random-span' (nothing encoded); pairs={config.pairs!r} needs the"
            " mined anchors: mine the corpus again with an encoder"
        )
    num_shards = int(stored["num_shards"])
    layout.chunks(num_shards)  # every shard complete, or the error that says which to run
    quantile = config.anchor_quantile
    if quantile is None:
        threshold = float(config.threshold) if config.threshold is not None else None
    else:
        threshold = exact_quantiles(partial(layout.centralities, num_shards), [quantile])[quantile]
    layout.remove_stale_merges()
    plan = MergePlan(
        output_dir=str(layout.output_dir),
        staging=str(layout.merge_staging()),
        config=config,
        num_shards=num_shards,
        top_k=int(stored["top_k"]),
        threshold=threshold,
        encoded=encoded,
    )
    return plan, stored


def merge_part(plan: MergePlan, shard: int, chunk: int) -> dict[str, Any]:
    """Build the groups of one stored chunk and write its part files; returns its counts."""
    layout = MiningLayout(plan.output_dir)
    config, top_k, threshold = plan.config, plan.top_k, plan.threshold
    stored = layout.read_chunk(shard, plan.num_shards, chunk)
    columns = stored.to_pydict()
    parts = MergedParts(Path(plan.staging), part_name(shard, chunk))
    parts.make_folders()
    labels = np.asarray(columns["label"], dtype=np.int64)
    centralities = np.asarray(columns["centrality"], dtype=np.float64)
    texts = columns["text"]
    n_rows = len(labels)
    boundaries = np.flatnonzero(np.diff(labels)) + 1 if n_rows else np.array([], dtype=np.int64)
    starts = [0, *boundaries.tolist()] if n_rows else []
    stops = [*boundaries.tolist(), n_rows] if n_rows else []
    text_columns = [ANCHOR, *related_columns(top_k)]
    train: dict[str, list[Any]] = {name: [] for name in [*text_columns, LABEL]}
    held: dict[str, list[Any]] = {name: [] for name in [*text_columns, LABEL, "anchor_index", "related_index"]}
    held_passages: dict[str, list[Any]] = {"label": [], "passage": [], "text": []}
    held_titles: dict[str, list[Any]] = {"label": [], "kind": [], "level": [], "text": [], "passages": []}
    stored_headings = columns.get("headings") or [None] * n_rows  # None: scored before headings were kept
    meta_lines: list[str] = []
    is_anchor = np.zeros(n_rows, dtype=bool)
    in_group = np.zeros(n_rows, dtype=bool)
    held_out = np.zeros(n_rows, dtype=bool)
    counts = {"documents_with_groups": 0, "padded_groups": 0, "scored_documents": 0}
    counts |= {"heldout_documents": 0, "heldout_groups": 0, "heldout_passages": 0}
    counts |= {"heldout_titles": 0, "heldout_headings": 0}
    counts |= {"positives_checked": 0, "positives_not_nearest": 0}
    if config.pairs == "inverse-cloze":  # the query's BM25 against its document's passages: the corpus's frequencies
        counts |= {"cloze_word_span": 0, "cloze_own_passage": 0, "cloze_removed": 0, "cloze_query_words": 0}
        lexicon = layout.corpus_frequencies(plan.num_shards)
        idf = bm25_idf(lexicon.document_frequencies, lexicon.passages)
    stored_nearest = columns.get("nearest") or [None] * n_rows  # None: scored before the nearest passage was kept

    def mined_groups(start: int, stop: int, rng: Any, positive: str) -> list[tuple[int, list[int], dict]]:
        found = []
        for i in range(stop - start):
            row = start + i
            if threshold is None or not centralities[row] >= threshold:
                continue
            if positive == "random":
                found.append((i, random_related(i, stop - start, top_k, rng), {}))
                continue
            scores = {name: columns[name][row] for name in ("embedding_scores", "tfidf_scores", "fused_scores")}
            found.append((i, list(columns["related"][row]), scores))
        return found

    for start, stop in zip(starts, stops, strict=True):
        n = stop - start
        label = int(labels[start])
        doc_id = columns["doc_id"][start]
        counts["scored_documents"] += n >= MIN_PASSAGES
        if config.holdout > 0 and is_held_out(doc_id, config.holdout, config.seed):
            held_out[start:stop] = True
            counts["heldout_documents"] += 1
            counts["heldout_passages"] += n
            held_passages["label"] += [label] * n
            held_passages["passage"] += list(range(n))
            held_passages["text"] += texts[start:stop]
            for section in sections_of(stored_headings[start]):
                kind = "title" if section.is_title else "heading"
                counts[f"heldout_{kind}s"] += 1
                held_titles["label"].append(label)
                held_titles["kind"].append(kind)
                held_titles["level"].append(section.level)
                held_titles["text"].append(section.text)
                held_titles["passages"].append(list(range(section.first, min(section.stop, n))))
            if n >= MIN_PASSAGES and plan.encoded:
                # The held-out groups are always the mined ones: the label-free check's truth, whatever the ablation.
                for i, related, _ in mined_groups(start, stop, None, "mined"):
                    padded = related + [related[-1]] * (top_k - len(related))
                    for name, text in zip(
                        text_columns, [texts[start + i], *[texts[start + j] for j in padded]], strict=True
                    ):
                        held[name].append(text)
                    held[LABEL].append(label)
                    held["anchor_index"].append(i)
                    held["related_index"].append(related)
                    counts["heldout_groups"] += 1
            continue
        if n < MIN_PASSAGES:
            continue
        rng = document_rng(config.seed, label)
        groups: list[tuple[list[str], dict[str, Any]]] = []
        if config.pairs == "random-span":
            count = span_group_count(centralities[start:stop], threshold)  # as many as mined anchors, if scored
            for spans in random_spans(texts[start:stop], top_k, rng, num_groups=count):
                groups.append((spans, {"label": label, "doc_id": doc_id, "kind": "random-span"}))
        elif config.pairs == "inverse-cloze":
            for i, _, _ in mined_groups(start, stop, rng, "mined"):
                cloze = inverse_cloze_group(texts[start:stop], i, top_k, rng, lexicon.counts, idf)
                counts["cloze_word_span"] += not cloze.sentence
                row, related = start + i, cloze.related
                is_anchor[row] = True
                in_group[[row, *[start + j for j in related]]] = True
                counts["padded_groups"] += len(related) < top_k
                counts["cloze_own_passage"] += related[0] == i
                counts["cloze_removed"] += cloze.removed
                counts["cloze_query_words"] += len(cloze.query.split())
                nearest = stored_nearest[row]
                if nearest is not None and nearest >= 0:
                    counts["positives_checked"] += 1
                    counts["positives_not_nearest"] += related[0] != nearest
                meta = cloze.meta(label, doc_id, i, float(centralities[row]))
                groups.append((cloze.texts_of_group(top_k), meta))
        else:
            for i, related, scores in mined_groups(start, stop, rng, config.positive):
                row = start + i
                is_anchor[row] = True
                in_group[row] = True
                in_group[[start + j for j in related]] = True
                padded = related + [related[-1]] * (top_k - len(related))
                counts["padded_groups"] += len(related) < top_k
                nearest = stored_nearest[row]
                if nearest is not None and nearest >= 0 and config.positive == "mined":
                    counts["positives_checked"] += 1
                    counts["positives_not_nearest"] += related[0] != nearest
                meta = {
                    "label": label,
                    "doc_id": doc_id,
                    "anchor_index": i,
                    "related_indices": related,
                    "num_related": len(related),
                    "centrality": float(centralities[row]),
                    **scores,
                }
                groups.append(([texts[row], *[texts[start + j] for j in padded]], meta))
        if groups:
            counts["documents_with_groups"] += 1
        for texts_of_group, meta in groups:
            for name, text in zip(text_columns, texts_of_group, strict=True):
                train[name].append(text)
            train[LABEL].append(label)
            meta_lines.append(json.dumps(meta, ensure_ascii=False))
    counts["groups"] = len(train[LABEL])
    counts["anchors"] = int(is_anchor.sum())
    counts["covered"] = int(in_group.sum())
    counts["passages"] = int(n_rows - held_out.sum())

    if train[LABEL]:
        write_arrow(parts.arrow(MergedParts.GROUPS), pa.table(train), group_features(top_k))
    if held[LABEL]:
        write_arrow(parts.arrow(MergedParts.HELDOUT_GROUPS), pa.table(held), group_features(top_k, heldout=True))
    if held_passages["label"]:
        write_arrow(parts.arrow(MergedParts.HELDOUT_PASSAGES), pa.table(held_passages), heldout_passage_features())
    if held_titles["label"]:
        write_arrow(parts.arrow(MergedParts.HELDOUT_TITLES), pa.table(held_titles), heldout_title_features())
    parts.meta.write_text("".join(line + "\n" for line in meta_lines), encoding="utf-8")
    side = stored.select(["label", "doc_id", "passage_index", "text", "n_tokens", "centrality"])
    for name, flags in (("is_anchor", is_anchor), ("in_group", in_group), ("held_out", held_out)):
        side = side.append_column(name, pa.array(flags))
    pq.write_table(side, parts.passages)
    return counts


def finish_merge(plan: MergePlan, stored: dict[str, Any], part_counts: list[dict[str, Any]]) -> dict[str, Any]:
    """Move every part into place, write ``stats.json`` (last) and return it; see :func:`merge` for the figures."""
    layout = MiningLayout(plan.output_dir)
    config, output_dir, staging = plan.config, layout.output_dir, Path(plan.staging)
    names = [part_name(shard, chunk) for shard, chunk in layout.chunks(plan.num_shards)]
    parts = [MergedParts(staging, name) for name in names]
    for part in parts:
        part.make_folders()  # a run with no chunk still publishes empty folders
    counts = sum_counts(layout.shard_counts(s, plan.num_shards) for s in range(plan.num_shards))
    merged = sum_counts(part_counts)
    found = exact_quantiles(partial(layout.centralities, plan.num_shards), QUANTILES)
    quantiles = {f"q{int(q * 100)}": round(v, 4) for q, v in found.items() if v is not None}
    stats = build_stats(
        counts=counts, merged=merged, config=config, stored=stored, threshold=plan.threshold, quantiles=quantiles
    )
    previous = _previous_groups(output_dir)
    if stats["groups"] == 0 and previous:
        # a re-merge that forms no group leaves the groups it would replace as they are
        _raise_without_groups(stats, int(merged.get("scored_documents", 0)), stored, plan, output_dir, previous)
    # from the first part moved into place to stats.json, readers are refused the folder (a killed merge)
    unfinished = {key: getattr(config, key) for key in config.MERGE_FIELDS}
    atomic_write_json(output_dir / MERGE_UNFINISHED, {"settings": unfinished})
    publish_dataset(staging / MergedParts.GROUPS, output_dir, group_features(plan.top_k))
    concatenate_text([part.meta for part in parts], output_dir / META_FILE)
    publish_passages(staging / "passages", output_dir / PASSAGES_FILE)
    heldout = output_dir / HELDOUT_DIR
    if config.holdout > 0:
        held_groups, held_passages = output_dir / HELDOUT_GROUPS, output_dir / HELDOUT_PASSAGES
        publish_dataset(staging / MergedParts.HELDOUT_GROUPS, held_groups, group_features(plan.top_k, True))
        publish_dataset(staging / MergedParts.HELDOUT_PASSAGES, held_passages, heldout_passage_features())
        held_titles = output_dir / HELDOUT_TITLES
        if int(merged.get("heldout_titles", 0)) + int(merged.get("heldout_headings", 0)):
            publish_dataset(staging / MergedParts.HELDOUT_TITLES, held_titles, heldout_title_features())
        elif held_titles.is_dir():
            shutil.rmtree(held_titles)  # re-merged with documents held out that have no title
    elif heldout.is_dir():
        shutil.rmtree(heldout)  # re-merged without --holdout: every document is a training document again
    if config.holdout > 0:
        stats["holdout"]["contamination"] = _contamination(output_dir)
    texts = (t for table in layout.iter_passages(plan.num_shards, ["text"]) for t in table.column("text").to_pylist())
    record = publish_embeddings(layout.chunk_dirs(plan.num_shards), texts, output_dir)
    kept = ("rows", "dimension", "dtype", "precision")  # precision: what the vectors and so the groups came from
    stats["embeddings"] = None if record is None else {k: record.get(k, "fp32") for k in kept}
    layout.write_stats(stats)
    (output_dir / MERGE_UNFINISHED).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    _raise_without_groups(stats, int(merged.get("scored_documents", 0)), stored, plan, output_dir)
    return stats


def _previous_groups(output_dir: Path) -> int:
    """The training groups of the folder's last finished merge (0 when there is none)."""
    try:
        previous = json.loads((output_dir / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    groups = previous.get("groups") if isinstance(previous, dict) else None
    return groups if isinstance(groups, int) and (output_dir / DATASET_STATE).is_file() else 0


def _contamination(output_dir: Path) -> dict[str, Any]:
    """Held-out documents and passages whose text the training part repeats (logged when there are any)."""
    found = heldout_contamination(output_dir / PASSAGES_FILE)
    if found["documents"] or found["passages"]:
        examples = "; ".join(found["examples"])
        logger.warning(
            "%d held-out document(s) repeat the exact text of a training document under another id, and %d held-out "
            "passage(s) are also training passages%s: the label-free check is partly a score on training "
            "text. Remove the duplicates from the corpus (stats.json: holdout.contamination).",
            found["documents"],
            found["passages"],
            f" (e.g. {examples})" if examples else "",
        )
    return found


def _raise_without_groups(
    stats: dict[str, Any],
    scored: int,
    stored: dict[str, Any],
    plan: MergePlan,
    output_dir: Path,
    previous: int = 0,
) -> None:
    skips = skip_diagnosis(stats, scored, stored)
    threshold = plan.threshold
    written = (
        f"The folder's previous {previous} training groups and its stats.json are kept."
        if previous
        else "stats.json is written."
    )
    if stats["groups"] == 0:
        holdout = stats.get("holdout") or {}
        with_passages = stats.get("documents_with_passages", 0)
        if holdout and with_passages and holdout.get("documents", 0) >= with_passages:
            raise NoGroupsError(
                f"no groups in {output_dir}: --holdout {plan.config.holdout} held out all {holdout['documents']} "
                "documents that have passages, so none is left to train on. Re-merge with a smaller --holdout "
                f"(`xprt-st mine --merge {output_dir} --holdout 0.1`). {written}"
            )
        if scored == 0 or threshold is None or plan.config.pairs != "mined":
            cause = skips or f"no document had the {MIN_PASSAGES} passages a group needs."
            raise NoGroupsError(f"no groups in {output_dir}: {cause} {written}")
        quantiles = stats.get("centrality_quantiles") or {}
        if holdout:
            skips = (
                f"--holdout {plan.config.holdout} held out {holdout.get('documents', 0)} of the {with_passages} "
                "documents that have passages; a smaller --holdout leaves more to train on. " + (skips or "")
            ).strip()
        raise NoGroupsError(
            f"no passage reached the centrality threshold {threshold:.4f} ({stats['threshold_source']}) in "
            f"{output_dir} (centrality quantiles {quantiles}; {stats['passages']} passages of {scored} scored "
            f"documents). The threshold depends on the model and corpus: re-merge without re-encoding with "
            f"`xprt-st mine --merge {output_dir} --threshold-quantile 0.5` (anchors: the more central half of the "
            "passages) or a lower --threshold. " + (f"Also, {skips[0].lower()}{skips[1:]} " if skips else "") + written
        )
    if skips is not None:
        logger.warning("%s", skips)


PartRunner = Callable[[MergePlan, list[tuple[int, int]]], list[dict[str, Any]]]
"""How an engine runs the merge parts: given the plan and the ``(shard, chunk)`` list, the parts' counts."""


def run_parts_here(plan: MergePlan, chunks: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Merge ``chunks`` (shard, chunk) one after another in this process; their counts in order."""
    return [merge_part(plan, shard, chunk) for shard, chunk in chunks]


def merge(
    output_dir: str | Path,
    config: MiningConfig | None = None,
    progress: bool = True,
    run_parts: PartRunner = run_parts_here,
) -> dict[str, Any]:
    """Turn the stored passage scores into the training dataset, the side files and ``stats.json``.

    ``stats.json`` figures (the paper's on 100K FineWeb documents in brackets):

    - ``documents``: input records read, skipped ones included;
    - ``documents_with_groups`` and ``document_coverage = documents_with_groups / documents`` [99%]
      (with ``holdout``, over the documents not held out);
    - ``groups``; ``groups_per_document = groups / documents_with_groups`` [7.0];
      ``groups_per_input_document = groups / documents`` (the same denominator as the coverage);
    - ``passages``: passages of the training documents after de-duplication and the per-document cap;
    - ``passage_coverage``: passages that appear in at least one group, as anchor or as one of the
      ``top_k`` related passages, over ``passages`` [68%] (padding repeats are counted once);
    - ``anchors``, ``threshold`` (the effective value; None when a quantile was asked of a corpus where
      no passage was scored), ``threshold_source``, centrality quantiles, ``skipped`` by reason,
      ``repairs``, ``text_fields`` (documents read from each field), and ``settings``;
    - with ``holdout``: ``holdout`` = its ``fraction`` and the held-out ``documents``, ``groups`` and
      ``passages`` (the figures above count the training documents only), and, when any were found, the
      ``titles`` and ``headings`` of the held-out documents (``DIR/heldout/titles``, the ``titles:DIR`` task).

    The threshold (a quantile) is taken over every stored centrality, held-out documents included,
    so it does not move with the holdout.

    Raises:
        NoGroupsError: after writing everything, when no group was formed; the message names the
            cause: the dominant skip reason and its fix when no document could be scored, else the
            effective threshold and how to lower it.
    """
    del progress  # the merge is one pass per chunk; nothing worth a bar
    layout = MiningLayout(output_dir)
    layout.require_run()
    with layout.lock():  # the last shard jobs to finish may merge at the same time; so may a --merge
        plan, stored = plan_merge(output_dir, config)
        Path(plan.staging).mkdir(parents=True, exist_ok=True)
        try:
            part_counts = run_parts(plan, layout.chunks(plan.num_shards))
            return finish_merge(plan, stored, part_counts)
        except OSError as error:  # a full disk: one line naming the folder, not the writer's traceback
            raise_write_failure(output_dir, error, unfinished=(Path(output_dir) / MERGE_UNFINISHED).is_file())
            raise
        finally:
            if os.path.isdir(plan.staging):
                shutil.rmtree(plan.staging, ignore_errors=True)
