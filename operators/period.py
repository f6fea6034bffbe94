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
  long burn-in; a weakly periodic one waits for ``b_max``. The ``embed`` operator's rule
  (``shape`` used it before issue 36 item 2).
* :func:`time_scale_rule` -- the ``shape`` detector's rule (issue 36 item 2), per channel:

  1. **Clear period** at a checkpoint n = ``b_min``, 2 ``b_min``, ..., ``b_max``: the
     periodogram's dominant period (:func:`dominant_period`: the largest power of the
     standardised periodogram over periods ``[p_min, n/4]``, confirmed and refined by the
     highest ACF local maximum within that frequency bin, after the first zero crossing, with
     ACF >= ``min_acf``; rule ``"fft"``); else the first ACF peak after the first zero
     crossing if it is as clear (ACF >= ``min_acf``; rule ``"acf"``). Both need
     ``p_min <= P < n/4``. The stream's period is fixed at the first checkpoint where any
     channel has one: the median over those channels.
  2. **An edge is not a period.** A peak at the upper end of the range (``P = n/4``, the
     longest period the burn-in holds four times) means the ACF or the periodogram is still
     rising past the range: red noise, a trend or a cycle longer than the range.
  3. At ``b_max``, with no clear period in any channel, a scalar stream takes its first ACF
     peak whatever its height (``"acf-weak"``: TSSB's weakly periodic series need it) unless
     it is at the edge, there is none, or the spectrum is red (:func:`red_spectrum`: the
     periodogram's largest power within ``[p_min, n/4]`` at the range's longest period; the
     weak "peak" is then a wiggle of slowly decaying autocorrelation). A multichannel stream
     with no clear channel has no period.
  4. **No period -> a short scale**: ``P = NO_PERIOD = 16`` records (rule ``"none"``; blocks
     of 2P = 32 records resolve segments of >= 96 records with ``min_blocks = 3``), not the
     longest allowed one (96: blocks of 192, segments of >= 576 records).

  Chosen on the development data (``tssb-dev.json``, ``mocap6.json``: best mean covering over
  their 31 series among pre-declared variants, with an edge peak not a period, a short scale
  without one, and alarms on a synthetic bee-dance-like red-noise series as constraints;
  ``benchmarks/results/shape.md``, section "Time-scale rule (issue 36 item 2)"). The
  no-period scale 16 was the best of {4, 8, 16} there (8 and 4 alarm 20-24 times on the
  change-free DodgerLoopDay); at the default threshold 6, 4 also gives 4.6-7.3 false alarms
  per 10,000 records of stationary white or AR(1) noise, 8 at most 1.0 and 16 at most 0.1.
  The dominant frequency checked only by the ACF's value at P (not by an ACF peak there)
  called red noise periodic (its ACF at a short lag exceeds any fixed threshold) and lost on
  the development data.
* :func:`embed_params` -- the delay embedding covers ``span`` periods with at most ``dmax``
  coordinates: lag ``tau = ceil(span * P / dmax)``, ``d = ceil(span * P / tau)``. The SPD
  dimension stays <= dmax however long the period is (decimation by the lag).

Only NumPy; these run once per key at the end of the burn-in.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["acf", "acf_period", "progressive_period", "checkpoints", "embed_params",
           "dominant_period", "red_spectrum", "time_scale_rule", "NO_PERIOD"]

#: The scale (records) taken when a stream has no period (:func:`time_scale_rule`).
NO_PERIOD = 16


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


def red_spectrum(x: np.ndarray, p_min: int, p_max: int) -> bool:
    """True when the periodogram of ``x`` (standardised) has its largest power within the
    periods ``[p_min, p_max]`` at the longest of them (or no power there): no period in the
    range, the power rises towards longer ones.

    >>> t = np.arange(384)
    >>> red_spectrum(np.sin(2 * np.pi * t / 24), 4, 96)
    False
    >>> red_spectrum(np.sin(2 * np.pi * t / 200), 4, 96)  # a cycle longer than the range
    True
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    sd = x.std()
    power = np.abs(np.fft.rfft((x - x.mean()) / (sd if sd > 0 else 1.0))) ** 2
    k = np.arange(len(power))
    per = n / np.maximum(k, 1)
    ok = (k > 0) & (per >= p_min) & (per <= p_max)
    if not ok.any() or power[ok].max() <= 0:
        return True
    return bool(np.argmax(np.where(ok, power, -1.0)) == np.flatnonzero(ok).min())


def _clear_peak(y: np.ndarray, p_min: int, min_acf: float) -> tuple[int | None, float]:
    """The first ACF peak of ``y`` strictly inside ``[p_min, len(y) // 4)`` and its ACF."""
    pmax = len(y) // 4
    r = acf(y, pmax + 1)
    j = _first_peak(r, p_min)
    if j is None or j >= pmax:  # none, or at the edge of the range: not a period
        return None, 0.0
    return int(j), float(r[j])


def dominant_period(y: np.ndarray, p_min: int, min_acf: float) -> int | None:
    """The period of the periodogram's largest power within ``[p_min, len(y) // 4]``,
    confirmed by the autocorrelation: the highest ACF local maximum within the frequency
    bin's width (periods ``n / (k + 1/2) .. n / (k - 1/2)``), after the first zero crossing,
    below ``len(y) // 4`` and with ACF >= ``min_acf``; None when there is none or the largest
    power is at the range's longest period (an edge is not a period).

    Two sines: the larger one's period, where the first ACF peak (:func:`acf_period`) is
    elsewhere:

    >>> t = np.arange(384)
    >>> y = 2 * np.sin(2 * np.pi * t / 30) + np.sin(2 * np.pi * t / 6)
    >>> dominant_period(y, 4, 0.3), acf_period(y)
    (30, 25)
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    pmax = n // 4
    sd = y.std()
    power = np.abs(np.fft.rfft((y - y.mean()) / (sd if sd > 0 else 1.0))) ** 2
    k = np.arange(len(power))
    per = n / np.maximum(k, 1)
    ok = (k > 0) & (per >= p_min) & (per <= pmax)
    if not ok.any() or power[ok].max() <= 0:
        return None
    kk = int(np.argmax(np.where(ok, power, -1.0)))
    if kk == np.flatnonzero(ok).min():
        return None
    r = acf(y, pmax + 1)
    neg = np.nonzero(r[1:] < 0)[0]
    if not len(neg):
        return None
    lo = max(p_min, math.ceil(n / (kk + 0.5)), int(neg[0]) + 2)
    hi = min(pmax - 1, math.floor(n / (kk - 0.5)))
    best = None
    for j in range(lo, hi + 1):
        if r[j] >= r[j - 1] and r[j] >= r[j + 1] and r[j] >= min_acf \
                and (best is None or r[j] > r[best]):
            best = j
    return best


def time_scale_rule(burn: np.ndarray, b_min: int = 64, b_max: int = 384, p_min: int = 4,
                    min_acf: float = 0.3) -> dict | None:
    """The ``shape`` detector's time scale from the burn-in ``burn`` ((n,) or (n, c)): a dict
    ``{"period", "rule", "at"}`` (rule ``"fft"``, ``"acf"``, ``"acf-weak"`` or ``"none"``;
    ``at``: the burn-in length that decided; with several channels the rule most of those
    with a clear period followed), or None while undecided (call again with more data). See
    the module docstring.

    >>> t = np.arange(400)
    >>> time_scale_rule(np.sin(2 * np.pi * t / 12))
    {'period': 12, 'rule': 'fft', 'at': 64}
    >>> red = np.cumsum(np.random.default_rng(0).normal(size=400))
    >>> time_scale_rule(red)
    {'period': 16, 'rule': 'none', 'at': 384}
    """
    x = np.asarray(burn, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    for n in checkpoints(b_min, b_max):
        if len(x) < n:
            return None
        found, rules = [], []
        for ch in range(x.shape[1]):
            j = dominant_period(x[:n, ch], p_min, min_acf)
            if j is not None:
                found.append(j)
                rules.append("fft")
                continue
            j, r = _clear_peak(x[:n, ch], p_min, min_acf)
            if j is not None and r >= min_acf:
                found.append(j)
                rules.append("acf")
        if found:
            rule = "fft" if 2 * rules.count("fft") >= len(rules) else "acf"
            return {"period": int(np.median(found)), "rule": rule, "at": n}
    y = x[:b_max, 0]
    if x.shape[1] == 1:
        j, _ = _clear_peak(y, p_min, min_acf)
        if j is not None and not red_spectrum(y, p_min, b_max // 4):
            return {"period": j, "rule": "acf-weak", "at": b_max}
    return {"period": max(NO_PERIOD, p_min), "rule": "none", "at": b_max}


def checkpoints(b_min: int, b_max: int) -> list[int]:
    """The burn-in lengths at which :func:`progressive_period` and :func:`time_scale_rule`
    decide."""
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
