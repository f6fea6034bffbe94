"""``shape(dependence="lag1")``: the scan's scale for dependent blocks (an option; the
decision to keep ``"none"`` is in benchmarks/results/shape.md)."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators.shape import kernels as K
from shiftwatch.operators.shape.detector import ShapeDetector


def _lag1_numpy(x: np.ndarray, k: int) -> float:
    sides = [x[:k] - x[:k].mean(0), x[k:] - x[k:].mean(0)]
    num = sum(float((s[:-1] * s[1:]).sum()) for s in sides)
    den = sum(float((s * s).sum()) for s in sides)
    return num / den


@pytest.mark.parametrize("seed", range(5))
def test_the_within_side_lag1_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(20, 7))
    x[1:] += 0.6 * x[:-1]
    x[11:] += 2.0
    for k in (3, 10, 11, 17):
        assert K.lag1_within(x, 20, k) == pytest.approx(_lag1_numpy(x, k), rel=1e-12)


def test_dependent_blocks_lower_z_and_independent_ones_leave_it():
    rng = np.random.default_rng(3)
    e = rng.normal(size=(40, 5))
    ar = np.empty_like(e)
    ar[0] = e[0]
    for i in range(1, 40):
        ar[i] = 0.8 * ar[i - 1] + e[i]
    for x, lowered in ((ar, True), (e, False)):
        k0, z0 = K.zscan(x, 40, 3, 0.01, 0)
        k1, z1 = K.zscan(x, 40, 3, 0.01, 1)
        assert k0 == k1
        rho = min(max(_lag1_numpy(x, k0), 0.0), 0.9)
        assert z1 == pytest.approx(z0 * (1 - rho) / (1 + rho), rel=1e-12)
        assert (z1 < z0 * 0.5) if lowered else (z1 >= z0 * 0.8)


def test_lag1_is_never_more_sensitive_and_still_finds_a_change():
    rng = np.random.default_rng(4)
    t = np.arange(6000)
    y = np.sin(2 * np.pi * t / 12) * np.where(t < 3000, 1.0, 1.6) + 0.4 * rng.normal(size=6000)
    a0, c0, z0, _ = ShapeDetector().update_many(y)
    a1, c1, z1, _ = ShapeDetector(dependence="lag1").update_many(y)
    first = int(np.flatnonzero(a0)[0])  # the same blocks until the first alarm
    assert np.all(z1[:first] <= z0[:first] + 1e-12)
    assert not a1[:first].any()
    assert any(abs(int(c1[i]) - 3000) <= 24 for i in np.flatnonzero(a1))


def test_dependence_is_checked():
    with pytest.raises(ValueError, match="dependence must be one of"):
        ShapeDetector(dependence="ar1")
