"""Change detection by confidence sequences (Shekhar & Ramdas, ICML 2024).

:mod:`~shiftwatch.operators.confseq.detector` holds the mathematics (:class:`ConfSeqDetector`,
a River drift detector), :mod:`~shiftwatch.operators.confseq.kernels` its Numba kernels,
:mod:`~shiftwatch.operators.confseq.operator` the ``cs`` operator, and
:mod:`~shiftwatch.operators.confseq.fleet` (with its kernel in
:mod:`~shiftwatch.operators.confseq.fleet_kernel`) the many-keys form ``Keyed`` uses.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "ConfSeqDetector": ".detector",
    "CS_CHOICES": ".detector",
    "ConfSeqOperator": ".operator",
    "ConfSeqFleet": ".fleet",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
