"""Run every docstring example of the installed ``shiftwatch`` packages.

The modules are imported by their installed names (``shiftwatch.operators.confseq``), not from
the repository folders, so each one is loaded once and registers its operators once.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import shiftwatch

PACKAGES = ["shiftwatch.streams", "shiftwatch.operators", "shiftwatch.sinks", "shiftwatch.deploy"]


def module_names() -> list[str]:
    names = ["shiftwatch"]
    for package in PACKAGES:
        names.append(package)
        path = importlib.util.find_spec(package).submodule_search_locations
        names += [m.name for m in pkgutil.walk_packages(path, prefix=f"{package}.")]
    return names


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures = []
    for test in finder.find(module, name):
        out: list[str] = []
        result = runner.run(test, out=out.append)
        if result.failed:
            failures.append("".join(out))
    assert not failures, "\n".join(failures)


def test_the_namespace_is_the_one_that_is_imported():
    assert shiftwatch.__file__.endswith("shiftwatch/__init__.py")
