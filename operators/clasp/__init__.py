"""Classification-score change detection (ClaSS): a sliding window of subsequences, their
exact streaming k nearest neighbours, and the cross-validated "left vs right" k-NN score of
every split with ClaSP's significance test.

:mod:`~shiftwatch.operators.clasp.detector` holds the mathematics (:class:`ClassDetector`,
a River drift detector); :mod:`~shiftwatch.operators.clasp.kernels` its Numba kernels;
:mod:`~shiftwatch.operators.clasp.operator` the ``class`` operator.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "ClassDetector": ".detector",
    "ClassOperator": ".operator",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
