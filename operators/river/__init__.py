"""River's drift detectors as shiftwatch operators (the ``river:NAME`` family).

:mod:`~shiftwatch.operators.river.adapter` holds :class:`RiverDetector`, the one adapter every
River detector runs through; :mod:`~shiftwatch.operators.river.source_info` lists the family
from River's source without importing it (``shiftwatch operators`` stays instant).
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "RiverDetector": ".adapter",
    "river_detector_names": ".adapter",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
