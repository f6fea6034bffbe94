"""``shape(asymmetry=True)``: the time-asymmetry scan beside the covariance (an option; the
decision to keep it off is in benchmarks/results/shape.md)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from shiftwatch.operators.shape import kernels as K
from shiftwatch.operators.shape.detector import ShapeDetector
from shiftwatch.operators.state_codec import dumps_state, loads_state


def reversed_sawtooth(n: int = 3000, at: int = 1500, seed: int = 1) -> np.ndarray:
    """A sawtooth (slow rise, sudden drop) that turns into its time reversal at ``at``:
    the same autocovariance, so the covariance scan cannot see it."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < at, signal.sawtooth(2 * np.pi * t / 20),
                 signal.sawtooth(2 * np.pi * t / 20, width=0))
    return y + 0.1 * rng.normal(size=n)


def test_the_covariance_cannot_see_a_time_reversal_and_the_asymmetry_scan_can():
    y = reversed_sawtooth()
    a0 = ShapeDetector().update_many(y)[0]
    det = ShapeDetector(asymmetry=True)
    a1, c1, _, _ = det.update_many(y)
    assert a0.sum() == 0
    assert det.thresholds[-1] == pytest.approx(6.5)  # 6 x 13/12 where both scans run
    B = det.time_scale["block"]
    # the scan's block boundary may be a block off (the straddling block on either side),
    # beyond the refinement's +-1 block reach
    assert any(abs(int(c1[i]) - 1500) <= 2 * B for i in np.flatnonzero(a1))


def test_the_skew_feature_equals_numpy():
    rng = np.random.default_rng(2)
    c, d, tau, B = 2, 4, 3, 40
    ring = rng.gamma(2.0, size=(B + (d - 1) * tau, c))
    a23 = np.zeros((2, c, d))
    for p in range((d - 1) * tau, len(ring)):
        for ch in range(c):
            for j in range(1, d):
                inc = ring[p, ch] - ring[p - j * tau, ch]
                a23[0, ch, j] += inc * inc
                a23[1, ch, j] += inc ** 3
    out = np.zeros(c * (d - 1))
    K._skew_feature(a23, d, float(B), out)
    want = []
    for ch in range(c):
        for j in range(1, d):
            inc = ring[(d - 1) * tau:, ch] - ring[(d - 1) * tau - j * tau:len(ring) - j * tau, ch]
            want.append(np.mean(inc ** 3) / np.mean(inc ** 2) ** 1.5)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    assert not a23.any()  # the sums reset for the next block


@pytest.mark.parametrize("cut", [100, 777, 1510, 2222])
def test_cutting_anywhere_and_restoring_gives_the_same_alarms(cut):
    y = reversed_sawtooth(seed=3)
    whole = ShapeDetector(asymmetry=True).update_many(y)
    first = ShapeDetector(asymmetry=True)
    head = first.update_many(y[:cut])
    second = ShapeDetector(asymmetry=True)
    second.load_state_dict(loads_state(dumps_state(first.state_dict())))
    tail = second.update_many(y[cut:])
    for w, h, t in zip(whole[:3], head[:3], tail[:3], strict=True):
        np.testing.assert_array_equal(w, np.concatenate([h, t]))


def test_a_state_from_before_the_asymmetry_scan_loads_and_runs_as_before():
    y = reversed_sawtooth(seed=4)
    det = ShapeDetector()
    det.update_many(y[:1000])
    old = det.state_dict()
    old.pop("a23")
    old.pop("feats2")
    old["ist"] = old["ist"][:7]
    again = ShapeDetector()
    again.load_state_dict(old)
    a, c, z, _ = again.update_many(y[1000:])
    b, d_, w, _ = det.update_many(y[1000:])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(z, w)


def test_no_embedding_no_second_scan():
    rng = np.random.default_rng(5)
    y = rng.normal(size=(800, 12))
    det = ShapeDetector(asymmetry=True)
    det.update_many(y)
    assert det.time_scale["d"] == 1 and det.state_dict()["feats2"].shape[1] == 0


def test_refine_skew_finds_a_time_reversal_inside_its_reach():
    from shiftwatch.operators.shape.kernels import refine_skew

    y = reversed_sawtooth(n=400, at=230, seed=6)[:, None]
    R = len(y)
    for lo, hi in ((150, 310), (200, 260), (100, 400)):
        s = refine_skew(y, R, lo, hi, 10, 2, 10)
        assert abs(s - 230) <= 6, (lo, hi, s)
    assert refine_skew(y, R, 200, 215, 10, 2, 10) == -1  # too short for two sides


def test_the_reported_threshold_is_the_one_compared():
    from shiftwatch.operators import create

    y = reversed_sawtooth(seed=7)
    outs = create("shape", asymmetry=True).process_batch(
        [{"ts": i, "value": float(v)} for i, v in enumerate(y)])
    assert outs[0]["threshold"] == 6.0 and outs[-1]["threshold"] == pytest.approx(6.5)
    plain = create("shape").process_batch([{"ts": i, "value": float(v)}
                                           for i, v in enumerate(y)])
    assert {o["threshold"] for o in plain} == {6.0}


def test_asymmetry_is_checked():
    with pytest.raises(ValueError, match="asymmetry must be true or false"):
        ShapeDetector(asymmetry="yes")
