"""Docstring examples run as tests, so they cannot rot unseen (``python3 -m pytest -q tests`` runs them).

Two kinds: ``>>>`` examples in every module of the package (doctest; lines marked ``+SKIP`` need real data or
a long run), and the loss classes' ``Example: ::`` blocks (plain code a user pastes into a training script),
executed with :func:`xprt_st.models.load_model` returning the tiny random BERT, in a scratch folder.
"""

from __future__ import annotations

import copy
import doctest
import importlib
import inspect
import pkgutil
import re
import textwrap

import pytest

import xprt_st
import xprt_st.losses

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(xprt_st.__path__, prefix="xprt_st.")
    if not info.name.endswith("__main__")
)


def _doctests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    return [test for test in doctest.DocTestFinder().find(module, module_name) if test.examples]


@pytest.mark.parametrize("module_name", [name for name in MODULES if _doctests(name)])
def test_docstring_examples(module_name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in _doctests(module_name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring example(s) of {module_name} failed"


def test_examples_are_found() -> None:
    # guards the collection above: the package's examples (bootstrap, binding, objectives ...) are really run
    with_examples = [name for name in MODULES if _doctests(name)]
    assert {"xprt_st.binding", "xprt_st.objectives", "xprt_st.evaluation.bootstrap", "xprt_st.recipe"} <= set(
        with_examples
    )


LITERAL_EXAMPLE = re.compile(r"Example:\n(\s*)::\n\n((?:\1 {4}.*\n|\s*\n)+)")


def _literal_examples() -> list[tuple[str, str]]:
    found = []
    for name in xprt_st.losses.__all__:
        obj = getattr(xprt_st.losses, name)
        for owner, doc in ((name, inspect.getdoc(obj)), (f"{name}.__init__", inspect.getdoc(obj.__init__))):
            for match in LITERAL_EXAMPLE.finditer((doc or "") + "\n"):
                found.append((owner, textwrap.dedent(match.group(2))))
    return list(dict(found).items())


LITERAL = _literal_examples()


def test_every_loss_example_is_found() -> None:
    owners = {owner.split(".")[0] for owner, _ in LITERAL}
    assert {"CrossPassageLoss", "XPRTLoss", "RetroMAELoss", "MLMLoss", "UniformityLoss", "WithRetention"} <= owners


@pytest.mark.parametrize(("owner", "code"), LITERAL, ids=[owner for owner, _ in LITERAL])
def test_loss_examples_run_on_the_tiny_model(
    owner: str, code: str, tiny_model, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import xprt_st.models

    monkeypatch.chdir(tmp_path)  # a trainer in an example writes its output folder here
    monkeypatch.setattr(xprt_st.models, "load_model", lambda *args, **kwargs: copy.deepcopy(tiny_model))
    exec(compile(code, f"<{owner} example>", "exec"), {"__name__": f"example_{owner}"})
