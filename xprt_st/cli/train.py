"""``xprt-st train``: run a recipe on a mined folder, with resumable checkpoints and a rich display."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from xprt_st.cli.app import app
from xprt_st.precision import OPTION_HELP as PRECISION_HELP


@app.command()
def train(
    recipe: Annotated[
        str, typer.Option("--recipe", help="Recipe name in xprt_st/recipes (xprt, tsdae, ...) or a YAML file.")
    ],
    data: Annotated[
        Path | None,
        typer.Option("--mined", help="Folder written by `xprt-st mine` (required, except with --print-recipe)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Run folder: checkpoint-N/ while training, then the final model (required, except with "
            "--print-recipe).",
        ),
    ] = None,
    setting: Annotated[
        str | None,
        typer.Option("--setting", help="continued (lr 2e-5, retention; the paper: E5, lr 1e-6) or from-bert."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Starting model (name or folder); overrides the setting's.")
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="'last' (newest complete checkpoint in --output) or a checkpoint.")
    ] = None,
    fork_from: Annotated[
        str | None,
        typer.Option(
            "--fork-from",
            help="A checkpoint of another run to continue with this recipe (same optimizer state and schedule).",
        ),
    ] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Optimizer steps (-1: use --epochs).")] = None,
    epochs: Annotated[
        float | None, typer.Option("--epochs", help="Passes over the groups (a float) when --max-steps is -1.")
    ] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Groups per device and step (>= 2).")] = None,
    learning_rate: Annotated[float | None, typer.Option("--learning-rate", help="Peak learning rate.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for initialisation, data order, masking.")] = None,
    save_steps: Annotated[int | None, typer.Option("--save-steps", help="Checkpoint every N steps.")] = None,
    logging_steps: Annotated[int | None, typer.Option("--logging-steps", help="Log loss terms every N steps.")] = None,
    eval_steps: Annotated[
        int | None, typer.Option("--eval-steps", help="With held-out documents: label-free score every N steps.")
    ] = None,
    keep_best: Annotated[
        bool | None,
        typer.Option(
            "--keep-best/--no-keep-best",
            help="End on the checkpoint with the best label-free score. That score favours the mining model's own "
            "neighbours (the held-out groups were chosen by it), so it tends to keep an early checkpoint; choose "
            "with labels where you have them.",
        ),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option("--precision", help="auto (the recipe's default), fp32, bf16 or fp16. " + PRECISION_HELP),
    ] = None,
    max_seq_length: Annotated[int | None, typer.Option("--max-seq-length", help="Token limit per passage.")] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Delete what an earlier train wrote in --output (its files only) and start again."
        ),
    ] = False,
    print_recipe: Annotated[
        bool, typer.Option("--print-recipe", help="Print the resolved recipe as YAML and exit.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress display: one log line per --logging-steps instead.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' warnings (always in OUTPUT/xprt-st.log).")
    ] = False,
) -> None:
    """Pre-train a sentence-transformers model with a recipe; the result loads with SentenceTransformer(OUTPUT).

    \b
    Single process:
      xprt-st train --recipe change-only-positive --mined mined/ -o runs/cop
    Several GPUs (one process each):
      torchrun --nproc_per_node 8 -m xprt_st train \\
        --recipe change-only-positive --mined mined/ -o runs/cop
    """
    from xprt_st.cli.common import command_logging
    from xprt_st.pipeline import run_pipeline
    from xprt_st.pipeline.stages import TrainStage
    from xprt_st.progress_lines import command_progress
    from xprt_st.recipe import load_recipe
    from xprt_st.training.pace import recorded_pace
    from xprt_st.training.run import TrainSettings

    progress = not quiet
    console = Console(stderr=True, emoji=False)
    overrides = {
        "training.model": model,
        "training.max_steps": max_steps,
        "training.epochs": epochs,
        "training.batch_size": batch_size,
        "training.learning_rate": learning_rate,
        "training.seed": seed,
        "training.save_steps": save_steps,
        "training.logging_steps": logging_steps,
        "training.eval_steps": eval_steps,
        "training.keep_best": keep_best,
        "training.precision": precision,
        "training.max_seq_length": max_seq_length,
    }
    # every project error below ends the command with its one line and exit code (xprt_st.cli.common.report_error)
    resolved = load_recipe(recipe, overrides=overrides, setting=setting)
    if print_recipe:
        typer.echo(yaml.safe_dump(resolved.to_dict(), sort_keys=False), nl=False)
        return
    if data is None or output is None:
        console.print("[red]error:[/red] --mined and --output are required to train (or pass --print-recipe)")
        raise typer.Exit(2)
    settings = TrainSettings(
        resolved,
        data,
        output,
        resume=resume,
        model=model,
        progress=progress,
        fork_from=fork_from,
        overwrite=overwrite,
        model_option="--model" if model else f"recipe {recipe}: training.model",
    )
    main_process = int(os.environ.get("RANK", "0")) == 0  # under torchrun / accelerate launch, one process reports
    with (
        command_logging("train", output, verbose=verbose, progress=progress, show_info=main_process),
        command_progress("train", console, progress and main_process),
    ):
        run_pipeline([TrainStage(settings)], output)  # every check of the run first, then the training
    if main_process:
        console.print(
            f"[green]done:[/green] {escape(str(output))} loads with SentenceTransformer({escape(repr(str(output)))})",
            highlight=False,
        )
        pace = recorded_pace(output)
        if pace is not None:
            console.print(pace.line(), highlight=False, markup=False)
