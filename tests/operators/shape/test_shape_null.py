"""The ``shape`` detector's threshold from the null of its scan statistic (issue 36, item 1):
the table is what ``benchmarks/shape_null.py`` derives, the false-alarm rate on a fresh null
is the stated one, young segments alarm no more often than old ones, and the fixed rule and
old states still work."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from shiftwatch.operators.shape import null
from shiftwatch.operators.shape.detector import ShapeDetector
from shiftwatch.operators.shape.operator import ShapeOperator
from shiftwatch.operators.state_codec import dumps_state, loads_state

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("shape_null",
                                                  ROOT / "benchmarks" / "shape_null.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_is_what_the_script_derives():
    S = _script()
    # the small version, bit for bit (the full one: `python benchmarks/shape_null.py table`)
    assert S.table(**S.CHECK)["c"] == null.CHECK_C
    assert (null.M, null.H, null.MAXB) == (list(S.M_GRID), list(S.H_GRID), S.MAXB)
    assert len(null.Q) == len(S.PERIODS) == len(null.C)
    for by_m in null.C:
        for m, by_h in zip(null.M, by_m, strict=True):
            assert len(by_h) == len(null.H)
            for curve in by_h:
                assert len(curve) == S.MAXB - 2 * m + 1
            # a smaller hazard never gives a lower full-window threshold
            full = [c[-1] for c in by_h]
            assert full == sorted(full, reverse=True)


def test_threshold_curve_interpolates_and_covers_every_window():
    c = null.threshold_curve(null.Q[1], 3, 50, null.H[2])
    assert len(c) == 51 and np.all(np.isinf(c[:6])) and np.all(np.isfinite(c[6:]))
    assert np.allclose(c[6:], null.C[1][1][2])
    lo = null.threshold_curve(null.Q[1], 3, 50, null.H[3])
    mid = null.threshold_curve(null.Q[1], 3, 50, np.sqrt(null.H[2] * null.H[3]))
    assert np.allclose(mid[6:], (c[6:] + lo[6:]) / 2)
    # a longer window keeps the full-window value; another min_blocks starts at 2 m
    long = null.threshold_curve(null.Q[1], 3, 80, null.H[2])
    assert len(long) == 81 and np.all(long[50:] == c[50])
    assert np.isfinite(null.threshold_curve(null.Q[1], 7, 60, null.H[2])[14])


def _first_alarm_blocks(name, P, runs, blocks, **params):
    """Blocks in the window at each stream's first alarm (None: none), the period given."""
    S = _script()
    out = []
    B = 2 * P
    for i in range(runs):
        det = ShapeDetector(period=P, **params)
        a = det.update_many(S.family(name, np.random.default_rng([99, P, i]), blocks * B + B,
                                     P))[0]
        pos = np.flatnonzero(a)
        # the scan over N blocks runs when block N ends; the alarm waits confirm=1 block
        out.append(int((pos[0] + 1) // B) - 1 if len(pos) else None)
    return out


def _hazard(first, lo, hi):
    """(first alarms, scans) over scans of windows of lo <= N < hi blocks."""
    events = sum(1 for f in first if f is not None and lo <= f < hi)
    exposure = sum(max(0, min(hi, f + 1 if f is not None else hi) - lo) for f in first)
    return events, exposure


def _young_excess(first):
    """Whether young windows (N = 6..11) see more first alarms than the old ones' (N =
    20..49) hazard explains: above its one-sided 99.9% Poisson bound."""
    ey, xy = _hazard(first, 6, 12)
    eo, xo = _hazard(first, 20, 50)
    assert xy > 1000 and xo > 1000 and eo > 50
    return ey > stats.poisson.ppf(0.999, eo / xo * xy), (ey, xy, eo, xo)


def test_young_segments_alarm_no_more_often_than_old_ones():
    # a resonance whose coherence outlasts a block (the table's heaviest family, period 9
    # which the table never saw): with the fixed threshold 6 the young windows' first-alarm
    # hazard exceeds the old ones' (94 in 1571 scans against 0.040 per scan, seeds fixed);
    # with the null's thresholds it does not
    excess, counts = _young_excess(_first_alarm_blocks("ar2_3", 9, 300, 50, threshold=6.0))
    assert excess, counts
    excess, counts = _young_excess(_first_alarm_blocks("ar2_3", 9, 300, 50, threshold="null"))
    assert not excess, counts


def test_false_alarm_rate_on_a_fresh_null():
    # the table's eight families at period 9 (a feature dimension between the table's) with
    # seeds it never saw: alarms per 100 periods, their mean over the families, is the stated
    # rate. 0.235 [0.216, 0.255] at 100 streams a family (benchmarks/results/shape.md): the
    # hazard is calibrated for fresh segments and the restart after a false alarm keeps
    # blocks the split chose, so allow the rate within [0.5, 1.5] x the target besides the
    # Monte Carlo (99.9% Poisson interval)
    S = _script()
    rate = ShapeDetector().false_alarms_per_100_periods
    alarms, periods = 0, 0.0
    for fi, name in enumerate(S.FAMILIES):
        k, _, per = S.null_alarms(name, 9, 1, 25, [11, 9, fi], rate)
        alarms, periods = alarms + k, periods + per
    lo = stats.chi2.ppf(0.0005, 2 * alarms) / 2 / periods if alarms else 0.0
    hi = stats.chi2.ppf(0.9995, 2 * alarms + 2) / 2 / periods
    assert hi >= 0.5 * rate and lo <= 1.5 * rate, (alarms / periods, lo, hi, rate)


def test_fixed_threshold_and_parameters():
    rng = np.random.default_rng(1)
    t = np.arange(3000)
    y = np.where(t < 1500, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    y = y + 0.3 * rng.normal(size=3000)
    det = ShapeDetector(threshold=6.0)
    a, ch, st, _ = det.update_many(y)
    assert [(int(i), int(ch[i])) for i in np.flatnonzero(a)] == [(1568, 1509)]
    assert np.all(det.thresholds[np.isfinite(det.thresholds)] == 6.0)
    assert np.all(det.threshold_curve() == 6.0)
    null_det = ShapeDetector(threshold="null")
    null_det.update_many(y)
    curve = null_det.threshold_curve()
    assert len(curve) == null_det.max_blocks + 1 and np.all(curve[6:] >= 1.0)
    # the statistic at an alarm is above the threshold reported beside it
    d = ShapeDetector(threshold="null")
    a, _, st, _ = d.update_many(y)
    assert a.sum() >= 1
    for i in np.flatnonzero(a):
        assert st[i] > d.thresholds[i] >= 1.0
    for bad in ("auto", -1.0, 0, True):
        with pytest.raises(ValueError, match="threshold"):
            ShapeDetector(threshold=bad)
    for bad in (0, -0.1, 100, "x"):
        with pytest.raises(ValueError, match="false_alarms_per_100_periods"):
            ShapeDetector(false_alarms_per_100_periods=bad)


def test_operator_reports_the_threshold_in_effect_and_restores_old_states():
    rng = np.random.default_rng(0)
    t = np.arange(2000)
    y = np.sin(2 * np.pi * t / 12) + 0.3 * rng.normal(size=2000)
    recs = [{"key": "k", "ts": float(i), "value": float(v)} for i, v in enumerate(y)]
    op = ShapeOperator(threshold="null")
    outs = op.process_batch(recs)
    thr = [o["threshold"] for o in outs]
    assert thr[0] is None and all(isinstance(h, float) and h >= 1.0 for h in thr[-100:])
    # a state saved before the null threshold (fst of 2 entries) still loads and runs
    st = loads_state(dumps_state(op.state_dict()))
    st["state"]["fst"] = st["state"]["fst"][:2]
    op2 = ShapeOperator(threshold="null")
    op2.load_state_dict(st)
    assert len(op2.process_batch(recs[:50])) == 50
