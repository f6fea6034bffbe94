"""Seeded synthetic streams with known change points.

Every generator draws from ``numpy.random.default_rng(seed)`` afresh on each iteration, so
iterating twice gives the same stream. Records are ``{"key": None, "ts": float(i),
"value": ...}``; ``annotations == {"truth": [change points]}`` where a change point ``c``
means records ``c, c+1, ...`` come from the new distribution; ``length`` is ``n``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from shiftwatch.streams.base import Source

__all__ = ["GaussianShift", "BetaStream", "WishartSPDStream", "GrassmannStream",
           "random_spd_scale"]

#: Records are generated in chunks of this many, to bound memory on long streams.
_CHUNK = 4096


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return int(n)


def _check_change_point(change_point: Any, n: int) -> list[int]:
    if change_point is None:
        return []
    if isinstance(change_point, bool) or not isinstance(change_point, (int, np.integer)) \
            or not 0 < change_point < n:
        raise ValueError(f"change_point must be an integer in 1..n-1 (n={n}) or None, "
                         f"got {change_point!r}")
    return [int(change_point)]


class _Synthetic(Source):
    def _segments(self, bounds: list[int]) -> Iterator[tuple[int, int, int]]:
        """(segment index, start, stop) chunks covering 0..n, split at the change points."""
        edges = [0, *bounds, self.n]
        for seg in range(len(edges) - 1):
            for start in range(edges[seg], edges[seg + 1], _CHUNK):
                yield seg, start, min(start + _CHUNK, edges[seg + 1])

    def __repr__(self) -> str:
        import inspect

        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in names)
        return f"{type(self).__name__}({args})"


# --------------------------------------------------------------------------------------
# Gaussian mean / variance shifts
# --------------------------------------------------------------------------------------


class GaussianShift(_Synthetic):
    """Independent Gaussian samples whose mean and/or standard deviation change.

    Parameters
    ----------
    n
        Number of records.
    change_points
        Increasing indices in 1..n-1 where a new segment starts.
    means, sigmas
        One mean and one standard deviation per segment (``len(change_points) + 1`` each).
        With ``dim > 1`` each may be a number (the same for every coordinate) or a
        length-``dim`` sequence.
    dim
        1 for scalar values, otherwise vectors of this length with independent coordinates.
    seed
        Seed of ``numpy.random.default_rng``.

    Examples
    --------
    >>> src = GaussianShift(n=400, change_points=(200,), means=(0, 2), seed=0)
    >>> x = np.array([r["value"] for r in src])
    >>> src.annotations, float(x[:200].mean().round(2)), float(x[200:].mean().round(2))
    ({'truth': [200]}, 0.02, 1.91)
    """

    def __init__(self, n: int = 1000, change_points: Sequence[int] = (500,),
                 means: Sequence[Any] = (0.0, 1.0), sigmas: Sequence[Any] = (1.0, 1.0),
                 dim: int = 1, seed: int = 0):
        self.n = n
        self.change_points = change_points
        self.means = means
        self.sigmas = sigmas
        self.dim = dim
        self.seed = seed
        self._validate()
        self.name = "gaussian"
        self.length = self._n
        self.annotations = {"truth": list(self._bounds)}

    def _validate(self) -> None:
        self._n = _check_n(self.n)
        if isinstance(self.dim, bool) or not isinstance(self.dim, (int, np.integer)) \
                or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        cps = [self.change_points] if isinstance(self.change_points, (int, np.integer)) \
            else list(self.change_points)
        if any(not isinstance(c, (int, np.integer)) or isinstance(c, bool) for c in cps) or \
                any(not 0 < c < self._n for c in cps) or cps != sorted(set(cps)):
            raise ValueError(f"change_points must be increasing integers in 1..n-1 "
                             f"(n={self._n}), got {self.change_points!r}")
        self._bounds = [int(c) for c in cps]
        k = len(cps) + 1
        if len(self.means) != k or len(self.sigmas) != k:
            raise ValueError(f"means and sigmas need one entry per segment ({k} for "
                             f"{len(cps)} change points), got {len(self.means)} and "
                             f"{len(self.sigmas)}")
        try:
            self._mu = [np.broadcast_to(np.asarray(m, dtype=float), (self.dim,))
                        for m in self.means]
            self._sd = [np.broadcast_to(np.asarray(s, dtype=float), (self.dim,))
                        for s in self.sigmas]
        except ValueError:
            raise ValueError(f"each mean and sigma must be a number or have length dim="
                             f"{self.dim}") from None
        if any(np.any(s <= 0) or not np.all(np.isfinite(s)) for s in self._sd) or \
                not all(np.all(np.isfinite(m)) for m in self._mu):
            raise ValueError(f"sigmas must be finite and > 0 and means finite, got "
                             f"means={self.means!r}, sigmas={self.sigmas!r}")

    def __iter__(self) -> Iterator[dict]:
        rng = np.random.default_rng(self.seed)
        for seg, start, stop in self._segments(self._bounds):
            x = rng.normal(self._mu[seg], self._sd[seg], size=(stop - start, self.dim))
            values = x[:, 0].tolist() if self.dim == 1 else x.tolist()
            for i, v in enumerate(values, start=start):
                yield {"key": None, "ts": float(i), "value": v}


# --------------------------------------------------------------------------------------
# Beta streams (Shekhar & Ramdas 2024)
# --------------------------------------------------------------------------------------


class BetaStream(_Synthetic):
    """Independent Beta samples on [0, 1] whose parameters change once.

    The bounded streams of the confidence-sequence change-detection experiments.

    Parameters
    ----------
    n
        Number of records.
    change_point
        Index in 1..n-1 of the first post-change record, or ``None`` for no change.
    pre, post
        ``(a, b)`` Beta parameters before and after the change.
    seed
        Seed of ``numpy.random.default_rng``.

    References
    ----------
    S. Shekhar and A. Ramdas. Reducing sequential change detection to sequential
    estimation. ICML 2024.

    Examples
    --------
    >>> BetaStream.post_for_mean_shift((2.0, 6.0), 0.1)
    (2.8, 5.2)
    >>> src = BetaStream.with_mean_shift(0.1, n=2000, change_point=1000, pre=(2.0, 6.0), seed=0)
    >>> x = np.array([r["value"] for r in src])
    >>> float(x[:1000].mean().round(3)), float(x[1000:].mean().round(3))
    (0.239, 0.358)
    """

    def __init__(self, n: int = 1000, change_point: int | None = 500,
                 pre: tuple[float, float] = (2.0, 6.0), post: tuple[float, float] = (2.8, 5.2),
                 seed: int = 0):
        self.n = n
        self.change_point = change_point
        self.pre = pre
        self.post = post
        self.seed = seed
        self._n = _check_n(n)
        self._bounds = _check_change_point(change_point, self._n)
        for label, ab in (("pre", pre), ("post", post)):
            if len(ab) != 2 or not all(np.isfinite(v) and v > 0 for v in ab):
                raise ValueError(f"{label} must be two Beta parameters (a, b) > 0, got {ab!r}")
        self.name = "beta"
        self.length = self._n
        self.annotations = {"truth": list(self._bounds)}

    @staticmethod
    def post_for_mean_shift(pre: tuple[float, float], shift: float) -> tuple[float, float]:
        """Beta parameters with mean ``a/(a+b) + shift`` and the same concentration ``a+b``."""
        a, b = float(pre[0]), float(pre[1])
        conc = a + b
        mean = a / conc + shift
        if not 0.0 < mean < 1.0:
            raise ValueError(f"shift {shift} moves the mean {a / conc:.4g} outside (0, 1)")
        return (round(mean * conc, 12), round((1.0 - mean) * conc, 12))

    @classmethod
    def with_mean_shift(cls, shift: float, n: int = 1000, change_point: int | None = 500,
                        pre: tuple[float, float] = (2.0, 6.0), seed: int = 0) -> BetaStream:
        """A stream whose mean moves by ``shift`` at ``change_point``, concentration kept."""
        return cls(n=n, change_point=change_point, pre=pre,
                   post=cls.post_for_mean_shift(pre, shift), seed=seed)

    @property
    def means(self) -> tuple[float, float]:
        """The true means before and after the change."""
        return (self.pre[0] / sum(self.pre), self.post[0] / sum(self.post))

    def __iter__(self) -> Iterator[dict]:
        rng = np.random.default_rng(self.seed)
        params = [self.pre, self.post]
        for seg, start, stop in self._segments(self._bounds):
            a, b = params[seg]
            for i, v in enumerate(rng.beta(a, b, size=stop - start).tolist(), start=start):
                yield {"key": None, "ts": float(i), "value": v}


# --------------------------------------------------------------------------------------
# Manifold-valued streams (Wang, Borsoi & Richard 2024)
# --------------------------------------------------------------------------------------


def random_spd_scale(rng: np.random.Generator, dim: int, c: float | None = None,
                     eigvals: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """The authors' random SPD matrix ``U diag(e / sum e + 1e-6) U^T`` and its change.

    ``U`` is the left singular basis of a ``dim x dim`` standard normal matrix and
    ``e = rand(dim) + 1e-6`` (drawn unless ``eigvals`` is given). Returns ``(M0, M1, c)``
    where ``M1`` uses ``e + c`` renormalised, ``c = 1.6 rand()`` unless given.

    >>> M0, M1, c = random_spd_scale(np.random.default_rng(1), 3)
    >>> bool(np.all(np.linalg.eigvalsh(M0) > 0)), round(float(np.trace(M0)), 6)
    (True, 1.000003)
    """
    u, _, _ = np.linalg.svd(rng.standard_normal((dim, dim)))
    e = rng.random(dim) + 1e-6 if eigvals is None else np.asarray(eigvals, dtype=float)
    drawn = 1.6 * float(rng.random())  # drawn even when c is given: same samples either way
    if c is None:
        c = drawn
    e1 = e + c
    m0 = (u * (e / e.sum() + 1e-6)) @ u.T
    m1 = (u * (e1 / e1.sum() + 1e-6)) @ u.T
    return (m0 + m0.T) / 2, (m1 + m1.T) / 2, float(c)


class WishartSPDStream(_Synthetic):
    """SPD matrices ``X_t ~ Wishart(df, M)`` whose scale changes from ``M0`` to ``M1``.

    The SPD experiment of Wang, Borsoi & Richard: ``U`` from the SVD of ``randn(dim, dim)``,
    ``e = rand(dim) + 1e-6``, ``M0 = U diag(e / sum e + 1e-6) U^T``, ``M1`` the same with
    ``e + c`` (``c = 1.6 rand()`` unless given) renormalised. So ``E[X_t] = df M``.

    Parameters
    ----------
    n
        Number of records.
    change_point
        Index of the first record drawn with scale ``M1`` (``None``: no change).
    dim
        Matrix size.
    df
        Wishart degrees of freedom (``>= dim`` so that samples are SPD almost surely).
    c
        Eigenvalue offset of ``M1``; ``None`` draws ``1.6 rand()``.
    seed
        Seed of ``numpy.random.default_rng`` (samples, and the scales unless ``scale_seed``).
    scale_seed
        Seed of the scales ``M0``, ``M1`` alone. The paper keeps them fixed over its Monte
        Carlo runs: give a fixed ``scale_seed`` and vary ``seed``. ``None``: the scales are
        drawn from ``seed`` before the samples.

    Attributes
    ----------
    scale_before, scale_after
        ``M0`` and ``M1`` as arrays.
    eig_offset
        The ``c`` used (drawn when ``c`` is ``None``).

    References
    ----------
    X. Wang, R. A. Borsoi and C. Richard. Non-parametric online change point detection on
    Riemannian manifolds. ICML 2024.

    Examples
    --------
    >>> src = WishartSPDStream(n=4, change_point=2, dim=3, df=4, seed=1)
    >>> X = np.array([r["value"] for r in src])
    >>> X.shape, bool(np.all(np.linalg.eigvalsh(X) > 0)), bool(np.all(X == X.transpose(0, 2, 1)))
    ((4, 3, 3), True, True)
    >>> round(src.eig_offset, 4)
    0.5276
    """

    def __init__(self, n: int = 2000, change_point: int | None = 1500, dim: int = 8,
                 df: float = 11, c: float | None = None, seed: int = 1,
                 scale_seed: int | None = None):
        self.n = n
        self.change_point = change_point
        self.dim = dim
        self.df = df
        self.c = c
        self.seed = seed
        self.scale_seed = scale_seed
        self._n = _check_n(n)
        self._bounds = _check_change_point(change_point, self._n)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not np.isfinite(df) or df < dim:
            raise ValueError(f"df must be >= dim={dim} (SPD samples), got {df!r}")
        if c is not None and not (np.isfinite(c) and c >= 0):
            raise ValueError(f"c must be None or a finite number >= 0, got {c!r}")
        m0, m1, c_used = random_spd_scale(
            np.random.default_rng(seed if scale_seed is None else scale_seed), dim, c)
        self.scale_before, self.scale_after = m0, m1
        self.eig_offset = c_used
        self.name = "wishart"
        self.length = self._n
        self.annotations = {"truth": list(self._bounds)}

    def __iter__(self) -> Iterator[dict]:
        from scipy import stats  # only this generator needs SciPy

        rng = np.random.default_rng(self.seed)
        if self.scale_seed is None:
            scales = random_spd_scale(rng, self.dim, self.c)[:2]  # drawn first from `seed`
        else:
            scales = (self.scale_before, self.scale_after)
        for seg, start, stop in self._segments(self._bounds):
            x = stats.wishart(df=self.df, scale=scales[seg]).rvs(size=stop - start,
                                                                  random_state=rng)
            x = np.asarray(x).reshape(stop - start, self.dim, self.dim)
            x = (x + x.transpose(0, 2, 1)) / 2  # exactly symmetric for the SPD checks
            for i, v in enumerate(x.tolist(), start=start):
                yield {"key": None, "ts": float(i), "value": v}


class GrassmannStream(_Synthetic):
    """Points of the Grassmannian Gr(ambient, rank) whose generating mean changes.

    The Grassmann experiment of Wang, Borsoi & Richard: ``Z ~ MatrixNormal(M, U, V)``
    (``ambient x ambient``) with ``U, V`` random SPD matrices built as in
    :func:`random_spd_scale`, ``M0 = randn + 1``, ``M1 = M0 + shift randn``; the point
    ``X_t`` is the ``ambient x rank`` orthonormal basis of the ``rank`` leading left singular
    vectors of ``Z``.

    Parameters
    ----------
    n
        Number of records.
    change_point
        Index of the first record drawn around ``M1`` (``None``: no change).
    ambient, rank
        ``n`` and ``p`` of Gr(n, p).
    shift
        Scale of the random perturbation of the mean.
    seed
        Seed of ``numpy.random.default_rng`` (samples, and the parameters unless
        ``scale_seed``).
    scale_seed
        Seed of the fixed parameters (``U``, ``V``, ``M0``, ``M1``) alone, so that Monte Carlo
        runs varying ``seed`` share one change, as in the paper. ``None``: drawn from
        ``seed`` before the samples.

    References
    ----------
    X. Wang, R. A. Borsoi and C. Richard. Non-parametric online change point detection on
    Riemannian manifolds. ICML 2024.

    Examples
    --------
    >>> src = GrassmannStream(n=3, change_point=2, ambient=6, rank=2, seed=1)
    >>> X = np.array([r["value"] for r in src])
    >>> X.shape, bool(np.allclose(X[0].T @ X[0], np.eye(2)))
    ((3, 6, 2), True)
    """

    def __init__(self, n: int = 2000, change_point: int | None = 1500, ambient: int = 20,
                 rank: int = 5, shift: float = 0.03, seed: int = 1,
                 scale_seed: int | None = None):
        self.n = n
        self.change_point = change_point
        self.ambient = ambient
        self.rank = rank
        self.shift = shift
        self.seed = seed
        self.scale_seed = scale_seed
        self._n = _check_n(n)
        self._bounds = _check_change_point(change_point, self._n)
        for label, v in (("ambient", ambient), ("rank", rank)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{label} must be a positive integer, got {v!r}")
        if rank > ambient:
            raise ValueError(f"rank must be <= ambient={ambient}, got {rank}")
        if not np.isfinite(shift):
            raise ValueError(f"shift must be a finite number, got {shift!r}")
        self.name = "grassmann"
        self.length = self._n
        self.annotations = {"truth": list(self._bounds)}

    def _params(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list]:
        d = self.ambient
        row_cov, _, _ = random_spd_scale(rng, d)
        col_cov, _, _ = random_spd_scale(rng, d)
        m0 = rng.standard_normal((d, d)) + 1.0
        m1 = m0 + self.shift * rng.standard_normal((d, d))
        return np.linalg.cholesky(row_cov), np.linalg.cholesky(col_cov), [m0, m1]

    def __iter__(self) -> Iterator[dict]:
        rng = np.random.default_rng(self.seed)
        if self.scale_seed is None:
            a, b, means = self._params(rng)  # drawn first from `seed`
        else:
            a, b, means = self._params(np.random.default_rng(self.scale_seed))
        d, p = self.ambient, self.rank
        for seg, start, stop in self._segments(self._bounds):
            g = rng.standard_normal((stop - start, d, d))
            # MatrixNormal(M, U, V) = M + A G B^T with U = A A^T, V = B B^T.
            z = means[seg] + a @ g @ b.T
            u, _, _ = np.linalg.svd(z)
            for i, v in enumerate(u[:, :, :p].tolist(), start=start):
                yield {"key": None, "ts": float(i), "value": v}
