"""The old spellings of renamed options: hidden, still accepted, each use announced in one line.

The command line has one vocabulary (``-o/--output`` where a command writes, ``--mined`` for a mined
folder, ``--model`` for the starting model, ``--encode-batch-size`` for an encoding batch, ``-q/--quiet``
instead of ``--no-progress``). Scripts written against the older names keep working: before a command
parses its arguments, each old spelling is replaced by its new one and a line such as
``--data is deprecated; use --mined`` goes to stderr. The old names are no options of their own, so
``--help`` never lists them.
"""

from __future__ import annotations

from collections.abc import Sequence

DROP = ""
"""The new spelling of an old flag that now is the default (``--progress``): it is removed from the arguments."""

DEPRECATED: dict[str, dict[str, str]] = {
    "train": {"--data": "--mined", "--no-progress": "--quiet", "--progress": DROP},
    "compare": {"--no-progress": "--quiet", "--progress": DROP},
    "quickstart": {"--no-progress": "--quiet", "--progress": DROP},
    "mine": {"--model": "--mining-model", "--batch-size": "--encode-batch-size"},
    "evaluate": {"--output-dir": "--output", "--batch-size": "--encode-batch-size"},
    "interpolate": {"--batch-size": "--encode-batch-size"},
    "finetune-compare": {"--output-dir": "--output", "--base": "--model"},
}
"""Per command: old option name -> the name that replaces it (:data:`DROP`: nothing replaces it)."""


def deprecation_line(old: str, new: str) -> str:
    """The one line printed when ``old`` is used, e.g. ``--data is deprecated; use --mined``."""
    if new == DROP:
        return f"{old} is deprecated; it is the default now, leave it out"
    return f"{old} is deprecated; use {new}"


def rewrite_arguments(command: str, args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Replace the deprecated option names of ``command`` in ``args`` by their new names.

    Both ``--old VALUE`` and ``--old=VALUE`` are rewritten; everything after a lone ``--`` is left alone
    (those are arguments, not options).

    Returns:
        The rewritten arguments and one deprecation line per old name used (each name once).
    """
    table = DEPRECATED.get(command, {})
    rewritten: list[str] = []
    used: dict[str, str] = {}
    arguments = iter(args)
    for token in arguments:
        if token == "--":
            rewritten.append(token)
            rewritten.extend(arguments)
            break
        name, equals, value = token.partition("=")
        if name in table:
            new = table[name]
            used.setdefault(name, deprecation_line(name, new))
            if new != DROP:
                rewritten.append(f"{new}{equals}{value}")
            continue
        rewritten.append(token)
    return rewritten, list(used.values())
