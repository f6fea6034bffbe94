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
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["OperatorInfo", "param_docs", "class_info_from_source", "parse_source", "module_file",
           "class_defs", "literal_value", "base_name", "find_method", "init_params"]

_NOT_LITERAL = object()


@dataclass
class OperatorInfo:
    """What ``shiftwatch operators`` prints for one operator."""

    name: str
    summary: str
    params: dict  # name -> default (inspect.Parameter.empty shown as "required")
    input_kind: str


_SECTION = re.compile(r"^([A-Z][A-Za-z ]+)\n-{3,}$", re.M)
_NAMES = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)(\s*:.*)?$")


def param_docs(doc: str | None) -> dict[str, str]:
    r"""Parameter name -> its description, from a numpydoc ``Parameters`` section (a cleaned
    docstring). Names described together (``burn_in, burn_in_min``) share the text.

    >>> param_docs("Summary.\n\nParameters\n----------\nalpha\n    Level.\n    In (0, 1).\n"
    ...            "a, b : int\n    Both.\n\nExamples\n--------\n>>> 1\n")
    {'alpha': 'Level. In (0, 1).', 'a': 'Both.', 'b': 'Both.'}
    """
    if not doc:
        return {}
    sections = list(_SECTION.finditer(doc))
    body = None
    for i, m in enumerate(sections):
        if m.group(1) == "Parameters":
            end = sections[i + 1].start() if i + 1 < len(sections) else len(doc)
            body = doc[m.end():end]
            break
    if body is None:
        return {}
    out: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def done() -> None:
        for n in names:
            out[n] = " ".join(text).strip()

    for line in body.splitlines():
        m = _NAMES.match(line) if line and not line[0].isspace() else None
        if m:
            done()
            names = [n.strip() for n in m.group(1).split(",")]
            text = []
        elif line.strip() and names:
            text.append(line.strip())
    done()
    return out


@lru_cache(maxsize=64)
def parse_source(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def module_file(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin


def class_defs(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv}


def literal_value(node: ast.AST | None) -> Any:
    """The value of a literal (or of arithmetic on number literals, ``1 - 1e-4``)."""
    if node is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = literal_value(node.left), literal_value(node.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            try:
                return _ARITHMETIC[type(node.op)](left, right)
            except ArithmeticError:
                return _NOT_LITERAL
    return _NOT_LITERAL


def base_name(node: ast.expr) -> str | None:
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
        bases = [b for b in cls.bases if base_name(b) not in ("Generic", "object")]
        if len(bases) != 1 or cls.keywords:
            return None
        name = base_name(bases[0])
        if name in stop:
            return chain
        if name is None:
            return None


def find_method(chain: list[ast.ClassDef], method: str) -> ast.FunctionDef | None:
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
                return literal_value(node.value)
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and node.target.id == attr and node.value is not None):
                return literal_value(node.value)
    return inspect.Parameter.empty  # not set in the chain


def _docstring(chain: list[ast.ClassDef]) -> str | None:
    for cls in chain:
        doc = ast.get_docstring(cls, clean=True)
        if doc:
            return doc
    return None


def init_params(init: ast.FunctionDef, keep_varargs: bool) -> dict[str, Any] | None:
    """Parameter name -> default (``inspect.Parameter.empty`` if required), ``self`` dropped."""
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.AST | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params: dict[str, Any] = {}
    for arg, default in list(zip(positional, defaults, strict=True))[1:]:
        params[arg.arg] = literal_value(default)
    if a.vararg is not None and keep_varargs:
        params[a.vararg.arg] = inspect.Parameter.empty
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params[arg.arg] = literal_value(default)
    if any(v is _NOT_LITERAL for v in params.values()):
        return None
    return params


def _wrapped_init(chain: list[ast.ClassDef]) -> ast.FunctionDef | None:
    """The function ``f`` of a class body's ``__init__ = params_of(Cls, f)``."""
    for cls in chain:
        for node in cls.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "__init__" and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "params_of" and len(node.value.args) == 2
                    and isinstance(node.value.args[1], ast.Name)):
                return find_method([cls], node.value.args[1].id)
    return None


def _params_from(qualname: str, init: ast.FunctionDef | None) -> dict[str, Any] | None:
    """The parameters of an ``__init__`` made by
    :func:`~shiftwatch.operators.contract.params_of`: those of ``qualname``'s own
    ``__init__`` (read from its module's source), then ``init``'s keyword-only ones."""
    module, _, cls_name = qualname.rpartition(".")
    path = module_file(module) if module else None
    cls = class_defs(parse_source(path)).get(cls_name) if path else None
    base = find_method([cls], "__init__") if cls is not None else None
    if base is None or base.args.vararg is not None or base.args.kwarg is not None:
        return None
    if init is None:
        return None
    a = init.args
    if a.vararg is None or a.kwarg is None or len([*a.posonlyargs, *a.args]) != 1:
        return None  # not the shape params_of expects
    params = init_params(base, keep_varargs=False)
    own = {arg.arg: literal_value(d) for arg, d in zip(a.kwonlyargs, a.kw_defaults,
                                                          strict=True)}
    if params is None or any(v is _NOT_LITERAL for v in own.values()):
        return None
    return {**params, **own}


@lru_cache(maxsize=1)
def _default_input_kind() -> Any:
    """``Operator.input_kind``, read from the contract's source (importing it loads NumPy)."""
    path = module_file("shiftwatch.operators.contract")
    cls = class_defs(parse_source(path)).get("Operator") if path else None
    return _class_attr([cls], "input_kind") if cls is not None else inspect.Parameter.empty


def class_info_from_source(module: str, cls_name: str, name: str) -> OperatorInfo | None:
    """The :class:`OperatorInfo` of operator class ``module.cls_name``, read from its source.

    Equal to what listing the imported class gives; None if that cannot be read for certain.
    """
    path = module_file(module)
    if path is None:
        return None
    chain = _chain(class_defs(parse_source(path)), cls_name, stop={"Operator"})
    if chain is None or find_method(chain, "info") is not None:
        return None
    init = find_method(chain, "__init__")
    doc = _docstring(chain)
    kind = _class_attr(chain, "input_kind")
    if kind is inspect.Parameter.empty:
        kind = _default_input_kind()
    if (init is None and _wrapped_init(chain) is None) or doc is None \
            or not isinstance(kind, str):
        return None
    from_cls = _class_attr(chain, "params_from")
    if isinstance(from_cls, str):
        params = _params_from(from_cls, _wrapped_init(chain))
    else:
        params = init_params(init, keep_varargs=True)
    if params is None:
        return None
    return OperatorInfo(name=name, summary=doc.split("\n")[0],
                        params={k: ("required" if v is inspect.Parameter.empty else v)
                                for k, v in params.items()},
                        input_kind=kind)
