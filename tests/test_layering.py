"""The package's layering: no module below the CLI imports it; the launcher modules run the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xprt_st"
ENTRY = PACKAGE / "__main__.py"  # the one module above the CLI: `python -m xprt_st`


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_below_the_cli_imports_it() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == ENTRY or PACKAGE / "cli" in path.parents:
            continue
        if any(name == "xprt_st.cli" or name.startswith("xprt_st.cli.") for name in _imported(path)):
            upward.append(str(path.relative_to(PACKAGE)))
    assert not upward, f"modules importing the CLI from below: {upward}"


def test_both_launcher_modules_run_the_cli() -> None:
    for module in ("xprt_st", "xprt_st.training"):
        result = subprocess.run(
            [sys.executable, "-m", module, "train", "--help"], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
        assert "Usage: xprt-st train" in result.stdout
