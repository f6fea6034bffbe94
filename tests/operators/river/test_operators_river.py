"""The River adapter and the restricted object-graph codec behind its state."""

from __future__ import annotations

import json

import numpy as np
import pytest
from river import drift

from shiftwatch.operators import BadInput, Operator, RiverDetector, create, dumps_state, loads_state
from shiftwatch.operators.object_state import StateRefused, decode_object, encode_object
from shiftwatch.operators.river.adapter import river_detector_names

ALL = river_detector_names()
BINARY = {"DDM", "EDDM", "FHDDM", "HDDMA", "HDDMW"}


def _stream(name, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    if name in BINARY:
        p = np.where(np.arange(n) < n // 2, 0.1, 0.4)
        return [{"key": "k", "ts": i, "value": int(v)} for i, v in enumerate(rng.random(n) < p)]
    x = rng.normal(0, 1, n) + np.where(np.arange(n) < n // 2, 0.0, 2.0)
    return [{"key": "k", "ts": i, "value": float(v)} for i, v in enumerate(x)]


def _params(name):
    return {"seed": 5} if name in ("KSWIN", "DummyDriftDetector") else {}


def test_every_river_detector_is_registered():
    assert set(ALL) >= {"ADWIN", "KSWIN", "PageHinkley", "DDM", "EDDM", "FHDDM", "HDDMA",
                        "HDDMW", "DummyDriftDetector", "NoDrift"}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cut", [1, 700, 1600])
def test_state_round_trip_is_bit_exact(name, cut):
    stream = _stream(name)
    op = create(f"river:{name}", **_params(name))
    op.process_batch(stream[:cut])
    blob = dumps_state(op.state_dict())
    back = create(f"river:{name}", **_params(name))
    back.load_state_dict(loads_state(blob))
    a, b = op.process_batch(stream[cut:]), back.process_batch(stream[cut:])
    assert [o["alarm"] for o in a] == [o["alarm"] for o in b]
    stat_a = np.array([np.nan if o["statistic"] is None else o["statistic"] for o in a])
    stat_b = np.array([np.nan if o["statistic"] is None else o["statistic"] for o in b])
    assert stat_a.tobytes() == stat_b.tobytes()
    assert a == b or np.isnan(stat_a).any()


def test_pinned_alarms_on_a_seeded_stream():
    stream = _stream("PageHinkley")
    got = {name: [o["ts"] for o in create(f"river:{name}", **_params(name))
                  .process_batch(stream) if o["alarm"]]
           for name in ("ADWIN", "PageHinkley")}
    # The shift is at 1500; PageHinkley's defaults give one false alarm before it.
    assert got == {"ADWIN": [1535], "PageHinkley": [1434, 1530]}
    # The adapter adds nothing to River's own decisions.
    for name, cls in (("ADWIN", drift.ADWIN), ("PageHinkley", drift.PageHinkley)):
        det, direct = cls(), []
        for r in stream:
            det.update(r["value"])
            if det.drift_detected:
                direct.append(r["ts"])
        assert got[name] == direct


def test_statistics():
    stream = _stream("ADWIN", n=400)
    out = create("river:ADWIN").process_batch(stream)
    det = drift.ADWIN()
    for r in stream:
        det.update(r["value"])
    assert out[-1]["statistic"] == det.estimation
    ph = create("river:PageHinkley", mode="up").process_batch(stream)
    assert all(isinstance(o["statistic"], float) and o["statistic"] >= 0 for o in ph)
    ks = create("river:KSWIN", seed=1).process_batch(stream)
    assert ks[0]["statistic"] is None and 0 <= ks[-1]["statistic"] <= 1
    ddm = create("river:DDM").process_batch(_stream("DDM", n=200))
    assert "warning" in ddm[0] and isinstance(ddm[-1]["statistic"], float)
    assert create("river:NoDrift").process({"value": 1.0})[0]["statistic"] is None


def test_vector_values_run_one_detector_per_coordinate():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (1000, 3))
    x[500:, 2] += 4.0
    op = create("river:PageHinkley", field="meta.x")
    outs = op.process_batch([{"ts": i, "meta": {"x": row.tolist()}} for i, row in enumerate(x)])
    alarms = [o for o in outs if o["alarm"]]
    assert alarms and all(o["coordinates"] == [2] for o in alarms)
    assert len(outs[0]["statistic"]) == 3
    with pytest.raises(BadInput, match="fixed by the first record"):
        op.process({"meta": {"x": [1.0, 2.0]}})
    with pytest.raises(BadInput, match="fixed by the first record"):
        op.process({"meta": {"x": 1.0}})
    scalar = create("river:ADWIN")
    scalar.process({"value": 1.0})
    with pytest.raises(BadInput):
        scalar.process({"value": [1.0, 2.0]})


def test_binary_detectors_take_only_zero_one():
    op = create("river:DDM")
    for good in (0, 1, True, False, 1.0):
        op.process({"value": good})
    for bad in (0.5, 2, -1, "x", float("nan")):
        with pytest.raises(BadInput):
            op.process({"value": bad})


def test_constructor_forms_and_parameter_errors():
    a = RiverDetector(detector="ADWIN", delta=0.01)
    b = create("river:ADWIN", delta=0.01)
    assert type(a) is type(b) and repr(a) == repr(b)
    assert isinstance(a, RiverDetector) and a.name == "river:ADWIN"
    with pytest.raises(ValueError, match="needs detector"):
        RiverDetector()
    with pytest.raises(ValueError, match="unknown River detector"):
        RiverDetector(detector="SPC")
    with pytest.raises(ValueError,
                       match="parameters: field, locate, locate_window, restart, delta"):
        RiverDetector(detector="ADWIN", alpha=0.1)
    for name, bad in [("PageHinkley", {"threshold": "high"}), ("PageHinkley", {"mode": "x"}),
                      ("KSWIN", {"alpha": 2.0}), ("KSWIN", {"seed": 1.5}),
                      ("HDDMA", {"two_sided_test": 1}), ("ADWIN", {"clock": 2.5}),
                      ("ADWIN", {"field": ""})]:
        with pytest.raises(ValueError) as exc:
            create(f"river:{name}", **bad)
        assert "\n" not in str(exc.value)


def test_state_for_another_operator_is_refused():
    ph = create("river:PageHinkley")
    ph.process({"value": 1.0})
    with pytest.raises(ValueError, match="river:PageHinkley"):
        create("river:ADWIN").load_state_dict(ph.state_dict())


# ---- the object-graph codec ----------------------------------------------------------


@pytest.mark.parametrize("doc", [
    {"!obj": 0, "new": {"!global": "os:system"}, "args": ["true"]},
    {"!obj": 0, "new": {"!global": "builtins:eval"}, "args": ["1"]},
    {"!obj": 0, "new": {"!global": "copyreg:__newobj__"},
     "args": [{"!global": "subprocess:Popen"}]},
    {"!obj": 0, "new": {"!global": "copyreg:__newobj__"}, "args": [{"!global": "builtins:dict"}]},
    {"!obj": 0, "new": {"!global": "copyreg:_reconstructor"},
     "args": [{"!global": "river.drift.adwin:ADWIN"}, {"!global": "builtins:eval"}, None]},
    {"!global": "river.drift.kswin:random"},  # a river module's import of another module
    {"!global": "river.drift.adwin:ADWIN.__init__.__globals__"},
    {"!method": "__class__", "self": 1},
    {"something": 1},
    {"!ref": 4},
])
def test_decoder_refuses_anything_outside_the_allowlist(doc):
    with pytest.raises(StateRefused):
        decode_object(doc)


def test_encoder_refuses_foreign_objects():
    class Foreign:
        pass

    with pytest.raises(TypeError, match="allowlist"):
        encode_object(Foreign())
    det = drift.PageHinkley()
    det.hook = print
    with pytest.raises(TypeError):
        encode_object(det)


def test_shared_references_and_cycles_survive():
    det = drift.PageHinkley()
    shared = det._x_mean
    graph = {"a": shared, "b": [shared], "det": det}
    back = decode_object(json.loads(json.dumps(encode_object(graph))))
    assert back["a"] is back["b"][0] is back["det"]._x_mean
    assert back["det"]._test_drift.__self__ is back["det"]


def test_default_state_dict_handles_river_objects():
    class Wrapped(Operator):
        def __init__(self):
            self._reset()

        def _reset(self):
            self._det = drift.ADWIN()

        def process(self, record):
            self._det.update(record["value"])
            return [self._output(record, alarm=self._det.drift_detected)]

    rng = np.random.default_rng(2)
    recs = [{"value": float(v)} for v in np.r_[rng.normal(0, 1, 300), rng.normal(2, 1, 300)]]
    op = Wrapped()
    op.process_batch(recs[:250])
    back = Wrapped()
    back.load_state_dict(loads_state(dumps_state(op.state_dict())))
    assert back.process_batch(recs[250:]) == op.process_batch(recs[250:])


# ---- locating the change at an alarm ---------------------------------------------------


def _shift_stream(n=1000, at=600, shift=2.0, seed=11, ts0=1000.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, n)
    x[at:] += shift
    return [{"key": "s", "ts": ts0 + 0.5 * i, "value": float(v)} for i, v in enumerate(x)]


@pytest.mark.parametrize("name", ["PageHinkley", "ADWIN", "KSWIN"])
def test_alarms_say_where_the_change_began(name):
    params = {"seed": 1} if name == "KSWIN" else {}
    op = create(f"river:{name}", **params)
    outs = op.process_batch(_shift_stream())
    alarms = [(i, o) for i, o in enumerate(outs) if o["alarm"]]
    assert alarms
    first_i, first = alarms[0]
    assert first_i > 600  # detected late ...
    assert abs(first["change_at"] - 600) <= 5  # ... but located near the true change
    assert first["change_ts"] == 1000.0 + 0.5 * first["change_at"]
    for i, o in alarms:
        assert o["change_at"] <= i
    assert all("change_at" not in o and "change_ts" not in o for o in outs if not o["alarm"])


def test_locate_off_and_without_ts():
    recs = _shift_stream()
    off = create("river:PageHinkley", locate=False).process_batch(recs)
    assert any(o["alarm"] for o in off) and all("change_at" not in o for o in off)
    no_ts = [{"value": r["value"]} for r in recs]
    outs = create("river:PageHinkley").process_batch(no_ts)
    alarm = next(o for o in outs if o["alarm"])
    assert "change_ts" not in alarm and abs(alarm["change_at"] - 600) <= 5


def test_positions_count_accepted_records_only():
    recs = _shift_stream()
    with_bad = recs[:100] + [{"key": "s", "ts": 0.0, "value": float("nan")}] * 3 + recs[100:]
    a = create("river:PageHinkley").process_batch(recs)
    b = [o for o in create("river:PageHinkley").process_batch(with_bad) if isinstance(o, dict)]
    assert [o.get("change_at") for o in a] == [o.get("change_at") for o in b]


def test_variance_locator_and_vectors():
    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(0, 1, 800), rng.normal(0, 3, 800)]
    recs = [{"value": float(v)} for v in x]
    # DummyDriftDetector alarms at a fixed time (t_0), so this tests the locator alone.
    for locate, want in (("meanvar", 800), ("mean", None)):
        outs = create("river:DummyDriftDetector", t_0=1000, locate=locate).process_batch(recs)
        (alarm,) = [o for o in outs if o["alarm"]]
        if want is not None:
            assert abs(alarm["change_at"] - want) <= 10
        else:  # no mean change: the mean split cannot find this one
            assert abs(alarm["change_at"] - 800) > 50
    v = rng.normal(0, 1, (1000, 3))
    v[400:, 2] += 2.5
    outs = create("river:PageHinkley").process_batch([{"value": r.tolist()} for r in v])
    first = next(o for o in outs if o["alarm"])
    assert first["coordinates"] == [2] and abs(first["change_at"] - 400) <= 5


def test_locate_window_is_bounded_and_restored():
    op = create("river:PageHinkley", locate_window=50)
    recs = _shift_stream()
    outs = op.process_batch(recs[:700])
    state = op.state_dict()
    win = state["state"]["window"]
    assert len(win["values"]) <= 50 and win["count"] == 700
    first = next(o for o in outs if o["alarm"])
    assert first["change_at"] >= 700 - 50 or first["change_at"] >= 600
    op2 = create("river:PageHinkley", locate_window=50)
    op2.load_state_dict(json.loads(json.dumps(state, default=lambda a: a.tolist())))
    assert op2.process_batch(recs[700:]) == op.process_batch(recs[700:])


def _staggered(seed):
    """Three channels that all change at 500, by 1, 0.8 and 0.6 sd (seen at different lags)."""
    rng = np.random.default_rng(seed)
    v = rng.normal(0, 1, (1000, 3))
    v[500:] += [1.0, 0.8, 0.6]
    return [{"ts": float(i), "value": r.tolist()} for i, r in enumerate(v)]


def test_restart_makes_one_change_of_several_channels_one_alarm():
    """Without ``restart`` the channels that see a shared change later alarm again, each
    located inside the new segment; with it every channel starts again from the located change
    (re-fed the values since), so the later ones have nothing left to see."""
    extra_without, extra_with = 0, 0
    for seed in range(10):
        recs = _staggered(seed)
        for restart in (False, True):
            outs = create("river:ADWIN", restart=restart).process_batch(recs)
            at = [o["change_at"] for o in outs if o["alarm"]]
            assert at and abs(at[0] - 500) <= 25, (seed, restart, at)
            if restart:
                extra_with += len(at) - 1
            else:
                extra_without += len(at) - 1
    assert extra_without >= 5 and extra_with <= 1, (extra_without, extra_with)


def test_restart_refeeds_from_the_located_change_and_round_trips():
    recs = _staggered(3)
    op = create("river:ADWIN", restart=True)
    outs = op.process_batch(recs[:700])
    first = next(o for o in outs if o["alarm"])
    # every channel's ADWIN now holds exactly the values from the located change on
    widths = [d.width for d in op._detectors]
    assert widths == [700 - first["change_at"]] * 3, (widths, first)
    state = json.loads(json.dumps(op.state_dict(), default=lambda a: a.tolist()))
    op2 = create("river:ADWIN", restart=True)
    op2.load_state_dict(state)
    assert op2.process_batch(recs[700:]) == op.process_batch(recs[700:])
    # a scalar key has one detector: restart changes nothing
    x = [{"ts": float(i), "value": r["value"][0]} for i, r in enumerate(recs)]
    assert create("river:ADWIN", restart=True).process_batch(x) == \
        create("river:ADWIN").process_batch(x)


@pytest.mark.parametrize("bad", [{"restart": 1}, {"restart": True, "locate": False}])
def test_restart_parameter_errors(bad):
    with pytest.raises(ValueError, match="restart"):
        create("river:ADWIN", **bad)


@pytest.mark.parametrize("bad", [{"locate": "median"}, {"locate": 1},
                                 {"locate_window": 1}, {"locate_window": 2.5}])
def test_locate_parameter_errors(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        create("river:ADWIN", **bad)


@pytest.mark.parametrize("name", ["river:DDM", "river:EDDM", "river:HDDM_A"])
def test_binary_hot_path_gives_the_slow_paths_outputs(name):
    """Floats 0.0/1.0 take the hot path of a binary detector; ints, bools and anything else
    the checked one. Both give the same outputs, and a float other than 0/1 is refused."""
    rng = np.random.default_rng(3)
    errors = np.r_[rng.random(600) < 0.1, rng.random(600) < 0.5].astype(int)
    fast, slow = create(name), create(name)
    got = [fast.process({"value": float(e), "ts": float(i)}) for i, e in enumerate(errors)]
    want = [slow.process({"value": int(e) if i % 2 else bool(e), "ts": float(i)})
            for i, e in enumerate(errors)]
    assert got == want and any(o[0]["alarm"] for o in got)
    with pytest.raises(BadInput, match="0/1"):
        fast.process({"value": 0.5})
    assert dumps_state(fast.state_dict()) == dumps_state(slow.state_dict())
