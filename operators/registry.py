"""The registry: operators by name, for pipeline files and the command line.

Built-in operators are declared in one table, :data:`BUILTIN_OPERATORS` (name ->
``"module:Class"``), and the ``river:NAME`` family in :data:`BUILTIN_PREFIXES`. A built-in
operator's module is imported only when :func:`create` or :func:`resolve` needs that operator,
so naming one operator does not load the libraries of the others (Numba, PyTorch).
:func:`list_operators` describes operators whose module is not imported yet from the module's
source (:mod:`shiftwatch.operators.source_info`), so ``shiftwatch operators`` imports none of
them.

>>> from shiftwatch.operators.registry import create, registered_names
>>> "river:PageHinkley" in registered_names()
True
>>> create("standardize", burn_in=10)
Standardize(field='value', burn_in=10, emit_burn_in=True, min_std=1e-09)
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shiftwatch.operators.source_info import OperatorInfo, class_info_from_source

if TYPE_CHECKING:  # listing operators must not import NumPy (the contract does)
    from shiftwatch.operators.contract import Operator

__all__ = [
    "BUILTIN_OPERATORS",
    "BUILTIN_PREFIXES",
    "OperatorInfo",
    "register",
    "register_prefix",
    "create",
    "resolve",
    "list_operators",
    "registered_names",
    "suggest",
    "ALIASES",
]

#: Built-in operators: registered name -> ``"module:Class"``. The module registers the class
#: with :func:`register` when it is imported, which happens on first use.
BUILTIN_OPERATORS: dict[str, str] = {
    "cs": "shiftwatch.operators.confseq.operator:ConfSeqOperator",
    "karcher": "shiftwatch.operators.riemannian.operator:KarcherOperator",
    "hare-tortoise": "shiftwatch.operators.learners.hare_tortoise:HareTortoise",
    "cila": "shiftwatch.operators.learners.cila:CILA",
    "standardize": "shiftwatch.operators.transforms:Standardize",
    "embed": "shiftwatch.operators.embed:DelayEmbed",
    "shape": "shiftwatch.operators.shape.operator:ShapeOperator",
    "class": "shiftwatch.operators.clasp.operator:ClassOperator",
    "auto": "shiftwatch.operators.auto:AutoDetect",
    "window_covariance": "shiftwatch.operators.riemannian.transforms:WindowCovariance",
    "window_subspace": "shiftwatch.operators.riemannian.transforms:WindowSubspace",
    "normalize_sphere": "shiftwatch.operators.riemannian.transforms:NormalizeSphere",
}

#: Built-in operator families ``prefix:NAME``: prefix -> the module that calls
#: :func:`register_prefix` for it when imported.
BUILTIN_PREFIXES: dict[str, str] = {
    "river": "shiftwatch.operators.river.adapter",
}

#: Families whose operators can be listed from source: prefix -> (the library module whose
#: import makes reading the source pointless, ``"module:function"`` returning the infos or None).
PREFIX_SOURCE_INFOS: dict[str, tuple[str, str]] = {
    "river": ("river.drift", "shiftwatch.operators.river.source_info:river_operator_infos"),
}

_REGISTRY: dict[str, type[Operator]] = {}
_PREFIXES: dict[str, tuple[Callable[[str], Callable[..., Operator]], Callable[[], list[str]]]] = {}


def register(name: str) -> Callable[[type[Operator]], type[Operator]]:
    """Class decorator: make an operator constructible by ``name`` from configs and the CLI."""

    def deco(cls: type[Operator]) -> type[Operator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"operator name {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def register_prefix(prefix: str, factory: Callable[[str], Callable[..., Operator]],
                    names: Callable[[], list[str]]) -> None:
    """Register a family of operators named ``prefix:NAME`` (e.g. ``river:ADWIN``).

    ``factory(NAME)`` returns a callable taking keyword parameters; ``names()`` lists NAMEs.
    """
    _PREFIXES[prefix] = (factory, names)


def _load(name: str) -> None:
    """Import the module of the built-in operator ``name`` (it registers the class)."""
    module = BUILTIN_OPERATORS[name].partition(":")[0]
    importlib.import_module(module)
    if name not in _REGISTRY:  # a wrong table entry: say so rather than "unknown operator"
        raise RuntimeError(f"importing {module} did not register operator {name!r}")


def _load_prefix(prefix: str) -> bool:
    if prefix not in _PREFIXES and prefix in BUILTIN_PREFIXES:
        importlib.import_module(BUILTIN_PREFIXES[prefix])
    return prefix in _PREFIXES


#: Other spellings accepted for an operator: alias -> registered name (River's docs and older
#: papers write HDDM_A and HDDM_W; River's classes are HDDMA and HDDMW).
ALIASES: dict[str, str] = {
    "river:HDDM_A": "river:HDDMA",
    "river:HDDM_W": "river:HDDMW",
}


def resolve(name: str) -> Callable[..., Operator]:
    """Return a constructor for the operator registered as ``name``.

    An unknown name raises ``ValueError`` with the closest registered names:

    >>> try:
    ...     resolve("adwin")
    ... except ValueError as exc:
    ...     print(str(exc).split(";")[1])
     did you mean river:ADWIN? (run `shiftwatch operators` for all)
    """
    name = ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(name, str):
        raise ValueError(f"operator name must be a string, got {name!r}")
    if name not in _REGISTRY and name in BUILTIN_OPERATORS:
        _load(name)
    if name in _REGISTRY:
        return _REGISTRY[name]
    prefix, sep, rest = name.partition(":")
    if sep and _load_prefix(prefix) and rest in _PREFIXES[prefix][1]():
        return _PREFIXES[prefix][0](rest)
    close = suggest(name)
    hint = (f"did you mean {' or '.join(close)}?" if close else
            f"known operators include: {', '.join(registered_names()[:16])}")
    raise ValueError(f"unknown operator {name!r}; {hint} (run `shiftwatch operators` for all)")


def _fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


def suggest(name: str, n: int = 3) -> list[str]:
    """Registered names close to ``name``: same letters ignoring case, ``_`` and ``-`` (with
    or without the family prefix), else the closest spellings (:mod:`difflib`).

    >>> suggest("adwin"), suggest("river:pagehinkly"), suggest("Standardise")
    (['river:ADWIN'], ['river:PageHinkley'], ['standardize'])
    """
    import difflib

    names = registered_names() + list(ALIASES)
    folded: dict[str, list[str]] = {}
    for cand in names:
        target = ALIASES.get(cand, cand)
        for key in {_fold(cand), _fold(cand.partition(":")[2] or cand)}:
            if target not in folded.setdefault(key, []):
                folded[key].append(target)
    want = _fold(name)
    bare = _fold(name.partition(":")[2] or name)
    for key in (want, bare):
        if key in folded:
            return folded[key][:n]
    out: list[str] = []
    for key in difflib.get_close_matches(want, list(folded), n=n, cutoff=0.7):
        out += [c for c in folded[key] if c not in out]
    return out[:n]


def create(name: str, keep_input: bool = False, **params: Any) -> Operator:
    """Construct the operator registered as ``name`` with keyword ``params``.

    Unknown or invalid parameters raise ``ValueError`` with one clear line that names the
    operator (``cs: alpha must be in (0, 1), got 2``). ``keep_input=True``
    (accepted by every operator, ``--param keep_input=true`` on the command line) wraps the
    operator in :class:`~shiftwatch.operators.with_input.WithInput`, so its outputs also carry
    the input record's fields, e.g. a detector's alarms next to the feature vector for a
    learner chained after it.
    """
    if not isinstance(keep_input, bool):
        raise ValueError(f"keep_input must be true or false, got {keep_input!r}")
    if keep_input:
        from shiftwatch.operators.with_input import WithInput

        return WithInput(create(name, **params))
    ctor = resolve(name)
    accepted = _accepted_params(ctor)
    if accepted is not None:
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise ValueError(f"operator {name!r} has no parameter {', '.join(map(repr, unknown))};"
                             f" parameters: {', '.join(accepted) or '(none)'}")
    try:
        return ctor(**params)
    except TypeError as exc:
        missing = _missing_params(ctor, params)
        if missing:
            raise ValueError(_needs(name, missing)) from None
        raise ValueError(f"operator {name!r}: {exc}") from None
    except ValueError as exc:  # name the operator, as River's errors do: "cs: alpha must ..."
        msg = str(exc)
        if msg.startswith((f"{name}:", f"operator {name!r}")):
            raise
        raise type(exc)(f"{name}: {msg}") from None


def _missing_params(ctor: Callable[..., Any], params: dict) -> list[str]:
    try:
        sig = inspect.signature(ctor)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in params]


def _needs(name: str, missing: list[str]) -> str:
    """``operator 'x' needs in_dim (what it means) ...: --param in_dim=...``"""
    try:
        docs = param_help(name)
    except Exception:  # the meaning is a help, never a new failure
        docs = {}
    parts = [f"{m} ({docs[m].split('. ')[0].rstrip('.')})" if docs.get(m) else m
             for m in missing]
    return (f"operator {name!r} needs {' and '.join(parts)}: give "
            + " ".join(f"--param {m}=..." for m in missing)
            + f" (`shiftwatch operators {name}` describes every parameter)")


def _accepted_params(ctor: Callable[..., Any]) -> list[str] | None:
    target = ctor.__init__ if isinstance(ctor, type) else ctor
    names = getattr(ctor, "accepted_params", None)
    if names is not None:
        return list(names)
    sig = inspect.signature(target)
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return [p.name for p in sig.parameters.values() if p.name != "self"]


def _prefix_infos(prefix: str) -> list[OperatorInfo] | None:
    """The family's operators read from source, or None when that is not possible."""
    entry = PREFIX_SOURCE_INFOS.get(prefix)
    if entry is None or entry[0] in sys.modules:
        return None
    module, _, function = entry[1].partition(":")
    return getattr(importlib.import_module(module), function)()


def registered_names() -> list[str]:
    """Every name :func:`create` accepts, prefixed families expanded."""
    names = sorted(set(_REGISTRY) | set(BUILTIN_OPERATORS))
    for prefix in sorted(set(_PREFIXES) | set(BUILTIN_PREFIXES)):
        infos = _prefix_infos(prefix)
        if infos is not None:
            names += [i.name for i in infos]
        elif _load_prefix(prefix):
            names += [f"{prefix}:{n}" for n in _PREFIXES[prefix][1]()]
    return names


def _info_of(name: str, ctor: Callable[..., Any]) -> OperatorInfo:
    info = getattr(ctor, "info", None)
    if callable(info):
        return info()
    doc = inspect.getdoc(ctor) or ""
    sig = inspect.signature(ctor)
    params = {p.name: ("required" if p.default is p.empty else p.default)
              for p in sig.parameters.values() if p.kind not in (p.VAR_KEYWORD,)}
    return OperatorInfo(name=name, summary=doc.split("\n")[0], params=params,
                        input_kind=getattr(ctor, "input_kind", ""))


def param_help(name: str) -> dict[str, str]:
    """Parameter -> its meaning, for operator ``name``, read from the numpydoc ``Parameters``
    of the operator's docstring and of the class whose parameters it takes (``params_from``
    or ``params_doc_from``: a detector; River's detector for ``river:NAME``). Imports the
    operator's module."""
    import importlib as _importlib

    from shiftwatch.operators.source_info import param_docs

    ctor = resolve(name)
    docs: dict[str, str] = {}
    for attr in ("params_from", "params_doc_from"):
        qual = getattr(ctor, attr, None)
        if isinstance(qual, str):
            module, _, cls_name = qual.rpartition(".")
            docs.update(param_docs(inspect.getdoc(
                getattr(_importlib.import_module(module), cls_name))))
    river_cls = getattr(ctor, "river_class", None)
    if callable(river_cls):
        docs.update(param_docs(inspect.getdoc(river_cls())))
    for cls in reversed(getattr(ctor, "__mro__", (ctor,))):  # a base's, then the class's own
        if cls.__module__.startswith("shiftwatch."):
            docs.update({k: v for k, v in param_docs(cls.__doc__ and inspect.cleandoc(
                cls.__doc__)).items() if v})
    own = param_docs(inspect.getdoc(ctor))
    docs.update({k: v for k, v in own.items() if v})
    return docs


def list_operators() -> list[OperatorInfo]:
    """Name, one-line summary, parameters with defaults, and accepted input of each operator.

    Operators whose module is not imported yet are described from their source, so listing
    imports no operator module (and neither Numba nor PyTorch).
    """
    infos: list[OperatorInfo] = []
    for name in sorted(set(_REGISTRY) | set(BUILTIN_OPERATORS)):
        if name not in _REGISTRY:
            module, _, cls_name = BUILTIN_OPERATORS[name].partition(":")
            info = class_info_from_source(module, cls_name, name)
            if info is not None:
                infos.append(info)
                continue
            _load(name)
        infos.append(_info_of(name, _REGISTRY[name]))
    for prefix in sorted(set(_PREFIXES) | set(BUILTIN_PREFIXES)):
        family = _prefix_infos(prefix)
        if family is None and _load_prefix(prefix):
            family = [_info_of(f"{prefix}:{n}", resolve(f"{prefix}:{n}"))
                      for n in _PREFIXES[prefix][1]()]
        infos.extend(family or [])
    return infos
