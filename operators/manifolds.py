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
returns a float64 array or raises :class:`~shiftwatch.operators.records.BadInput` saying what is
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

import math

import numpy as np
from numba import njit

from shiftwatch.operators.records import BadInput, as_array

__all__ = [
    "Manifold",
    "SPD",
    "Grassmann",
    "Sphere",
    "SPD_METRICS",
    "manifold_from_spec",
]

#: The metrics :class:`SPD` accepts.
SPD_METRICS = ("affine", "log-euclidean", "bures-wasserstein")


# --------------------------------------------------------------------------------------
# Symmetric matrix functions (one eigendecomposition each)
# --------------------------------------------------------------------------------------


@njit(cache=True)
def sym(a):
    """(a + a^T) / 2."""
    return 0.5 * (a + a.T)


@njit(cache=True)
def sym_from_eig(q, w):
    """q diag(w) q^T, exactly symmetric."""
    return sym((q * w) @ q.T)


@njit(cache=True)
def sym_logm(a):
    """Matrix logarithm of an SPD matrix."""
    w, q = np.linalg.eigh(a)
    return sym_from_eig(q, np.log(w))


@njit(cache=True)
def sym_expm(a):
    """Matrix exponential of a symmetric matrix."""
    w, q = np.linalg.eigh(sym(a))
    return sym_from_eig(q, np.exp(w))


@njit(cache=True)
def sym_sqrtm_pair(a):
    """(a^1/2, a^-1/2) of an SPD matrix."""
    w, q = np.linalg.eigh(a)
    r = np.sqrt(w)
    return sym_from_eig(q, r), sym_from_eig(q, 1.0 / r)


@njit(cache=True)
def lower_inverse(low):
    """Inverse of a lower-triangular matrix by forward substitution."""
    n = low.shape[0]
    inv = np.zeros((n, n))
    for j in range(n):
        inv[j, j] = 1.0 / low[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s += low[i, k] * inv[k, j]
            inv[i, j] = -s / low[i, i]
    return inv


@njit(cache=True)
def spd_whiten(x, p):
    """(L, L^-1, L^-1 X L^-T) with P = L L^T the Cholesky factor.

    The affine-invariant maps are congruence-equivariant, so any factor of P may stand in for
    P^1/2: ``Log_P(X) = L log(L^-1 X L^-T) L^T``. Cholesky is far cheaper than an eigh.
    """
    low = np.linalg.cholesky(p)
    inv = lower_inverse(low)
    return low, inv, sym(inv @ x @ inv.T)


# --------------------------------------------------------------------------------------
# Small symmetric eigenproblems and SPD factor kernels, in place (no allocation per call)
# --------------------------------------------------------------------------------------

#: LLVM fast-math flag of the in-place kernels: fused multiply-add only (about 25% faster
#: on SPD(8)). Unlike reassociation it leaves results deterministic for a given machine, so
#: a run split over several kernel calls still gives the same bits as one call.
_FMA = {"contract"}

#: Largest n for which the SPD kernels use :func:`sym_eig_inplace`; above it LAPACK (whose
#: blocked algorithms win from n ~ 32 on) through ``numpy.linalg.eigh``.
SMALL_EIG_MAX = 24


@njit(cache=True)
def _transpose_inplace(v):
    n = v.shape[0]
    for i in range(n):
        for j in range(i):
            x = v[i, j]
            v[i, j] = v[j, i]
            v[j, i] = x


@njit(cache=True, fastmath=_FMA)
def sym_eig_inplace(v, d, e, vectors):
    """Eigen-decomposition of a small symmetric matrix in place, without allocating.

    On entry ``v`` (n x n) holds the matrix (both triangles); on exit ``d`` (n) holds the
    eigenvalues in ascending order and, when ``vectors``, ``v`` the orthonormal eigenvectors
    as columns (otherwise ``v`` is overwritten). ``e`` (n) is workspace. Householder
    reduction to tridiagonal form, then the QL algorithm with implicit shifts: the EISPACK
    ``tred2``/``tql2`` pair as written in JAMA (public domain). For n <= ~32 this beats a
    LAPACK call through NumPy/Numba, whose fixed cost (argument checks, copies, workspace
    allocation) dominates at these sizes; it is backward stable like LAPACK's ``dsyevd``.
    Tested against ``numpy.linalg.eigh`` in ``tests/operators/test_manifolds.py``.
    """
    n = v.shape[0]
    # Householder reduction to tridiagonal form (tred2).
    for j in range(n):
        d[j] = v[n - 1, j]
    for i in range(n - 1, 0, -1):
        scale = 0.0
        h = 0.0
        for k in range(i):
            scale += abs(d[k])
        if scale == 0.0:
            e[i] = d[i - 1]
            for j in range(i):
                d[j] = v[i - 1, j]
                v[i, j] = 0.0
                v[j, i] = 0.0
        else:
            rs = 1.0 / scale
            for k in range(i):
                d[k] *= rs
                h += d[k] * d[k]
            f = d[i - 1]
            g = math.sqrt(h)
            if f > 0:
                g = -g
            e[i] = scale * g
            h = h - f * g
            d[i - 1] = f - g
            for j in range(i):
                e[j] = 0.0
            for j in range(i):
                f = d[j]
                v[j, i] = f
                g = e[j] + v[j, j] * f
                for k in range(j + 1, i):
                    g += v[k, j] * d[k]
                    e[k] += v[k, j] * f
                e[j] = g
            f = 0.0
            rh = 1.0 / h
            for j in range(i):
                e[j] *= rh
                f += e[j] * d[j]
            hh = f / (h + h)
            for j in range(i):
                e[j] -= hh * d[j]
            for j in range(i):
                f = d[j]
                g = e[j]
                for k in range(j, i):
                    v[k, j] -= f * e[k] + g * d[k]
                d[j] = v[i - 1, j]
                v[i, j] = 0.0
        d[i] = h
    if vectors:
        for i in range(n - 1):
            v[n - 1, i] = v[i, i]
            v[i, i] = 1.0
            h = d[i + 1]
            if h != 0.0:
                rh = 1.0 / h
                for k in range(i + 1):
                    d[k] = v[k, i + 1] * rh
                for j in range(i + 1):
                    g = 0.0
                    for k in range(i + 1):
                        g += v[k, i + 1] * v[k, j]
                    for k in range(i + 1):
                        v[k, j] -= g * d[k]
            for k in range(i + 1):
                v[k, i + 1] = 0.0
        for j in range(n):
            d[j] = v[n - 1, j]
            v[n - 1, j] = 0.0
        v[n - 1, n - 1] = 1.0
    else:
        for j in range(n):
            d[j] = v[j, j]
    e[0] = 0.0
    if vectors:
        _transpose_inplace(v)
    # QL with implicit shifts (tql2) on the tridiagonal (d, e).
    for i in range(1, n):
        e[i - 1] = e[i]
    e[n - 1] = 0.0
    f = 0.0
    tst1 = 0.0
    eps = 2.0 ** -52
    for ll in range(n):
        tst1 = max(tst1, abs(d[ll]) + abs(e[ll]))
        m = ll
        while m < n - 1:
            if abs(e[m]) <= eps * tst1:
                break
            m += 1
        if m > ll:
            for _ in range(100):
                g = d[ll]
                p = (d[ll + 1] - g) / (2.0 * e[ll])
                r = math.sqrt(p * p + 1.0) if abs(p) < 1e150 else abs(p)  # = hypot(p, 1)
                if p < 0:
                    r = -r
                d[ll] = e[ll] / (p + r)
                d[ll + 1] = e[ll] * (p + r)
                dl1 = d[ll + 1]
                h = g - d[ll]
                for i in range(ll + 2, n):
                    d[i] -= h
                f += h
                p = d[m]
                c = 1.0
                c2 = c
                c3 = c
                el1 = e[ll + 1]
                s = 0.0
                s2 = 0.0
                for i in range(m - 1, ll - 1, -1):
                    c3 = c2
                    c2 = c
                    s2 = s
                    g = c * e[i]
                    h = c * p
                    r = math.sqrt(p * p + e[i] * e[i])  # faster than hypot
                    if not 1e-290 < r < 1e290:
                        r = math.hypot(p, e[i])  # under- or overflow of the squares
                    e[i + 1] = s * r
                    rr = 1.0 / r
                    s = e[i] * rr
                    c = p * rr
                    p = c * d[i] - s * g
                    d[i + 1] = h + s * (c * g + s * d[i])
                    if vectors:  # rows of v are the vectors here (contiguous)
                        for k in range(n):
                            h = v[i + 1, k]
                            v[i + 1, k] = s * v[i, k] + c * h
                            v[i, k] = c * v[i, k] - s * h
                p = -s * s2 * c3 * el1 * e[ll] / dl1
                e[ll] = s * p
                d[ll] = c * p
                if abs(e[ll]) <= eps * tst1:
                    break
        d[ll] = d[ll] + f
        e[ll] = 0.0
    # Sort ascending (selection sort: n is small).
    for i in range(n - 1):
        k = i
        p = d[i]
        for j in range(i + 1, n):
            if d[j] < p:
                k = j
                p = d[j]
        if k != i:
            d[k] = d[i]
            d[i] = p
            if vectors:
                for j in range(n):
                    p = v[i, j]
                    v[i, j] = v[k, j]
                    v[k, j] = p
    if vectors:
        _transpose_inplace(v)


@njit(cache=True, fastmath=_FMA)
def sym_eigh_small(a):
    """(eigenvalues ascending, eigenvectors as columns) of a symmetric matrix, by
    :func:`sym_eig_inplace`; the allocating counterpart of ``numpy.linalg.eigh``."""
    n = a.shape[0]
    v = np.ascontiguousarray(a).copy()
    d = np.empty(n)
    e = np.empty(n)
    sym_eig_inplace(v, d, e, True)
    return d, v


@njit(cache=True, fastmath=_FMA)
def sym_eigvalsh_small(a):
    """The eigenvalues (ascending) of a symmetric matrix, by :func:`sym_eig_inplace`."""
    n = a.shape[0]
    v = np.ascontiguousarray(a).copy()
    d = np.empty(n)
    e = np.empty(n)
    sym_eig_inplace(v, d, e, False)
    return d


@njit(cache=True, fastmath=_FMA)
def cholesky_inplace(a, low):
    """``low`` <- the lower Cholesky factor of the SPD matrix ``a`` (same result as LAPACK's
    unblocked ``dpotf2`` up to rounding); raises like ``numpy.linalg.cholesky`` otherwise."""
    n = a.shape[0]
    for j in range(n):
        s = a[j, j]
        for k in range(j):
            s -= low[j, k] * low[j, k]
        if not s > 0.0:
            np.linalg.cholesky(a)  # raises LinAlgError (not positive definite)
            raise ValueError("matrix is not positive definite")
        dj = math.sqrt(s)
        low[j, j] = dj
        rj = 1.0 / dj
        for i in range(j + 1, n):
            s = a[i, j]
            for k in range(j):
                s -= low[i, k] * low[j, k]
            low[i, j] = s * rj
        for i in range(j):
            low[i, j] = 0.0


@njit(cache=True, fastmath=_FMA)
def lower_inverse_inplace(low, inv):
    """``inv`` <- the inverse of the lower-triangular ``low`` (forward substitution)."""
    n = low.shape[0]
    for j in range(n):
        inv[j, j] = 1.0 / low[j, j]
    for j in range(n):
        for i in range(j):
            inv[i, j] = 0.0
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s += low[i, k] * inv[k, j]
            inv[i, j] = -s * inv[i, i]


@njit(cache=True, fastmath=_FMA)
def congruence_lower_inplace(inv, x, tmp, w):
    """``w`` <- inv x inv^T for lower-triangular ``inv`` and symmetric ``x`` (exactly
    symmetric: the lower triangle is computed and mirrored). ``tmp`` is n x n workspace."""
    n = x.shape[0]
    for i in range(n):
        for j in range(n):
            s = 0.0
            for k in range(i + 1):
                s += inv[i, k] * x[k, j]
            tmp[i, j] = s
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for k in range(j + 1):
                s += tmp[i, k] * inv[j, k]
            w[i, j] = s
            w[j, i] = s


@njit(cache=True, fastmath=_FMA)
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


@njit(cache=True, fastmath=_FMA)
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
# Python classes: validation and dispatch
# --------------------------------------------------------------------------------------


class Manifold:
    """Base class: the kernels of one geometry plus point validation.

    Subclasses set ``kind`` (the key of the Karcher step kernels) and implement
    :meth:`validate`, :meth:`point_shape` and the five geometric methods.
    """

    kind: str = ""
    #: Relative tolerance of the membership tests (symmetry, orthonormality, unit norm).
    atol: float = 1e-6

    def _params(self) -> dict:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._params() == self._params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self._params().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def point_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def belongs(self, x: object) -> bool:
        """True when ``x`` is a point of the manifold (within ``atol``)."""
        try:
            self.validate(x)
        except BadInput:
            return False
        return True

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        """Return ``x`` as a C-contiguous float64 point or raise BadInput saying why not."""
        raise NotImplementedError

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def step(self, x: np.ndarray, base_point: np.ndarray, fraction: float,
             retraction: bool = False) -> np.ndarray:
        """``R_P(fraction * Log_P(X))``: the Karcher-mean stochastic gradient step."""
        tangent = fraction * self.log(x, base_point)
        if retraction:
            return self.retract(tangent, base_point)
        return self.exp(tangent, base_point)


def _f64(a: object) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _check_int(name: str, v: object, low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


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
    shiftwatch.operators.records.BadInput: value is not positive definite (smallest eigenvalue -1)
    """

    def __init__(self, n: int, metric: str = "affine"):
        _check_int("n", n)
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
        a = as_array(x, shape=(self.n, self.n), name=name)
        scale = max(1.0, float(np.max(np.abs(a))))
        asym = float(np.max(np.abs(a - a.T)))
        if asym > self.atol * scale:
            raise BadInput(f"{name} is not symmetric (max |A - A^T| = {asym:.3g})")
        a = _f64(0.5 * (a + a.T))
        try:
            np.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            lo = float(np.linalg.eigvalsh(a)[0])
            raise BadInput(f"{name} is not positive definite (smallest eigenvalue {lo:.3g})"
                           ) from None
        return a

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """The Riemannian logarithm Log_base(point), a symmetric matrix."""
        return self._log(_f64(point), _f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """The Riemannian exponential Exp_base(tangent_vec)."""
        return self._exp(_f64(tangent_vec), _f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        """sym(P + V + 0.5 V P^-1 V)."""
        return spd_retract(_f64(tangent_vec), _f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        """The geodesic distance."""
        return float(self._dist(_f64(a), _f64(b)))

    def step(self, x: np.ndarray, base_point: np.ndarray, fraction: float,
             retraction: bool = False) -> np.ndarray:
        if self.metric == "affine":
            return spd_affine_step(_f64(x), _f64(base_point), float(fraction), bool(retraction))
        return super().step(x, base_point, fraction, retraction)


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
        _check_int("n", n)
        _check_int("p", p)
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
        if err > self.atol:
            raise BadInput(f"{name} does not have orthonormal columns "
                           f"(max |X^T X - I| = {err:.3g})")
        return _f64(a)

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_log(_f64(point), _f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_exp(_f64(tangent_vec), _f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return grassmann_retract(_f64(tangent_vec), _f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(grassmann_dist(_f64(a), _f64(b)))


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
        _check_int("dim", dim)
        self.dim = int(dim)

    def _params(self) -> dict:
        return {"dim": self.dim}

    def point_shape(self) -> tuple[int, ...]:
        return (self.dim + 1,)

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        a = as_array(x, shape=(self.dim + 1,), name=name)
        err = abs(float(np.sqrt(a @ a)) - 1.0)
        if err > self.atol:
            raise BadInput(f"{name} is not a unit vector (| |x| - 1 | = {err:.3g})")
        return _f64(a)

    def log(self, point: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_log(_f64(point), _f64(base_point))

    def exp(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_exp(_f64(tangent_vec), _f64(base_point))

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        return sphere_retract(_f64(tangent_vec), _f64(base_point))

    def dist(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(sphere_dist(_f64(a), _f64(b)))


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
