"""``xprt-st interpolate``: mix a starting model's and a trained model's weights; pick the mix without labels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xprt_st.cli.app import app
from xprt_st.precision import OPTION_HELP as PRECISION_HELP
from xprt_st.precision import check_precision, resolve_precision, use_precision

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
    from xprt_st.cli.common import OutputPathError, check_model, command_logging
    from xprt_st.evaluation.label_free import TASK_PREFIX, load_heldout_task
    from xprt_st.interpolate import AlphaError, check_alpha, parse_alphas, start_problem
    from xprt_st.output_folder import hold_folder
    from xprt_st.training.heldout_contract import contamination_warning, refuse_overlap

    # every project error below ends the command with its one line and exit code (xprt_st.cli.common.report_error)
    if (alpha is None) == (alphas is None):
        raise AlphaError("give either --alpha A, or --alphas A1,A2,... with --select mined:DIR")
    if alphas is not None and select is None:
        raise AlphaError("--alphas needs --select mined:DIR, the mined folder whose held-out part picks alpha")
    if select is not None and alphas is None:
        raise AlphaError("--select picks among --alphas; give --alphas 0,0.25,0.5,0.75,1")
    candidates = [check_alpha(alpha)] if alpha is not None else parse_alphas(alphas or "")
    check_precision(precision)
    heldout = None
    if select is not None:
        if not select.startswith(TASK_PREFIX):
            raise AlphaError(f"--select {select!r}: expected mined:DIR, the folder written by xprt-st mine")
        heldout = load_heldout_task(select[len(TASK_PREFIX) :])
        refuse_overlap([start, trained], heldout.path, f"interpolate --select {select}")
        duplicates = contamination_warning(heldout.path)
        if duplicates is not None:
            err_console.print(f"[bold yellow]warning:[/bold yellow] {escape(duplicates)}", highlight=False)
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
        from xprt_st.interpolate import check_same_architecture, save_interpolated, select_alpha
        from xprt_st.interpolate import interpolate as mix
        from xprt_st.models import load_model

        start_model = load_model(start, device=device)
        trained_model = load_model(trained, device=device)
        check_same_architecture(start_model, trained_model)
        if heldout is not None:  # only the label-free scoring encodes
            for loaded in (start_model, trained_model):
                use_precision(loaded, resolve_precision(precision, loaded.device.type).precision)
        selection = None
        if heldout is not None:
            selection, model = select_alpha(
                start_model,
                trained_model,
                candidates,
                heldout,
                start_name=start,
                trained_name=trained,
                batch_size=batch_size,
            )
            chosen = selection.chosen.alpha
        else:
            chosen = candidates[0]
            model = mix(start_model, trained_model, chosen)
        save_interpolated(model, output, start=start, trained=trained, alpha=chosen, selection=selection)

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
