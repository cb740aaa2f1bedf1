"""`xprt-st quickstart`: the README's main job, offline, on the data shipped with the package or on yours."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xprt_st.cli.app import app
from xprt_st.encode_backend import OPTION_HELP, check_encode_backend
from xprt_st.precision import OPTION_HELP as PRECISION_HELP
from xprt_st.progress_lines import heartbeat_for
from xprt_st.quickstart.defaults import DEFAULTS, HOLDOUT, LABEL_FREE_NOTE, closing_note, hybrid_note
from xprt_st.stage_timing import StageTimer, format_rows, startup_row

console = Console(emoji=False)  # a task or folder named like :m: stays text


@app.command()
def quickstart(
    output: Annotated[Path, typer.Option("--output", "-o", help="Run folder (mined data, model, evaluation).")] = Path(
        "xprt-quickstart"
    ),
    corpus: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<file>",
            help="Your documents, as xprt-st mine reads them (JSONL/JSONL.gz/Parquet files, one-document "
            ".txt/.md/.html files, folders or zips of them); repeat for several. Default: the shipped "
            "Python-docs pages.",
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="With --corpus: your labelled BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) to score "
            "start and result on; the label-free check on held-out documents runs always."
        ),
    ] = None,
    recipe: Annotated[str, typer.Option(help="Recipe to train (name or YAML).")] = DEFAULTS.recipe,
    text_field: Annotated[
        str | None, typer.Option(help="With --corpus: field with the text (default 'text'; with --html 'html').")
    ] = None,
    id_field: Annotated[
        str | None,
        typer.Option(help="With --corpus: field with the document id; it decides which documents are held out."),
    ] = None,
    title_field: Annotated[
        str | None, typer.Option(help="With --corpus: field with the document title (where xprt-st mine has one).")
    ] = None,
    html: Annotated[bool, typer.Option("--html", help="With --corpus: the text is raw HTML (trafilatura).")] = False,
    model: Annotated[str | None, typer.Option(help="Starting model; default the offline all-MiniLM-L6-v2.")] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            help=f"Training steps of the recipe (default {DEFAULTS.max_steps} on the shipped pages, "
            f"{DEFAULTS.corpus_max_steps} with --corpus, the in-domain sweep's best, at most one pass over the mined "
            "groups)."
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Groups per step.")] = DEFAULTS.batch_size,
    seed: Annotated[int, typer.Option(help="Seed for mining ablations, training and evaluation.")] = 42,
    holdout: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=0.95,
            help="Fraction of pages held out of training for the label-free check (0: no check).",
        ),
    ] = HOLDOUT,
    max_documents: Annotated[
        int | None,
        typer.Option(min=1, hidden=True, help="Mine only the first N of the 100 shipped pages (tests, quick looks)."),
    ] = None,
    encode_backend: Annotated[str, typer.Option(help=OPTION_HELP)] = "torch",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete what an earlier quickstart wrote into --output (only that) and start again: a rerun with "
            "other settings is refused without it, naming what differs.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress displays.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' warnings (always in OUTPUT/xprt-st.log).")
    ] = False,
) -> None:
    """Mine documents, pre-train (only the positive changes, hard negatives), evaluate: shipped data or yours.

    \b
    On the shipped Python-docs pages, scored on python-faq:
      xprt-st quickstart
    On your documents, scored on your BEIR folder and the label-free check:
      xprt-st quickstart --corpus my.jsonl --id-field id --task my-beir/ -o out/
    """
    flags = dict(locals())  # the options, before any name below joins them
    from xprt_st.cli.common import check_output_folder, command_logging, config_from, report_error
    from xprt_st.encode_runtime import ExportCacheError
    from xprt_st.mining.config import MiningError
    from xprt_st.mining.reader import CorpusError
    from xprt_st.models import ModelLoadError, check_model
    from xprt_st.output_folder import hold_folder
    from xprt_st.quickstart.config import QuickstartConfig
    from xprt_st.quickstart.run import QuickstartInputError, check_folder, plan_quickstart, run_quickstart
    from xprt_st.recipe import load_recipe

    progress = not quiet
    try:
        check_encode_backend(encode_backend)
        task_folder = Path(task) if task is not None else None
        config = config_from(QuickstartConfig, flags, corpus=tuple(corpus or ()), task=task_folder)
        check_output_folder(output, "--output")
        check_quickstart_values(max_steps=config.max_steps, batch_size=batch_size, seed=seed)
        load_recipe(recipe)
        plan = plan_quickstart(config)
        check_model(model, "--model")
        folder = hold_folder(output, "quickstart", overwrite=overwrite)
    except ValueError as error:  # a bad value of an option (project errors end in the command class's handler)
        raise report_error(error) from error
    try:  # a stage of an earlier run made with other settings, or a model/ the quickstart never wrote
        check_folder(plan, folder)
    except QuickstartInputError:
        folder.release(record=False)
        raise
    console.rule("[bold]xprt-st quickstart[/bold]: mine -> pre-train -> evaluate")
    console.print(f"precision: {config.precision} ({config.precision_reason})", highlight=False, markup=False)
    startup = startup_row()  # the time before the first stage, which the stages do not count
    timer = StageTimer()
    try:
        with (
            command_logging("quickstart", output, verbose=verbose, progress=progress, show_info=verbose, folder=folder),
            heartbeat_for(timer, console, progress),
        ):
            summary = run_quickstart(config, progress=progress, folder=folder, timer=timer, plan=plan)
    # Found once work began, what was mined is kept (exit 1): no groups, fewer groups than one step, a bad record
    # past the first, an output folder that cannot be written.
    except CorpusError as error:
        raise report_error(error, exit_code=1, option="--corpus") from error
    except (QuickstartInputError, MiningError, ExportCacheError) as error:
        raise report_error(error, exit_code=1) from error
    except ModelLoadError as error:  # --model passed the check of its files but did not load; nothing was mined
        raise report_error(error, option="--model") from error
    _print_summary(summary, startup, output)


def _print_summary(summary: dict, startup: dict | None, output: Path) -> None:
    """What the quickstart ends with: the mining table, the scores, the notes and lines of the checks, the stages."""
    from xprt_st.mining.stats import summary_table

    console.print(summary_table(summary["mining"]))
    if summary["scores"]:
        _print_scores(summary)
    if summary["notes"].get("task_corpus"):
        console.print(f"[bold yellow]note:[/bold yellow] {escape(summary['notes']['task_corpus'])}", highlight=False)
    record = summary.get("label_free")
    if record:
        console.print(label_free_line(record), highlight=False, markup=False)
        if "skipped" not in record:
            console.print(LABEL_FREE_NOTE, highlight=False, markup=False)
    if summary.get("titles"):
        console.print(titles_line(summary["titles"]), highlight=False, markup=False)
    if summary.get("stages"):
        console.print(stage_table([*([startup] if startup else []), *summary["stages"]]))
        from xprt_st.quickstart.config import MODEL
        from xprt_st.training.pace import recorded_pace

        pace = recorded_pace(output / MODEL)
        if pace is not None:
            console.print(f"train: {pace.line()}", highlight=False, markup=False)
    console.print(
        f"Everything is in [bold]{escape(str(output))}[/bold]; the trained model loads with "
        f"SentenceTransformer('{escape(str(output))}/model').",
        highlight=False,
    )


def stage_table(rows: list[dict]) -> Table:
    """The closing table of the stages: wall and CPU seconds, and whether a stage reused an encoding."""
    table = Table(title="Time by stage (seconds)")
    table.add_column("stage", style="bold")
    table.add_column("wall", justify="right")
    table.add_column("CPU", justify="right")
    table.add_column("texts/s", justify="right")
    table.add_column("reused vectors")
    for cells in format_rows(rows):
        table.add_row(*cells)
    return table


def _print_scores(summary: dict) -> None:
    """The closing table: each labelled task's nDCG@10 before and after, the gain and its paired 95% interval, and
    BM25's line with the trained model's difference from it (the reference a search team compares with first), and
    the hybrids of BM25 with the start and with the trained model, with the trained hybrid's difference from the
    start's (whether pre-training still adds where a team serves a hybrid)."""
    table = Table(title="Retrieval before and after pre-training (nDCG@10)")
    table.add_column("model", style="bold")
    tasks = list(summary["gain"])
    for task in tasks:
        table.add_column(escape(task), justify="right")
    for name, scores in summary["scores"].items():
        table.add_row(escape(name), *[f"{scores[task]:.4f}" for task in tasks])
    table.add_row("gain", *[f"{summary['gain'][task]:+.4f}" for task in tasks], style="italic")
    table.add_row("gain, 95% CI", *[_bounds(summary["interval"][task]) for task in tasks], style="italic")
    reference = summary.get("bm25", {})
    if reference.get("scores"):
        table.add_section()
        table.add_row("BM25 (reference)", *[f"{reference['scores'][task]:.4f}" for task in tasks])
        over = reference["after_minus_bm25"]
        cells = [
            "n/a" if over[task]["difference"] is None else f"{over[task]['difference']:+.4f} {_bounds(over[task])}"
            for task in tasks
        ]
        table.add_row("after - BM25, 95% CI", *cells, style="italic")
    hybrid = summary.get("hybrid") or {}
    if hybrid.get("scores"):
        table.add_section()
        for name, scores in hybrid["scores"].items():
            table.add_row(f"{name} (BM25 + model)", *[f"{scores[task]:.4f}" for task in tasks])
        over = hybrid["trained_minus_start"]
        cells = [
            "n/a" if over[task]["difference"] is None else f"{over[task]['difference']:+.4f} {_bounds(over[task])}"
            for task in tasks
        ]
        table.add_row("hybrid trained - start, 95% CI", *cells, style="italic")
    console.print(table)
    for note in (closing_note(summary), hybrid_note(summary)):
        if note:
            console.print(note, highlight=False, markup=False)


def check_quickstart_values(*, max_steps: int | None, batch_size: int, seed: int) -> None:
    """Refuse quickstart's own flags before anything is mined (the recipe would refuse them only after mining).

    Raises:
        ValueError: one line naming the quickstart flag.
    """
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"--max-steps {max_steps}: the quickstart trains at least 1 step; give --max-steps 20")
    if batch_size < 2:
        raise ValueError(
            f"--batch-size {batch_size}: in-batch negatives need at least 2 groups a step; give --batch-size 16"
        )
    if not 0 <= seed < 2**32:
        raise ValueError(f"--seed {seed}: must be in [0, 2**32)")


def label_free_line(record: dict) -> str:
    """The quickstart's label-free line (held-out documents of the mined folder, no labels), or why there is none."""
    from xprt_st.evaluation.label_free import format_comparison

    if "skipped" in record:
        return f"No label-free check: {record['skipped']}"
    return f"Label-free nDCG@10 on {record['queries']} held-out anchors: {format_comparison(record)}"


def titles_line(record: dict) -> str:
    """The quickstart's ``titles:DIR`` line: the held-out titles and headings as queries, start against trained,
    then the record's caveat; "written by people" only when most queries are not plain-text first lines."""
    caveat = record.get("caveat")
    by_people = 2 * int(record.get("first_lines", 0)) <= int(record["queries"])
    source = " (written by people, not by the mining model)" if by_people else ""
    return (
        f"Titles and headings nDCG@10 on {record['queries']} held-out titles/headings{source}: start "
        f"{record['start']:.4f}, trained {record['model']:.4f}, difference {record['difference']:+.4f} "
        f"[{record['ci_low']:+.4f}, {record['ci_high']:+.4f}]" + (f". Caveat: {caveat}" if caveat else "")
    )


def _bounds(fields: dict[str, str]) -> str:
    if not fields["ci_low"]:
        return "n/a"
    return f"[{float(fields['ci_low']):+.4f}, {float(fields['ci_high']):+.4f}]"
