"""Checks of the paths a user names, shared by the library's stages and the CLI (which sits above them)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_NAME_MAX = 255
"""Bytes of one file name on the common Linux, macOS and Windows filesystems, when ``pathconf`` cannot tell."""
DEFAULT_PATH_MAX = 4096


def _limits(path: Path) -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` of the filesystem holding the nearest existing folder above ``path``."""
    for candidate in (path, *path.parents):
        try:
            if candidate.is_dir():
                return os.pathconf(candidate, "PC_NAME_MAX"), os.pathconf(candidate, "PC_PATH_MAX")
        except (OSError, ValueError, AttributeError):  # a name too long to stat, no pathconf (Windows)
            continue
    return DEFAULT_NAME_MAX, DEFAULT_PATH_MAX


def path_length_problem(path: str | Path, option: str) -> str | None:
    """Why ``path`` cannot be created for its length (``OSError`` Errno 36 otherwise), naming ``option``; else None."""
    path = Path(path)
    name_max, path_max = _limits(path.absolute())
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            return (
                f"{option} {_short(path)}: the name {_short(part)!r} is {size} bytes long, and this filesystem allows "
                f"at most {name_max} bytes per name; choose a shorter name"
            )
    size = len(os.fsencode(str(path.absolute())))
    if size >= path_max:
        return (
            f"{option} {_short(path)}: the path is {size} bytes long, and this filesystem allows {path_max - 1}; "
            "choose a shorter one"
        )
    return None


def _short(text: str | Path, keep: int = 60) -> str:
    """``text`` cut to its first and last characters around "...", when longer than ``keep``."""
    text = str(text)
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 4 :]}"


def output_folder_problem(path: str | Path, option: str) -> str | None:
    """Why ``path`` cannot become (or already is not) a folder this process writes into; None when it can.

    The folder itself may be missing (the caller creates it); its names must fit the filesystem, it must not be a
    file, no parent may be a file, and the nearest existing parent must be writable. The message names ``option``
    (for example ``--output``) and what to give instead, so callers raise it as is, under their own exception type.
    """
    path = Path(path)
    too_long = path_length_problem(path, option)
    if too_long is not None:
        return too_long
    if path.exists() and not path.is_dir():
        return f"{option} {path} is an existing file, not a folder; give a folder (it is created when missing)"
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{option} {path}: {existing} is a file, so no folder can be created inside it"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{option} {path}: {existing} is not writable; choose a folder you can write to"
    return None
