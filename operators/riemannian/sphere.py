"""The unit sphere: Numba kernels and :class:`Sphere`.
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit
from shiftwatch.operators.riemannian.base import Manifold, as_f64, check_int
from shiftwatch.records import BadInput, as_array

__all__ = ["Sphere"]



# --------------------------------------------------------------------------------------
# Sphere
# --------------------------------------------------------------------------------------


@njit(cache=True)
def sphere_angle(a, b):
    """The angle between unit vectors, 2 asin(|a - b| / 2): accurate at small angles."""
    d = math.sqrt(np.sum((a - b) ** 2))
    return 2.0 * math.asin(min(1.0, 0.5 * d))


@njit(cache=True)
def sphere_log(x, p):
    """Log_p(x) = theta / sin(theta) (x - cos(theta) p)."""
    th = sphere_angle(x, p)
    v = x - math.cos(th) * p
    if th < 1e-8:
        return v - np.dot(v, p) * p
    return (th / math.sin(th)) * v


@njit(cache=True)
def sphere_exp(v, p):
    """Exp_p(v) = cos(|v|) p + sin(|v|) v / |v|, renormalised."""
    nv = math.sqrt(np.sum(v * v))
    if nv < 1e-16:
        out = p + v
    else:
        out = math.cos(nv) * p + (math.sin(nv) / nv) * v
    return out / math.sqrt(np.sum(out * out))


@njit(cache=True)
def sphere_retract(v, p):
    """(p + v) / |p + v|."""
    out = p + v
    return out / math.sqrt(np.sum(out * out))


@njit(cache=True)
def sphere_dist(a, b):
    """The great-circle distance."""
    return sphere_angle(a, b)


@njit(cache=True)
def sphere_step(x, p, s, retraction):
    """R_p(s Log_p(x))."""
    v = s * sphere_log(x, p)
    if retraction:
        return sphere_retract(v, p)
    return sphere_exp(v, p)


# --------------------------------------------------------------------------------------

class Sphere(Manifold):
    """The unit sphere S^dim in R^(dim + 1).

    Parameters
    ----------
    dim
        Dimension of the sphere; points have ``dim + 1`` coordinates.

    Examples
    --------
    >>> import numpy as np
    >>> s = Sphere(2)
    >>> round(s.dist(np.array([1.0, 0, 0]), np.array([0.0, 0, 1])) / np.pi, 12)
    0.5
    """

    kind = "sphere"

    def __init__(self, dim: int):
        check_int("dim", dim)
        self.dim = int(dim)

    def _params(self) -> dict:
        return {"dim": self.dim}

    def point_shape(self) -> tuple[int, ...]:
        return (self.dim + 1,)

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        a = as_array(x, shape=(self.dim + 1,), name=name)
        err = abs(float(np.sqrt(a @ a)) - 1.0)
        if not err <= self.atol:  # (NaN is not)
            raise BadInput(f"{name} is not a unit vector (| |x| - 1 | = {err:.3g})")
        return as_f64(a)

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_log(as_f64(point), as_f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_exp(as_f64(tangent_vec), as_f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_retract(as_f64(tangent_vec), as_f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(sphere_dist(as_f64(a), as_f64(b)))
