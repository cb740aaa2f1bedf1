"""Every command of the CLI is flags -> a typed config -> run: no command body is over 60 lines.

A body is the function's lines below its signature (the options), its docstring left out: the work a command does
belongs in the library, where a notebook can call it too.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from xprt_st.cli import app

MAX_BODY_LINES = 60


def body_lines(function: Callable[..., Any]) -> int:
    """The lines of ``function`` below its signature, its docstring left out (blank and comment lines count)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(node, ast.FunctionDef) and node.end_lineno is not None
    body = node.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return node.end_lineno - body[0].lineno + 1 if body else 0


def _measured(a: int) -> int:
    """Three lines below the signature and this docstring."""
    b = a + 1

    return b


def _commands() -> dict[str, Callable[..., Any]]:
    commands = {}
    for info in app.registered_commands:
        assert info.callback is not None
        commands[info.name or info.callback.__name__.replace("_", "-")] = info.callback
    return commands


def test_the_body_is_counted_below_the_signature_without_the_docstring() -> None:
    assert body_lines(_measured) == 3


def test_every_command_is_measured() -> None:
    expected = {"mine", "inspect", "train", "evaluate", "finetune-compare", "interpolate", "quickstart", "compare"}
    assert expected <= set(_commands())


@pytest.mark.parametrize("name", sorted(_commands()))
def test_no_command_body_is_over_60_lines(name: str) -> None:
    function = _commands()[name]
    lines = body_lines(function)
    assert lines <= MAX_BODY_LINES, (
        f"xprt-st {name}: the body of {function.__module__}.{function.__qualname__} is {lines} lines (at most "
        f"{MAX_BODY_LINES}); move the work into the library: flags -> a typed config -> run"
    )
