"""Riemannian geometry of the manifolds the change detectors run on, as Numba kernels.

Three families, each a small Python class around ``@njit(cache=True)`` kernels on float64
arrays:

* :class:`SPD` — symmetric positive definite ``n x n`` matrices with the affine-invariant,
  log-Euclidean or Bures-Wasserstein metric;
* :class:`Grassmann` — ``p``-dimensional subspaces of R^n, points given as ``n x p``
  orthonormal bases (tangent vectors are horizontal: ``Y^T H = 0``);
* :class:`Sphere` — unit vectors of R^(dim + 1).

Every class has ``log(point, base_point)``, ``exp(tangent_vec, base_point)``,
``retract(tangent_vec, base_point)``, ``dist(a, b)``, ``belongs(x)`` and ``validate(x)`` (which
returns a float64 array or raises :class:`~shiftwatch.records.BadInput` saying what is
wrong). The kernels are module-level functions named for what they compute (``spd_affine_log``,
``grassmann_dist``, ...) so that other kernels can call them. geomstats is the reference
the tests compare them with.

Examples
--------
>>> import numpy as np
>>> spd = SPD(2)
>>> a, b = np.diag([1.0, 1.0]), np.diag([np.e, 1.0])
>>> round(spd.dist(a, b), 12)
1.0
>>> bool(np.allclose(spd.exp(spd.log(b, a), a), b))
True
"""

from __future__ import annotations

from shiftwatch.operators.riemannian.base import Manifold
from shiftwatch.operators.riemannian.grassmann import Grassmann
from shiftwatch.operators.riemannian.spd import SPD, SPD_METRICS
from shiftwatch.operators.riemannian.sphere import Sphere
from shiftwatch.records import BadInput

__all__ = [
    "Manifold",
    "SPD",
    "Grassmann",
    "Sphere",
    "SPD_METRICS",
    "MANIFOLD_NAMES",
    "manifold_from_spec",
]


#: Names accepted by :func:`manifold_from_spec` (dimensions come from the first point).
MANIFOLD_NAMES = ("spd", "spd-affine", "spd-log-euclidean", "spd-bures-wasserstein",
                  "grassmann", "sphere")


def manifold_from_spec(spec: str, shape: tuple[int, ...]) -> Manifold:
    """The manifold named ``spec`` whose points have ``shape``.

    >>> manifold_from_spec("spd-log-euclidean", (4, 4))
    SPD(n=4, metric='log-euclidean')
    >>> manifold_from_spec("grassmann", (6, 2)), manifold_from_spec("sphere", (3,))
    (Grassmann(n=6, p=2), Sphere(dim=2))
    """
    if spec in ("spd", "spd-affine", "spd-log-euclidean", "spd-bures-wasserstein"):
        if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 1:
            raise BadInput(f"value has shape {shape}, expected a square matrix")
        metric = "affine" if spec in ("spd", "spd-affine") else spec[4:]
        return SPD(shape[0], metric=metric)
    if spec == "grassmann":
        if len(shape) != 2 or not 1 <= shape[1] <= shape[0]:
            raise BadInput(f"value has shape {shape}, expected an n x p basis with p <= n")
        return Grassmann(shape[0], shape[1])
    if spec == "sphere":
        if len(shape) != 1 or shape[0] < 2:
            raise BadInput(f"value has shape {shape}, expected a vector of length >= 2")
        return Sphere(shape[0] - 1)
    raise ValueError(f"manifold must be one of {', '.join(map(repr, MANIFOLD_NAMES))} "
                     f"or a Manifold, got {spec!r}")
