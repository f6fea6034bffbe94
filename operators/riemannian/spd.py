"""Symmetric positive definite matrices: the affine-invariant, log-Euclidean and
Bures-Wasserstein geometries as Numba kernels, and :class:`SPD`.
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit
from shiftwatch.operators.riemannian.base import Manifold, as_f64, check_int
from shiftwatch.operators.riemannian.linalg import (
    FASTMATH_FMA,
    SMALL_EIG_MAX,
    cholesky_inplace,
    congruence_lower_inplace,
    lower_inverse,
    lower_inverse_inplace,
    spd_whiten,
    sym,
    sym_eig_inplace,
    sym_expm,
    sym_logm,
    sym_sqrtm_pair,
)
from shiftwatch.records import MAX_ABS, BadInput, as_array

__all__ = ["SPD", "SPD_METRICS", "MIN_EIGENVALUE", "MAX_EIGENVALUE", "MAX_CONDITION"]


#: The metrics :class:`SPD` accepts.
SPD_METRICS = ("affine", "log-euclidean", "bures-wasserstein")

#: The eigenvalues of a point :meth:`SPD.validate` accepts lie in
#: [MIN_EIGENVALUE, MAX_EIGENVALUE] = [1 / MAX_ABS, MAX_ABS] = [1e-150, 1e150]: the geometry
#: whitens one matrix by another (``L^-1 X L^-T``, ``P^1/2 X P^1/2``), whose eigenvalues are
#: then ratios or products of two such eigenvalues, within [1e-300, 1e300]: finite, and not
#: subnormal, so their logarithms and square roots are too.
MIN_EIGENVALUE = 1.0 / MAX_ABS
MAX_EIGENVALUE = MAX_ABS
#: The largest condition number (largest / smallest eigenvalue) of a point. An eigensolver
#: finds each eigenvalue to within about ``eps * largest`` (eps = 2.2e-16); at 1e12 the
#: smallest is still 4,500 times that error, so it stays positive and its logarithm keeps three
#: digits. A covariance matrix that ill-conditioned is degenerate (constant or collinear
#: channels; ``window_covariance``'s shrinkage keeps its outputs far below).
MAX_CONDITION = 1e12


# --------------------------------------------------------------------------------------
# SPD, affine-invariant metric
# --------------------------------------------------------------------------------------


@njit(cache=True)
def spd_affine_log(x, p):
    """Log_P(X) = P^1/2 log(P^-1/2 X P^-1/2) P^1/2."""
    low, _, w = spd_whiten(x, p)
    return sym(low @ sym_logm(w) @ low.T)


@njit(cache=True)
def spd_affine_exp(v, p):
    """Exp_P(V) = P^1/2 exp(P^-1/2 V P^-1/2) P^1/2."""
    low, _, w = spd_whiten(v, p)
    return sym(low @ sym_expm(w) @ low.T)


@njit(cache=True)
def spd_affine_dist(a, b):
    """|| log(A^-1/2 B A^-1/2) ||_F from the generalised eigenvalues of (B, A)."""
    _, _, w = spd_whiten(b, a)
    lam = np.linalg.eigvalsh(w)
    return math.sqrt(np.sum(np.log(lam) ** 2))


@njit(cache=True)
def spd_retract(v, p):
    """The second-order retraction sym(P + V + 0.5 V P^-1 V) (always SPD)."""
    low = np.linalg.cholesky(p)
    inv = lower_inverse(low)
    u = inv @ v  # V P^-1 V = (L^-1 V)^T (L^-1 V)
    return sym(p + v + 0.5 * (u.T @ u))


@njit(cache=True)
def spd_affine_step(x, p, s, retraction):
    """P moved a fraction ``s`` towards X: R_P(s Log_P(X)) with one eigh.

    With the exponential map this is the geodesic point P^1/2 (P^-1/2 X P^-1/2)^s P^1/2; the
    retraction sym(P + V + 0.5 V P^-1 V) with V = s Log_P(X) is L (I + S + S^2 / 2) L^T with
    S = s log(L^-1 X L^-T), both diagonal in the eigenbasis of the whitened sample.
    """
    low, _, w = spd_whiten(x, p)
    lam, q = np.linalg.eigh(w)
    if retraction:
        t = s * np.log(lam)
        f = 1.0 + t + 0.5 * t * t
    else:
        f = np.exp(s * np.log(lam))
    lq = low @ q
    return sym((lq * f) @ lq.T)


@njit(cache=True, fastmath=FASTMATH_FMA)
def spd_affine_step_inplace(x, p, low, inv, s, retraction, v, d, e, tmp):
    """In place, allocation-free form of :func:`spd_affine_step`: ``p`` <- R_P(s Log_P(X)),
    then ``low``/``inv`` <- the Cholesky factor of the new ``p`` and its inverse.

    On entry ``low`` and ``inv`` must be the factor of ``p`` and its inverse (as this
    function leaves them), so a run of steps factors each estimate once per sample. ``v``,
    ``tmp`` (n x n) and ``d``, ``e`` (n) are workspace. With W = L^-1 X L^-T = Q diag(lam)
    Q^T, the new point is (L Q) diag(f(lam)) (L Q)^T with f = lam^s (exponential map) or
    1 + t + t^2 / 2, t = s log lam (the second-order retraction).
    """
    n = x.shape[0]
    congruence_lower_inplace(inv, x, tmp, v)
    if n <= SMALL_EIG_MAX:
        sym_eig_inplace(v, d, e, True)
    else:
        w, q = np.linalg.eigh(v)
        d[:] = w
        v[:, :] = q
    for k in range(n):  # d <- f(lam)^1/2
        t = s * math.log(d[k])
        d[k] = math.sqrt(1.0 + t + 0.5 * t * t) if retraction else math.exp(0.5 * t)
    # tmp <- L Q diag(f)^1/2, then p <- tmp tmp^T
    for i in range(n):
        for j in range(n):
            acc = 0.0
            for k in range(i + 1):
                acc += low[i, k] * v[k, j]
            tmp[i, j] = acc * d[j]
    for i in range(n):
        for j in range(i + 1):
            acc = 0.0
            for k in range(n):
                acc += tmp[i, k] * tmp[j, k]
            p[i, j] = acc
            p[j, i] = acc
    cholesky_inplace(p, low)
    lower_inverse_inplace(low, inv)


@njit(cache=True, fastmath=FASTMATH_FMA)
def spd_affine_dist_factored(inv_a, low_b, c, m, d, e):
    """d(A, B) from ``inv_a`` = L_A^-1 and ``low_b`` = L_B (Cholesky factors).

    The generalised eigenvalues of (B, A) are those of C C^T with C = L_A^-1 L_B (lower
    triangular); only eigenvalues are computed. ``c``, ``m`` (n x n), ``d``, ``e`` (n) are
    workspace.
    """
    n = c.shape[0]
    for i in range(n):
        for j in range(n):
            acc = 0.0
            for k in range(j, i + 1):
                acc += inv_a[i, k] * low_b[k, j]
            c[i, j] = acc
    for i in range(n):
        for j in range(i + 1):
            acc = 0.0
            for k in range(j + 1):
                acc += c[i, k] * c[j, k]
            m[i, j] = acc
            m[j, i] = acc
    if n <= SMALL_EIG_MAX:
        sym_eig_inplace(m, d, e, False)
    else:
        d[:] = np.linalg.eigvalsh(m)
    acc = 0.0
    for k in range(n):
        lg = math.log(d[k])
        acc += lg * lg
    return math.sqrt(acc)



# --------------------------------------------------------------------------------------
# SPD, log-Euclidean metric
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _divided_differences(lam, f, df):
    # First divided differences of a scalar function on the eigenvalues (Daleckii-Krein).
    n = lam.shape[0]
    d = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            gap = lam[i] - lam[j]
            if abs(gap) > 1e-12 * max(1.0, abs(lam[i])):
                d[i, j] = (f[i] - f[j]) / gap
            else:
                d[i, j] = df[i]
    return d


@njit(cache=True)
def spd_logeuclid_dlog(v, p):
    """The differential of the matrix logarithm at P applied to V."""
    mu, q = np.linalg.eigh(p)
    d = _divided_differences(mu, np.log(mu), 1.0 / mu)
    return sym(q @ (d * (q.T @ v @ q)) @ q.T)


@njit(cache=True)
def spd_logeuclid_dexp(h, s):
    """The differential of the matrix exponential at the symmetric S applied to H."""
    lam, q = np.linalg.eigh(s)
    e = np.exp(lam)
    d = _divided_differences(lam, e, e)
    return sym(q @ (d * (q.T @ h @ q)) @ q.T)


@njit(cache=True)
def spd_logeuclid_log(x, p):
    """Log_P(X) = D exp_{log P}(log X - log P)."""
    lp = sym_logm(p)
    return spd_logeuclid_dexp(sym_logm(x) - lp, lp)


@njit(cache=True)
def spd_logeuclid_exp(v, p):
    """Exp_P(V) = exp(log P + D log_P(V))."""
    return sym_expm(sym_logm(p) + spd_logeuclid_dlog(v, p))


@njit(cache=True)
def spd_logeuclid_dist(a, b):
    """|| log A - log B ||_F."""
    return math.sqrt(np.sum((sym_logm(a) - sym_logm(b)) ** 2))


# --------------------------------------------------------------------------------------
# SPD, Bures-Wasserstein metric
# --------------------------------------------------------------------------------------


@njit(cache=True)
def spd_bw_log(x, p):
    """Log_P(X) = (P X)^1/2 + (X P)^1/2 - 2P, with (PX)^1/2 = P^1/2 (P^1/2 X P^1/2)^1/2 P^-1/2."""
    r, ri = sym_sqrtm_pair(p)
    c, _ = sym_sqrtm_pair(sym(r @ x @ r))
    m = r @ c @ ri
    return sym(m + m.T - 2.0 * p)


@njit(cache=True)
def spd_bw_exp(v, p):
    """Exp_P(V) = P + V + L P L, where L solves P L + L P = V (in the eigenbasis of P)."""
    mu, q = np.linalg.eigh(p)
    vt = q.T @ v @ q
    n = mu.shape[0]
    lt = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            lt[i, j] = vt[i, j] / (mu[i] + mu[j])
    lpl = (lt * mu) @ lt  # in the eigenbasis P is diag(mu)
    return sym(p + v + q @ lpl @ q.T)


@njit(cache=True)
def spd_bw_dist(a, b):
    """sqrt(tr A + tr B - 2 tr (A^1/2 B A^1/2)^1/2), computed as || A^1/2 - B^1/2 U ||_F.

    U = W Z^T, the orthogonal polar factor of B^1/2 A^1/2 = W S Z^T, attains the minimum of
    || A^1/2 - B^1/2 U ||_F over orthogonal U, which is the distance. Subtracting matrices
    instead of traces avoids the cancellation that leaves ~1e-5 of noise in d(A, A) when
    tr A ~ 1e3.
    """
    ra, _ = sym_sqrtm_pair(a)
    rb, _ = sym_sqrtm_pair(b)
    w, _, zt = np.linalg.svd(rb @ ra)
    return math.sqrt(np.sum((ra - rb @ (w @ zt)) ** 2))


# --------------------------------------------------------------------------------------

class SPD(Manifold):
    """Symmetric positive definite ``n x n`` matrices.

    Parameters
    ----------
    n
        Matrix size.
    metric
        ``"affine"`` (affine-invariant), ``"log-euclidean"`` or ``"bures-wasserstein"``.

    Notes
    -----
    :meth:`retract` is the second-order retraction ``sym(P + V + 0.5 V P^-1 V)`` for every
    metric (a retraction does not depend on the metric; this one always stays SPD).

    Examples
    --------
    >>> import numpy as np
    >>> spd = SPD(3, metric="bures-wasserstein")
    >>> a, b = np.eye(3), 4 * np.eye(3)
    >>> round(spd.dist(a, b), 10)  # sqrt(3 + 12 - 2 * 6)
    1.7320508076
    >>> spd.validate([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: value is not positive definite (smallest eigenvalue -1)
    """

    def __init__(self, n: int, metric: str = "affine"):
        check_int("n", n)
        if metric not in SPD_METRICS:
            raise ValueError(f"metric must be one of {', '.join(map(repr, SPD_METRICS))}, "
                             f"got {metric!r}")
        self.n = int(n)
        self.metric = metric
        self.kind = {"affine": "spd-affine", "log-euclidean": "spd-logeuclid",
                     "bures-wasserstein": "spd-bw"}[metric]
        self._log, self._exp, self._dist = {
            "affine": (spd_affine_log, spd_affine_exp, spd_affine_dist),
            "log-euclidean": (spd_logeuclid_log, spd_logeuclid_exp, spd_logeuclid_dist),
            "bures-wasserstein": (spd_bw_log, spd_bw_exp, spd_bw_dist),
        }[metric]

    def _params(self) -> dict:
        return {"n": self.n, "metric": self.metric}

    def point_shape(self) -> tuple[int, ...]:
        return (self.n, self.n)

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        """``x`` as a float64 SPD matrix, or BadInput: not symmetric, not positive definite,
        eigenvalues beyond [:data:`MIN_EIGENVALUE`, :data:`MAX_EIGENVALUE`] or a condition
        number above :data:`MAX_CONDITION` (where the geometry's arithmetic overflows or
        rounds the eigenvalues away)."""
        a = as_array(x, shape=(self.n, self.n), name=name)
        scale = max(1.0, float(np.max(np.abs(a))))
        asym = float(np.max(np.abs(a - a.T)))
        if not asym <= self.atol * scale:
            raise BadInput(f"{name} is not symmetric (max |A - A^T| = {asym:.3g})")
        a = as_f64(0.5 * (a + a.T))
        try:
            lam = np.linalg.eigvalsh(a)
        except np.linalg.LinAlgError:  # (no convergence: not seen on finite input)
            raise BadInput(f"{name}: its eigenvalues cannot be computed") from None
        lo, hi = float(lam[0]), float(lam[-1])
        if not lo > 0.0:
            raise BadInput(f"{name} is not positive definite (smallest eigenvalue {lo:.3g})")
        if not (MIN_EIGENVALUE <= lo and hi <= MAX_EIGENVALUE):
            raise BadInput(f"{name} has eigenvalues in [{lo:.3g}, {hi:.3g}], beyond the limits "
                           f"[{MIN_EIGENVALUE:.3g}, {MAX_EIGENVALUE:.3g}]")
        if not hi <= MAX_CONDITION * lo:
            raise BadInput(f"{name} has condition number {hi / lo:.3g}, above the limit "
                           f"{MAX_CONDITION:.3g}")
        return a

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """The Riemannian logarithm Log_base(point), a symmetric matrix."""
        return self._log(as_f64(point), as_f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """The Riemannian exponential Exp_base(tangent_vec)."""
        return self._exp(as_f64(tangent_vec), as_f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """sym(P + V + 0.5 V P^-1 V)."""
        return spd_retract(as_f64(tangent_vec), as_f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        """The geodesic distance."""
        return float(self._dist(as_f64(a), as_f64(b)))

    def step(self, x: np.ndarray, base_point: np.ndarray, fraction: float,
             retraction: bool = False) -> np.ndarray:
        if self.metric == "affine":
            return spd_affine_step(as_f64(x), as_f64(base_point), float(fraction), bool(retraction))
        return super().step(x, base_point, fraction, retraction)
