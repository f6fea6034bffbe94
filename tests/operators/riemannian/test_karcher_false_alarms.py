"""The default threshold's false-alarm rate on change-free input is the documented one
(issue 36, item 6; the Monte Carlo with intervals: benchmarks/defaults/karcher_arl.py,
benchmarks/results/defaults.md)."""

import numpy as np

from shiftwatch.operators.riemannian.karcher import KarcherDetector

HORIZON = 4000  # monitored samples per run (censored there)


def window_covariances(x: np.ndarray, w: int) -> np.ndarray:
    # window_covariance's formula (shrinkage 0.1, min_eig 1e-6) for every full window
    v = np.lib.stride_tricks.sliding_window_view(x, w, axis=0)
    c = v - v.mean(axis=2, keepdims=True)
    s = c @ c.transpose(0, 2, 1) / (w - 1)
    d = x.shape[1]
    tr = np.trace(s, axis1=1, axis2=2)[:, None, None]
    s = 0.9 * s + (0.1 * tr / d + 1e-6) * np.eye(d)
    return np.ascontiguousarray(0.5 * (s + s.transpose(0, 2, 1)))


def monitored_run_lengths(runs: int = 20, **params) -> np.ndarray:
    """Samples from the first one that may alarm to the first alarm (censored at HORIZON),
    on 3 independent N(0, 1) channels through window_covariance window=20 (the issue's
    chain)."""
    out = []
    for r in range(runs):
        det = KarcherDetector("spd", **params)
        dead = det.burn_in_length + (det.calibration if det.threshold == "calibrated" else 0)
        rng = np.random.default_rng(500 + r)
        xs = window_covariances(rng.normal(size=(dead + HORIZON + 19, 3)), 20)
        _, alarms, _ = det.update_many(xs, stop_at_alarm=True)
        out.append(len(alarms) - dead if alarms[-1] else HORIZON)
    return np.array(out)


def test_default_threshold_is_calibrated_for_the_documented_run_length():
    det = KarcherDetector()
    assert det.threshold == "calibrated" and det.target_arl == 1000
    # The run length's mean over 20 runs (censored at 4,000, so a lower bound) is at least
    # half the target: the calibrated default gives ~2,000 (benchmarks/results/defaults.md),
    # the authors' adaptive rule ~150 on this input (the default before issue 36).
    rl = monitored_run_lengths()
    assert rl.mean() >= 0.5 * det.target_arl, rl


def long_run(margin: float, streams: int = 40, length: int = 6000) -> tuple[float, int]:
    """Pooled monitored run length (monitored records / false alarms) of change-free
    streams with resets, and how many streams alarmed more than twice the documented rate:
    what a user sees in a long run (issue 48, item 6)."""
    alarms = monitored = over = 0
    for r in range(streams):
        det = KarcherDetector("spd", calibration_margin=margin)
        rng = np.random.default_rng(7000 + r)
        xs = window_covariances(rng.normal(size=(length + 19, 3)), 20)
        _, al, _ = det.update_many(xs)
        m = length - det.burn_in_length - det.calibration
        a = int(np.sum(al))
        alarms, monitored = alarms + a, monitored + m
        over += a > 2 * m / det.target_arl
    return monitored / max(alarms, 1), over


def test_the_default_holds_its_rate_in_long_runs_over_overlapping_windows():
    # window_covariance's overlapping windows make the 500 calibration statistics worth a few
    # dozen independent ones; the margin for the threshold's own uncertainty keeps the
    # long-run rate (alarms and resets over 6,000 records a stream) within the target, and
    # at most 5% of the streams (2 of 40) alarm more than twice as often as documented.
    assert KarcherDetector().calibration_margin == 1.0
    rl, over = long_run(1.0)
    assert rl >= 1000 and over <= 2, (rl, over)  # measured: 2,932 and 1
    # Without it (the threshold before issue 48) the same streams alarm more often than
    # documented: the test fails for the old default.
    rl0, over0 = long_run(0.0)
    assert rl0 < 1000 or over0 > 2, (rl0, over0)  # measured: 1,173 and 5
