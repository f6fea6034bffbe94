"""Seeded manifold-valued sample streams for the operators' own checks.

The Riemannian detectors' check-suite streams (``KarcherOperator._test_stream``) need SPD and
Grassmann points with a change. The operators may not import :mod:`shiftwatch.streams` (arrows
run from streams down to the ground floor, never back up), so the two generators of the SPD
and Grassmann experiments of Wang, Borsoi & Richard (ICML 2024) are here in a minimal form:
iterables of ``{"key": None, "ts": i, "value": point}`` records. The full sources with
validation, annotations and options are :class:`shiftwatch.streams.synthetic.WishartSPDStream`
and :class:`shiftwatch.streams.synthetic.GrassmannStream`; for equal arguments both give the
same records (``tests/operators/test_manifold_samples.py`` checks it).

>>> X = np.array([r["value"] for r in WishartSPDStream(n=4, change_point=2, dim=3, df=4)])
>>> X.shape, bool(np.all(np.linalg.eigvalsh(X) > 0))
((4, 3, 3), True)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["random_spd_scale", "WishartSPDStream", "GrassmannStream"]

_CHUNK = 4096


def random_spd_scale(rng: np.random.Generator, dim: int, c: float | None = None,
                     eigvals: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """The random SPD matrix ``U diag(e / sum e + 1e-6) U^T`` and its change ``(M0, M1, c)``.

    ``U`` is the left singular basis of a ``dim x dim`` standard normal matrix and
    ``e = rand(dim) + 1e-6`` (drawn unless ``eigvals`` is given); ``M1`` uses ``e + c``
    renormalised, ``c = 1.6 rand()`` unless given.

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


def _segments(n: int, change_point: int | None) -> Iterator[tuple[int, int, int]]:
    edges = [0, n] if change_point is None else [0, int(change_point), n]
    for seg in range(len(edges) - 1):
        for start in range(edges[seg], edges[seg + 1], _CHUNK):
            yield seg, start, min(start + _CHUNK, edges[seg + 1])


class WishartSPDStream:
    """SPD matrices ``X_t ~ Wishart(df, M)``, the scale changing from ``M0`` to ``M1``.

    Parameters
    ----------
    n, change_point, dim, df, c, seed
        As in :class:`shiftwatch.streams.synthetic.WishartSPDStream` (scales drawn from
        ``seed`` before the samples).
    """

    def __init__(self, n: int = 2000, change_point: int | None = 1500, dim: int = 8,
                 df: float = 11, c: float | None = None, seed: int = 1):
        self.n = n
        self.change_point = change_point
        self.dim = dim
        self.df = df
        self.c = c
        self.seed = seed

    def __iter__(self) -> Iterator[dict]:
        from scipy import stats

        rng = np.random.default_rng(self.seed)
        scales = random_spd_scale(rng, self.dim, self.c)[:2]
        for seg, start, stop in _segments(self.n, self.change_point):
            x = stats.wishart(df=self.df, scale=scales[seg]).rvs(size=stop - start,
                                                                  random_state=rng)
            x = np.asarray(x).reshape(stop - start, self.dim, self.dim)
            x = (x + x.transpose(0, 2, 1)) / 2
            for i, v in enumerate(x.tolist(), start=start):
                yield {"key": None, "ts": float(i), "value": v}


class GrassmannStream:
    """Points of Gr(ambient, rank): leading left singular vectors of ``MatrixNormal(M, U, V)``.

    Parameters
    ----------
    n, change_point, ambient, rank, shift, seed
        As in :class:`shiftwatch.streams.synthetic.GrassmannStream` (parameters drawn from
        ``seed`` before the samples).
    """

    def __init__(self, n: int = 2000, change_point: int | None = 1500, ambient: int = 20,
                 rank: int = 5, shift: float = 0.03, seed: int = 1):
        self.n = n
        self.change_point = change_point
        self.ambient = ambient
        self.rank = rank
        self.shift = shift
        self.seed = seed

    def __iter__(self) -> Iterator[dict]:
        rng = np.random.default_rng(self.seed)
        d, p = self.ambient, self.rank
        row_cov, _, _ = random_spd_scale(rng, d)
        col_cov, _, _ = random_spd_scale(rng, d)
        m0 = rng.standard_normal((d, d)) + 1.0
        means = [m0, m0 + self.shift * rng.standard_normal((d, d))]
        a, b = np.linalg.cholesky(row_cov), np.linalg.cholesky(col_cov)
        for seg, start, stop in _segments(self.n, self.change_point):
            g = rng.standard_normal((stop - start, d, d))
            z = means[seg] + a @ g @ b.T
            u, _, _ = np.linalg.svd(z)
            for i, v in enumerate(u[:, :, :p].tolist(), start=start):
                yield {"key": None, "ts": float(i), "value": v}
