"""The package's layering: no import circle, no module below the CLI imports it, no module imports the facade of
the package it sits in; the launcher module runs the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xprt_st"
ENTRY = PACKAGE / "__main__.py"  # the one module above the CLI: `python -m xprt_st`


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _owner(name: str) -> str | None:
    """The package module that ``name`` (a module, or a name inside one) resolves to; None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports anywhere in its file: at the top, inside a
    function (a late import still runs), or under ``TYPE_CHECKING`` (the type still couples the two)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(_owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update(_owner(f"{node.module}.{alias.name}") for alias in node.names)
        graph[module] = {target for target in targets if target is not None and target != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively).

    Example:
        >>> circles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
        [['a', 'b']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    assert not circles(import_graph()), "modules that import each other, directly or round a circle"


def test_no_module_imports_the_facade_of_its_own_package() -> None:
    """``xprt_st.mining.x`` importing ``xprt_st.mining`` climbs back up to the package that gathers it."""
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py" and name != "xprt_st"}
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if target in packages and module.startswith(target + ".")
    ]
    assert not upward, f"modules importing their own package's facade: {upward}"


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


def test_the_launcher_module_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xprt_st", "train", "--help"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: xprt-st train" in result.stdout
