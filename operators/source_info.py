"""Describe operators from their source code, without importing their modules.

``shiftwatch operators`` lists every operator with its parameters and docstring summary. The
operator modules import Numba and PyTorch, and River's drift detectors load scikit-learn and
pandas (through ``river.drift.datasets``), which together take seconds. The functions here read
the same facts from the source with :mod:`ast`: the class docstring's first line, the
constructor's parameters with their (literal) defaults and the ``input_kind`` class attribute.
Whenever the source holds something they cannot read for certain (a non-literal default, a base
class defined elsewhere, a custom ``info``), they return ``None`` and the caller imports the
module instead. ``tests/operators/test_registry.py`` checks that the results equal what the
imported classes give.

>>> info = class_info_from_source("shiftwatch.operators.transforms", "Standardize",
...                               "standardize")
>>> info.params["burn_in"], info.input_kind
(30, 'number or vector')
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import operator
from functools import lru_cache
from pathlib import Path
from typing import Any

from shiftwatch.operators.registry import OperatorInfo

__all__ = ["class_info_from_source", "river_operator_infos"]

_NOT_LITERAL = object()


@lru_cache(maxsize=64)
def _parse(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def _module_file(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv}


def _literal(node: ast.AST | None) -> Any:
    """The value of a literal (or of arithmetic on number literals, ``1 - 1e-4``)."""
    if node is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _literal(node.left), _literal(node.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            try:
                return _ARITHMETIC[type(node.op)](left, right)
            except ArithmeticError:
                return _NOT_LITERAL
    return _NOT_LITERAL


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _chain(classes: dict[str, ast.ClassDef], name: str,
           stop: set[str]) -> list[ast.ClassDef] | None:
    """The class and its in-module bases, in MRO order, ending at a base named in ``stop``.

    None when the hierarchy is not a single chain inside the module (multiple inheritance,
    a base imported from elsewhere).
    """
    chain: list[ast.ClassDef] = []
    while True:
        cls = classes.get(name)
        if cls is None or cls in chain:
            return None
        chain.append(cls)
        bases = [b for b in cls.bases if _base_name(b) not in ("Generic", "object")]
        if len(bases) != 1 or cls.keywords:
            return None
        name = _base_name(bases[0])
        if name in stop:
            return chain
        if name is None:
            return None


def _method(chain: list[ast.ClassDef], method: str) -> ast.FunctionDef | None:
    for cls in chain:
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == method:
                return node
    return None


def _class_attr(chain: list[ast.ClassDef], attr: str) -> Any:
    for cls in chain:
        for node in cls.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == attr for t in node.targets):
                return _literal(node.value)
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and node.target.id == attr and node.value is not None):
                return _literal(node.value)
    return inspect.Parameter.empty  # not set in the chain


def _docstring(chain: list[ast.ClassDef]) -> str | None:
    for cls in chain:
        doc = ast.get_docstring(cls, clean=True)
        if doc:
            return doc
    return None


def _init_params(init: ast.FunctionDef, keep_varargs: bool) -> dict[str, Any] | None:
    """Parameter name -> default (``inspect.Parameter.empty`` if required), ``self`` dropped."""
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.AST | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params: dict[str, Any] = {}
    for arg, default in list(zip(positional, defaults, strict=True))[1:]:
        params[arg.arg] = _literal(default)
    if a.vararg is not None and keep_varargs:
        params[a.vararg.arg] = inspect.Parameter.empty
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params[arg.arg] = _literal(default)
    if any(v is _NOT_LITERAL for v in params.values()):
        return None
    return params


@lru_cache(maxsize=1)
def _default_input_kind() -> Any:
    """``Operator.input_kind``, read from the contract's source (importing it loads NumPy)."""
    path = _module_file("shiftwatch.operators.contract")
    cls = _classes(_parse(path)).get("Operator") if path else None
    return _class_attr([cls], "input_kind") if cls is not None else inspect.Parameter.empty


def class_info_from_source(module: str, cls_name: str, name: str) -> OperatorInfo | None:
    """The :class:`OperatorInfo` of operator class ``module.cls_name``, read from its source.

    Equal to what listing the imported class gives; None if that cannot be read for certain.
    """
    path = _module_file(module)
    if path is None:
        return None
    chain = _chain(_classes(_parse(path)), cls_name, stop={"Operator"})
    if chain is None or _method(chain, "info") is not None:
        return None
    init = _method(chain, "__init__")
    doc = _docstring(chain)
    kind = _class_attr(chain, "input_kind")
    if kind is inspect.Parameter.empty:
        kind = _default_input_kind()
    if init is None or doc is None or not isinstance(kind, str):
        return None
    params = _init_params(init, keep_varargs=True)
    if params is None:
        return None
    return OperatorInfo(name=name, summary=doc.split("\n")[0],
                        params={k: ("required" if v is inspect.Parameter.empty else v)
                                for k, v in params.items()},
                        input_kind=kind)


# --------------------------------------------------------------------------------------
# River's drift detectors (the ``river:NAME`` family)
# --------------------------------------------------------------------------------------

#: The accepted input of River's binary (error-stream) detectors, as set by
#: ``operators/river_adapter.py`` (the other detectors take ``RiverDetector.input_kind``).
_RIVER_BINARY_INPUT = "0/1 or bool (1 = error), scalar or vector"
#: River's detector base classes (river.base) -> whether the detector takes a binary stream.
_RIVER_BASES = {"DriftDetector": False, "DriftAndWarningDetector": False,
                "BinaryDriftDetector": True, "BinaryDriftAndWarningDetector": True}


def _river_package_detectors(init_path: Path) -> list[tuple[str, Path]] | None:
    """(name, file) of each class exported by a river.drift package ``__init__.py``."""
    tree = _parse(str(init_path))
    exported = None
    sources: dict[str, Path] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"):
            exported = _literal(node.value)
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            base = init_path.parent / Path(*node.module.split("."))
            file = base.with_suffix(".py") if base.with_suffix(".py").exists() \
                else base / "__init__.py"
            for alias in node.names:
                sources[alias.asname or alias.name] = file
    if not isinstance(exported, list):
        return None
    # Names without a class import of their own (subpackages, stale entries) are not detectors.
    return [(n, sources[n]) for n in exported if n in sources and sources[n].name != "__init__.py"]


@lru_cache(maxsize=1)
def _river_detectors() -> tuple[tuple[str, str, dict, bool], ...] | None:
    """(name, docstring, constructor defaults, binary) of each concrete River drift detector.

    The same detectors, in the same order, as ``river_detector_names()`` finds by importing
    ``river.drift`` and ``river.drift.binary``.
    """
    root = _module_file("river")
    if root is None:
        return None
    drift = Path(root).parent / "drift"
    found: dict[str, tuple[str, str, dict, bool]] = {}
    for init in (drift / "__init__.py", drift / "binary" / "__init__.py"):
        if not init.exists():
            return None
        entries = _river_package_detectors(init)
        if entries is None:
            return None
        for name, file in entries:
            classes = _classes(_parse(str(file)))
            cls = classes.get(name)
            if cls is None:
                return None
            bases = {_base_name(b) for b in cls.bases}
            kinds = {_RIVER_BASES[b] for b in bases if b in _RIVER_BASES}
            if not kinds:
                if bases & set(classes) or any(b and "Drift" in b for b in bases):
                    return None  # derived from a class this does not know: unsure
                continue  # not a drift detector (e.g. DriftRetrainingClassifier)
            if len(kinds) != 1 or len(bases) != 1 or any(
                    _base_name(d) == "abstractmethod"
                    for f in cls.body if isinstance(f, ast.FunctionDef) for d in f.decorator_list
                    if isinstance(d, (ast.Name, ast.Attribute))):
                return None
            init_fn = _method([cls], "__init__")
            doc = ast.get_docstring(cls, clean=True)
            if init_fn is None or not doc:
                return None
            defaults = _init_params(init_fn, keep_varargs=False)
            if defaults is None:
                return None
            found[name] = (name, doc, defaults, kinds.pop())
    return tuple(found[n] for n in sorted(found))


def river_operator_infos() -> list[OperatorInfo] | None:
    """The ``river:NAME`` operators, with River's facts read from its source.

    Importing ``river.drift`` takes over a second (it loads scikit-learn and pandas for its
    bundled datasets); reading the source of its detectors takes milliseconds. The info itself
    is made by ``RiverDetector.info``, given the facts read here. None if River's source
    holds something this cannot read for certain.
    """
    detectors = _river_detectors()
    if detectors is None:
        return None
    from shiftwatch.operators.river_adapter import RiverDetector

    infos = []
    for name, doc, defaults, binary in detectors:
        stand_in = type(f"River{name}", (), {
            "name": f"river:{name}",
            "river_class": type(name, (), {"__doc__": doc}),
            "river_defaults": dict(defaults),
            "binary": binary,
            "input_kind": _RIVER_BINARY_INPUT if binary else RiverDetector.input_kind,
        })
        try:
            infos.append(RiverDetector.info.__func__(stand_in))
        except (AttributeError, TypeError, KeyError):  # info needs more than River's facts
            return None
    return infos
