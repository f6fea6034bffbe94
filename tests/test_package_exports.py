"""Public names, lazy package imports and the layering of the four packages (by AST)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["operators", "streams", "sinks", "deploy"]
#: The family subpackages of operators/ and deploy/ (each with a public __init__).
SUBPACKAGES = ["operators.confseq", "operators.riemannian", "operators.river", "operators.learners",
               "operators.shape",
               "deploy.kafka", "deploy.demos"]
HEAVY = {"numba", "torch", "matplotlib", "kafka"}
#: The ground floor, in shiftwatch/: the record model every package speaks (records and dead
#: letters, the record <-> bytes codec). It imports none of the four folders.
GROUND_FLOOR = ["records", "codec"]
#: operators/' own common modules (the contract, the registry, Keyed, the state codec): the
#: families build on them; they import no family and nothing of streams, sinks or deploy.
OPERATOR_COMMONS = ["state_codec", "contract", "registry", "keyed", "with_input"]
#: One folder per operator family; a family imports the ground floor, never another family.
FAMILIES = ["confseq", "riemannian", "river", "learners", "shape"]


@pytest.mark.parametrize("package", PACKAGES + SUBPACKAGES)
def test_every_all_entry_imports(package):
    mod = importlib.import_module(f"shiftwatch.{package}")
    assert mod.__all__, f"{package} has an empty __all__"
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert getattr(mod, name, None) is not None, f"{package}.{name} does not import"
    with pytest.raises(AttributeError):
        mod.no_such_name  # noqa: B018


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


_LOADED = ("import json, sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules}"
           f" & set({sorted(HEAVY)!r}))))")


@pytest.mark.parametrize("package", PACKAGES + SUBPACKAGES)
def test_importing_a_package_loads_no_heavy_library(package):
    assert _run(f"import shiftwatch.{package}; " + _LOADED) == []


def _imports(path: Path, module_level_only: bool = False) -> set[str]:
    """Absolute names of the modules ``path`` imports (``from pkg import mod`` gives pkg.mod).

    With ``module_level_only``, imports inside functions and classes are left out (those
    inside module-level ``if``/``try`` blocks are kept).
    """
    tree = ast.parse(path.read_text())
    try:
        parts = path.parent.relative_to(ROOT).parts
        pkg = ".".join(["shiftwatch", *(parts[1:] if parts[:1] == ("shiftwatch",) else parts)])
    except ValueError:  # a file outside the repository (the self-test below)
        pkg = f"shiftwatch.{path.parent.name}"
    if module_level_only:
        todo, nodes = list(tree.body), []
        while todo:
            n = todo.pop()
            nodes.append(n)
            if isinstance(n, (ast.If, ast.Try)):
                todo += [*n.body, *n.orelse, *getattr(n, "finalbody", []),
                         *[s for h in getattr(n, "handlers", []) for s in h.body]]
    else:
        nodes = list(ast.walk(tree))
    names = set()
    for n in nodes:
        if isinstance(n, ast.Import):
            names |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")[:len(pkg.split(".")) - n.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            if base.count(".") <= 1 and base.startswith("shiftwatch"):  # from a package
                names |= {f"{base}.{a.name}" for a in n.names}
    return names


def _modules(package: str) -> list[Path]:
    """Every module of ``package`` (a folder path such as ``operators/confseq``), subfolders
    included."""
    paths = sorted((ROOT / package).rglob("*.py"))
    assert paths
    return paths


def _operator_commons() -> list[Path]:
    return sorted((ROOT / "operators").glob("*.py"))


def _shiftwatch_package(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "shiftwatch" and len(parts) > 1:
        return parts[1]
    return None


@pytest.mark.parametrize("module", GROUND_FLOOR)
def test_the_ground_floor_imports_none_of_the_four_folders_and_nothing_heavy(module):
    path = ROOT / "shiftwatch" / f"{module}.py"
    every = _imports(path)
    above = {n for n in every if _shiftwatch_package(n) in PACKAGES}
    assert not above, f"shiftwatch/{module}.py imports {above}"
    assert not {n.split(".")[0] for n in every} & HEAVY, f"{module} imports {every & HEAVY}"


@pytest.mark.parametrize("module", OPERATOR_COMMONS)
def test_operator_commons_import_no_package_above_and_nothing_heavy(module):
    path = ROOT / "operators" / f"{module}.py"
    every = _imports(path)
    assert not {n for n in every if n.split(".")[:2] in (["shiftwatch", "streams"],
                                                          ["shiftwatch", "sinks"],
                                                          ["shiftwatch", "deploy"])}
    top = _imports(path, module_level_only=True)
    assert not {n.split(".")[0] for n in top} & HEAVY, f"{module} imports {top & HEAVY}"


@pytest.mark.parametrize("path", _modules("operators"),
                         ids=lambda p: str(p.relative_to(ROOT / "operators")))
def test_operators_never_import_streams_sinks_or_deploy(path):
    bad = {n for n in _imports(path) if n.split(".")[:2] in (
        ["shiftwatch", "streams"], ["shiftwatch", "sinks"], ["shiftwatch", "deploy"])}
    assert not bad, f"{path.name} imports {bad}"
    assert not {n.split(".")[0] for n in _imports(path)} & {"streams", "sinks", "deploy",
                                                             "operators"}


#: What sources and sinks may import from below: the ground floor (the record and dead letter,
#: and the record <-> bytes codec, which imports only records).
STREAMS_SINKS_MAY_IMPORT = {"shiftwatch.records", "shiftwatch.codec"}
#: The top-level helper every package __init__ uses for its lazy re-exports (stdlib only).
TOP_LEVEL_HELPERS = {"shiftwatch._lazy"}
#: Compiled kernels of streams (``streams/*_kernel.py``, e.g. the CSV scan) may take ``njit``
#: from ``shiftwatch._jit`` (Numba, cached where it can be), as the operators' kernels do.
KERNEL_HELPERS = {"shiftwatch._jit"}


@pytest.mark.parametrize("path", _modules("streams") + _modules("sinks"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_streams_and_sinks_import_only_records_from_below(path):
    own = path.relative_to(ROOT).parts[0]
    foreign = {n for n in _imports(path) if n.startswith("shiftwatch")
               and _shiftwatch_package(n) not in (own, None)}
    # `from shiftwatch.records import X` also yields ...records.X: drop those.
    allowed = STREAMS_SINKS_MAY_IMPORT | TOP_LEVEL_HELPERS | (
        KERNEL_HELPERS if path.name.endswith("_kernel.py") else set())
    foreign = {n for n in foreign if not any(n.startswith(m + ".") for m in allowed)}
    assert foreign <= allowed, f"{path.name} imports {foreign}"
    assert not {n.split(".")[0] for n in _imports(path)} & {"streams", "sinks", "deploy",
                                                             "operators"}


@pytest.mark.parametrize("module", sorted(STREAMS_SINKS_MAY_IMPORT))
def test_what_streams_and_sinks_import_stays_on_the_ground_floor(module):
    path = ROOT / "shiftwatch" / f"{module.rsplit('.', 1)[1]}.py"
    assert path.exists(), f"{module} is allowed to streams and sinks but does not exist"
    ours = {n for n in _imports(path) if n.startswith("shiftwatch")}
    assert {n for n in ours if not n.startswith("shiftwatch.records")} == set()
    assert not {n.split(".")[0] for n in _imports(path)} & HEAVY


def test_the_top_level_helpers_import_only_the_standard_library():
    for module in TOP_LEVEL_HELPERS:
        path = ROOT / "shiftwatch" / f"{module.rsplit('.', 1)[1]}.py"
        names = {n.split(".")[0] for n in _imports(path)}
        assert not names & {"shiftwatch", "numpy", *HEAVY}, f"{module} imports {names}"


def _family_of(name: str) -> str | None:
    """The operator family a dotted module name belongs to (None for the ground floor)."""
    parts = name.split(".")
    if parts[:2] == ["shiftwatch", "operators"] and len(parts) > 2 and parts[2] in FAMILIES:
        return parts[2]
    return None


@pytest.mark.parametrize("path", _operator_commons(), ids=lambda p: p.name)
def test_the_operator_commons_import_no_family(path):
    families = {n for n in _imports(path) if _family_of(n)}
    assert not families, f"operators/{path.name} imports {families}"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_the_ground_floor_and_no_other_family(family):
    for path in _modules(f"operators/{family}"):
        others = {n for n in _imports(path) if _family_of(n) not in (None, family)}
        assert not others, f"{path.relative_to(ROOT)} imports {others}"


def test_the_kafka_runtime_is_imported_only_by_deploy():
    offenders = []
    for package in ("operators", "streams", "sinks"):
        for path in _modules(package):
            found = {n for n in _imports(path) if n.startswith("shiftwatch.deploy")}
            if found:
                offenders.append(f"{path.relative_to(ROOT)} imports {found}")
    assert not offenders, offenders


def test_the_demos_are_imported_only_by_the_cli():
    for path in _modules("deploy") + _modules("operators") + _modules("streams") + \
            _modules("sinks"):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("deploy", "demos") or rel == Path("deploy/cli.py"):
            continue
        found = {n for n in _imports(path) if n.startswith("shiftwatch.deploy.demos")}
        assert not found, f"{rel} imports {found}"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the shiftwatch modules it imports (module level and inside functions)."""
    graph = {}
    for package in [*PACKAGES, "shiftwatch"]:
        for path in _modules(package):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[0] == "shiftwatch":
                parts = parts[1:]
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(["shiftwatch", *parts])
            graph[name] = {n for n in _imports(path) if n.startswith("shiftwatch.")}
    # an imported name that is not a module (``from pkg.mod import Class``) is dropped
    return {m: {n for n in deps if n in graph and n != m} for m, deps in graph.items()}


def test_no_import_circles_between_modules():
    graph = _import_graph()
    # Packages' __init__ re-export lazily (strings, no imports): they are not edges.
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_layering_check_sees_imports_inside_functions(tmp_path):
    # riemannian's old lazy import (inside a method) must count as an import.
    fake = tmp_path / "operators" / "fake.py"
    fake.parent.mkdir()
    fake.write_text("class A:\n    def f(self):\n"
                    "        from shiftwatch.streams.synthetic import WishartSPDStream\n"
                    "        from . import keyed\n")
    assert _imports(fake) == {"shiftwatch.streams.synthetic", "shiftwatch.operators",
                              "shiftwatch.operators.keyed"}
    assert _imports(fake, module_level_only=True) == set()


def test_nothing_imports_the_folders_by_their_bare_names():
    # `import operators` from the repository root would load a second copy of a package
    # (a second operator registry); code, doctests and docs use `shiftwatch.*`.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bare = re.compile(r"^\s*(>>> |\.\.\. )?(from|import) (operators|streams|sinks|deploy)\b")
    found = []
    for folder in ("operators", "streams", "sinks", "deploy", "shiftwatch", "tests",
                   "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if bare.match(line):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    docs = sorted((root / "docs").rglob("*.md"))
    for path in [root / "README.md", root / "DEVELOPERS.md", *docs]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if bare.match(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


#: A module one person can hold: the library's modules stay under this many lines.
MAX_MODULE_LINES = 800
#: operators/ keeps its common modules few (the families have folders of their own).
MAX_OPERATOR_TOP_MODULES = 16


def test_no_library_module_is_over_800_lines():
    long = []
    for package in [*PACKAGES, "shiftwatch"]:
        for path in _modules(package):
            n = len(path.read_text().splitlines())
            if n > MAX_MODULE_LINES:
                long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, "\n".join(long)


def test_operators_holds_at_most_16_modules_at_its_top():
    top = sorted(p.name for p in (ROOT / "operators").glob("*.py"))
    assert len(top) <= MAX_OPERATOR_TOP_MODULES, top


def test_streams_and_sinks_import_nothing_from_operators():
    found = [f"{p.relative_to(ROOT)}: {n}" for p in _modules("streams") + _modules("sinks")
             for n in _imports(p) if _shiftwatch_package(n) == "operators"]
    assert not found, "\n".join(found)


def test_one_version_source_and_the_cli_prints_it(capsys):
    import importlib.metadata

    import shiftwatch
    from shiftwatch.deploy.cli import main

    head = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.dynamic]")[0]
    assert 'dynamic = ["version"]' in head and "\nversion =" not in head
    assert importlib.metadata.version("shiftwatch") == shiftwatch.__version__
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"shiftwatch {shiftwatch.__version__}"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog and f"## {shiftwatch.__version__}" in changelog


def test_a_lazy_name_is_not_shadowed_by_a_submodule_of_the_same_name():
    # importing a submodule sets the package attribute of its name: `deploy.dedupe` (the
    # function README documents) was replaced by the module deploy/dedupe.py once the
    # executor had imported it
    code = ("import json, shiftwatch.deploy as d, shiftwatch.deploy.executor, "
            "shiftwatch.deploy.kafka.stage; print(json.dumps(callable(d.dedupe)))")
    assert _run(code) is True
    for package in PACKAGES + SUBPACKAGES:
        mod = importlib.import_module(f"shiftwatch.{package}")
        folder = ROOT / package.replace(".", "/")
        clash = sorted(n for n in mod.__all__ if (folder / f"{n}.py").exists()
                       and n not in {"stage"})
        assert not clash, f"{package}: {clash} are both exported names and modules"
