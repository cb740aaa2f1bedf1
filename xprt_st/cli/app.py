"""The ``xprt-st`` Typer app and its command class, below the command modules that register on it.

:mod:`xprt_st.cli` imports this module, then each command module (which imports ``app`` from here), then calls
:func:`use_command_class`: the commands sit above the app, and nothing imports back up.
"""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

INTERRUPTED = "interrupted (Ctrl-C); what it finished is kept: run the same command again to go on from there"
"""The line after a command's name when a SIGINT stops it."""

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
        :class:`xprt_st.errors.XPRTError` the command raises as one line and exit with its code; a Ctrl-C (SIGINT)
        is one line and exit 130, as a shell reports it (typer's own exit 130 says nothing)."""
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
        except KeyboardInterrupt as error:  # every stage keeps what it finished (docs/reliability.md, round 7)
            sys.stderr.write(f"xprt-st {ctx.info_name}: {INTERRUPTED}\n")
            sys.stderr.flush()
            raise typer.Exit(130) from error


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


def use_command_class(typer_app: typer.Typer) -> None:
    """Give every registered command :class:`_Command` (old spellings, finite numbers, one-line errors) and its
    docstring's whole first paragraph as its line in the command list."""
    for info in typer_app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = _Command
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            # The command list shows each command's whole first paragraph, wrapped; click would cut it
            # at the column's width ("Same corpus, steps, batch and schedule; only the...").
            info.short_help = " ".join(inspect.cleandoc(info.callback.__doc__).split("\n\n")[0].split())
