"""The shape detector and the delay embedding: causality (any cut and restore gives the same
alarms), state round trip, record = batch, scale invariance, bad input, multichannel, one
alarm for one noiseless change, and the period rule."""
from __future__ import annotations

import numpy as np

from shiftwatch.operators import create
from shiftwatch.operators.embed import DelayEmbed
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.shape.detector import ShapeDetector
from shiftwatch.operators.shape.operator import ShapeOperator
from shiftwatch.operators.state_codec import dumps_state, loads_state


def series(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < 1200, np.sin(2 * np.pi * t / 20), np.sign(np.sin(2 * np.pi * t / 20)))
    y = np.where(t < 2200, y, np.sin(2 * np.pi * t / 31))
    return y + 0.2 * rng.normal(size=n)


def alarms(op, recs):
    return [(i, o["change_at"]) for i, o in enumerate(op.process_batch(recs)) if o["alarm"]]


def test_chunks_and_state():
    y = series()
    recs = [{"key": "k", "ts": float(i), "value": float(v)} for i, v in enumerate(y)]
    ref = alarms(ShapeOperator(), recs)
    assert len(ref) >= 2, ref
    for cut in (1, 50, 63, 64, 65, 384, 1000, 2500):
        a = ShapeOperator()
        first = alarms(a, recs[:cut])
        assert isinstance(dumps_state(a.state_dict()), (str, bytes))
        b = ShapeOperator()
        b.load_state_dict(loads_state(dumps_state(a.state_dict())))
        rest = [(i + cut, c) for i, c in alarms(b, recs[cut:])]
        assert first + rest == ref, (cut, first + rest, ref)
    # record-by-record = batch
    c = ShapeOperator()
    one = []
    for i, r in enumerate(recs):
        o = c.process(r)[0]
        if o["alarm"]:
            one.append((i, o["change_at"]))
    assert one == ref


def test_scale_invariance():
    y = series(seed=1)
    d1 = ShapeDetector()
    d2 = ShapeDetector()
    a1 = d1.update_many(y)[1]
    a2 = d2.update_many(1000.0 * y - 37.0)[1]
    assert np.array_equal(a1, a2)


def test_bad_input():
    op = ShapeOperator()
    outs = op.process_batch([{"value": 1.0}, {"value": float("nan")}, {"value": "x"},
                             {"value": [1.0, 2.0]}, {}, {"value": 2.0}])
    kinds = [type(o).__name__ for o in outs]
    assert kinds == ["dict", "DeadLetter", "DeadLetter", "DeadLetter", "DeadLetter", "dict"], kinds
    assert op._count == 2


def test_multichannel():
    rng = np.random.default_rng(2)
    y = series(2000, 3)
    x = np.stack([y, np.roll(y, 3) + 0.1 * rng.normal(size=len(y))], axis=1)
    for ch in ("joint", "separate"):
        op = ShapeOperator(channels=ch)
        out = op.process_batch([{"value": v.tolist()} for v in x])
        assert len(out) == len(x)


def test_embed():
    y = series(800)
    e = DelayEmbed(d=4, tau=2)
    out = e.process_batch([{"value": float(v)} for v in y])
    assert len(out) == len(y) - 6 and out[0]["value"] == [y[6], y[4], y[2], y[0]]
    ea = DelayEmbed()
    out = ea.process_batch([{"value": float(v)} for v in y])
    assert ea.time_scale["period"] == 20, ea.time_scale
    d = ea.time_scale["d"]
    assert all(len(o["value"]) == d for o in out)


def test_noiseless_periodic():
    # exactly periodic, noiseless: one change (sine -> square wave of the same period), one alarm
    t = np.arange(3000)
    y = np.where(t < 1500, np.sin(2 * np.pi * t / 20), np.sign(np.sin(2 * np.pi * t / 20)))
    outs = ShapeOperator().process_batch([{"ts": 1000.0 + i, "value": float(v)}
                                          for i, v in enumerate(y)])
    al = [o for o in outs if o["alarm"]]
    assert len(al) == 1 and abs(al[0]["change_at"] - 1500) <= 2 * 20, al  # within a block (2P)
    assert al[0]["change_ts"] == 1000.0 + al[0]["change_at"]


def test_a_shape_change_the_mean_detectors_miss():
    # Period 10 -> 17 at 1500, same level and variance: shape alarms near 1500, cs does not.
    rng = np.random.default_rng(1)
    t = np.arange(3000)
    y = np.where(t < 1500, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    recs = [{"key": "k", "value": float(v)} for v in y + 0.3 * rng.normal(size=3000)]
    shape = [o["change_at"] for o in Keyed(create("shape")).process_batch(recs) if o["alarm"]]
    assert len(shape) == 1 and abs(shape[0] - 1500) <= 30, shape
    mean = [o for o in Keyed(create("river:ADWIN")).process_batch(recs) if o["alarm"]]
    assert not mean


def test_short_streams_are_not_silenced():
    # 400 records, period 8, a change of shape at 200: the progressive burn-in fixes the
    # period after 64 records, so the change is still found.
    rng = np.random.default_rng(4)
    t = np.arange(400)
    y = np.where(t < 200, np.sin(2 * np.pi * t / 8), np.sign(np.sin(2 * np.pi * t / 8)))
    det = ShapeDetector()
    alarm, change_at, _, _ = det.update_many(y + 0.1 * rng.normal(size=400))
    assert det.time_scale["period"] == 8
    found = change_at[alarm == 1]
    assert len(found) >= 1 and abs(int(found[0]) - 200) <= 16, found


def test_the_period_rule():
    from shiftwatch.operators.period import acf_period, embed_params, progressive_period

    t = np.arange(2000)
    rng = np.random.default_rng(0)
    for period in (6, 13, 40, 90):
        y = np.sin(2 * np.pi * t / period) + 0.2 * rng.normal(size=len(t))
        assert abs(acf_period(y[:384], p_max=96) - period) <= max(1, 0.05 * period), period
    clear = np.sin(2 * np.pi * t / 12)
    assert progressive_period(clear) == (12, 64)  # clear: fixed at the first checkpoint
    assert embed_params(12) == (12, 1) and embed_params(90) == (15, 6)


def test_a_stream_shorter_than_the_burn_in_still_gets_embedded():
    # 50 records, fewer than the first checkpoint (64): nothing until the stream ends, then
    # the replay's flush fixes the period on those 50 values and emits their vectors.
    from shiftwatch.deploy.local import Pipeline

    class Collect:
        wants_inputs = False

        def __init__(self):
            self.records = []

        def open(self): pass
        def write(self, rs): self.records.extend(rs)
        def flush(self): pass
        def close(self): pass
        def summary(self): return {}

    y = np.sin(2 * np.pi * np.arange(50) / 6)
    recs = [{"key": "a", "value": float(v)} for v in y]
    op = DelayEmbed()
    assert op.process_batch(recs) == [] and op.time_scale is None
    out = op.flush()
    assert op.time_scale["period"] == 6 and len(out) == 50 - op.time_scale["lag"]
    sink = Collect()
    summary = Pipeline(recs, [create("embed"), create("window_covariance", window=5)],
                       [sink], progress=False).run()
    assert summary.outputs == len(sink.records) == 50 - 5 - 4  # lag 5, then a window of 5
    assert [r["offset"] for r in sink.records] == list(range(9, 50))
    assert DelayEmbed(d=3).flush() == []  # nothing held back


def test_a_ts_too_large_for_a_float_is_no_time_not_an_error():
    # found by the hostile-input property test: np.isfinite on an int of 10**400 raised
    from shiftwatch.operators import create

    op = create("shape")
    (out,) = op.process({"key": "k", "ts": 10**400, "value": 0.1})
    assert out["alarm"] is False and "change_ts" not in out
