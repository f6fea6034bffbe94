"""The columnar ADWIN kernel against River's own ``update`` and ``estimation``, step by step."""

import numpy as np
import pytest
from river.drift import ADWIN

from shiftwatch.operators.river.columns import _run_adwin


def _reference(det, xs):
    stats, hits = [], []
    for i, x in enumerate(xs.tolist()):
        det.update(x)
        stats.append(float(det.estimation))
        if det.drift_detected:
            hits.append(i)
    return np.array(stats), hits


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clock", [1, 32])
def test_run_adwin_is_river_step_for_step(seed, clock):
    rng = np.random.default_rng(seed)
    xs = np.concatenate([rng.normal(m, s, 700) for m, s in
                         zip(rng.uniform(-9, 9, 8), rng.uniform(0.01, 2, 8), strict=True)])
    if seed == 2:
        xs = np.round(xs, 1) * 1e7  # large totals: the additions' rounding matters
    ref, fast = ADWIN(clock=clock), ADWIN(clock=clock)
    want, want_hits = _reference(ref, xs[:3000])
    got1, hits1 = _run_adwin(fast, xs[:1234])  # in two batches: the state carries over
    got2, hits2 = _run_adwin(fast, xs[1234:3000])
    got = np.concatenate([got1, got2])
    assert want_hits and hits1 + [h + 1234 for h in hits2] == want_hits
    assert got.tobytes() == want.tobytes()
    assert fast.drift_detected == ref.drift_detected
    assert fast._helper.get_total() == ref._helper.get_total()


def test_run_adwin_empty_and_after_a_drift():
    det = ADWIN()
    stats, hits = _run_adwin(det, np.zeros(0))
    assert stats.shape == (0,) and hits == []
    det._drift_detected = True  # the next update starts afresh
    stats, hits = _run_adwin(det, np.array([5.0, 7.0]))
    assert stats.tolist() == [5.0, 6.0] and hits == []
