"""The ``xprt-st`` command line: one Typer app; each subcommand lives in its own module.

The modules only parse options and wire the library's stages together; the work itself is done by
the Python API so that every step can be run from a notebook too. What all commands share (output
and model checks, where warnings go) is in :mod:`xprt_st.cli.common`.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _interrupted_while_starting(signum: int, frame: Any) -> None:
    """Ctrl-C while the libraries load (seconds): one line and exit 130, not a traceback from inside an import."""
    del signum, frame
    sys.stderr.write("xprt-st: interrupted while starting; nothing was done\n")
    sys.stderr.flush()
    os._exit(130)


try:  # only the main thread may set a handler; elsewhere (a thread importing the CLI) keep Python's
    _previous_handler: Any = signal.signal(signal.SIGINT, _interrupted_while_starting)
except ValueError:
    _previous_handler = None

import inspect  # noqa: E402
import math  # noqa: E402

import typer  # noqa: E402
from typer.core import TyperCommand, TyperGroup  # noqa: E402

_HYPHEN_STAND_IN = "\ue000"
"""A one-column private-use character that stands for '-' while help text is wrapped."""

_BaseContext: Any = TyperCommand.context_class  # click's, vendored or not, whichever this typer uses


class _HelpFormatter(_BaseContext.formatter_class):
    """Click's plain help formatter, except that it never breaks a line at a hyphen inside a word.

    Wrapping at hyphens turns ``runs/compare-cpu`` into ``runs/compare-`` and ``cpu`` on the next
    line; the stand-in has the same width, so lines break exactly as before, only never there.
    """

    def write(self, string: str) -> None:
        super().write(string.replace(_HYPHEN_STAND_IN, "-"))

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog.replace("-", _HYPHEN_STAND_IN), args.replace("-", _HYPHEN_STAND_IN), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(text.replace("-", _HYPHEN_STAND_IN))

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [(first, second.replace("-", _HYPHEN_STAND_IN)) for first, second in rows]
        super().write_dl(rows, col_max=col_max, col_spacing=col_spacing)


class _Context(_BaseContext):
    formatter_class = _HelpFormatter


class _Command(TyperCommand):
    """A subcommand that accepts the old spellings of its options (:mod:`xprt_st.cli.aliases`), refuses a NaN
    or infinite value for any number option, and ends on any project error with its one line."""

    context_class = _Context

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from xprt_st.cli.aliases import both_spellings, rewrite_arguments

        single = {  # options that take one value (a flag given twice means the same thing)
            opt: [*param.opts, *param.secondary_opts]
            for param in self.params
            if not getattr(param, "multiple", False) and not getattr(param, "is_flag", False)
            for opt in param.opts
        }
        twice = both_spellings(self.name or "", args, single)
        if twice is not None:
            raise typer.BadParameter(twice, ctx=ctx)
        args, lines = rewrite_arguments(self.name or "", args)
        for line in lines:
            typer.echo(line, err=True)
        rest = super().parse_args(ctx, args)
        if ctx.params.get("quiet") and ctx.params.get("verbose"):
            raise typer.BadParameter("give -q/--quiet or -v/--verbose, not both", ctx=ctx)
        return rest

    def invoke(self, ctx: Any) -> Any:
        """Refuse a non-finite float option (``--learning-rate nan``) before the command runs; print any
        :class:`xprt_st.errors.XPRTError` the command raises as one line and exit with its code."""
        for param in self.params:
            value = ctx.params.get(param.name)
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(item, float) and not math.isfinite(item) for item in values):
                name = param.opts[0] if param.opts else param.name
                raise typer.BadParameter(f"{value!r} is not a finite number", ctx=ctx, param_hint=f"'{name}'")
        from xprt_st.cli.common import report_error
        from xprt_st.errors import XPRTError

        try:
            return super().invoke(ctx)
        except XPRTError as error:  # the one place any project error becomes its line and exit code
            raise report_error(error) from error


class _Group(TyperGroup):
    context_class = _Context


# Help is rendered as plain text (click's formatter), not as rich panels: the panels read help texts as
# rich markup (a regex such as '^test-([a-z]+)-' lost its '[a-z]'), show '<bool>' beside plain flags,
# and cut long option names ('--threshold-quanti…') to fit 80 columns. Plain help wraps the text instead.
app = typer.Typer(
    name="xprt-st",
    help="Retrieval-oriented continued pre-training (xPRT) for sentence-transformers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode=None,
    cls=_Group,
)

# The imports register each subcommand on ``app``.
from xprt_st.cli import compare, evaluate, interpolate, mine, quickstart, train  # noqa: E402, F401

if _previous_handler is not None:  # started: later interrupts are the commands' to handle (exit 130, work kept)
    signal.signal(signal.SIGINT, _previous_handler)

for _info in app.registered_commands:
    if _info.cls in (None, TyperCommand):
        _info.cls = _Command
    if _info.short_help is None and _info.callback is not None and _info.callback.__doc__:
        # The command list shows each command's whole first paragraph, wrapped; click would cut it
        # at the column's width ("Same corpus, steps, batch and schedule; only the...").
        _info.short_help = " ".join(inspect.cleandoc(_info.callback.__doc__).split("\n\n")[0].split())
