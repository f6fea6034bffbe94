"""River's drift detectors described from River's source (the ``river:NAME`` family).

Importing ``river.drift`` takes over a second (it loads scikit-learn and pandas for its bundled
datasets); reading the source of its detectors takes milliseconds, so ``shiftwatch operators``
lists the family without importing it (:func:`river_operator_infos`).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from shiftwatch.operators.source_info import (
    OperatorInfo,
    base_name,
    class_defs,
    find_method,
    init_params,
    literal_value,
    module_file,
    parse_source,
)

__all__ = ["river_operator_infos", "river_detector_modules"]


#: The accepted input of River's binary (error-stream) detectors, as set by
#: ``operators/river/adapter.py`` (the other detectors take ``RiverDetector.input_kind``).
_RIVER_BINARY_INPUT = "0/1 or bool (1 = error), scalar or vector"
#: River's detector base classes (river.base) -> whether the detector takes a binary stream.
_RIVER_BASES = {"DriftDetector": False, "DriftAndWarningDetector": False,
                "BinaryDriftDetector": True, "BinaryDriftAndWarningDetector": True}


def _river_package_detectors(init_path: Path) -> list[tuple[str, Path]] | None:
    """(name, file) of each class exported by a river.drift package ``__init__.py``."""
    tree = parse_source(str(init_path))
    exported = None
    sources: dict[str, Path] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"):
            exported = literal_value(node.value)
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
def _river_detectors() -> tuple[tuple[str, str, dict, bool, str], ...] | None:
    """(name, docstring, constructor defaults, binary, module) of each concrete River drift
    detector, ``module`` the one that defines it (e.g. ``river.drift.adwin``).

    The same detectors, in the same order, as ``river_detector_names()`` finds by importing
    ``river.drift`` and ``river.drift.binary``.
    """
    root = module_file("river")
    if root is None:
        return None
    drift = Path(root).parent / "drift"
    site = Path(root).parent.parent
    found: dict[str, tuple[str, str, dict, bool, str]] = {}
    for init in (drift / "__init__.py", drift / "binary" / "__init__.py"):
        if not init.exists():
            return None
        entries = _river_package_detectors(init)
        if entries is None:
            return None
        for name, file in entries:
            classes = class_defs(parse_source(str(file)))
            cls = classes.get(name)
            if cls is None:
                return None
            bases = {base_name(b) for b in cls.bases}
            kinds = {_RIVER_BASES[b] for b in bases if b in _RIVER_BASES}
            if not kinds:
                if bases & set(classes) or any(b and "Drift" in b for b in bases):
                    return None  # derived from a class this does not know: unsure
                continue  # not a drift detector (e.g. DriftRetrainingClassifier)
            if len(kinds) != 1 or len(bases) != 1 or any(
                    base_name(d) == "abstractmethod"
                    for f in cls.body if isinstance(f, ast.FunctionDef) for d in f.decorator_list
                    if isinstance(d, (ast.Name, ast.Attribute))):
                return None
            init_fn = find_method([cls], "__init__")
            doc = ast.get_docstring(cls, clean=True)
            if init_fn is None or not doc:
                return None
            defaults = init_params(init_fn, keep_varargs=False)
            if defaults is None:
                return None
            module = ".".join(file.relative_to(site).with_suffix("").parts)
            found[name] = (name, doc, defaults, kinds.pop(), module)
    return tuple(found[n] for n in sorted(found))


def river_detector_modules() -> dict[str, str] | None:
    """Each River drift detector's name -> the module that defines it (``{"ADWIN":
    "river.drift.adwin", ...}``), read from River's source; None if it cannot be read for
    certain (:mod:`~shiftwatch.operators.river.lazy_import` then imports ``river.drift``).
    """
    detectors = _river_detectors()
    return None if detectors is None else {d[0]: d[4] for d in detectors}


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
    from shiftwatch.operators.river.adapter import RiverDetector

    infos = []
    for name, doc, defaults, binary, _ in detectors:
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
