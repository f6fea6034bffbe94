"""Shape-change detection: changes of shape, period or correlation, not only of level.

:mod:`~shiftwatch.operators.shape.detector` holds the mathematics (:class:`ShapeDetector`,
a River drift detector): a delay embedding of each channel, the log-Euclidean covariance of
blocks of two periods, and a self-normalised two-sample scan over the blocks since the last
change; :mod:`~shiftwatch.operators.shape.kernels` its Numba kernels;
:mod:`~shiftwatch.operators.shape.operator` the ``shape`` operator. The period comes from the
burn-in (:mod:`shiftwatch.operators.period`).
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "ShapeDetector": ".detector",
    "ShapeOperator": ".operator",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
