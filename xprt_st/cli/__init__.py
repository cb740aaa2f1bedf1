"""The ``xprt-st`` command line: one Typer app; each subcommand lives in its own module.

The modules only parse options and wire the library's stages together; the work itself is done by
the Python API so that every step can be run from a notebook too.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="xprt-st",
    help="Retrieval-oriented continued pre-training (xPRT) for sentence-transformers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)

# The imports register each subcommand on ``app``.
from xprt_st.cli import compare, evaluate, mine, quickstart, train  # noqa: E402, F401
