"""The Grassmann manifold Gr(n, p), points as n x p orthonormal bases: Numba
kernels and :class:`Grassmann`.
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit
from shiftwatch.operators.riemannian.base import Manifold, as_f64, check_int
from shiftwatch.records import BadInput, as_array

__all__ = ["Grassmann"]



# --------------------------------------------------------------------------------------
# Grassmann Gr(n, p), points as n x p orthonormal bases
# --------------------------------------------------------------------------------------


@njit(cache=True)
def grassmann_log(x, y):
    """Log_Y(X) = U atan(S) V^T with U S V^T the thin SVD of (X - Y Y^T X)(Y^T X)^-1."""
    ytx = y.T @ x
    m = x - y @ ytx
    # (Y^T X)^-1 applied from the right: solve (Y^T X)^T Z^T = M^T.
    a = np.linalg.solve(ytx.T, m.T).T
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return (u * np.arctan(s)) @ vt


@njit(cache=True)
def orthonormal_basis(a):
    """The Q factor of a thin QR with a non-negative diagonal of R."""
    q, r = np.linalg.qr(a)
    for j in range(r.shape[0]):
        if r[j, j] < 0.0:
            q[:, j] = -q[:, j]
    return q


@njit(cache=True)
def grassmann_exp(h, y):
    """Exp_Y(H) = Y V cos(S) V^T + U sin(S) V^T with H = U S V^T, re-orthonormalised."""
    u, s, vt = np.linalg.svd(h, full_matrices=False)
    z = ((y @ vt.T) * np.cos(s)) @ vt + (u * np.sin(s)) @ vt
    return orthonormal_basis(z)


@njit(cache=True)
def grassmann_retract(h, y):
    """The polar retraction: the orthonormal polar factor of Y + H."""
    u, _, vt = np.linalg.svd(y + h, full_matrices=False)
    return u @ vt


@njit(cache=True)
def grassmann_dist(a, b):
    """|| theta ||_2 over the principal angles theta = arccos(svd(A^T B)).

    Each angle is atan2(sin, cos) with cos the singular value of A^T B and sin the norm of
    the matching direction's component outside span(A): accurate at small angles too,
    where arccos loses half the digits.
    """
    m = a.T @ b
    _, c, vt = np.linalg.svd(m)
    perp = (b - a @ m) @ vt.T
    t = 0.0
    for i in range(c.shape[0]):
        sn = math.sqrt(np.sum(perp[:, i] ** 2))
        th = math.atan2(sn, c[i])
        t += th * th
    return math.sqrt(t)


@njit(cache=True)
def grassmann_step(x, y, s, retraction):
    """R_Y(s Log_Y(X)) for the exponential map or the polar retraction."""
    h = s * grassmann_log(x, y)
    if retraction:
        return grassmann_retract(h, y)
    return grassmann_exp(h, y)


# --------------------------------------------------------------------------------------

class Grassmann(Manifold):
    """The Grassmannian Gr(n, p) of p-dimensional subspaces of R^n.

    Points are ``n x p`` matrices with orthonormal columns (a basis of the subspace); tangent
    vectors at ``Y`` are ``n x p`` matrices ``H`` with ``Y^T H = 0``. geomstats represents the
    same points as projection matrices ``Y Y^T`` and tangent vectors as ``H Y^T + Y H^T``.

    Parameters
    ----------
    n, p
        Ambient dimension and subspace dimension (``1 <= p <= n``).

    Examples
    --------
    >>> import numpy as np
    >>> gr = Grassmann(3, 1)
    >>> a, b = np.array([[1.0], [0.0], [0.0]]), np.array([[0.0], [1.0], [0.0]])
    >>> round(gr.dist(a, b), 10) == round(np.pi / 2, 10)
    True
    """

    kind = "grassmann"

    def __init__(self, n: int, p: int):
        check_int("n", n)
        check_int("p", p)
        if p > n:
            raise ValueError(f"p must be <= n={n}, got {p!r}")
        self.n = int(n)
        self.p = int(p)

    def _params(self) -> dict:
        return {"n": self.n, "p": self.p}

    def point_shape(self) -> tuple[int, ...]:
        return (self.n, self.p)

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        a = as_array(x, shape=(self.n, self.p), name=name)
        err = float(np.max(np.abs(a.T @ a - np.eye(self.p))))
        if not err <= self.atol:  # (NaN is not)
            raise BadInput(f"{name} does not have orthonormal columns "
                           f"(max |X^T X - I| = {err:.3g})")
        return as_f64(a)

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_log(as_f64(point), as_f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_exp(as_f64(tangent_vec), as_f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_retract(as_f64(tangent_vec), as_f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(grassmann_dist(as_f64(a), as_f64(b)))
