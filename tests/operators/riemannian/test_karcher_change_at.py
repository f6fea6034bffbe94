"""KarcherDetector.change_at (issue 34, 11): the detector locates its changes itself, with
the meaning change_at has on ShapeDetector and ConfSeqDetector and in the operators'
outputs, and the same positions as the ``karcher`` operator."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.operators.riemannian import KarcherDetector
from shiftwatch.streams.synthetic import WishartSPDStream

PARAMS = {"manifold": "spd", "threshold": 0.3, "update": "retraction"}


@pytest.fixture(scope="module")
def points() -> np.ndarray:
    a = [r["value"] for r in WishartSPDStream(n=1600, change_point=800, seed=4)]
    b = [r["value"] for r in WishartSPDStream(n=1600, change_point=800, seed=5)]
    return np.array(a + b)  # changes at 800, 1600 (a new stream), 2400


def test_detector_locates_as_the_operator(points):
    det = KarcherDetector(**PARAMS, locate_window=400)
    found = []
    for t, x in enumerate(points):
        det.update(x)
        if det.drift_detected:
            assert det.change_at is not None and det.change_at <= t
            found.append(det.change_at)
        else:
            assert det.change_at is None
    assert len(found) >= 2
    assert min(abs(p - 800) for p in found) < 40
    op = create("karcher", **PARAMS, locate_window=400)
    outs = op.process_batch([{"value": x.tolist()} for x in points])
    assert [o["change_at"] for o in outs if o["alarm"]] == found


def test_update_many_and_a_restored_state_agree_with_update(points):
    ref = KarcherDetector(**PARAMS, locate_window=400)
    at = []
    for x in points:
        ref.update(x)
        at.append(ref.change_at)
    many = KarcherDetector(**PARAMS, locate_window=400)
    _, alarms, _ = many.update_many(points[:1000])
    assert [at[t] for t in np.flatnonzero(alarms)] == [a for a in at[:1000] if a is not None]
    again = KarcherDetector(**PARAMS, locate_window=400)
    again.load_state_dict(many.state_dict())
    rest = []
    for x in points[1000:]:
        again.update(x)
        rest.append(again.change_at)
    assert rest == at[1000:]


def test_without_a_window_it_does_not_locate(points):
    det = KarcherDetector(**PARAMS)
    _, alarms, _ = det.update_many(points)
    assert alarms.any() and det.change_at is None
    with pytest.raises(ValueError, match="locate_window"):
        KarcherDetector(locate_window=1)
