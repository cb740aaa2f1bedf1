"""The output-folder guard every writing command uses: one writer, a manifest of its files, nobody else's touched.

A command that writes into a folder (``train``, ``interpolate``, ``evaluate``, ``compare``, ``finetune-compare``,
``quickstart``; ``mine`` shares the lock and the deletion) takes it through :class:`OutputFolder`:

- **a lock** (:class:`FolderLock`): ``DIR/.xprt-st.lock``, created atomically, names its holder (pid, host, command,
  start). A second command gets one line naming the holder; a lock whose holder ran on this host and is gone (a
  ``kill -9``) is taken over with a line saying so;
- **a manifest** (``DIR/.xprt-st-manifest.json``): the command and the top-level names it wrote. What the command
  wrote is what appeared in the folder while it held the lock, recorded when it ends; a command that may be killed
  midway records its names as it goes (:meth:`OutputFolder.record` before it writes a name,
  :meth:`OutputFolder.writing` around a save whose names it cannot list in advance). The command that takes a killed
  run's stale lock over adopts only what that run recorded: a user's ``notes.md`` added after the kill is never
  deleted by ``--overwrite``;
- **a refusal**, before any work, of a folder that holds files the command did not write (a user's ``README.md``,
  a mined folder given as a model's output, another command's folder): the command would write beside or over them;
- **``--overwrite``** deletes only the names the manifest (or the command's own name patterns) lists, and
  :func:`remove_path` never deletes through a symlink: a link is unlinked, its target left alone.

A command writing a single file (``inspect -o FILE``) checks it with :func:`check_output_file`. Paths too long for
the filesystem are named with their option by :func:`xprt_st.paths.output_folder_problem`.

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with OutputFolder(f"{tmp}/run", "train") as folder:
    ...         _ = (folder.path / "model.safetensors").write_bytes(b"")
    ...     sorted(OutputFolder(f"{tmp}/run", "train").own())
    ['model.safetensors']
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from xprt_st.errors import XPRTError
from xprt_st.fingerprint import FINGERPRINT_FILE, STATE_FILE
from xprt_st.paths import output_folder_problem, path_length_problem

logger = logging.getLogger(__name__)

LOCK_FILE = ".xprt-st.lock"
MANIFEST_FILE = ".xprt-st-manifest.json"
PENDING = "writing_beside"
"""The manifest key of a save under way (:meth:`OutputFolder.writing`): the names present before it began."""
LOG_PATTERNS = ("xprt-st.log", "xprt-st.rank*.log")
"""The log every command appends to in its folder (:mod:`xprt_st.cli.common`): nobody's files, never refused."""
SHOWN = 5
"""Names listed in a refusal before "and N more"."""


COMMAND_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "train": (
        "its checkpoints and final model (README.md, config.json, model.safetensors ...)",
        ("checkpoint-[0-9]*",),
    ),
    "interpolate": ("a model (README.md, config.json, model.safetensors, interpolation.json ...)", ()),
    "evaluate": (
        "scores.csv, scores.json and scores.png",
        ("scores.csv", "scores.json", "scores.png", "overlap_thirds.csv", "label_free.json"),
    ),
    "compare": (
        "its corpus, mined data, models and report",
        (
            "compare_config.yaml",
            "corpus",
            "mined",
            "data",
            "seed-*",
            "scores",
            "eval-cache",
            "compare.md",
            "compare.csv",
            "compare.png",
            "timings.json",
        ),
    ),
    "finetune-compare": (
        "finetune_compare.csv/json and its trainer folders",
        ("finetune_compare.csv", "finetune_compare.json", "trainer-*", "*+ft", "pretrained"),
    ),
    "quickstart": ("its mined data, model and evaluation", ()),
}
"""Per command: what it writes (for the refusal) and the top-level names that are its own without a manifest.

The names are ones no user would choose for their own files, so folders written before manifests existed are
recognised; a model's ``README.md`` or ``config.json`` is a command's only through its manifest. The quickstart has
none: ``model``, ``mined`` and ``evaluation`` are names a user gives their own folders, and its stages are its own
only through its manifest and fingerprints (:mod:`xprt_st.fingerprint`). ``compare`` keeps
no manifest (several processes share its folder), so its names must cover everything it writes.
"""
SHARED_FOLDERS = frozenset({"compare"})
"""Commands whose processes share one output folder (each takes a lock per model inside it): no folder lock."""


def command_folder(path: str | Path, command: str, option: str = "--output", overwrite: bool = False) -> OutputFolder:
    """The :class:`OutputFolder` of ``command`` (one of :data:`COMMAND_NAMES`) at ``path``."""
    writes, patterns = COMMAND_NAMES[command]
    return OutputFolder(
        path,
        command,
        option=option,
        writes=writes,
        own_patterns=patterns,
        overwrite=overwrite,
        exclusive=command not in SHARED_FOLDERS,
    )


def hold_folder(path: str | Path, command: str, option: str = "--output", overwrite: bool = False) -> OutputFolder:
    """Check and take ``command``'s output folder before any work (:func:`command_folder`, then
    :meth:`OutputFolder.acquire`); the CLI passes it to ``command_logging``, which releases it when the command ends.

    Raises:
        OutputFolderError: naming the option, the folder and the fix (or the lock's holder).
    """
    return command_folder(path, command, option=option, overwrite=overwrite).acquire()


class OutputFolderError(XPRTError, ValueError):
    """An output path cannot be written (not a folder, too long, read-only), holds files the command did not write,
    or is being written by another command. The message is one line naming the option and the fix."""


class FolderBusyError(OutputFolderError):
    """Another live process holds the folder's lock."""


def remove_path(path: Path) -> None:
    """Delete ``path`` without following symlinks: a link (to a file or a folder) is unlinked, its target kept.

    ``shutil.rmtree`` itself unlinks the links it meets inside a folder rather than descending into them.
    """
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def describe_holder(holder: dict[str, Any] | None) -> str:
    """``"pid 12 on host h (xprt-st train), since 2026-01-01 10:00:00"`` for a lock record."""
    if holder is None:
        return "an unreadable lock file"
    command = f" (xprt-st {holder['command']})" if holder.get("command") else ""
    return f"pid {holder.get('pid')} on host {holder.get('host')}{command}, since {holder.get('started')}"


class FolderLock:
    """Hold the lock file ``path`` while a ``with`` block runs; ``error`` (one line naming the holder) when it is held.

    The file is created with ``O_CREAT | O_EXCL`` (atomic on local filesystems and NFSv3+) and holds the holder's
    pid, host, command, start and ``extra`` fields. A lock whose holder ran on this host and no longer exists is
    stale and taken over with a warning (:attr:`taken_over` keeps its record); a lock held on another host cannot be
    checked from here, so the message says how to remove it when that process is gone. The same process taking a
    lock it holds already gets it (a shard job that goes on to merge).

    Args:
        path: the lock file.
        what: the folder in words, for the messages (``"the mining folder m"``).
        command: the command taking it, recorded for the next one's message.
        error: the exception raised when the lock is held (mining raises its own ``MiningOutputError``).
        extra: more JSON fields to record.
    """

    def __init__(
        self,
        path: Path,
        what: str,
        command: str | None = None,
        error: type[Exception] = FolderBusyError,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.what = what
        self.command = command
        self.error = error
        self.extra = dict(extra or {})
        self.taken_over: dict[str, Any] | None = None
        self._held = False

    def acquire(self) -> None:
        """Take the lock, or raise :attr:`error` naming the live holder."""
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            **self.extra,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == record["host"]:
                    return  # this process holds it already
                if holder is None or self._stale(holder):
                    logger.warning(
                        "taking over the stale lock %s (%s)",
                        self.path,
                        "an unreadable lock file: its holder cannot be named or checked"
                        if holder is None
                        else f"{describe_holder(holder)}: that process is no longer running",
                    )
                    self.taken_over = holder or {}
                    self.path.unlink(missing_ok=True)
                    continue
                raise self.error(
                    f"{self.what} is being written by another run ({describe_holder(holder)}); wait for it to "
                    f"finish (two runs writing one folder at once would mix their files). If that process is gone "
                    f"(it ran on another machine, or it crashed there), delete {self.path} and rerun."
                ) from None
            with os.fdopen(descriptor, "w") as handle:
                json.dump(record, handle)
            self._held = True
            return
        raise self.error(f"cannot take the lock {self.path}: it keeps coming back; is another run starting?")

    def holder(self) -> dict[str, Any] | None:
        """The record in the lock file, or None when it is missing, half-written or not a record."""
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # half-written by a killed run, or removed meanwhile
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        pid = holder.get("pid")
        return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)

    @property
    def held(self) -> bool:
        """Whether this object created the lock file (and will remove it on release)."""
        return self._held

    def release(self) -> None:
        """Remove the lock file if this object holds it."""
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.release()


def _infrastructure(name: str) -> bool:
    own_records = (LOCK_FILE, MANIFEST_FILE, FINGERPRINT_FILE, STATE_FILE)
    return name in own_records or any(fnmatch.fnmatchcase(name, p) for p in LOG_PATTERNS)


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


class OutputFolder:
    """The output folder of one command: lock, manifest, refusal of other files, ``--overwrite`` (see the module).

    Args:
        path: the folder (created when missing).
        command: the command writing it (``"train"``); a manifest of another command makes its files foreign.
        option: the option that named the folder, for the messages.
        writes: what the command writes, for the refusal (``"its checkpoints and model"``).
        own_patterns: glob patterns of top-level names that are the command's whatever the manifest says (names
            no user would choose, e.g. ``checkpoint-[0-9]*``), so folders written before manifests existed, and
            folders several processes share, are recognised.
        overwrite: delete the command's own files when the folder is taken.
        exclusive: take the lock; without it (``compare``, whose processes share a run folder and coordinate per
            model) only the refusal applies and no manifest is kept, so ``own_patterns`` must cover every name.

    Use as a context manager (or :meth:`acquire` / :meth:`release`); on exit the manifest records every name that
    appeared while the folder was held, also when the block raised (an interrupted run resumes from its files).
    """

    def __init__(
        self,
        path: str | Path,
        command: str,
        *,
        option: str = "--output",
        writes: str = "its files",
        own_patterns: Iterable[str] = (),
        overwrite: bool = False,
        exclusive: bool = True,
    ) -> None:
        self.path = Path(path)
        self.command = command
        self.option = option
        self.writes = writes
        self.own_patterns = tuple(own_patterns)
        self.overwrite = overwrite
        self.exclusive = exclusive
        self._lock: FolderLock | None = None
        self._before: set[str] = set()
        self._created = False

    # ------------------------------------------------------------ what is in the folder
    def names(self) -> set[str]:
        """The top-level names in the folder now, the lock, manifest and logs left out."""
        if not self.path.is_dir():
            return set()
        return {entry.name for entry in os.scandir(self.path) if not _infrastructure(entry.name)}

    def manifest(self) -> dict[str, Any] | None:
        """The folder's manifest (``{"command": ..., "files": [...]}``), or None without one (or an unreadable one)."""
        try:
            record = json.loads((self.path / MANIFEST_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and isinstance(record.get("files"), list) else None

    def _listed(self) -> set[str]:
        record = self.manifest()
        if record is None or record.get("command") != self.command:
            return set()
        return {name for name in record["files"] if isinstance(name, str) and _plain_name(name)}

    def own(self) -> set[str]:
        """The names in the folder this command wrote: listed in its manifest or matching its own patterns."""
        present = self.names()
        listed = self._listed() & present
        return listed | {name for name in present if any(fnmatch.fnmatchcase(name, p) for p in self.own_patterns)}

    def foreign(self) -> list[str]:
        """The names in the folder this command did not write, sorted."""
        return sorted(self.names() - self.own())

    def holds_a_run(self) -> bool:
        """Whether the folder holds files this command wrote (a run to resume, rewrite or ``--overwrite``)."""
        return bool(self.own())

    # ------------------------------------------------------------ checks
    def check_path(self) -> None:
        """Raise :class:`OutputFolderError` when the path cannot become a writable folder (see
        :func:`xprt_st.paths.output_folder_problem`: a file, a file parent, read-only, a name too long)."""
        problem = output_folder_problem(self.path, self.option)
        if problem is not None:
            raise OutputFolderError(problem)

    def check(self) -> None:
        """Everything that can be checked without writing: the path, then files this command did not write.

        A folder that holds a run of this command keeps files a user added beside it (notes, plots); a folder
        without one must hold nothing but the command's log. Call it before any work or model load.
        """
        self.check_path()
        foreign = self.foreign()
        if foreign and not self.holds_a_run():
            other = self.manifest()
            written_by = f" (it was written by xprt-st {other['command']})" if other and other.get("command") else ""
            raise OutputFolderError(
                f"{self.option} {self.path} holds files that xprt-st {self.command} did not write{written_by}: "
                f"{_shown(foreign)}; {self.command} would write {self.writes} beside or over them. Choose an empty "
                f"or new {self.option} folder, or move those files out first."
            )

    # ------------------------------------------------------------ taking and releasing
    def acquire(self) -> OutputFolder:
        """Check the folder, take its lock (exclusive mode), delete the command's own files with ``overwrite``."""
        self.check_path()
        self._created = not self.path.exists()
        if self.exclusive:
            self.path.mkdir(parents=True, exist_ok=True)
            lock = FolderLock(self.path / LOCK_FILE, f"{self.option} {self.path}", command=self.command)
            lock.acquire()
            self._lock = lock
            if lock.taken_over is not None:
                self._adopt()
        try:
            self.check()
            if self.overwrite:
                self.clear()
        except BaseException:
            self.release(record=False)
            raise
        self._before = self.names()
        return self

    def _adopt(self) -> None:
        """Finish the record of a killed run of this command: what appeared during the save it had declared
        (:meth:`writing`), and nothing else (its other names it recorded itself; a user's files are not its)."""
        record = self.manifest()
        if record is None or record.get("command") != self.command or not isinstance(record.get(PENDING), list):
            return
        self._write_manifest(self._listed() | (self.names() - set(record[PENDING])))

    def record(self, *names: str) -> None:
        """Add ``names`` to the manifest now, before the command writes them, so a killed run's rerun knows them."""
        if self.exclusive and self.path.is_dir():
            self._write_manifest(self._listed() | set(names))

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Around a save whose names cannot be listed before it runs (a model's files): the names present before
        are recorded first, so the names that appear during the block are this command's even when it is killed."""
        if not (self.exclusive and self.path.is_dir()):
            yield
            return
        before = self.names()
        self._write_manifest(self._listed(), pending=before)
        try:
            yield
        finally:
            self._write_manifest(self._listed() | (self.names() - before))

    def release(self, record: bool = True) -> None:
        """Record the names that appeared since :meth:`acquire` in the manifest, then release the lock.

        A command that wrote nothing leaves no manifest behind, and a folder it created is removed again when it
        stayed empty (a command refused after taking its folder leaves no folder behind).
        """
        try:
            if record and self.exclusive and self.path.is_dir():
                files = (self._listed() & self.names()) | (self.names() - self._before)
                if files or self.manifest() is not None:
                    self._write_manifest(files)
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            if self._created and self.path.is_dir() and not any(self.path.iterdir()):
                self.path.rmdir()
            self._created = False

    def clear(self) -> None:
        """Delete the command's own files (``--overwrite``): only :meth:`own`, never through a symlink."""
        own = sorted(self.own())
        if not own:
            return
        logger.warning("--overwrite: deleting what xprt-st %s wrote in %s (%s)", self.command, self.path, _shown(own))
        for name in own:
            remove_path(self.path / name)
        if self.exclusive:
            self._write_manifest(set())
            for record in (FINGERPRINT_FILE, STATE_FILE):  # what made the deleted run's stages, and how far it got
                (self.path / record).unlink(missing_ok=True)

    def remove_stale(self, results: Iterable[str], written: Iterable[str]) -> list[str]:
        """Delete the names among ``results`` that an earlier run of this command left and this run did not write.

        A command that rewrites its results on every run (``evaluate``, ``finetune-compare``) calls it after
        writing them: a result of other settings (an earlier run's ``label_free.json`` or fine-tuned models) would
        otherwise read as this run's. Only the command's own names go (:meth:`own`), never through a symlink.

        Returns:
            The names deleted, sorted.
        """
        stale = sorted((set(results) & self.own()) - set(written))
        for name in stale:
            remove_path(self.path / name)
        return stale

    def _write_manifest(self, files: set[str], pending: set[str] | None = None) -> None:
        record: dict[str, Any] = {"command": self.command, "files": sorted(files)}
        if pending is not None:
            record[PENDING] = sorted(pending)
        tmp = self.path / f"{MANIFEST_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path / MANIFEST_FILE)

    def __enter__(self) -> OutputFolder:
        return self.acquire()

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.release()


def _plain_name(name: str) -> bool:
    """A manifest entry is one name inside the folder: no separator, no ``..`` (a tampered manifest deletes nothing
    outside)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def check_output_file(path: str | Path, option: str, is_own: Callable[[Path], bool], what: str) -> Path:
    """Refuse, before any work, a file output that would replace something the command did not write.

    Args:
        path: the file to write.
        option: the option that named it (``-o``).
        is_own: whether an existing file at ``path`` is one this command wrote (e.g. starts with its signature).
        what: what the command writes, in words (``"an HTML report"``).

    Raises:
        OutputFolderError: ``path`` is a folder, an existing file the command did not write, a name too long, or
            its folder cannot be created.
    """
    path = Path(path)
    too_long = path_length_problem(path, option)
    if too_long is not None:
        raise OutputFolderError(too_long)
    if path.is_dir():
        raise OutputFolderError(
            f"{option} {path} is an existing folder; give the path of {what} (e.g. {path / 'report.html'})"
        )
    problem = output_folder_problem(path.parent, option)
    if problem is not None:
        raise OutputFolderError(problem)
    if (path.exists() or path.is_symlink()) and not is_own(path):
        raise OutputFolderError(
            f"{option} {path} is an existing file that xprt-st did not write; writing {what} there would replace "
            "it. Give a new file name (or delete that file first)."
        )
    return path
