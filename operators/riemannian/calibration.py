"""The ``calibrated`` threshold of
:class:`~shiftwatch.operators.riemannian.karcher.KarcherDetector`: a level whose mean time
to the first crossing is a target (Rice's formula)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["calibrate_threshold"]


def calibrate_threshold(statistics: Any, target_arl: float) -> float:
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

    Parameters
    ----------
    statistics
        The statistic on a stretch without change (after the burn-in), at least 20 values.
    target_arl
        The wanted average run length (samples), > 1.

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
    u = mu + sigma * math.sqrt(2.0 * math.log(q)) if q > 1 else mu
    return float(u * u)
