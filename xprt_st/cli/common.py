"""What every ``xprt-st`` command shares: checks of its outputs and models before any work, and one
place that decides what reaches the terminal.

Every error a command stops on is printed as one line by :func:`report_error`: the command class calls it for
any :class:`xprt_st.errors.XPRTError` that leaves a command (:mod:`xprt_st.cli`), so a command catches only the
errors whose exit code or wording depends on where it met them.

A command checks its output folder and its models first (:func:`check_output_folder`,
:func:`xprt_st.models.check_model`), so a bad path fails in a second with the option's name instead of a traceback
after the work. It then runs inside :func:`command_logging`: xprt-st's own messages and every error
stay on the terminal, while warnings of the libraries underneath (torch, transformers,
sentence-transformers, mteb, datasets) go to ``OUTPUT/xprt-st.log``, and to the terminal as well
with ``-v``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from xprt_st.errors import XPRTError, with_option
from xprt_st.output_folder import OutputFolder, OutputFolderError
from xprt_st.paths import output_folder_problem

LOG_FILE_NAME = "xprt-st.log"
"""Name of the log file a command writes into its output folder."""

OWN_LOGGER = "xprt_st"

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


ConfigT = TypeVar("ConfigT")

OutputPathError = OutputFolderError
"""An output option names a path where no folder can be written, or a folder the command must not write into
(the guard's :class:`xprt_st.output_folder.OutputFolderError`, under the name the commands catch)."""


def report_error(
    error: BaseException,
    *,
    exit_code: int | None = None,
    option: str | None = None,
    message: str | None = None,
) -> typer.Exit:
    """Print ``error`` as the one line a command ends with, on stderr; return the :class:`typer.Exit` to raise.

    The line is ``<heading>: <option>: <message>``: the heading, the option to blame and the exit code are the
    error's own (:class:`xprt_st.errors.XPRTError`; ``error`` and 2 for any other exception) unless given here,
    for an error whose meaning depends on where the command met it (after work that is kept: exit 1).
    ``message`` replaces the error's text, e.g. to end it with the command's own advice.
    """
    own = isinstance(error, XPRTError)
    heading = error.heading if own else "error"
    blamed = option if option is not None else (error.option if own else None)
    text = with_option(message if message is not None else str(error), blamed)
    code = exit_code if exit_code is not None else (error.exit_code if own else 2)
    Console(stderr=True, emoji=False).print(f"[bold red]{heading}:[/bold red] {escape(text)}", highlight=False)
    return typer.Exit(code)


def config_from(cls: type[ConfigT], flags: Mapping[str, Any], **changes: Any) -> ConfigT:
    """The typed config ``cls`` (a dataclass) made from a command's flags: each field takes the flag of its own name
    (flags and config fields are spelled the same), ``changes`` replace flags first, and flags the config has no field
    for (``--quiet``, ``--output`` of another config) are left out; the config validates itself when made.

    Example:
        >>> @dataclasses.dataclass
        ... class Config:
        ...     seed: int = 0
        ...     holdout: float = 0.0
        >>> config_from(Config, {"seed": 3, "quiet": True}, holdout=0.1)
        Config(seed=3, holdout=0.1)
    """
    names = {field.name for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    return cls(**{name: value for name, value in {**flags, **changes}.items() if name in names})


def check_output_folder(path: Path, option: str) -> Path:
    """Fail before any work when ``path`` cannot become (or already is not) a writable folder.

    The folder itself may be missing (commands create it); see :func:`xprt_st.paths.output_folder_problem`.

    Raises:
        OutputPathError: naming the option, the path and what to do instead.
    """
    problem = output_folder_problem(path, option)
    if problem is not None:
        raise OutputPathError(problem)
    return Path(path)


def _is_own(name: str) -> bool:
    return name == OWN_LOGGER or name.startswith(OWN_LOGGER + ".")


class _TerminalFilter(logging.Filter):
    """Lets xprt-st's records through from ``own_level`` and everybody else's from ``other_level``."""

    def __init__(self, own_level: int, other_level: int) -> None:
        super().__init__()
        self.own_level = own_level
        self.other_level = other_level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= (self.own_level if _is_own(record.name) else self.other_level)


class _FolderFileHandler(logging.FileHandler):
    """Appends to a log file that it creates, folder included, only when the first record arrives.

    A command that fails its checks thus leaves no folder behind. The first record is preceded by a
    line naming the command, which separates the runs that share one file (a resumed training).
    """

    def __init__(self, path: Path, header: str) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.header = header

    def _open(self) -> Any:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        stream = super()._open()
        stream.write(f"{self.header}\n")
        return stream


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` replacement: one log record, under xprt-st's logger when raised by xprt-st."""
    own = Path(filename).resolve().is_relative_to(Path(__file__).resolve().parents[1])
    logger = logging.getLogger(f"{OWN_LOGGER}.warnings" if own else "py.warnings")
    logger.warning("%s:%s: %s: %s", filename, lineno, category.__name__, message)


def _library_bars(enabled: bool) -> list[Any]:
    """Turn the tqdm bars of transformers, datasets and huggingface_hub on or off; return the calls that undo it."""
    import datasets
    import huggingface_hub.utils as hub_utils
    import transformers

    switches = [
        (
            transformers.utils.logging.is_progress_bar_enabled(),
            transformers.utils.logging.enable_progress_bar,
            transformers.utils.logging.disable_progress_bar,
        ),
        (
            not datasets.utils.are_progress_bars_disabled(),
            datasets.utils.enable_progress_bars,
            datasets.utils.disable_progress_bars,
        ),
        (not hub_utils.are_progress_bars_disabled(), hub_utils.enable_progress_bars, hub_utils.disable_progress_bars),
    ]
    undo = []
    for was_on, enable, disable in switches:
        (enable if enabled else disable)()
        undo.append(enable if was_on else disable)
    return undo


@contextmanager
def _tqdm_disabled() -> Iterator[None]:
    """Every tqdm bar that does not pass ``disable`` itself draws nothing, until the block ends.

    This is the override tqdm applies for ``TQDM_DISABLE=1`` when it is imported, applied for the
    block only; it reaches bars with no switch of their own, e.g. sentence-transformers' "Computing
    widget examples" at the start of training.
    """
    from tqdm import std

    original = std.tqdm.__init__
    std.tqdm.__init__ = functools.partialmethod(original, disable=True)
    try:
        yield
    finally:
        std.tqdm.__init__ = original


@contextmanager
def _releasing(folder: OutputFolder) -> Iterator[None]:
    try:
        yield
    finally:
        folder.release()


@contextmanager
def command_logging(
    command: str,
    log_dir: Path | None,
    *,
    verbose: bool = False,
    progress: bool = True,
    show_info: bool = True,
    folder: OutputFolder | None = None,
) -> Iterator[Path | None]:
    """Route the logging and ``warnings`` of one command; restore everything on exit.

    - xprt-st's records go to the terminal from INFO (``show_info``, or ``verbose``) or from WARNING;
    - other libraries' records and every Python warning go to the terminal only from ERROR, or from
      INFO with ``verbose``; errors always show;
    - with ``log_dir``, everything from WARNING (xprt-st's from INFO) is appended to
      ``log_dir/xprt-st.log`` (``xprt-st.rankN.log`` on the other processes of a distributed run);
      the file appears with its first record;
    - tqdm bars (of transformers, datasets, huggingface_hub, sentence-transformers ...) draw only with
      ``progress`` and ``verbose``: the commands draw their own rich progress, which ``progress``
      alone keeps.

    Libraries that print through their own stderr handlers (transformers, datasets, huggingface_hub)
    are made to propagate into these handlers instead for the duration. A ``folder`` taken by
    :func:`xprt_st.output_folder.hold_folder` is released on exit, however the command ends.

    Yields:
        The log file's path, or None without ``log_dir``.
    """
    from rich.logging import RichHandler

    if folder is not None:
        with _releasing(folder):
            with command_logging(command, log_dir, verbose=verbose, progress=progress, show_info=show_info) as path:
                yield path
        return
    # This also imports the three libraries, so that their own handlers exist and are detached below.
    undo_bars = _library_bars(progress and verbose)
    root = logging.getLogger()
    own = logging.getLogger(OWN_LOGGER)
    saved_levels = (root.level, own.level)
    detached: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    loggers = [item for item in list(logging.root.manager.loggerDict.values()) if isinstance(item, logging.Logger)]
    for logger in [root, *loggers]:
        if logger is not root and _is_own(logger.name):
            continue
        stream_handlers = [h for h in logger.handlers if type(h) is logging.StreamHandler]
        if stream_handlers:
            detached.append((logger, stream_handlers, logger.propagate))
            for handler in stream_handlers:
                logger.removeHandler(handler)
            logger.propagate = True

    terminal = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
    terminal.addFilter(
        _TerminalFilter(
            logging.INFO if show_info or verbose else logging.WARNING, logging.INFO if verbose else logging.ERROR
        )
    )
    handlers: list[logging.Handler] = [terminal]
    log_file = None
    if log_dir is not None:
        rank = int(os.environ.get("RANK", "0"))
        log_file = Path(log_dir) / (LOG_FILE_NAME if rank == 0 else LOG_FILE_NAME.replace(".log", f".rank{rank}.log"))
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        file_handler = _FolderFileHandler(log_file, f"==== {started} xprt-st {command}: {' '.join(sys.argv)}")
        file_handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    own.setLevel(logging.INFO)
    saved_showwarning = warnings.showwarning
    warnings.showwarning = _log_warning
    bars = nullcontext() if progress and verbose else _tqdm_disabled()
    try:
        with bars:
            yield log_file
    finally:
        warnings.showwarning = saved_showwarning
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(saved_levels[0])
        own.setLevel(saved_levels[1])
        for logger, stream_handlers, propagate in detached:
            for handler in stream_handlers:
                logger.addHandler(handler)
            logger.propagate = propagate
        for restore in undo_bars:
            restore()
