"""Every example in the package's docstrings runs and gives what it shows."""

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "incremental_assets"
# Entry points that act when imported (the CLI's __main__, the workspace's code location).
SKIP = {"incremental_assets.cli.__main__", "incremental_assets.definitions"}


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in SKIP and ">>>" in path.read_text():
            names.append(name)
    return names


def test_the_examples_are_found():
    assert len(module_names()) >= 25


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{name} has '>>>' but no example doctest can find"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
