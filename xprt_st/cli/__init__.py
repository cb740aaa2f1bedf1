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

# The imports register each subcommand on ``app``.
from xprt_st.cli import compare, evaluate, interpolate, mine, quickstart, train  # noqa: E402, F401
from xprt_st.cli.app import app, use_command_class  # noqa: E402

if _previous_handler is not None:  # started: later interrupts are the commands' to handle (exit 130, work kept)
    signal.signal(signal.SIGINT, _previous_handler)

use_command_class(app)
