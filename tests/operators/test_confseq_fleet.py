"""Keyed(cs) as a fleet (state in arrays, one kernel call per micro-batch) equals one
ConfSeqOperator per key: outputs and dead letters bit for bit; state_dicts restore into
either kind with the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.operators import Keyed, create, dumps_state, loads_state
from shiftwatch.operators.confseq_fleet import ConfSeqFleet, fleet_eligible
from shiftwatch.operators.records import BadInput, DeadLetter

PARAMS = [{}, {"sigma": 1.0}, {"alpha": 0.05, "burn_in": 10}, {"locate": False},
          {"cs": "hoeffding", "lower": -6.0, "upper": 6.0, "alpha": 0.01},
          {"field": "meta.v", "alpha": 0.02}]


def _records(n, n_keys, seed, field="value", bad=True):
    rng = np.random.default_rng(seed)
    means = np.zeros(n_keys)
    recs = []
    for i in range(n):
        k = int(rng.integers(n_keys))
        if rng.random() < 0.004:
            means[k] += rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 3.0)
        v = float(np.clip(means[k] + rng.normal(), -5.9, 5.9))
        rec = {"key": f"s{k}", "offset": i, "value": v}
        if field == "meta.v":
            rec = {"key": f"s{k}", "offset": i, "meta": {"v": v}}
        if rng.random() < 0.9:
            rec["ts"] = float(1000 + i)
        elif rng.random() < 0.5:
            rec["ts"] = 1000 + i  # an int ts
        recs.append(rec)
        if bad and rng.random() < 0.01:
            kind = int(rng.integers(9))
            recs.append([
                {"key": f"s{k}", "value": float("nan")},
                {"key": f"s{k}", "value": "abc"},
                {"key": f"s{k}"},
                {"key": f"s{k}", "value": [1.0, 2.0]},  # a vector for a scalar key
                {"key": {"a": 1}, "value": 1.0},        # an unhashable key
                {"key": ["x", k], "value": v, "ts": "noon"},  # a list key, a str ts
                {"key": f"vec{k % 3}", "value": [v, -v]},   # a vector key
                "not a record",
                {"key": f"s{k}", "value": 7 if field == "value" else None},  # an int value
            ][kind])
    return recs


def _norm(outs):
    """Each key's results in order (Keyed over objects groups its outputs by key; the fleet
    gives them in input order: the interleaving of keys carries no meaning). Outputs as
    their JSON bytes (key order included)."""
    by_key: dict = {}
    for d in outs:
        if isinstance(d, DeadLetter):
            item = ("DL", d.reason, json.dumps(d.origin, sort_keys=True, default=str),
                    repr(d.raw))
            key = repr(d.origin.get("key"))
        else:
            item = json.dumps(d)
            key = repr(d.get("key"))
        by_key.setdefault(key, []).append(item)
    return sorted(by_key.items())


def _pair(params):
    fleet = Keyed(create("cs", **params))
    objects = Keyed(lambda: create("cs", **params))  # a factory: one object per key
    return fleet, objects


@pytest.mark.parametrize("params", PARAMS)
def test_fleet_equals_one_operator_per_key(params):
    fleet, objects = _pair(params)
    assert isinstance(fleet._store, ConfSeqFleet) and not isinstance(objects._store, ConfSeqFleet)
    recs = _records(12_000, 7, seed=len(json.dumps(params)),
                    field=params.get("field", "value"))
    rng = np.random.default_rng(1)
    i = alarms = 0
    while i < len(recs):
        b = int(rng.integers(1, 700))
        a, o = fleet.process_batch(recs[i:i + b]), objects.process_batch(recs[i:i + b])
        assert _norm(a) == _norm(o)
        alarms += sum(1 for r in a if isinstance(r, dict) and r.get("alarm"))
        i += b
    assert alarms >= 5  # the streams do change, and the comparison covers alarms
    assert set(fleet.keys) == set(objects.keys) and len(fleet) == len(objects)
    # A single record through process() too.
    rec = {"key": "s1", "value": 0.5, "ts": 1.0}
    if params.get("field") == "meta.v":
        rec = {"key": "s1", "meta": {"v": 0.5}, "ts": 1.0}
    assert _norm(fleet.process(rec)) == _norm(objects.process(rec))
    for keyed in (fleet, objects):  # process() raises for a bad record, as operators do
        with pytest.raises(BadInput):
            keyed.process({"key": "s1", "value": "abc"})
    # Every key's state_dict restores into both kinds and continues identically.
    state = loads_state(dumps_state(fleet.state_dict()))
    more = _records(3000, 7, seed=99, field=params.get("field", "value"))
    expect = _norm(objects.process_batch(more))
    for restored in _pair(params):
        restored.load_state_dict(state)
        assert _norm(restored.process_batch(more)) == expect


def test_object_state_restores_into_a_fleet():
    fleet, objects = _pair({})
    recs = _records(5000, 4, seed=3)
    objects.process_batch(recs)
    fleet.load_state_dict(loads_state(dumps_state(objects.state_dict())))
    more = _records(4000, 4, seed=4)
    assert _norm(fleet.process_batch(more)) == _norm(objects.process_batch(more))


def test_hull_blocks_grow_and_the_pool_compacts():
    # A convex walk (values rising slowly, sigma large: no alarm) keeps every point on the
    # lower hull, so each key's block doubles again and again and old blocks are left behind.
    fleet, objects = _pair({"sigma": 1000.0})
    recs = [{"key": k, "value": i * 1e-3, "ts": float(i)} for i in range(600) for k in range(40)]
    for i in range(0, len(recs), 997):
        assert _norm(fleet.process_batch(recs[i:i + 997])) == \
            _norm(objects.process_batch(recs[i:i + 997]))
    store = fleet._store
    assert int(store._size.max()) > 256  # grown well past the first block of 16
    assert store._pool_live <= store._pool_used <= store._pool_x.shape[0]
    assert store.compactions >= 1
    state = fleet.state_dict()
    assert state["keys"][Keyed.key_name(3)]["state"]["count"] == 600
    more = [{"key": k, "value": 0.6 + i * 1e-3} for i in range(300) for k in range(40)]
    expect = _norm(objects.process_batch(more))
    restored = Keyed(create("cs", sigma=1000.0))
    restored.load_state_dict(loads_state(dumps_state(state)))
    assert _norm(restored.process_batch(more)) == expect


def test_change_ts_is_kept_beyond_the_locate_window():
    # The located start's ts is kept with its hull point: not limited to the last
    # locate_window records any more.
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0, 1, 4000), rng.normal(0.3, 1, 6000)]
    recs = [{"key": "a", "value": float(v), "ts": 10.0 * i} for i, v in enumerate(x)]
    for keyed in _pair({"locate_window": 50}):
        alarms = [o for o in keyed.process_batch(recs) if o["alarm"]]
        assert alarms
        far = [o for o in alarms if o["ts"] / 10.0 - o["change_at"] > 50]
        assert far and all(o["change_ts"] == 10.0 * o["change_at"] for o in alarms)


def test_only_eligible_operators_run_as_a_fleet():
    assert fleet_eligible(create("cs"))
    for params in ({"pfa": True}, {"prune": 100}, {"restart": True}, {"locate": "mean"},
                   {"cs": "betting", "lower": -1.0, "upper": 1.0},
                   {"cs": "empirical-bernstein", "lower": -1.0, "upper": 1.0}):
        assert not fleet_eligible(create("cs", **params))
        assert not isinstance(Keyed(create("cs", **params))._store, ConfSeqFleet)
