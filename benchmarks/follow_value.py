"""How far a reader walks to follow one value through the package: rooms, stays, returns and climbs back up.

The stage layer's measure of a command's shape: run a command in-process on tiny inputs and trace every call of a
package function that holds the followed value (an argument or local equal to it, or a package object, list or dict
holding it one level down), every return from such a call to a caller that holds it too, and the caller of such a
call when it holds the value and the trip was elsewhere (back in its module). Each change of module
along that trip is a *stay* (consecutive calls inside one module are one stay); a *room* is a distinct module; a
*return* is a stay in a module already visited; a *climb back up* is a call from a module (the calling frame's)
into one that imports it (directly or not, read from the source as ``tests/test_layering.py`` does): a lower layer
calling an upper one.

Two trips, on a tiny random BERT (``bench_mining_scale.build_model``) and a 12-document corpus (nothing from a hub;
the checkout given by ``--root``)::

    python benchmarks/follow_value.py --json benchmarks/results/follow-value.json            # this checkout
    python benchmarks/follow_value.py --root /tmp/old-checkout --json /tmp/old.json         # another commit's

- ``train --mined``: the mined folder's path, from the command's function in ``cli/train.py`` (past the parsing of
  its arguments) to the saved model (1 step);
- ``quickstart config``: the ``QuickstartConfig`` object, from ``xprt-st quickstart`` on the corpus (1 step).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` -> the package modules it imports anywhere in its file (tests/test_layering.py)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update(owner(f"{node.module}.{alias.name}") for alias in node.names)
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def below(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


class Follower:
    """A ``sys.settrace`` hook that records the trip of one value through the package's functions."""

    def __init__(self, package: Path, holds: Any) -> None:
        self.package = str(package)
        self.holds = holds
        self.trip: list[tuple[str, str, str, str | None]] = []  # (call | resume | return, module, function, caller)

    def module(self, frame: Any) -> str | None:
        name = frame.f_globals.get("__name__", "")
        return name if name.startswith("xprt_st") and frame.f_code.co_filename.startswith(self.package) else None

    def holding(self, frame: Any) -> bool:
        return any(self.holds(value) for value in list(frame.f_locals.values()))

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "call" or self.module(frame) is None or not self.holding(frame):
            return None
        caller = frame.f_back
        calling = self.module(caller) if caller is not None else None
        if calling is not None and self.holding(caller) and (not self.trip or self.trip[-1][1] != calling):
            # the caller holds the value too: the trip is back in its module (after a return it did not hold
            # the value at, e.g. the line that assigns a config a call just made)
            self.trip.append(("resume", calling, caller.f_code.co_name, None))
        self.trip.append(("call", self.module(frame), frame.f_code.co_name, calling))
        return self.local

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "return":
            caller = frame.f_back
            if caller is not None and self.module(caller) is not None and self.holding(caller):
                self.trip.append(("return", self.module(caller), caller.f_code.co_name, None))
        return None


def one_level(value: Any, match: Any) -> bool:
    """``match(value)``, or of a value one level inside a package object, a list, tuple or dict."""
    if match(value):
        return True
    if isinstance(value, (list, tuple)) and len(value) < 64:
        return any(match(v) for v in value)
    if isinstance(value, dict) and len(value) < 64:
        return any(match(v) for v in value.values())
    if type(value).__module__.startswith("xprt_st"):
        fields = dataclasses.fields(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else ()
        inner = {**{f.name: getattr(value, f.name) for f in fields}, **getattr(value, "__dict__", {})}
        return any(match(v) for v in inner.values())
    return False


def summarise(
    trip: list[tuple[str, str, str, str | None]], graph: dict[str, set[str]], start: str | None = None
) -> dict[str, Any]:
    """Stays, rooms, returns and climbs back up of a trip (the module doc), from its first stay in ``start`` (a
    module: the command's own, past the parsing of its arguments) or from its first. A climb is read from each call's
    own caller, not from the stay before it (a caller that does not hold the value leaves no stay)."""
    first = next((i for i, (_, module, _, _) in enumerate(trip) if module == start), 0)
    stays: list[str] = []
    climbs = 0
    for event, module, _, caller in trip[first:]:
        if not stays or stays[-1] != module:
            stays.append(module)
        if event == "call" and caller is not None and caller != module and caller in below(graph, module):
            climbs += 1
    seen: set[str] = set()
    returns = 0
    entered: dict[str, int] = {}
    for module in stays:
        returns += module in seen
        seen.add(module)
        entered[module] = entered.get(module, 0) + 1
    return {
        "rooms": len(seen),
        "stays": len(stays),
        "returns": returns,
        "climbs_back_up": climbs,
        "most_entered": sorted(entered.items(), key=lambda kv: -kv[1])[:5],
        "path": stays,
    }


def corpus(path: Path) -> Path:
    topics = ["river", "violin", "glacier", "tax", "comet", "bakery"]
    rows = []
    for i in range(12):
        topic = topics[i % len(topics)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history, with detail "
            f"number {i * 10 + j} about {topics[(i + j) % len(topics)]} and more words to read."
            for j in range(4 + i % 3)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def follow(package: Path, argv: list[str], holds: Any) -> list[tuple[str, str, str, str | None]]:
    from typer.testing import CliRunner

    from xprt_st.cli import app

    follower = Follower(package, holds)
    sys.settrace(follower)
    try:
        result = CliRunner().invoke(app, argv, catch_exceptions=False)
    finally:
        sys.settrace(None)
    if result.exit_code != 0:
        raise SystemExit(f"{' '.join(argv[:2])} failed ({result.exit_code}): {result.output[-2000:]}")
    return follower.trip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.root))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench_mining_scale import build_model  # the tiny random BERT of the mining benchmarks

    import xprt_st

    package = Path(xprt_st.__file__).resolve().parent
    if package != (args.root / "xprt_st").resolve():
        raise SystemExit(f"imported {package}, not the checkout {args.root}")
    graph = import_graph(package)
    head = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    results: dict[str, Any] = {"commit": head.stdout.strip() or None}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        model, text = build_model(tmp / "tiny"), corpus(tmp / "corpus.jsonl")
        mined = tmp / "mined"
        mine = ["mine", str(text), "--output", str(mined), "--model", str(model), "--id-field", "id", "--quiet"]
        follow(package, [*mine, "--max-tokens", "32", "--min-tokens", "8"], lambda v: False)
        target = os.path.abspath(mined)

        def is_mined(value: Any) -> bool:
            return isinstance(value, (str, Path)) and os.path.abspath(str(value)) == target

        train = ["train", "--recipe", "change-only-positive", "--mined", str(mined), "--output", str(tmp / "run")]
        train += ["--model", str(model), "--max-steps", "1", "--batch-size", "2", "--max-seq-length", "32", "--quiet"]
        trip = follow(package, train, lambda v: one_level(v, is_mined))
        results["train --mined"] = summarise(trip, graph, start="xprt_st.cli.train")

        def is_config(value: Any) -> bool:
            return type(value).__name__ == "QuickstartConfig"

        quick = ["quickstart", "--corpus", str(text), "--id-field", "id", "--model", str(model), "-o", str(tmp / "qs")]
        quick += ["--max-steps", "1", "--batch-size", "2", "--quiet"]
        trip = follow(package, quick, lambda v: one_level(v, is_config))
        results["quickstart config"] = summarise(trip, graph)
    for name in ("train --mined", "quickstart config"):
        r = results[name]
        print(f"{name}: {r['rooms']} rooms, {r['stays']} stays, {r['returns']} returns, {r['climbs_back_up']} climbs")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
