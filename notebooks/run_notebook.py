"""Execute ``notebooks/adoption.ipynb`` end to end with nbclient and save it with its outputs.

Usage::

    python notebooks/run_notebook.py                    # executes in place (the committed outputs)
    python notebooks/run_notebook.py --output out.ipynb --workdir /tmp/run

The notebook writes into ``$XPRT_NOTEBOOK_DIR``; this script sets it to ``--workdir`` or a fresh temporary
folder, so nothing lands in the repository. Before saving, execution timestamps are dropped and any HTML
output larger than ``--max-html`` characters is refused, so the committed file stays small and reviewable.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent / "adoption.ipynb"
CELL_TIMEOUT_S = 1800
"""Per-cell limit: generous because CI machines are shared; the whole notebook takes minutes."""
MAX_HTML_CHARS = 20_000


class OversizedOutputError(RuntimeError):
    """A cell produced an HTML output too large to commit (e.g. an embedded report)."""


def execute(
    notebook: Path = NOTEBOOK,
    workdir: Path | None = None,
    timeout: int = CELL_TIMEOUT_S,
    kernel_name: str = "python3",
) -> nbformat.NotebookNode:
    """Run every cell of ``notebook`` in a fresh kernel with ``XPRT_NOTEBOOK_DIR=workdir``; return the result.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (the message names the cell and its traceback).
    """
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="xprt-adoption-"))
    workdir.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(notebook, as_version=4)
    previous = os.environ.get("XPRT_NOTEBOOK_DIR")
    # The kernel inherits this process's environment.
    os.environ["XPRT_NOTEBOOK_DIR"] = str(workdir)
    try:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=kernel_name,
            resources={"metadata": {"path": str(workdir)}},
            record_timing=False,
        )
        client.execute()
    finally:
        if previous is None:
            os.environ.pop("XPRT_NOTEBOOK_DIR", None)
        else:
            os.environ["XPRT_NOTEBOOK_DIR"] = previous
    return nb


def check_output_sizes(nb: nbformat.NotebookNode, max_html: int = MAX_HTML_CHARS) -> None:
    """Raise :class:`OversizedOutputError` naming the cell when an HTML output exceeds ``max_html`` characters."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html", "")
            size = len(html) if isinstance(html, str) else sum(len(part) for part in html)
            if size > max_html:
                raise OversizedOutputError(
                    f"cell {index} produced {size} characters of HTML (limit {max_html}); write large reports to a "
                    "file and print its path instead"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK)
    parser.add_argument("--output", type=Path, default=None, help="Where to save (default: in place).")
    parser.add_argument("--workdir", type=Path, default=None, help="XPRT_NOTEBOOK_DIR (default: a temp folder).")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="Per-cell timeout in seconds.")
    parser.add_argument("--max-html", type=int, default=MAX_HTML_CHARS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    nb = execute(args.notebook, args.workdir, args.timeout)
    check_output_sizes(nb, args.max_html)
    output = args.output or args.notebook
    nbformat.write(nb, output)
    print(f"executed {args.notebook.name} in {time.perf_counter() - start:.0f} s -> {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
