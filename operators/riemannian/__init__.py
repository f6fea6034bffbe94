"""Riemannian online change detection (Wang, Borsoi & Richard, ICML 2024) and its manifolds.

The geometries, one module each with its Numba kernels:
:mod:`~shiftwatch.operators.riemannian.spd` (affine-invariant, log-Euclidean,
Bures-Wasserstein), :mod:`~shiftwatch.operators.riemannian.grassmann`,
:mod:`~shiftwatch.operators.riemannian.sphere`, on the shared matrix kernels of
:mod:`~shiftwatch.operators.riemannian.linalg`; :mod:`~shiftwatch.operators.riemannian.manifolds`
picks one by name. :mod:`~shiftwatch.operators.riemannian.karcher` holds the detector
(:class:`KarcherDetector`), :mod:`~shiftwatch.operators.riemannian.operator` the ``karcher``
operator, and :mod:`~shiftwatch.operators.riemannian.transforms` the operators that turn
plain vectors into manifold points (``window_covariance``, ``window_subspace``,
``normalize_sphere``).
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "Manifold": ".base",
    "SPD": ".spd",
    "Grassmann": ".grassmann",
    "Sphere": ".sphere",
    "manifold_from_spec": ".manifolds",
    "KarcherDetector": ".karcher",
    "calibrate_threshold": ".karcher",
    "KarcherOperator": ".operator",
    "WindowCovariance": ".transforms",
    "WindowSubspace": ".transforms",
    "NormalizeSphere": ".transforms",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
