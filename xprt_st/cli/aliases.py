"""The old spellings of renamed options: hidden, still accepted, each use announced in one line.

The command line has one vocabulary (``-o/--output`` where a command writes, ``--mined`` for a mined
folder, ``--model`` for the starting model, ``--encode-batch-size`` for an encoding batch, ``-q/--quiet``
instead of ``--no-progress``). Scripts written against the older names keep working: before a command
parses its arguments, each old spelling is replaced by its new one and a line such as
``--data is deprecated; use --mined`` goes to stderr. The old names are no options of their own, so
``--help`` never lists them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def both_spellings(command: str, args: Sequence[str], spellings: Mapping[str, Sequence[str]]) -> str | None:
    """The error line when ``args`` give an old spelling and the new one of the same option (``--data A --mined B``,
    ``--output-dir A -o B``): the command would take one and drop the other silently. None when they do not.

    Args:
        command: the subcommand.
        args: its arguments as typed (before :func:`rewrite_arguments`).
        spellings: each new option name -> every spelling of it (``{"--output": ["--output", "-o"]}``).

    Example:
        >>> both_spellings("train", ["--data", "A", "--mined", "B"], {"--mined": ["--mined"]})
        '--data A and --mined B give the same option twice (--data is the old spelling of --mined); give only --mined'
    """
    table = DEPRECATED.get(command, {})
    given: dict[str, str] = {}
    tokens = list(args[: args.index("--")] if "--" in args else args)
    for index, token in enumerate(tokens):
        name, equals, _ = token.partition("=")
        if not name.startswith("-"):
            continue
        shown = token if equals or index + 1 >= len(tokens) else f"{token} {tokens[index + 1]}"
        given.setdefault(name, shown)
    for old, new in table.items():
        if new == DROP or old not in given:
            continue
        for spelling in spellings.get(new, (new,)):
            if spelling in given:
                return (
                    f"{given[old]} and {given[spelling]} give the same option twice ({old} is the old spelling of "
                    f"{new}); give only {new}"
                )
    return None
