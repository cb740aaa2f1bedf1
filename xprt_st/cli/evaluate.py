"""`xprt-st evaluate` and `xprt-st finetune-compare`: thin wiring over :mod:`xprt_st.evaluation` and
:mod:`xprt_st.finetune.run`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from xprt_st.cli.app import app
from xprt_st.cli.common import report_error
from xprt_st.encode_backend import OPTION_HELP, load_encoder
from xprt_st.precision import OPTION_HELP as PRECISION_HELP
from xprt_st.precision import resolve_precision

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation.run import EvaluateConfig, EvaluationReport
    from xprt_st.output_folder import OutputFolder

console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

VERBOSE_HELP = "Log progress, and show the libraries' warnings (always in OUTPUT/xprt-st.log)."
QUIET_HELP = "Print only errors and the results."


def _fail(error: Exception) -> typer.Exit:
    """A plain ``ValueError`` of a bad option value (project errors reach the command class's handler too)."""
    return report_error(error)


@app.command()
def evaluate(
    models: Annotated[
        list[str] | None,
        typer.Argument(
            help="Models to compare (names or folders); 'default' = the offline all-MiniLM-L6-v2; 'bm25' and "
            "'hybrid:MODEL' (BM25 fused with MODEL by reciprocal ranks) are lexical references for retrieval tasks."
        ),
    ] = None,
    tasks: Annotated[
        list[str],
        typer.Option(
            "--tasks",
            "-t",
            help="Comma-separated tasks: python-faq (ships with the package), the local benchmark tasks arguana, "
            "stsb, sickr, sts12-sts15 (in --data-dir), mined:DIR (the label-free task on a mined folder's held-out "
            "documents), titles:DIR (its held-out titles and headings as queries), a BEIR folder, an STS file, or "
            "an MTEB task name as MTEB spells it (ArguAna; from the hub). "
            "A path with a comma: give it as its own --tasks value, or write the comma as \\,.",
        ),
    ] = ["python-faq"],  # noqa: B006 (typer reads defaults, never mutates them)
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Folder of the named local tasks (default: $XPRT_DATA_DIR, else ../shared/data)."),
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="Name of each model in the table (once per model).")] = None,
    max_queries: Annotated[
        int | None, typer.Option(help="Keep a seeded sample of this many queries (STS: pairs).")
    ] = None,
    max_corpus: Annotated[
        int | None,
        typer.Option(help="Keep this many documents: all judged documents of kept queries plus a seeded sample."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the subsampling.")] = 0,
    overlap_thirds: Annotated[
        bool,
        typer.Option(
            "--overlap-thirds",
            help="Also report nDCG@10 per third of queries by query/target word overlap (Jaccard), per model.",
        ),
    ] = False,
    output_dir: Annotated[Path, typer.Option("--output", "-o", help="Where scores.csv/json/png are written.")] = Path(
        "xprt-eval"
    ),
    cache_dir: Annotated[
        Path | None, typer.Option(help="mteb result cache (default: $XPRT_CACHE_DIR, else ~/.cache/xprt-st/mteb).")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the result cache.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Re-run even when cached results exist.")] = False,
    hybrids: Annotated[
        bool,
        typer.Option(
            help="With bm25 among MODELS, also score hybrid:MODEL for each dense model, and each hybrid against the "
            "first one's (does pre-training still add to a hybrid?)."
        ),
    ] = True,
    batch_size: Annotated[int, typer.Option("--encode-batch-size", help="Texts per encoding batch.")] = 32,
    device: Annotated[str | None, typer.Option(help="Torch device, e.g. cpu or cuda.")] = None,
    encode_backend: Annotated[str, typer.Option(help=OPTION_HELP)] = "torch",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Evaluate one or more models side by side through mteb, offline on local data by default."""
    flags = dict(locals())  # the options, before any name below joins them
    from xprt_st.cli.common import command_logging, config_from
    from xprt_st.evaluation.run import EvaluateConfig
    from xprt_st.pipeline import run_pipeline
    from xprt_st.pipeline.evaluate import EvaluateStage

    specs, labels = tuple(models or ["default"]), tuple(label or ())
    if hybrids and (not labels or len(labels) == len(specs)):  # a label count that is off is refused by the check
        from xprt_st.evaluation.hybrid_lines import with_hybrids

        specs, labels = with_hybrids(specs, labels)
    config = config_from(EvaluateConfig, flags, models=specs, tasks=tuple(tasks), label=labels, show_progress=verbose)
    written: dict[str, Path] = {}

    def present(report: EvaluationReport, folder: OutputFolder) -> None:
        written.update(_present(report, folder, config, quiet=quiet, overlap_thirds=overlap_thirds))

    stage = EvaluateStage(config, present, warn=_warn)
    with command_logging("evaluate", output_dir, verbose=verbose, progress=verbose, show_info=verbose):
        try:
            run_pipeline([stage], output_dir)  # every check first: nothing loaded or written before they pass
        except ValueError as error:
            raise _fail(error) from error
    if not quiet:
        console.print("wrote " + ", ".join(str(path) for path in written.values()), highlight=False, markup=False)


def _warn(line: str) -> None:
    err_console.print(f"[bold yellow]warning:[/bold yellow] {escape(line)}", highlight=False)


def _present(
    report: EvaluationReport, folder: OutputFolder, config: EvaluateConfig, *, quiet: bool, overlap_thirds: bool
) -> dict[str, Path]:
    """What evaluate shows and writes while its folder is held: the precision line, the report (:func:`_write_report`),
    and the removal of an earlier run's results this run did not rewrite; returns the paths written by name."""
    from xprt_st.output_folder import COMMAND_NAMES

    resolved = resolve_precision(config.precision, config.device, config.encode_backend)
    if not quiet:
        console.print(f"precision: {resolved.precision} ({resolved.reason})", highlight=False, markup=False)
    paths = _write_report(report, config, resolved.precision, overlap_thirds=overlap_thirds)
    # its own names (COMMAND_NAMES) are exactly what an evaluate run writes: one run's results replace another's
    _remove_stale_results(folder, list(COMMAND_NAMES["evaluate"][1]), [path.name for path in paths.values()])
    return paths


def _write_report(
    report: EvaluationReport, config: EvaluateConfig, precision: str, *, overlap_thirds: bool
) -> dict[str, Path]:
    """Print the scores (and their differences, with several models), write them to ``config.output_dir``, then
    the overlap thirds and the label-free lines asked for; return the paths written by name."""
    from xprt_st.evaluation.analysis import overlap_thirds_report, thirds_rich_table, write_thirds_csv

    output_dir = config.output_dir
    console.print(report.rich_table())
    if len(report.models) > 1:
        differences = report.differences()
        if differences:
            console.print(report.differences_table(differences))
        _print_hybrid_lines(report)
    paths = report.write(output_dir)
    if overlap_thirds:
        rows = []
        for task in report.tasks:
            if task in report.per_query:
                rows.extend(overlap_thirds_report(report, task))
            elif report.task_objects[task].metadata.type == "Retrieval":
                err_console.print(
                    f"[yellow]--overlap-thirds: skipping {escape(task)} (not a local retrieval task)[/yellow]"
                )
        if rows:
            console.print(thirds_rich_table(rows))
            paths["thirds"] = write_thirds_csv(rows, output_dir / "overlap_thirds.csv")
    specs, tasks = list(config.models), list(config.tasks)
    encoding = {
        "device": config.device,
        "batch_size": config.batch_size,
        "backend": config.encode_backend,
        "cache_root": output_dir,
        "precision": precision,
    }
    drift = _label_free_drift(specs, report.models, tasks, **encoding)
    drift += _titles_intervals(specs, tasks, report, **encoding)
    if drift:
        paths["label_free"] = output_dir / "label_free.json"
        paths["label_free"].write_text(json.dumps(drift, indent=2) + "\n", encoding="utf-8")
    return paths


def _print_hybrid_lines(report: EvaluationReport) -> None:
    """Each hybrid against the first one (the start's, when the start comes first), and where a hybrid is what to
    serve (:mod:`xprt_st.evaluation.hybrid_lines`)."""
    from xprt_st.evaluation.hybrid_lines import hybrid_labels, serve_hybrid_lines

    hybrid = hybrid_labels(report)
    if len(hybrid) > 1:
        rows = report.differences(reference=hybrid[0], models=hybrid[1:])
        if rows:
            console.print(report.differences_table(rows))
    for line in serve_hybrid_lines(report):
        console.print(line, highlight=False, markup=False)


def _quiet_or_print(quiet: bool) -> Callable[[str], None]:
    """Where a library's progress lines go: nowhere with ``--quiet``, else one plain line each on stdout."""

    def say(line: str) -> None:
        if not quiet:
            console.print(line, highlight=False, markup=False)

    return say


def _remove_stale_results(folder: OutputFolder, results: list[str], written: list[str]) -> None:
    """Delete the ``results`` an earlier run of the command left in its folder and this run did not rewrite
    (another run's ``label_free.json`` beside this run's scores would read as this run's); say which."""
    stale = folder.remove_stale(results, written)
    if stale:
        err_console.print(
            f"removed {', '.join(stale)} from {folder.path}: an earlier xprt-st {folder.command} wrote them and this "
            "run has none, so they would read as its results",
            highlight=False,
            markup=False,
        )


def _titles_intervals(
    specs: list[str],
    tasks: list[str],
    report: EvaluationReport,
    *,
    device: str | None,
    batch_size: int,
    backend: str,
    cache_root: Path,
    precision: str,
) -> list[dict[str, Any]]:
    """Each ``titles:DIR`` task's difference with its paired interval against the first model (or the start).

    With several models the per-query scores of the table are compared (nothing is encoded again); with one model
    trained by xprt-st, its recorded starting model is scored on the task here. A task's caveat (few queries, or
    plain-text first lines as titles: :attr:`xprt_st.evaluation.titles.TitlesTask.caveat`) is printed and recorded.
    """
    from xprt_st.evaluation.catalog import split_task_specs
    from xprt_st.evaluation.titles import TASK_PREFIX, comparison_record, load_titles_task, score_model
    from xprt_st.training.trainer import TrainingStateError, read_training_config

    folders = {
        f"{TASK_PREFIX}{Path(name[len(TASK_PREFIX) :]).resolve().name}": name[len(TASK_PREFIX) :]
        for name in split_task_specs(tasks)
        if name.startswith(TASK_PREFIX)
    }
    records: list[dict[str, Any]] = []
    for task, folder in folders.items():
        scores = report.per_query.get(task)
        if not scores:
            continue
        titles = load_titles_task(folder)
        caveat = {"caveat": titles.caveat} if titles.caveat else {}
        if caveat:
            err_console.print(f"{task}: caveat: {titles.caveat}", style="yellow", markup=False, highlight=False)
        if len(specs) > 1:
            reference, start, others = report.models[0], scores[report.models[0]], report.models[1:]
        else:
            try:
                starting = read_training_config(specs[0])["starting_model"]
            except (TrainingStateError, KeyError):
                continue
            reference, others = f"start {starting}", report.models
            model = load_encoder(starting, backend, cache_root, device, precision)
            start = score_model(model, titles, batch_size).per_query
        for label in others:
            row = comparison_record(scores[label], start) | caveat
            console.print(
                f"{task}: {reference} {row['start']:.4f}, {label} {row['model']:.4f}, difference "
                f"{row['difference']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] ({row['verdict']})",
                highlight=False,
                markup=False,
            )
            records.append({"task": task, "model_label": label, "reference_label": reference, **row})
    return records


def _label_free_drift(
    specs: list[str],
    labels: list[str],
    tasks: list[str],
    *,
    device: str | None,
    batch_size: int,
    backend: str,
    cache_root: Path,
    precision: str,
) -> list[dict[str, Any]]:
    """The label-free difference with its interval and the drift of each ``mined:DIR`` task, printed and returned.

    With several models, every model after the first is compared with the first; with one model trained by
    xprt-st, with the starting model its ``training_state/`` records; otherwise there is no reference.
    """
    from xprt_st.evaluation.label_free import TASK_PREFIX, compare_to_reference, format_comparison, load_heldout_task
    from xprt_st.pipeline.evaluate import specs_with
    from xprt_st.training.trainer import TrainingStateError, read_training_config

    mined = specs_with(tasks, TASK_PREFIX)
    if not mined:
        return []
    if len(specs) > 1:
        reference, others = (labels[0], specs[0]), list(zip(labels[1:], specs[1:], strict=True))
    else:
        try:
            start = read_training_config(specs[0])["starting_model"]
        except (TrainingStateError, KeyError):
            err_console.print(
                f"[yellow]{escape(', '.join(mined))}: no drift line; give the starting model too (xprt-st evaluate "
                f"START {escape(specs[0])} ...) to compare with it[/yellow]"
            )
            return []
        reference, others = (f"start {start}", start), [(labels[0], specs[0])]
    loaded: dict[str, SentenceTransformer] = {}

    def model(spec: str) -> SentenceTransformer:
        if spec not in loaded:
            loaded[spec] = load_encoder(spec, backend, cache_root, device, precision)
        return loaded[spec]

    records = []
    for spec in dict.fromkeys(mined):
        heldout = load_heldout_task(spec[len(TASK_PREFIX) :])
        rows = compare_to_reference(
            heldout,
            [(label, model(name)) for label, name in others],
            (reference[0], model(reference[1])),
            batch_size=batch_size,
        )
        for row in rows:
            names = (row["reference_label"], row["model_label"])
            console.print(f"{spec}: {format_comparison(row, names)}", highlight=False, markup=False)
            records.append({"task": spec, **row})
    console.print(
        "The label-free task is a drift and sanity signal, not a verdict: its related passages were chosen by the "
        "mining model.",
        highlight=False,
    )
    return records


@app.command("finetune-compare")
def finetune_compare(
    pretrained: Annotated[
        str | None,
        typer.Option(help="The pre-trained model (name or folder), e.g. an xPRT output; or give --recipe/--mined."),
    ] = None,
    base: Annotated[
        str,
        typer.Option("--model", help="The model pre-training started from; 'default' = all-MiniLM-L6-v2."),
    ] = "default",
    task: Annotated[
        str,
        typer.Option(
            help="Retrieval task for the test queries: python-faq (ships), arguana (in --data-dir), or a BEIR folder."
        ),
    ] = "python-faq",
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Folder of the named local tasks (default: $XPRT_DATA_DIR, else ../shared/data)."),
    ] = None,
    train_pairs: Annotated[
        Path | None,
        typer.Option(help="Labelled pairs (JSONL, or TSV with a header); then every task query is a test query."),
    ] = None,
    train_split: Annotated[
        str | None, typer.Option(help="Use qrels/<SPLIT>.tsv of the task folder as training judgements.")
    ] = None,
    query_field: Annotated[str, typer.Option(help="Query column of --train-pairs.")] = "query",
    positive_field: Annotated[str, typer.Option(help="Positive column of --train-pairs.")] = "positive",
    test_fraction: Annotated[
        float, typer.Option(help="Without labelled pairs: share of the task's queries held out for testing.")
    ] = 0.5,
    domain_field: Annotated[
        str | None, typer.Option(help="Field of a query record (or its metadata) naming its sub-domain.")
    ] = None,
    domain_pattern: Annotated[
        str | None,
        typer.Option(help="Regex on the query id whose group 1 names the sub-domain, e.g. '^test-([a-z]+)-'."),
    ] = None,
    recipe: Annotated[
        str | None, typer.Option(help="Without --pretrained: pre-train BASE with this recipe (name or YAML) first.")
    ] = None,
    mined: Annotated[
        Path | None, typer.Option(help="With --recipe: the mined folder (output of xprt-st mine) to pre-train on.")
    ] = None,
    pretrain_set: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<key=value>",
            help="With --recipe: override a recipe key, e.g. training.max_steps=500 (repeatable).",
        ),
    ] = None,
    max_queries: Annotated[int | None, typer.Option(help="Seeded sample of the task's queries (before folds).")] = None,
    max_corpus: Annotated[int | None, typer.Option(help="Seeded corpus sample (keeps all judged documents).")] = None,
    epochs: Annotated[float, typer.Option(help="Fine-tuning epochs of both models (a float).")] = 1.0,
    batch_size: Annotated[int, typer.Option(help="Training pairs per fine-tuning step (in-batch negatives).")] = 32,
    learning_rate: Annotated[float, typer.Option(help="Fine-tuning peak learning rate.")] = 2e-5,
    seed: Annotated[int, typer.Option(help="Seed of folds, subsampling and training.")] = 0,
    tolerance: Annotated[float, typer.Option(help="Flag a sub-domain whose gain is below -TOLERANCE.")] = 0.0,
    output_dir: Annotated[Path, typer.Option("--output", "-o", help="Where finetune_compare.csv/json go.")] = Path(
        "xprt-finetune"
    ),
    save_models: Annotated[bool, typer.Option("--save-models", help="Also save the two fine-tuned models.")] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete what an earlier finetune-compare wrote in --output, its --recipe model too, and start again.",
        ),
    ] = False,
    device: Annotated[str | None, typer.Option(help="Torch device, e.g. cpu or cuda.")] = None,
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Fine-tune base and pre-trained models identically (MNRL) and compare the gain before and after.

    With --recipe, the model pre-trained into OUTPUT/pretrained is reused by a rerun with the same recipe, overrides,
    mined folder and --model, and refused (naming what differs) with other ones."""
    flags = dict(locals())  # the options, before any name below joins them
    from xprt_st.cli.common import check_output_folder, command_logging, config_from
    from xprt_st.finetune.run import FinetuneCompareConfig, run_finetune_compare
    from xprt_st.models import check_model
    from xprt_st.output_folder import hold_folder

    try:
        check_output_folder(output_dir, "--output")
        check_model(base, "--model")
        if pretrained is not None:
            check_model(pretrained, "--pretrained")
        from xprt_st.evaluation.catalog import check_sample_sizes
        from xprt_st.finetune.folds import check_domain_pattern
        from xprt_st.finetune.result import FinetuneSettings

        resolved = resolve_precision(precision, device)
        settings = FinetuneSettings(
            epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed, precision=resolved.precision
        )
        check_sample_sizes(max_queries=max_queries, max_corpus=max_corpus)
        check_domain_pattern(domain_pattern)
        if not 0 < test_fraction < 1:
            raise ValueError(f"--test-fraction {test_fraction}: must be in (0, 1), the share of queries tested on")
        folder = hold_folder(output_dir, "finetune-compare", "--output", overwrite=overwrite)
    except ValueError as error:
        raise _fail(error) from error
    config = config_from(FinetuneCompareConfig, flags, pretrain_set=tuple(pretrain_set or ()))
    with command_logging(
        "finetune-compare", output_dir, verbose=verbose, progress=verbose, show_info=verbose, folder=folder
    ):
        try:
            result = run_finetune_compare(config, settings, folder, progress=verbose, say=_quiet_or_print(quiet))
        except (ValueError, FileExistsError) as error:
            raise _fail(error) from error
        _remove_stale_results(folder, ["base+ft", "pretrained+ft"], ["base+ft", "pretrained+ft"] if save_models else [])
    console.print(result.rich_table())
    flagged = [row.domain for row in result.rows if row.flag]
    if flagged:
        err_console.print(f"[red]pre-training loses on: {escape(', '.join(flagged))}[/red]", highlight=False)
    paths = [result.to_csv(output_dir / "finetune_compare.csv"), result.to_json(output_dir / "finetune_compare.json")]
    if not quiet:
        console.print("wrote " + ", ".join(str(path) for path in paths), highlight=False, markup=False)
