"""The per-key chart data of report.html in compiled loops (:mod:`~shiftwatch.sinks.html_report`).

A run's page holds, for every listed key, its series reduced to a budget of values and coded
in two characters per value: at 10,000 keys, NumPy's per-call costs over a few hundred
values a key made most of the report's time. :func:`reduce_rows` and :func:`encode_rows`
are those two steps as loops over each key's arrays, giving what the NumPy expressions they
replace give (the tests keep those as the oracle): the same buckets, the same first minimum
and maximum of each, the same codes.
"""

from __future__ import annotations

import numpy as np

from shiftwatch._jit import njit

__all__ = ["reduce_rows", "encode_rows"]


@njit(cache=True)
def reduce_rows(values, buckets, w):  # pragma: no cover - compiled
    """Each row of ``values`` (channels x n) as the minimum and the maximum of each bucket of
    ``w`` positions (``buckets`` of them, the last padded with NaN), in the order they occur
    (the minimum first when it comes first or at the same place); a bucket without a finite
    value gives its first value twice. An array (channels, 2 buckets)."""
    c, n = values.shape
    out = np.empty((c, 2 * buckets))
    for r in range(c):
        for b in range(buckets):
            lo = b * w
            i_min = -1
            i_max = -1
            v_min = np.inf
            v_max = -np.inf
            for i in range(lo, lo + w):
                x = values[r, i] if i < n else np.nan
                if np.isfinite(x):
                    if i_min < 0 or x < v_min:
                        v_min, i_min = x, i
                    if i_max < 0 or x > v_max:
                        v_max, i_max = x, i
            if i_min < 0:  # (no finite value: NumPy's argmin/argmax of all-inf is 0)
                first = values[r, lo] if lo < n else np.nan
                out[r, 2 * b] = first
                out[r, 2 * b + 1] = first
            elif i_min <= i_max:
                out[r, 2 * b] = v_min
                out[r, 2 * b + 1] = v_max
            else:
                out[r, 2 * b] = v_max
                out[r, 2 * b + 1] = v_min
    return out


@njit(cache=True)
def encode_rows(y, levels, codes):  # pragma: no cover - compiled
    """Each row of ``y`` coded as ``lo + (hi - lo) code / levels`` (``lo``, ``hi`` the row's
    finite extremes, 0 when none), ``code`` the rounded (half to even) scaled value, or
    ``levels + 1`` for a value that is not finite; two characters of ``codes`` (64 of them)
    per value. Returns ``(lo, hi, chars)``, ``chars`` uint8 (rows, 2 n)."""
    c, n = y.shape
    lo = np.zeros(c)
    hi = np.zeros(c)
    chars = np.empty((c, 2 * n), dtype=np.uint8)
    for r in range(c):
        has = False
        a = np.inf
        b = -np.inf
        for i in range(n):
            x = y[r, i]
            if np.isfinite(x):
                has = True
                if x < a:
                    a = x
                if x > b:
                    b = x
        if not has:
            a = 0.0
            b = 0.0
        lo[r] = a
        hi[r] = b
        span = b - a
        for i in range(n):
            x = y[r, i]
            if np.isfinite(x):
                scaled = (x - a) / span if span > 0 else 0.0
                code = np.int64(np.rint(scaled * levels))
            else:
                code = levels + 1
            chars[r, 2 * i] = codes[code >> 6]
            chars[r, 2 * i + 1] = codes[code & 63]
    return lo, hi, chars
