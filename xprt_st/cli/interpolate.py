"""``xprt-st interpolate``: mix a starting model's and a trained model's weights; pick the mix without labels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xprt_st.cli.app import app
from xprt_st.precision import OPTION_HELP as PRECISION_HELP
from xprt_st.precision import check_precision

if TYPE_CHECKING:
    from xprt_st.evaluation.label_free import HeldOut
    from xprt_st.interpolate import InterpolateConfig, Selection

console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


@app.command()
def interpolate(
    start: Annotated[str, typer.Argument(help="The model training started from (name or folder; 'default').")],
    trained: Annotated[str, typer.Argument(help="The trained model (e.g. the --output of xprt-st train).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder of the interpolated model (required).")],
    alpha: Annotated[
        float | None, typer.Option("--alpha", help="Weight of the trained model: (1-A)*start + A*trained.")
    ] = None,
    alphas: Annotated[
        str | None, typer.Option("--alphas", help="Comma-separated weights to choose from with --select.")
    ] = None,
    select: Annotated[
        str | None,
        typer.Option(
            "--select",
            help="mined:DIR: pick the alpha by the label-free task on DIR's held-out part. That task favours the "
            "mining model's own neighbours and so tends to pick small alphas; choose with labels where you have them.",
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--encode-batch-size", help="Passages per encoding batch of the label-free task.")
    ] = 32,
    device: Annotated[str | None, typer.Option(help="Torch device, e.g. cpu or cuda.")] = None,
    precision: Annotated[
        str, typer.Option(help="Of the --select scoring (the weights are mixed in fp32). " + PRECISION_HELP)
    ] = "auto",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the model an earlier interpolate wrote in --output.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors and the result.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log progress and the libraries' warnings (in OUTPUT/xprt-st.log).")
    ] = False,
) -> None:
    """Write a plain model with weights (1-A)*START + A*TRAINED; with --alphas and --select, A is chosen.

    \b
      xprt-st interpolate default runs/xprt --alpha 0.5 --output runs/xprt-half
      xprt-st interpolate default runs/xprt --alphas 0,0.25,0.5,0.75,1 \\
        --select mined:mined/ --output runs/xprt-mixed
    """
    flags = dict(locals())  # the options, before any name below joins them
    from xprt_st.cli.common import OutputPathError, command_logging, config_from
    from xprt_st.interpolate import AlphaError, InterpolateConfig, run_interpolation, start_problem
    from xprt_st.models import check_model
    from xprt_st.output_folder import hold_folder

    # every project error below ends the command with its one line and exit code (xprt_st.cli.common.report_error)
    config = config_from(InterpolateConfig, flags)
    config.candidates()
    check_precision(precision)
    heldout = _heldout(config)
    check_model(start, "START")
    check_model(trained, "TRAINED")
    mismatch = start_problem(start, trained)
    if mismatch is not None:
        raise AlphaError(mismatch)
    folder = hold_folder(output, "interpolate", overwrite=overwrite)
    if (output / "modules.json").is_file():
        folder.release(record=False)
        raise OutputPathError(
            f"--output {output} already holds a model written by xprt-st interpolate; choose another folder, or "
            "pass --overwrite to replace it"
        )
    with command_logging("interpolate", output, verbose=verbose, progress=verbose, show_info=not quiet, folder=folder):
        chosen, selection = run_interpolation(config, heldout)
    _print_result(output, chosen, selection)


def _heldout(config: InterpolateConfig) -> HeldOut | None:
    """The label-free task of ``--select mined:DIR`` (None without it), refused when either model trained on its
    held-out documents; a warning when its texts repeat training texts."""
    from xprt_st.evaluation.label_free import TASK_PREFIX, load_heldout_task
    from xprt_st.interpolate import AlphaError
    from xprt_st.training.heldout_contract import contamination_warning, refuse_overlap

    select = config.select
    if select is None:
        return None
    if not select.startswith(TASK_PREFIX):
        raise AlphaError(f"--select {select!r}: expected mined:DIR, the folder written by xprt-st mine")
    heldout = load_heldout_task(select[len(TASK_PREFIX) :])
    refuse_overlap([config.start, config.trained], heldout.path, f"interpolate --select {select}")
    duplicates = contamination_warning(heldout.path)
    if duplicates is not None:
        err_console.print(f"[bold yellow]warning:[/bold yellow] {escape(duplicates)}", highlight=False)
    return heldout


def _print_result(output: Path, chosen: float, selection: Selection | None) -> None:
    """The selection table (with ``--select``) and the line naming the model written."""
    if selection is not None:
        table = Table(title=f"Label-free nDCG@10 on {escape(selection.task)} (held-out documents)")
        for column in ("alpha", "nDCG@10", "vs start, 95% CI", "10-NN overlap"):
            table.add_column(column, justify="right")
        for row in selection.scores:
            table.add_row(
                f"{row.alpha:g}" + (" *" if row is selection.chosen else ""),
                f"{row.score:.4f}",
                f"{row.difference:+.4f} [{row.ci_low:+.4f}, {row.ci_high:+.4f}]",
                f"{row.knn_overlap_at_10:.3f}",
            )
        console.print(table)
        console.print(
            f"picked alpha = {chosen:g} (highest label-free score; ties to the smallest alpha); "
            f"the scores are in {output / 'interpolation.json'}",
            highlight=False,
            markup=False,
        )
    console.print(
        f"wrote {output} (alpha = {chosen:g}); it loads with SentenceTransformer({str(output)!r})",
        highlight=False,
        markup=False,
    )
