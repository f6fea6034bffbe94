"""The ``calibrated`` threshold of
:class:`~shiftwatch.operators.riemannian.karcher.KarcherDetector`: a level whose mean time
to the first crossing is a target (Rice's formula)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["calibrate_threshold", "effective_size"]


def effective_size(z: np.ndarray) -> float:
    """The effective number of independent values in the stationary series ``z``:
    ``n / (1 + 2 sum rho_k)``, the autocorrelations summed by Geyer's initial positive
    sequence (pairs ``rho_k + rho_k+1`` while positive). 1 <= result <= n.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> round(effective_size(rng.normal(size=2000)))  # independent: about n
    2000
    >>> # sums of 20 consecutive values, overlapping: worth about n / 20 = 100
    >>> round(effective_size(np.convolve(rng.normal(size=2000), np.ones(20), "same")))
    107
    """
    z = np.asarray(z, dtype=np.float64) - float(np.mean(z))
    n = z.size
    f = np.fft.rfft(z, 2 * n)
    ac = np.fft.irfft(f * np.conj(f))[:n]
    if not ac[0] > 0:
        return float(n)
    ac = ac / ac[0]
    total, k = 0.0, 1
    while k + 1 < n:
        pair = ac[k] + ac[k + 1]
        if pair <= 0:
            break
        total += pair
        k += 2
    return float(min(n, max(1.0, n / (1.0 + 2.0 * total))))


def calibrate_threshold(statistics: Any, target_arl: float, margin: float = 0.0) -> float:
    """A threshold whose mean time to the first crossing is about ``target_arl``.

    Method (Rice's formula for a stationary Gaussian process): on a no-change stretch of
    the statistic, take ``z = sqrt(g)``, its mean ``mu`` and standard deviation ``sigma``,
    and ``nu0``, the rate of up-crossings of ``mu`` per sample. The rate of up-crossings of
    a level ``u`` is then ``nu0 exp(-(u - mu)^2 / (2 sigma^2))``; a smooth stationary
    statistic with rare crossings first crosses after about ``1 / rate`` samples, so the
    level is ``u = mu + sigma sqrt(2 log(nu0 * target_arl))`` and the threshold ``u^2``.
    It extrapolates beyond the length of the stretch.

    The square root is there because distances are right-skewed (chi-like): fitted on ``g``
    itself the rule undershoots long targets (realised ARL ~600 for a target of 1000 on the
    SPD(8) Wishart stream), on ``log g`` it overshoots (~2300); on ``sqrt(g)`` it gave ~255
    for 200 and ~1000 for 1000 there (calibration stretch of 500 samples, 40 stretches).
    How well it hits its target is measured in ``benchmarks/results/riemannian.md``.

    The level is estimated from the stretch, so it is itself uncertain, and the more so the
    more dependent the statistics are (a statistic of overlapping windows: 500 values may be
    worth a few dozen independent ones). ``margin`` raises it by that many standard errors of
    its own estimate, ``se(u) = sigma sqrt((1 + r^2 / 2) / n_eff)`` with ``r = sqrt(2
    log(nu0 target_arl))`` and ``n_eff`` the stretch's :func:`effective_size` (the delta
    method for ``mu + sigma r``, with ``se(mu) = sigma / sqrt(n_eff)`` and ``se(sigma) =
    sigma / sqrt(2 n_eff)``), so that few streams get a threshold far below the target's.

    Parameters
    ----------
    statistics
        The statistic on a stretch without change (after the burn-in), at least 20 values.
    target_arl
        The wanted average run length (samples), > 1.
    margin
        Standard errors of the level added to it (>= 0; 0: the plain estimate).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> g = np.exp(np.convolve(rng.normal(size=5000), np.ones(20) / 20, mode="same"))
    >>> round(calibrate_threshold(g, 1000), 3)
    1.729
    """
    g = np.asarray(statistics, dtype=np.float64).ravel()
    if g.size < 20 or not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError("statistics must hold at least 20 finite values >= 0")
    if isinstance(target_arl, bool) or not isinstance(target_arl, (int, float)) \
            or not target_arl > 1:
        raise ValueError(f"target_arl must be a number > 1, got {target_arl!r}")
    z = np.sqrt(g)
    mu, sigma = float(z.mean()), float(z.std())
    if sigma == 0.0:
        return float(g[0])
    up = int(np.sum((z[:-1] < mu) & (z[1:] >= mu)))
    nu0 = max(up, 1) / (z.size - 1)
    q = nu0 * float(target_arl)
    r = math.sqrt(2.0 * math.log(q)) if q > 1 else 0.0
    u = mu + sigma * r
    if margin:
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0:
            raise ValueError(f"margin must be a number >= 0, got {margin!r}")
        u += margin * sigma * math.sqrt((1.0 + r * r / 2.0) / effective_size(z))
    return float(u * u)
