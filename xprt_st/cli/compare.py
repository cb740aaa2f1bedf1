"""``xprt-st compare``: train every objective of the paper's comparison on one mined corpus and tabulate the gains."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from xprt_st.cli.app import app
from xprt_st.precision import OPTION_HELP as PRECISION_HELP


def _int_list(value: str | None, flag: str = "--seeds") -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{value!r}: give comma-separated integers, e.g. 1,2,3", param_hint=flag) from None


def _str_list(value: str | None) -> list[str] | None:
    return None if value is None else [part.strip() for part in value.split(",") if part.strip()]


@app.command()
def compare(
    config: Annotated[Path, typer.Option("--config", "-c", help="Comparison YAML, e.g. benchmarks/compare-cpu.yaml.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Run folder; reuse it to continue a killed run.")],
    seeds: Annotated[str | None, typer.Option(help="Comma-separated training seeds (replaces the config's).")] = None,
    recipes: Annotated[str | None, typer.Option(help="Comma-separated recipes (replaces the config's).")] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Starting model (replaces the config's); it also mines unless the config sets mining_model."),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Training steps of every recipe.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Groups per step of every recipe.")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Peak learning rate of every recipe.")] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            help="Of mining, every training and every score (replaces the config's, default auto). " + PRECISION_HELP
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the corpus files and named tasks (default: the config's data_dir, else $XPRT_DATA_DIR, "
            "else ../shared/data)."
        ),
    ] = None,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="Only rewrite the report from the scores present now.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress displays.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' warnings (always in OUTPUT/xprt-st.log).")
    ] = False,
) -> None:
    """Same corpus, steps, batch and schedule; only the objective changes. Writes OUTPUT/compare.{md,csv,png}.

    \b
    xprt-st compare --config benchmarks/compare-cpu.yaml \\
      --output runs/compare-cpu
    """
    from xprt_st.cli.common import check_output_folder, command_logging, report_error
    from xprt_st.compare.command import run_compare
    from xprt_st.compare.config import CompareConfigError, load_compare_config
    from xprt_st.compare.report import gain_table
    from xprt_st.compare.run import check_compare_inputs
    from xprt_st.mining.config import MiningConfigError, MiningInputError
    from xprt_st.models import check_model
    from xprt_st.output_folder import hold_folder

    progress = not quiet
    console = Console(stderr=True, emoji=False)
    training = {
        key: value
        for key, value in (("max_steps", max_steps), ("batch_size", batch_size), ("learning_rate", learning_rate))
        if value is not None
    }
    overrides = {
        "seeds": _int_list(seeds),
        "recipes": _str_list(recipes),
        "model": model,
        "data_dir": str(data_dir) if data_dir is not None else None,
        "training": training or None,
        "precision": precision,
    }
    # a project error before the run ends the command with its one line and exit code (cli.common.report_error)
    check_output_folder(output, "--output")
    flags = {"seeds": "--seeds", "recipes": "--recipes", "precision": "--precision"}
    resolved = load_compare_config(config, overrides, flags=flags)
    if not report_only:
        check_model(resolved.model, "--model" if model else f"{config}: model")
        if resolved.mining_model is not None:
            check_model(resolved.mining_model, f"{config}: mining_model")
    tasks = check_compare_inputs(resolved, output, report_only)
    folder = hold_folder(output, "compare")
    try:
        with command_logging("compare", output, verbose=verbose, progress=progress, folder=folder):
            result = run_compare(resolved, output, progress=progress, report_only=report_only, tasks=tasks)
    except MiningConfigError as error:  # OUTPUT/mined is another corpus's or setting's run: kept, not mixed
        seeding = (
            " To seed a run folder with another run's mining, link its corpus/ (mined/ records the corpus file's "
            "path) and copy mined/ and data/."
            if isinstance(error, MiningInputError)
            else ""
        )
        advice = f" Give a new --output, or delete {output / 'mined'} to mine again."
        raise report_error(error, exit_code=1, message=error.reason + advice + seeding) from error
    except CompareConfigError as error:  # found only after mining (no structure pairs): the mining is kept
        raise report_error(error, exit_code=1) from error

    Console(emoji=False).print(gain_table(result))
    console.print(f"[green]done:[/green] {escape(str(output))}/compare.md, compare.csv, compare.png", highlight=False)
