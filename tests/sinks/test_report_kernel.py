"""report.html's chart data in compiled loops (sinks/report_kernel.py) equals the NumPy
expressions they replaced (kept in sinks/html_report.py as ``_reduce_numpy`` and
``_encode_rows_numpy``), on random series with gaps, infinities, constants and ties."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.sinks import html_report as h


def _series(rng, n):
    col = rng.normal(rng.normal(0.0, 100.0), rng.uniform(1e-3, 10.0), n)
    k = rng.random()
    if k < 0.3:
        col[rng.random(n) < 0.2] = np.nan
    if k < 0.1:
        col[rng.random(n) < 0.05] = np.inf
    if k < 0.05:
        col[rng.random(n) < 0.05] = -np.inf
    if 0.3 < k < 0.35:
        col[:] = np.nan
    if 0.35 < k < 0.4:
        col[:] = 3.0
    if 0.4 < k < 0.5:
        col[:] = np.round(col / 10.0)  # (ties within buckets)
    return col


@pytest.mark.parametrize("seed", range(4))
def test_reduce_and_encode_equal_numpy(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        c, n = int(rng.integers(1, 4)), int(rng.integers(1, 3000))
        cols = [_series(rng, n) for _ in range(c)]
        budget = int(rng.choice([48, 200, 1000, 4000, 20000]))
        assert h._reduce(cols, budget) == h._reduce_numpy(cols, budget)
        y = np.vstack(cols)
        assert h._encode_rows(y) == h._encode_rows_numpy(y)


def test_the_kernel_is_what_the_page_uses():
    """(A reduced series: the minimum and maximum of each bucket, in their order.)"""
    y = np.array([5.0, 1.0, 9.0, 2.0, np.nan, np.nan, 4.0, 3.0])
    got = h._reduce([y], 4)  # 4 values: 2 buckets of 4 positions
    assert got["n"] == 8 and got["w"] == 4
    assert got == h._reduce_numpy([y], 4)
    assert h.encode_values(np.array([0.0, 0.5, 1.0, np.nan]))["q"] == "AAf__-__"
