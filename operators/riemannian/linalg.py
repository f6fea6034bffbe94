"""Symmetric-matrix kernels the manifolds share: matrix functions through one
eigendecomposition, small in-place eigensolvers, Cholesky factors and their inverses
(``@njit(cache=True)``, no allocation per call in the in-place forms).
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit

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
FASTMATH_FMA = {"contract"}

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


@njit(cache=True, fastmath=FASTMATH_FMA)
def sym_eig_inplace(v, d, e, vectors):
    """Eigen-decomposition of a small symmetric matrix in place, without allocating.

    On entry ``v`` (n x n) holds the matrix (both triangles); on exit ``d`` (n) holds the
    eigenvalues in ascending order and, when ``vectors``, ``v`` the orthonormal eigenvectors
    as columns (otherwise ``v`` is overwritten). ``e`` (n) is workspace. Householder
    reduction to tridiagonal form, then the QL algorithm with implicit shifts: the EISPACK
    ``tred2``/``tql2`` pair as written in JAMA (public domain). For n <= ~32 this beats a
    LAPACK call through NumPy/Numba, whose fixed cost (argument checks, copies, workspace
    allocation) dominates at these sizes; it is backward stable like LAPACK's ``dsyevd``.
    Tested against ``numpy.linalg.eigh`` in ``tests/operators/riemannian/test_manifolds.py``.
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


@njit(cache=True, fastmath=FASTMATH_FMA)
def sym_eigh_small(a):
    """(eigenvalues ascending, eigenvectors as columns) of a symmetric matrix, by
    :func:`sym_eig_inplace`; the allocating counterpart of ``numpy.linalg.eigh``."""
    n = a.shape[0]
    v = np.ascontiguousarray(a).copy()
    d = np.empty(n)
    e = np.empty(n)
    sym_eig_inplace(v, d, e, True)
    return d, v


@njit(cache=True, fastmath=FASTMATH_FMA)
def sym_eigvalsh_small(a):
    """The eigenvalues (ascending) of a symmetric matrix, by :func:`sym_eig_inplace`."""
    n = a.shape[0]
    v = np.ascontiguousarray(a).copy()
    d = np.empty(n)
    e = np.empty(n)
    sym_eig_inplace(v, d, e, False)
    return d


@njit(cache=True, fastmath=FASTMATH_FMA)
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


@njit(cache=True, fastmath=FASTMATH_FMA)
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


@njit(cache=True, fastmath=FASTMATH_FMA)
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
