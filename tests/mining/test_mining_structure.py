"""The invariants of the mining package's structure that a newcomer relies on (read from the source, no import)."""

from __future__ import annotations

import ast
from pathlib import Path

import xprt_st

PACKAGE = Path(xprt_st.__file__).parent
MINING = PACKAGE / "mining"
MAX_LINES = 500


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def test_no_import_circle_and_no_long_file_in_mining():
    files = sorted(MINING.rglob("*.py"))
    graph = {_module(f): {m for m, _ in _imports(f) if m.startswith("xprt_st.mining.")} for f in files}
    for path in files:
        assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES, f"{path} is over {MAX_LINES} lines"

    def visit(module: str, stack: list[str]) -> None:
        for dependency in graph.get(module, ()):
            assert dependency not in stack, f"import circle: {' -> '.join([*stack, dependency])}"
            visit(dependency, [*stack, dependency])

    for module in graph:
        visit(module, [module])


def test_only_engines_and_mine_import_an_engine_and_the_ray_engine_imports_nothing_private():
    engines = ("xprt_st.mining.engines.local", "xprt_st.mining.engines.ray")
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        if module.startswith("xprt_st.mining.engines") or module == "xprt_st.mining.mine":
            continue
        assert not [m for m, _ in _imports(path) if m in engines], f"{module} imports an engine"
    for module, names in _imports(MINING / "engines" / "ray.py"):
        if module.startswith("xprt_st."):
            assert not [n for n in names if n.startswith("_")], f"the Ray engine imports {names} from {module}"


def test_only_the_layout_package_names_files_of_the_output_folder():
    names = ("stats.json", "groups_meta.jsonl", "passages.parquet", "mining_config.json", "COMPLETE", "split.parquet")
    for path in MINING.rglob("*.py"):
        if "layout" in path.relative_to(MINING).parts:
            continue
        tree = ast.parse(path.read_text())
        exported = {  # names in __all__ are Python names, not file names
            id(node)
            for assign in ast.walk(tree)
            if isinstance(assign, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in assign.targets)
            for node in ast.walk(assign.value)
        }
        code = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in exported]
        assert not [c for c in code if isinstance(c, str) and c in names], f"{path} names a file of the output folder"
