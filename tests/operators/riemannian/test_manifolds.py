"""The manifold kernels against geomstats 2.8, round trips, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from geomstats.geometry.grassmannian import Grassmannian
from geomstats.geometry.hypersphere import Hypersphere
from geomstats.geometry.spd_matrices import (
    SPDAffineMetric,
    SPDBuresWassersteinMetric,
    SPDLogEuclideanMetric,
    SPDMatrices,
)

from shiftwatch.operators.riemannian.grassmann import Grassmann
from shiftwatch.operators.riemannian.linalg import (
    cholesky_inplace,
    lower_inverse_inplace,
    sym_eig_inplace,
    sym_eigh_small,
    sym_eigvalsh_small,
)
from shiftwatch.operators.riemannian.manifolds import manifold_from_spec
from shiftwatch.operators.riemannian.spd import (
    SPD,
    spd_affine_dist,
    spd_affine_dist_factored,
    spd_affine_step,
    spd_affine_step_inplace,
)
from shiftwatch.operators.riemannian.sphere import Sphere
from shiftwatch.records import BadInput

GEOMSTATS_METRIC = {"affine": SPDAffineMetric, "log-euclidean": SPDLogEuclideanMetric,
                    "bures-wasserstein": SPDBuresWassersteinMetric}


def random_spd(rng, n, cond):
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    m = (q * np.geomspace(1.0, cond, n)) @ q.T * rng.uniform(0.5, 2.0)
    return (m + m.T) / 2


def geomstats_spd(n, metric):
    space = SPDMatrices(n, equip=False)
    space.equip_with_metric(GEOMSTATS_METRIC[metric])
    return space.metric


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / max(1.0, np.max(np.abs(b))))


# At conditioning 1e6 both sides lose digits: the whitened matrix A^-1/2 B A^-1/2 has a
# condition number up to cond(A) cond(B) = 1e12, so the first-order error bound of either
# is about eps * 1e12 = 2e-4. What each loses depends on the CPU (our kernels use FMA where
# it exists; OpenBLAS picks kernels per CPU): the affine Log of the first pair was within
# 1e-7 of geomstats on one machine and 4.1e-7 on another (against a 60-digit mpmath
# reference: ours 6.0e-7, geomstats 1.9e-7). 1e-5 sits between those and the bound: a
# wrong formula is off by O(1).
@pytest.mark.parametrize("metric", ["affine", "log-euclidean", "bures-wasserstein"])
@pytest.mark.parametrize(("n", "cond", "tol"), [(2, 3.0, 1e-11), (5, 50.0, 1e-11),
                                                (8, 1e6, 1e-5)])
def test_spd_against_geomstats(metric, n, cond, tol):
    rng = np.random.default_rng(n)
    ours, ref = SPD(n, metric=metric), geomstats_spd(n, metric)
    for _ in range(3):
        a, b = random_spd(rng, n, cond), random_spd(rng, n, cond)
        v = ours.log(b, a)
        assert rel(v, ref.log(b, a)) < tol
        assert abs(ours.dist(a, b) - float(ref.dist(a, b))) < tol * max(1.0, ours.dist(a, b))
        w = 0.3 * v
        assert rel(ours.exp(w, a), ref.exp(w, a)) < tol
        # dist(a, b) == |Log_a(b)| in the metric at a
        assert abs(np.sqrt(float(ref.squared_norm(v, a))) - ours.dist(a, b)) < tol * max(
            1.0, ours.dist(a, b))


@pytest.mark.parametrize("metric", ["affine", "log-euclidean", "bures-wasserstein"])
def test_spd_round_trips_and_retraction(metric):
    rng = np.random.default_rng(1)
    m = SPD(6, metric=metric)
    for cond in (2.0, 1e4):
        a, b = random_spd(rng, 6, cond), random_spd(rng, 6, cond)
        assert rel(m.exp(m.log(b, a), a), b) < 1e-9
        v = 0.1 * m.log(b, a)
        assert rel(m.log(m.exp(v, a), a), v) < 1e-9
        r = m.retract(v, a)
        assert m.belongs(r)
        # a retraction agrees with Exp to first order for every metric: the gap shrinks at
        # least quadratically with the step
        step = m.log(b, a) / np.linalg.norm(m.log(b, a))
        gaps = [rel(m.retract(e * step, a), m.exp(e * step, a)) for e in (1e-3, 1e-4)]
        assert gaps[1] < 0.02 * gaps[0] + 1e-12
    assert m.dist(a, a) < 1e-7


def test_spd_affine_step_is_the_geodesic_point_and_retraction():
    rng = np.random.default_rng(2)
    m = SPD(5)
    p, x = random_spd(rng, 5, 100.0), random_spd(rng, 5, 100.0)
    for s in (0.02, 0.5):
        assert rel(m.step(x, p, s), m.exp(s * m.log(x, p), p)) < 1e-11
        assert rel(m.step(x, p, s, retraction=True), m.retract(s * m.log(x, p), p)) < 1e-11


def eig_test_matrices(rng, n):
    """Symmetric test matrices with hard spectra: random, ill-conditioned SPD (up to 1e14),
    repeated and clustered eigenvalues, indefinite, diagonal, graded, zero."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    spectra = [rng.uniform(0.1, 10.0, n), np.geomspace(1.0, 1e-8, n), np.geomspace(1e6, 1e-8, n),
               np.repeat([1.0, 2.0], (n + 1) // 2)[:n], 1.0 + 1e-10 * rng.standard_normal(n),
               rng.standard_normal(n), np.zeros(n), np.ones(n)]
    out = [(q * w) @ q.T for w in spectra]
    out += [np.diag(rng.uniform(-1.0, 1.0, n)), random_spd(rng, n, 1e12)]
    g = rng.standard_normal((n, n))
    out.append(g @ g.T * np.outer(np.geomspace(1, 1e-6, n), np.geomspace(1, 1e-6, n)))
    return [(m + m.T) / 2 for m in out]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 33])
def test_small_eigensolver_matches_numpy(n):
    rng = np.random.default_rng(100 + n)
    for a in eig_test_matrices(rng, n):
        scale = max(np.abs(a).max(), 1e-300)
        w, v = sym_eigh_small(a)
        ref = np.linalg.eigvalsh(a)
        # Backward stable like LAPACK: each eigenvalue within a few eps of ||A||.
        assert np.all(np.diff(w) >= 0)
        assert np.abs(w - ref).max() <= 1e-13 * scale * n
        assert np.abs(v.T @ v - np.eye(n)).max() < 1e-13 * n
        assert np.abs((v * w) @ v.T - a).max() <= 1e-13 * scale * n
        assert np.abs(sym_eigvalsh_small(a) - ref).max() <= 1e-13 * scale * n
        # the in-place form leaves the same result in the caller's arrays
        vv, d, e = a.copy(), np.empty(n), np.empty(n)
        sym_eig_inplace(vv, d, e, True)
        assert np.array_equal(d, w) and np.array_equal(vv, v)
    # Well-separated SPD spectra are resolved to high relative accuracy, as by eigh.
    a = random_spd(rng, n, 1e6)
    ref = np.linalg.eigvalsh(a)
    assert np.abs(sym_eigvalsh_small(a) / ref - 1).max() < 1e-6


def _step_inplace(x, p, s, retraction):
    n = p.shape[0]
    q, low, inv = p.copy(), np.empty((n, n)), np.empty((n, n))
    cholesky_inplace(p, low)
    lower_inverse_inplace(low, inv)
    work = np.empty((n, n)), np.empty(n), np.empty(n), np.empty((n, n))
    spd_affine_step_inplace(x, q, low, inv, s, retraction, *work)
    return q, low, inv, work


def work_of(n):
    return np.empty((n, n)), np.empty((n, n)), np.empty(n), np.empty(n)


def test_inplace_spd_factor_kernels_match_the_lapack_ones():
    rng = np.random.default_rng(7)
    for n, cond in [(1, 1.0), (3, 10.0), (8, 1e2), (8, 1e4), (12, 1e3), (30, 1e2)]:
        p, x = random_spd(rng, n, cond), random_spd(rng, n, cond)
        low, inv = np.empty((n, n)), np.empty((n, n))
        cholesky_inplace(p, low)
        assert rel(low, np.linalg.cholesky(p)) < 1e-13
        lower_inverse_inplace(low, inv)
        assert rel(inv @ low, np.eye(n)) < 1e-14 * cond
        for s, retraction in [(0.02, False), (0.04, True), (0.7, False)]:
            q, lq, iq, (v, d, e, tmp) = _step_inplace(x, p, s, retraction)
            assert rel(q, spd_affine_step(x, p, s, retraction)) < 1e-11
            assert np.array_equal(q, q.T)
            # the factors left behind are those of the new point
            assert rel(lq, np.linalg.cholesky(q)) < 1e-11 and rel(iq @ lq, np.eye(n)) < 1e-11
            got = spd_affine_dist_factored(iq, low, tmp, v, d, e)  # d(q, p)
            assert abs(got - spd_affine_dist(q, p)) < 1e-11 * max(1.0, got)
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_inplace(np.array([[1.0, 2.0], [2.0, 1.0]]), np.empty((2, 2)))


@pytest.mark.parametrize("cond", [1e6, 1e8, 1e10])
def test_inplace_spd_step_on_ill_conditioned_commuting_pairs(cond):
    # P = Q diag(a) Q^T and X = Q diag(b) Q^T commute, so the exact answers are known in
    # closed form; the kernels do not know it (the Cholesky whitening mixes the eigenbasis).
    # Independent random P, X of this conditioning have no float64 reference: LAPACK's
    # answer (spd_affine_step) is itself off by ~1e-5 at cond 1e8 against 50-digit mpmath.
    rng = np.random.default_rng(int(np.log10(cond)))
    n = 8
    qm, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = np.geomspace(1.0, 1.0 / cond, n) * rng.uniform(0.5, 2.0, n)
    b = a * np.exp(rng.uniform(-2.0, 2.0, n))
    p, x = (qm * a) @ qm.T, (qm * b) @ qm.T
    p, x = (p + p.T) / 2, (x + x.T) / 2
    for s, retraction in [(0.02, False), (0.04, True), (0.7, False)]:
        t = s * np.log(b / a)
        f = 1.0 + t + 0.5 * t * t if retraction else np.exp(t)
        exact = (qm * (a * f)) @ qm.T
        q, lq, iq, (v, d, e, tmp) = _step_inplace(x, p, s, retraction)
        # entrywise error relative to the largest entry; the small eigen-directions carry
        # entries ~1/cond of it, which this bound does not test
        assert rel(q, exact) < 1e-12
    low, inv = np.empty((n, n)), np.empty((n, n))
    cholesky_inplace(p, low)
    lower_inverse_inplace(low, inv)
    got = spd_affine_dist_factored(inv, np.linalg.cholesky(x), *work_of(n))
    want = np.sqrt(np.sum(np.log(b / a) ** 2))
    # Rounding p and x to float64 alone moves their smallest eigenvalues by ~eps * cond
    # relative, so that is the accuracy the data allow (LAPACK's spd_affine_dist is off by
    # about as much).
    assert abs(got - want) < 1e-15 * cond * want


@pytest.mark.parametrize(("n", "p"), [(4, 1), (7, 3), (20, 5)])
def test_grassmann_against_geomstats(n, p):
    rng = np.random.default_rng(n)
    ours, ref = Grassmann(n, p), Grassmannian(n, p)
    for _ in range(3):
        x = np.linalg.qr(rng.standard_normal((n, p)))[0]
        y = np.linalg.qr(rng.standard_normal((n, p)))[0]
        px, py = x @ x.T, y @ y.T
        h = ours.log(x, y)
        assert np.abs(y.T @ h).max() < 1e-12  # horizontal
        delta = h @ y.T + y @ h.T  # the same tangent vector on projection matrices
        assert rel(delta, ref.metric.log(px, py)) < 1e-10
        # geomstats measures tangent vectors of projection matrices with the Frobenius norm,
        # which is sqrt(2) times the principal-angle norm used here (and by pymanopt)
        assert abs(float(ref.metric.dist(px, py)) - np.sqrt(2) * ours.dist(x, y)) < 1e-10
        assert abs(np.linalg.norm(h) - ours.dist(x, y)) < 1e-10
        for t in (0.3, 1.0):
            z = ours.exp(t * h, y)
            assert rel(z @ z.T, ref.metric.exp(t * delta, py)) < 1e-10
            assert ours.belongs(z)
        r = ours.retract(0.3 * h, y)
        assert ours.belongs(r)
        assert ours.dist(r, ours.exp(0.3 * h, y)) < 0.05
        # log(exp) round trip (within the injectivity radius)
        assert rel(ours.log(ours.exp(0.3 * h, y), y), 0.3 * h) < 1e-9


def test_grassmann_small_angles_are_accurate():
    y = np.eye(6)[:, :2]
    x = np.linalg.qr(y + 1e-9 * np.eye(6)[:, 2:4])[0]
    # arccos of the cosines would give ~1e-8 noise here
    assert abs(Grassmann(6, 2).dist(x, y) - np.sqrt(2) * 1e-9) < 1e-15
    assert Grassmann(6, 2).dist(y, y) == 0.0


@pytest.mark.parametrize("dim", [1, 2, 9])
def test_sphere_against_geomstats(dim):
    rng = np.random.default_rng(dim)
    ours, ref = Sphere(dim), Hypersphere(dim)
    for _ in range(3):
        a, b = rng.standard_normal((2, dim + 1))
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        v = ours.log(b, a)
        assert rel(v, ref.metric.log(b, a)) < 1e-12
        assert abs(ours.dist(a, b) - float(ref.metric.dist(a, b))) < 1e-12
        assert abs(np.linalg.norm(v) - ours.dist(a, b)) < 1e-12
        assert rel(ours.exp(0.4 * v, a), ref.metric.exp(0.4 * v, a)) < 1e-12
        assert rel(ours.exp(v, a), b) < 1e-12
        assert rel(ours.log(ours.exp(0.4 * v, a), a), 0.4 * v) < 1e-12
        assert ours.belongs(ours.retract(v, a))


@pytest.mark.parametrize(("manifold", "value", "message"), [
    (SPD(3), np.eye(2), "shape"),
    (SPD(3), [[1.0, 0, 0], [0, np.nan, 0], [0, 0, 1]], "NaN"),
    (SPD(3), [[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]], "not symmetric"),
    (SPD(3), [[1.0, 2, 0], [2, 1, 0], [0, 0, 1]], "not positive definite"),
    (SPD(2), [[1.0, 0], [0, 0]], "not positive definite"),
    (Grassmann(4, 2), np.ones((4, 2)), "orthonormal"),
    (Grassmann(4, 2), np.eye(4)[:, :3], "shape"),
    (Sphere(2), [1.0, 1.0, 0.0], "unit vector"),
    (Sphere(2), "abc", "not a numeric array"),
])
def test_bad_points_are_rejected_with_a_clear_message(manifold, value, message):
    with pytest.raises(BadInput, match=message):
        manifold.validate(value)
    assert not manifold.belongs(value)


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="metric must be one of"):
        SPD(3, metric="euclid")
    with pytest.raises(ValueError, match="p must be <= n"):
        Grassmann(2, 3)
    with pytest.raises(ValueError, match="dim must be an integer"):
        Sphere(0)
    with pytest.raises(ValueError, match="manifold must be one of"):
        manifold_from_spec("torus", (3,))
    assert SPD(3) == SPD(3) and SPD(3) != SPD(3, "log-euclidean")
