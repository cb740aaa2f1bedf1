"""`xprt-st mine` and `xprt-st inspect`: thin wrappers over :mod:`xprt_st.mining`."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from xprt_st.cli.app import app
from xprt_st.cli.common import OutputPathError, check_output_folder, command_logging, config_from, report_error
from xprt_st.encode_backend import OPTION_HELP, check_encode_backend
from xprt_st.mining.after_merge import AfterMerge
from xprt_st.mining.config import MiningConfig
from xprt_st.mining.derived import stale_draw_problem
from xprt_st.mining.groups import DEFAULT_THRESHOLD_QUANTILE, PAPER_THRESHOLD
from xprt_st.mining.layout import STRUCTURE_DIR, STRUCTURE_MIXED_DIR, MiningLayout, read_stats
from xprt_st.mining.mine import ENGINES
from xprt_st.mining.report import write_report
from xprt_st.mining.stats import summary_table
from xprt_st.mining.structure import (
    links_problem,
    parse_kinds,
)
from xprt_st.paths import path_length_problem
from xprt_st.pipeline import run_pipeline
from xprt_st.pipeline.stages import AfterMergeStage, MineSettings, MineStage
from xprt_st.precision import OPTION_HELP as PRECISION_HELP
from xprt_st.precision import resolve_precision
from xprt_st.progress_lines import command_progress

DEFAULTS = MiningConfig()
"""Every option's default is the library's (one place holds each default)."""

console = Console(stderr=True, emoji=False)


@app.command()
def mine(
    corpus: Annotated[
        list[str] | None,
        typer.Argument(
            help="JSONL/JSONL.gz/Parquet files, one-document .txt/.md/.html files (HTML with --html), folders or "
            "zips of them, or a dataset name (required, except with --merge)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Output folder, required except with --merge (reused to resume; a folder holding a run of other "
            "input or settings is refused).",
        ),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Delete the mining run stored in --output (its mining files only) and mine again."
        ),
    ] = False,
    merge_dir: Annotated[
        Path | None,
        typer.Option("--merge", help="Only merge the complete shards of this folder (re-thresholds, no encoding)."),
    ] = None,
    text_field: Annotated[
        str | None,
        typer.Option(help="Field with the text; default 'text' (with --html: 'html', else 'text' where it is absent)."),
    ] = None,
    id_field: Annotated[
        str | None,
        typer.Option(
            help="Field with the document id: it names the documents in the side files and decides which are held "
            "out (--holdout hashes it); default the file path and line number."
        ),
    ] = None,
    title_field: Annotated[
        str | None,
        typer.Option(help="Field with the document title (BEIR: title); kept for held-out documents (titles:DIR)."),
    ] = None,
    html: Annotated[
        bool, typer.Option("--html", help="Extract the main text of raw HTML with trafilatura.")
    ] = DEFAULTS.html,
    split: Annotated[str, typer.Option(help="Split of a Hugging Face dataset.")] = DEFAULTS.split,
    model: Annotated[
        str | None,
        typer.Option(
            "--mining-model", help="Model that encodes the passages (name or path); default all-MiniLM-L6-v2."
        ),
    ] = None,
    prompt: Annotated[str | None, typer.Option(help='Prompt text before each passage, e.g. "passage: " (E5).')] = None,
    prompt_name: Annotated[str | None, typer.Option(help="Name of a prompt stored in the model.")] = None,
    device: Annotated[str | None, typer.Option(help="Torch device; default: all GPUs when present.")] = None,
    batch_size: Annotated[
        int, typer.Option("--encode-batch-size", help="Passages per encoding batch.")
    ] = DEFAULTS.batch_size,
    encode_backend: Annotated[str, typer.Option(help=OPTION_HELP)] = DEFAULTS.encode_backend,
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = DEFAULTS.precision,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per passage.")] = DEFAULTS.max_tokens,
    min_tokens: Annotated[
        int, typer.Option(help="A passage closes at a block end after this many.")
    ] = DEFAULTS.min_tokens,
    overlap_tokens: Annotated[
        int, typer.Option(help="Tokens repeated after a cut inside a block.")
    ] = DEFAULTS.overlap_tokens,
    max_passages: Annotated[int, typer.Option(help="Most passages per document.")] = DEFAULTS.max_passages,
    threshold: Annotated[
        float | None,
        typer.Option(
            help=f"A fixed minimum centrality of an anchor; --threshold {PAPER_THRESHOLD} is the paper's (set for E5). "
            f"Default: --threshold-quantile {DEFAULT_THRESHOLD_QUANTILE}."
        ),
    ] = None,
    threshold_quantile: Annotated[
        float | None,
        typer.Option(
            help="Anchors are the passages above this quantile of the corpus's centralities. Default "
            f"{DEFAULT_THRESHOLD_QUANTILE} (the median), chosen because centralities depend on the model: with "
            "all-MiniLM-L6-v2 it gives paper-like coverage on BBC News and Debian pages, where 0.825 leaves many "
            "documents without groups (docs/mining.md)."
        ),
    ] = None,
    top_k: Annotated[int, typer.Option(help="Related passages per anchor (paper: 4).")] = DEFAULTS.top_k,
    rank_by: Annotated[
        str, typer.Option(help="fused (paper) | embedding | tfidf | bm25 (the lexical score alone, no cosine).")
    ] = DEFAULTS.rank_by,
    positive: Annotated[str, typer.Option(help="mined (paper) | random (ablation).")] = DEFAULTS.positive,
    pairs: Annotated[
        str,
        typer.Option(
            help="mined | random-span (Contriever-style baseline) | inverse-cloze (a sentence of each anchor as the "
            "query, the passage of its document its BM25 ranks first as the positive)."
        ),
    ] = DEFAULTS.pairs,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the random ablations and of --holdout. Default 0; with --merge, the folder's.",
            show_default=False,
        ),
    ] = None,
    holdout: Annotated[
        float | None,
        typer.Option(
            help="Fraction of whole documents (chosen by a hash of --seed and the document id) kept apart in "
            "DIR/heldout/ and never trained on: the material of the label-free check. Default 0: none; with "
            "--merge, the folder's (its held-out part is kept).",
            show_default=False,
        ),
    ] = None,
    hard_negatives: Annotated[
        int | None,
        typer.Option(
            help="After the merge, add K hard negatives per group (columns negative_1..K): the anchor's nearest "
            "passages of OTHER documents, embedded by the mining model, minus likely false negatives "
            "(--hard-negative-max-ratio). Default 0: none (the paper's data); with --merge, the folder's own K, so a "
            "re-merge keeps its negatives (--hard-negatives 0 drops them). Read by recipe change-only-positive-hard."
        ),
    ] = None,
    lexical_candidates: Annotated[
        int | None,
        typer.Option(
            help="After the merge, add L lexical candidates per group (columns lexical_1..L): BM25's top passages of "
            "OTHER documents for the anchor across the corpus (the bm25 reference's settings), which the hybrid "
            "teacher ranks beside the batch's own. Default 0: none; with --merge, the folder's own L. Read by recipe "
            "hybrid-teacher-lexical."
        ),
    ] = None,
    hard_negative_max_ratio: Annotated[
        float,
        typer.Option(help="Drop a candidate whose cosine to the anchor exceeds this x the positive's (NV-Retriever)."),
    ] = 0.95,
    structure: Annotated[
        str | None,
        typer.Option(
            help="After the merge, also write DIR/structure: groups whose anchor is a title, a section heading or "
            "a link text of a training document and whose positive is a passage it names (a title: the most central "
            "passage; a heading: its section's first; a link of an --html page: the first passage of the page it "
            "points at in the corpus, of the section its #fragment names, or the passage holding the element it "
            "names), with --hard-negatives K negatives each. Kinds: titles,headings,links. Held-out pages give "
            "none, nor are they link targets; drops are counted by reason in stats.json. Read by recipes "
            "structure-positive and structure-mixed. Default: none.",
        ),
    ] = None,
    structure_mix: Annotated[
        float | None,
        typer.Option(
            help="With --structure: also write DIR/structure-mixed, the training groups and the structure groups "
            "with this share of structure groups (0.5: half), for recipe structure-mixed. Default: none.",
        ),
    ] = None,
    num_shards: Annotated[int, typer.Option(help="Number of shards (one job each).")] = DEFAULTS.num_shards,
    shard_index: Annotated[int | None, typer.Option(help="Run only this shard; default all.")] = None,
    chunk_size: Annotated[int, typer.Option(help="Documents per checkpoint inside a shard.")] = DEFAULTS.chunk_size,
    engine: Annotated[str, typer.Option(help="local (one process, the reference) | ray (a Ray cluster).")] = ENGINES[0],
    num_workers: Annotated[
        int | None, typer.Option(help="Ray encoder workers; default one per GPU, or one per CPU without GPUs.")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS", help="Ray cluster to attach to (HOST:PORT); default a local one for this command."
        ),
    ] = None,
    skip_unreadable: Annotated[
        bool, typer.Option(help="Count unreadable files instead of failing.")
    ] = DEFAULTS.skip_unreadable,
    report: Annotated[bool, typer.Option("--report", help="Also write DIR/report.html (like inspect).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' warnings (always in DIR/xprt-st.log).")
    ] = False,
) -> None:
    """Turn a document corpus into xPRT training groups (anchor + related passages of the same page)."""
    flags = dict(locals())  # the options, before any name below joins them
    # Library warnings go to the run's log file when the folder can hold one; a bad --output is left to
    # the miner's own check, which names it before any work.
    check_encode_backend(encode_backend, device)
    resolved = resolve_precision(precision, device, encode_backend)
    log_dir = _log_dir(output, merge_dir)
    from xprt_st.models import ModelLoadError

    with (
        command_logging("mine", log_dir, verbose=verbose, progress=not quiet, show_info=False),
        command_progress("mine", console, not quiet),
        contextlib.ExitStack() as held,  # a re-merged folder's lock, from the merge to the last pass that writes
    ):
        try:
            mined, finished = _stages(flags)
            folder = mined.config.folder
            if merge_dir is not None and merge_dir.is_dir():  # else the merge names the missing run
                held.enter_context(MiningLayout(merge_dir).lock())
            run_pipeline([mined, finished], folder)
            if mined.shard is not None:
                _say(
                    f"shard {mined.shard.shard_index} complete (chunks computed {mined.shard.chunks_computed}, reused "
                    f"{mined.shard.chunks_reused}); the merge runs when every shard is complete, or: "
                    f"xprt-st mine --merge {output}"
                )
                return
            stats = finished.stats or {}
            for derived in (STRUCTURE_DIR, STRUCTURE_MIXED_DIR):
                stale = stale_draw_problem(folder / derived)
                if stale is not None:  # train refuses it until it is written again
                    _say(f"note: {stale}")
        except ModelLoadError as error:
            raise report_error(error, option="--mining-model") from error
        except ValueError as error:  # project errors (no groups: exit 1) end in the command class's handler
            raise report_error(error) from error
        Console(emoji=False).print(summary_table(stats))
        if pairs != "random-span":  # random spans encode nothing
            _say(f"precision: {resolved.precision} ({resolved.reason})")
        draw_caveat = (stats.get("holdout") or {}).get("draw_caveat")
        if draw_caveat:
            console.print(f"note: {draw_caveat}", highlight=False, markup=False)
        if report:
            console.print(f"report: {write_report(folder)}", markup=False)


def _stages(flags: dict[str, Any]) -> tuple[MineStage, AfterMergeStage]:
    """``xprt-st mine``'s two stages from its flags (:class:`MiningConfig` and :class:`AfterMerge` take the flags of
    their field names), each flag checked before any work in the order the options are read."""
    if flags["threshold"] is not None and flags["threshold_quantile"] is not None:
        raise typer.BadParameter("give --threshold or --threshold-quantile, not both")
    merge_dir, output, overwrite, corpus = flags["merge_dir"], flags["output"], flags["overwrite"], flags["corpus"]
    seed, holdout = _held_out_draw(merge_dir, flags["seed"], flags["holdout"])
    after = _after_merge(
        config_from(
            AfterMerge,
            flags,
            hard_negatives=flags["hard_negatives"] or 0,
            lexical_candidates=flags["lexical_candidates"] or 0,
            max_ratio=flags["hard_negative_max_ratio"],
            structure=(),
            structure_mix=flags["structure_mix"],
            seed=seed,
        ),
        (flags["hard_negatives"] is None, flags["lexical_candidates"] is None),
        flags["structure"],
        merge_dir if merge_dir is not None else (None if overwrite else output),
        merge_dir,
    )
    config = config_from(MiningConfig, flags, seed=seed, holdout=holdout)
    if merge_dir is not None and (corpus or output is not None or overwrite):
        raise typer.BadParameter("--merge DIR re-merges a stored run: give no CORPUS, --output or --overwrite")
    if merge_dir is None and (not corpus or output is None):
        raise typer.BadParameter("give CORPUS... and --output DIR (or --merge DIR)")
    settings = config_from(MineSettings, flags, mining=config, corpus=tuple(corpus or ()), progress=not flags["quiet"])
    mined = MineStage(settings, say=_say)
    return mined, AfterMergeStage(after, mined, model=flags["model"], say=_say)


def _say(line: str) -> None:
    console.print(line, markup=False)


def _log_dir(output: Path | None, merge_dir: Path | None) -> Path | None:
    """The folder whose xprt-st.log takes the libraries' warnings: the one mined into, when it can hold one (a bad
    --output is left to the miner's own check, which names it before any work)."""
    log_dir = merge_dir if merge_dir is not None else output
    too_long = path_length_problem(log_dir, "--merge" if merge_dir is not None else "--output") if log_dir else None
    if too_long is not None:  # any look at such a path raises OSError (Errno 36)
        console.print(f"[bold red]error:[/] {escape(too_long)}", highlight=False)
        raise typer.Exit(2)
    if log_dir is not None:
        try:
            check_output_folder(log_dir, "--output")
        except OutputPathError:
            return None
    return log_dir


def _after_merge(
    after: AfterMerge,
    unset: tuple[bool, bool],
    structure: str | None,
    stored_run: Path | None,
    merge_dir: Path | None,
) -> AfterMerge:
    """The chain after the merge from its flags: without --hard-negatives (--lexical-candidates) a re-merge keeps the
    folder's; the structure kinds parsed, their mix and the stored run checked (the counts are the stage's own
    check, :meth:`~xprt_st.pipeline.stages.AfterMergeStage.check`)."""
    for given, key, what in zip(
        unset, ("hard_negatives", "lexical_candidates"), ("hard negatives", "lexical candidates"), strict=True
    ):
        if given and merge_dir is not None:
            after = replace(after, **{key: _stored_count(merge_dir, key)})
            if getattr(after, key):
                console.print(
                    f"keeping the {getattr(after, key)} {what} per group that {merge_dir} was mined with "
                    f"(--{key.replace('_', '-')} 0 drops them)",
                    markup=False,
                )
    try:
        kinds = parse_kinds(structure)
        if after.structure_mix is not None and not kinds:
            raise ValueError(
                f"--structure-mix {after.structure_mix} mixes the structure pairs into the mined groups: give "
                "--structure too (e.g. --structure titles,headings,links)"
            )
        if after.structure_mix is not None and not 0 < after.structure_mix < 1:
            raise ValueError(f"--structure-mix {after.structure_mix}: give a share in (0, 1) with --structure")
        old_run = links_problem(stored_run, kinds) if stored_run is not None else None
        if old_run is not None:
            raise ValueError(old_run)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return replace(after, structure=kinds)


def _held_out_draw(merge_dir: Path | None, seed: int | None, holdout: float | None) -> tuple[int, float]:
    """``--seed`` and ``--holdout`` as given, else (for ``--merge DIR``) the ones DIR was merged with, else the
    defaults. The held-out part is part of a mined folder's identity: a re-merge to retune the threshold or add
    structure pairs keeps it (and says so) unless the user gives another draw."""
    stored = (read_stats(merge_dir, unfinished_ok=True) or {}).get("settings", {}) if merge_dir is not None else {}
    kept = []
    if seed is None:
        seed = stored.get("seed", DEFAULTS.seed) if isinstance(stored.get("seed"), int) else DEFAULTS.seed
        kept.append(f"--seed {seed}")
    if holdout is None:
        value = stored.get("holdout")
        holdout = float(value) if isinstance(value, int | float) else DEFAULTS.holdout
        kept.append(f"--holdout {holdout:g}")
    if merge_dir is not None and stored.get("holdout") and kept:
        console.print(
            f"keeping the held-out draw {merge_dir} was merged with ({', '.join(kept)}): its held-out documents "
            "stay out of training (--holdout 0 trains on them)",
            markup=False,
        )
    return seed, holdout


def _stored_count(folder: Path, key: str) -> int:
    """The hard negatives (``key``: or lexical candidates) per group a mined folder holds (0 when it holds none or
    has no stats yet)."""
    try:
        return int((read_stats(folder, unfinished_ok=True) or {}).get("settings", {}).get(key, 0) or 0)
    except (TypeError, ValueError, AttributeError):
        return 0


@app.command()
def inspect(
    folder: Annotated[Path, typer.Argument(help="A folder written by xprt-st mine.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file; default DIR/report.html.")] = None,
    sample: Annotated[int, typer.Option(help="Documents shown passage by passage.")] = 30,
    seed: Annotated[int, typer.Option(help="Seed of the document sample.")] = 0,
    threshold: Annotated[float | None, typer.Option(help="Threshold to draw; default the mined one.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also show the libraries' warnings.")] = False,
) -> None:
    """Write an HTML report to check the anchor filter on your corpus (paper adoption step 2)."""
    if sample < 0:
        console.print(f"[bold red]error:[/] --sample {sample}: give 0 or more documents to show")
        raise typer.Exit(2)
    with command_logging("inspect", None, verbose=verbose, progress=False, show_info=not quiet):
        path = write_report(folder, output, sample=sample, seed=seed, threshold=threshold)
    if not quiet:
        console.print(f"report: {path}", markup=False)
