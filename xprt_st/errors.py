"""The one base of every xprt-st exception: its message, the exit code a command ends with, the option to blame.

Every exception the package raises on purpose derives from :class:`XPRTError` (keeping its other bases, such as
``ValueError``, where callers catch those), so a command needs no list of the classes it may meet: the CLI prints
any of them as one line and exits with its ``exit_code`` (:func:`xprt_st.cli.common.report_error`). A class
whose failure comes after work was done and kept (no groups mined, a loss that became NaN) says so with
``exit_code = 1``; an input refused before any work keeps the default 2, as click does for bad options.

This module imports nothing of the package: every floor may import it.
"""

from __future__ import annotations

__all__ = ["XPRTError", "with_option"]


def with_option(message: str, option: str | None) -> str:
    """``message`` prefixed by the option to blame, unless it has none or the message already starts with it.

    Example:
        >>> with_option("no such folder", "--output"), with_option("--output: no such folder", "--output")
        ('--output: no such folder', '--output: no such folder')
    """
    return f"{option}: {message}" if option and not message.startswith(option) else message


class XPRTError(Exception):
    """Base of xprt-st's exceptions: ``str(error)`` says what was wrong, where, and how to fix it.

    Args:
        *args: the message (and whatever the other base takes, e.g. ``OSError``'s errno).
        option: the command-line option to blame (``--output``), when the raiser knows it; the one-line error
            starts with it unless the message already does.
        exit_code: overrides the class's :attr:`exit_code` for this one error.

    Example:
        >>> class MyError(XPRTError, ValueError): ...
        >>> error = MyError("no such folder: runs/x", option="--output")
        >>> error.exit_code, error.option, error.one_line()
        (2, '--output', '--output: no such folder: runs/x')
        >>> isinstance(error, ValueError)
        True
    """

    exit_code: int = 2
    """The exit code of a command that stops on this error: 2 refused before work, 1 stopped after it."""
    heading: str = "error"
    """The word the one-line error starts with (``error: ...``, ``no groups: ...``)."""
    option: str | None = None
    """The option to blame, or None."""

    def __init__(self, *args: object, option: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if option is not None:
            self.option = option
        if exit_code is not None:
            self.exit_code = exit_code

    def one_line(self) -> str:
        """The message as a command prints it: prefixed by the option to blame unless it already names it."""
        return with_option(str(self), self.option)
