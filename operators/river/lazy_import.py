"""River's drift detectors imported one module at a time.

``import river.drift`` takes about a second: its ``__init__`` imports every detector (KSWIN
loads ``scipy.stats``) and the bundled datasets (scikit-learn and pandas). A replay or a Kafka
stage running ``river:ADWIN`` needs ``river/drift/adwin.py`` and ``river.base``, a tenth of
that. :func:`detector_class` imports the one module that defines a detector (found by
:func:`~shiftwatch.operators.river.source_info.river_detector_modules` in River's source),
under a ``river.drift`` package (and ``river.drift.binary``) whose ``__init__`` runs the first
time a name it defines is asked for: ``from river.drift import KSWIN``, ``river.drift.datasets``
or ``river.drift.__all__`` in the same process still work, and give the same objects
(``river.drift.ADWIN is river.drift.adwin.ADWIN``).

Where River's source cannot be read for certain, or ``river.drift`` was already imported,
nothing is deferred: the detector is taken from the imported package.

>>> detector_class("ADWIN").__module__
'river.drift.adwin'
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from importlib.machinery import PathFinder
from importlib.util import module_from_spec
from typing import Any

__all__ = ["detector_class", "detector_names", "imported_detectors"]

#: The packages whose ``__init__`` is deferred, parents first.
_DEFERRED = ("river.drift", "river.drift.binary")
_LOCK = threading.RLock()


_IMPORTED: dict[str, type] = {}


def imported_detectors() -> dict[str, type]:
    """Name -> class of every drift detector exported by ``river.drift`` and
    ``river.drift.binary``, found by importing them (all of ``river.drift``)."""
    if not _IMPORTED:
        from river import base as river_base
        from river import drift
        from river.drift import binary

        for module in (drift, binary):
            for name in module.__all__:
                cls = getattr(module, name, None)
                if (isinstance(cls, type) and issubclass(cls, (river_base.DriftDetector,
                                                        river_base.BinaryDriftDetector))
                        and not inspect.isabstract(cls)):
                    _IMPORTED[name] = cls
    return _IMPORTED


def detector_names() -> list[str] | None:
    """The River detectors' names read from River's source (sorted), or None."""
    from shiftwatch.operators.river.source_info import river_detector_modules

    modules = river_detector_modules()
    return None if modules is None else sorted(modules)


def detector_class(name: str) -> type | None:
    """River's detector class ``name``, importing only the module that defines it; None
    when ``name`` is not a detector River's source lists (or the source cannot be read)."""
    from shiftwatch.operators.river.source_info import river_detector_modules

    modules = river_detector_modules()
    module = None if modules is None else modules.get(name)
    if module is None:
        return None
    with _LOCK:
        for package in _DEFERRED:
            if module.startswith(package + "."):
                _defer(package)
    cls = getattr(importlib.import_module(module), name, None)
    return cls if isinstance(cls, type) else None


def _defer(name: str) -> None:
    """Put the package ``name`` in ``sys.modules`` without running its ``__init__``, which
    runs on the first attribute the package lacks (PEP 562's module ``__getattr__``); its
    submodules import as usual. Nothing happens when it is imported already (or its
    parent cannot be)."""
    if name in sys.modules:
        return
    parent_name, _, child = name.rpartition(".")
    try:
        parent = importlib.import_module(parent_name)
        spec = PathFinder.find_spec(name, parent.__path__)
    except (ImportError, AttributeError, ValueError):
        return
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = module_from_spec(spec)
    namespace = module.__dict__

    def __getattr__(attr: str) -> Any:
        with _LOCK:
            if namespace.get("__getattr__") is __getattr__:  # (once; not while it runs)
                del namespace["__getattr__"]
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    namespace["__getattr__"] = __getattr__  # (raise again next time)
                    raise
        try:
            return namespace[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    namespace["__getattr__"] = __getattr__
    sys.modules[name] = module
    setattr(parent, child, module)
