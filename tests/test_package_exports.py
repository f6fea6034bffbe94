from __future__ import annotations

import importlib

import pytest

PACKAGES = ["operators", "streams", "sinks", "deploy"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_all_entry_imports(package):
    mod = importlib.import_module(package)
    assert mod.__all__, f"{package} has an empty __all__"
    for name in mod.__all__:
        assert getattr(mod, name, None) is not None, f"{package}.{name} does not import"


def test_layering_base_imports_nothing_from_the_other_packages():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tree = ast.parse((root / "operators" / "base.py").read_text())
    imported = {n.module.split(".")[0] for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
    assert not imported & {"streams", "sinks", "deploy"}
    for pkg, forbidden in (("streams", {"sinks", "deploy"}), ("sinks", {"streams", "deploy"})):
        for path in (root / pkg).glob("*.py"):
            tree = ast.parse(path.read_text())
            mods = {n.module.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module}
            mods |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names}
            assert not mods & forbidden, f"{path.name} imports {mods & forbidden}"
