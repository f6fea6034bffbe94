"""Choosing a time scale from a burn-in prefix: the dominant period and the delay embedding.

Ground floor (NumPy only): used by ``embed`` (:mod:`shiftwatch.operators.embed`) and the
``shape`` detector (:mod:`shiftwatch.operators.shape`).

Rules (stated, not tuned per series):

* :func:`acf_period` -- the first local maximum of the sample autocorrelation after its first
  zero crossing, with ``p_min <= P <= len(burn) // 4`` (so that the burn-in holds >= 4
  periods); if there is none, the periodogram's peak in the same range (ClaSP chooses its
  width from the dominant frequency in the same spirit); if that is empty too, ``p_min``.
* :func:`progressive_period` -- the burn-in doubles from ``b_min`` to ``b_max`` records; at
  each size it accepts the first ACF peak if it is a clear one (autocorrelation >=
  ``min_acf``) within ``n // 4``; at ``b_max`` it takes :func:`acf_period`. A clearly periodic
  stream locks its period after 64 or 128 records, so short streams are not silenced by a
  long burn-in; a weakly periodic one waits for ``b_max``.
* :func:`embed_params` -- the delay embedding covers ``span`` periods with at most ``dmax``
  coordinates: lag ``tau = ceil(span * P / dmax)``, ``d = ceil(span * P / tau)``. The SPD
  dimension stays <= dmax however long the period is (decimation by the lag).

Only NumPy; these run once per key at the end of the burn-in.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["acf", "acf_period", "progressive_period", "checkpoints", "embed_params"]


def acf(x: np.ndarray, maxlag: int) -> np.ndarray:
    """Sample autocorrelation of ``x`` at lags 0..maxlag (FFT, biased estimator).

    For a 2-D ``x`` (one column per channel) the pooled autocorrelation: the mean of the
    channels' autocorrelations (non-constant channels only), i.e. the normalised trace of
    the autocovariance of the standardised vector series."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    x = x - x.mean(axis=0)
    n = len(x)
    maxlag = int(min(maxlag, n - 1))
    f = np.fft.rfft(x, 2 * n, axis=0)
    r = np.fft.irfft(f * np.conj(f), axis=0)[: maxlag + 1]
    ok = r[0] > 0
    if not ok.any():
        return np.zeros(maxlag + 1)
    return (r[:, ok] / r[0, ok]).mean(axis=1)


def _first_peak(r: np.ndarray, p_min: int) -> int | None:
    neg = np.nonzero(r[1:] < 0)[0]
    if not len(neg):
        return None
    z = int(neg[0]) + 1
    for j in range(max(z + 1, p_min), len(r) - 1):
        if r[j] >= r[j - 1] and r[j] >= r[j + 1] and r[j] > 0:
            return j
    return None


def acf_period(burn: np.ndarray, p_min: int = 4, p_max: int | None = None) -> int:
    """The dominant period of ``burn`` (see the module docstring).

    >>> t = np.arange(400)
    >>> acf_period(np.sin(2 * np.pi * t / 25))
    25
    """
    burn = np.asarray(burn, dtype=np.float64)
    n = len(burn)
    p_max = max(p_min, int(p_max if p_max is not None else n // 4))
    if n >= 2 * p_min + 2:
        j = _first_peak(acf(burn, p_max + 1), p_min)
        if j is not None and j <= p_max:
            return int(j)
        x = burn.reshape(n, -1)
        sd = x.std(axis=0)
        x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        power = (np.abs(np.fft.rfft(x, axis=0)) ** 2).sum(axis=1)
        freq = np.fft.rfftfreq(n)
        per = np.where(freq > 0, 1.0 / np.maximum(freq, 1e-300), np.inf)
        ok = (per >= p_min) & (per <= p_max)
        if ok.any() and power[ok].max() > 0:
            return int(round(per[np.argmax(np.where(ok, power, -1.0))]))
    return int(p_min)


def progressive_period(y: np.ndarray, b_min: int = 64, b_max: int = 384, p_min: int = 4,
                       min_acf: float = 0.3) -> tuple[int, int] | None:
    """``(P, n)``: the period and the burn-in length that fixed it, or None if ``y`` is
    shorter than needed so far (call again with more data).

    Checks at n = b_min, 2 b_min, 4 b_min, ... (< b_max), then at b_max.
    """
    y = np.asarray(y, dtype=np.float64)
    n = b_min
    while n < b_max:
        if len(y) < n:
            return None
        r = acf(y[:n], n // 4 + 1)
        j = _first_peak(r, p_min)
        if j is not None and j <= n // 4 and r[j] >= min_acf:
            return int(j), n
        n *= 2
    if len(y) < b_max:
        return None
    return acf_period(y[:b_max], p_min, b_max // 4), b_max


def checkpoints(b_min: int, b_max: int) -> list[int]:
    """The burn-in lengths at which :func:`progressive_period` decides."""
    out, n = [], b_min
    while n < b_max:
        out.append(n)
        n *= 2
    return out + [b_max]


def embed_params(period: int, span: float = 1.0, dmax: int = 16) -> tuple[int, int]:
    """``(d, tau)``: <= dmax coordinates, lag tau, covering about span * period values."""
    length = max(2, int(round(span * period)))
    tau = max(1, math.ceil(length / dmax))
    d = max(2, math.ceil(length / tau))
    return d, tau
