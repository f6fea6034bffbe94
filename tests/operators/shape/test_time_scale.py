"""The shape detector's time-scale rule (issue 36 item 2, ``operators/period.py``
``time_scale_rule``): the dominant frequency confirmed by the ACF, an edge peak is not a
period, no period -> the short scale ``NO_PERIOD`` (not the longest one), the rule reported by
``time_scale`` and kept in the state, and alarms on a bee-dance-like red-noise series where
the previous rule (the first ACF peak, periodogram fallback) left ``shape`` silent."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from shiftwatch.operators.period import (
    NO_PERIOD,
    _clear_peak,
    dominant_period,
    progressive_period,
    time_scale_rule,
)
from shiftwatch.operators.shape.detector import ShapeDetector
from shiftwatch.operators.state_codec import dumps_state, loads_state


def _synthetic():
    """The seeded generators of ``benchmarks/time_scale_synthetic.py`` (one copy)."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "time_scale_synthetic.py"
    spec = importlib.util.spec_from_file_location("time_scale_synthetic", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SYN = _synthetic()
ar1, bee_dance_like = _SYN.ar1, _SYN.bee_dance_like


def test_dominant_frequency_on_sines():
    t = np.arange(384)
    for period in (6, 13, 40, 70):
        for seed in range(3):
            y = np.sin(2 * np.pi * t / period) + 0.2 * np.random.default_rng(seed).normal(size=384)
            p = dominant_period(y, 4, 0.3)
            assert p is not None and abs(p - period) <= max(1, 0.03 * period), (period, p)
    # a sum of sines: the larger one's period, where the first ACF peak is elsewhere
    y = 2 * np.sin(2 * np.pi * t / 30) + np.sin(2 * np.pi * t / 6)
    assert dominant_period(y, 4, 0.3) == 30
    assert _clear_peak(y, 4, 0.3)[0] == 25
    # a harmonic does not pull it to the shorter period
    harmonic = np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 8)
    assert dominant_period(harmonic, 4, 0.3) == 24
    # red noise has no dominant period confirmed by an ACF peak
    assert sum(dominant_period(ar1(384, 1, 0.95, s), 4, 0.3) is not None for s in range(20)) <= 2


def test_an_edge_peak_is_not_a_period():
    # a cycle of exactly n/4 = 96 records, and one longer than the range: the previous rule
    # took 96 (the edge), the new one has no period and takes the short scale
    t = np.arange(400)
    rng = np.random.default_rng(0)
    for period in (96, 200):
        y = np.sin(2 * np.pi * t / period) + 0.1 * rng.normal(size=400)
        assert progressive_period(y) == (96, 384)
        assert time_scale_rule(y) == {"period": NO_PERIOD, "rule": "none", "at": 384}
    assert NO_PERIOD < 96 // 4


def test_clear_periods_lock_early_and_say_how():
    t = np.arange(400)
    assert time_scale_rule(np.sin(2 * np.pi * t / 12)) == {"period": 12, "rule": "fft", "at": 64}
    assert time_scale_rule(np.sin(2 * np.pi * t / 12)[:63]) is None  # wait for 64 records
    det = ShapeDetector()
    det.update_many(np.sin(2 * np.pi * t / 12) + 0.1 * np.random.default_rng(2).normal(size=400))
    assert det.time_scale == {"period": 12, "d": 12, "tau": 1, "block": 24, "rule": "fft",
                              "at": 64}
    given = ShapeDetector(period=7)
    given.update_many(np.zeros(100) + np.sin(np.arange(100)))
    assert given.time_scale["rule"] == "given" and given.time_scale["period"] == 7


def test_red_noise_gets_a_short_scale():
    # univariate AR(1) 0.99: no period (the spectrum rises past the range), the short scale
    rules = [time_scale_rule(ar1(400, 1, 0.99, s)) for s in range(10)]
    assert sum(r["rule"] == "none" and r["period"] == NO_PERIOD for r in rules) >= 9, rules
    # three AR(1) 0.95 channels: no channel has a clear period -> no period, whatever weak
    # wiggles single channels show; the previous rule took 55-96 here
    for seed in range(5):
        x = ar1(400, 3, 0.95, seed)
        assert time_scale_rule(x) == {"period": NO_PERIOD, "rule": "none", "at": 384}
        det = ShapeDetector()
        det.update_many(x)
        assert det.time_scale["block"] == 2 * NO_PERIOD  # not 2 * 96


def test_shape_alarms_on_a_bee_dance_like_series():
    # 3 red-noise channels whose level, scale or AR coefficient change every 60-120 records:
    # the previous rule's period (55-96, taken here as a given period) left shape silent on
    # every seed (6 blocks of 2P outlast the segments); the short scale (segments >= 96
    # records resolvable) alarms on most seeds
    def alarms(lo, hi, n):
        new, old, rules = [], [], []
        for seed in range(8):
            y, _ = bee_dance_like(seed, n=n, lo=lo, hi=hi)
            found = [progressive_period(y[:, ch]) for ch in range(3)]
            prev = ShapeDetector(period=int(np.median([p for p, _ in found])), burn_in_min=384)
            old.append(int(prev.update_many(y)[0].sum()))
            det = ShapeDetector()
            new.append(int(det.update_many(y)[0].sum()))
            rules.append(det.time_scale["rule"])
        return new, old, rules

    new, old, rules = alarms(60, 120, 1100)
    assert rules == ["none"] * 8, rules
    assert sum(old) == 0 and sum(a > 0 for a in new) >= 6, (new, old)
    # the bee dance's shortest segments (20-30 records) are below what blocks of 32 records
    # resolve: still some alarms where there were none
    new, old, _ = alarms(20, 30, 900)
    assert sum(old) == 0 and sum(a > 0 for a in new) >= 1, (new, old)


def test_the_rule_is_kept_in_the_state():
    t = np.arange(600)
    y = np.sin(2 * np.pi * t / 20) + 0.1 * np.random.default_rng(3).normal(size=600)
    a = ShapeDetector()
    a.update_many(y[:300])
    b = ShapeDetector()
    b.load_state_dict(loads_state(dumps_state(a.state_dict())))
    assert b.time_scale == a.time_scale and a.time_scale["rule"] == "fft"
    old = {k: v for k, v in a.state_dict().items() if k not in ("rule", "at")}
    c = ShapeDetector()
    c.load_state_dict(old)  # a state from before the rule was recorded
    assert c.time_scale["period"] == 20 and c.time_scale["rule"] is None
    assert np.array_equal(b.update_many(y[300:])[0], c.update_many(y[300:])[0])
