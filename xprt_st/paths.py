"""Checks of the paths a user names, shared by the library's stages and the CLI (which sits above them)."""

from __future__ import annotations

import os
from pathlib import Path


def output_folder_problem(path: str | Path, option: str) -> str | None:
    """Why ``path`` cannot become (or already is not) a folder this process writes into; None when it can.

    The folder itself may be missing (the caller creates it); it must not be a file, no parent may be a
    file, and the nearest existing parent must be writable. The message names ``option`` (for example
    ``--output``) and what to give instead, so callers raise it as is, under their own exception type.
    """
    path = Path(path)
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
