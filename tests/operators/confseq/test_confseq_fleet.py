"""Keyed(cs) as a fleet (state in arrays, one kernel call per micro-batch) equals one
ConfSeqOperator per key: outputs and dead letters bit for bit; state_dicts restore into
either kind with the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.operators import Keyed, create, dumps_state, loads_state
from shiftwatch.operators.confseq.fleet import ConfSeqFleet, fleet_eligible
from shiftwatch.records import BadInput, DeadLetter

PARAMS = [{}, {"sigma": 1.0}, {"alpha": 0.05, "burn_in": 10}, {"locate": False},
          {"scale": "marginal"}, {"alpha": 0.05, "burn_in_effective": 12, "burn_in_max": 90},
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


def _free_blocks(store):
    """Each free list's blocks, walked from its head in ``pmeta[2:]``: {offset: capacity}."""
    from shiftwatch.operators.confseq.fleet import _CLASS_CAPS

    free = {}
    for ci, head in enumerate(store._pmeta[2:].tolist()):
        o = head
        while o >= 0:
            assert o not in free
            free[o] = int(_CLASS_CAPS[ci])
            o = int(store._pool_yt[o, 0])
    return free


def test_blocks_grown_out_of_are_reused_by_other_keys():
    # Keys whose hulls grow at different times (a convex walk each, started one after the
    # other): a block one key grew out of goes on a free list and a later key growing into
    # that size takes it. Outputs stay the per-key operator's; free blocks never overlap
    # live ones; the pool's accounting holds.
    fleet, objects = _pair({"sigma": 1000.0})
    recs = [{"key": k, "value": (i - 10 * k) * 1e-3, "ts": float(i)}
            for i in range(400) for k in range(30) if i >= 10 * k]
    store = fleet._store
    freed_before: set = set()
    reused: set = set()
    for i in range(0, len(recs), 250):
        assert _norm(fleet.process_batch(recs[i:i + 250])) == \
            _norm(objects.process_batch(recs[i:i + 250]))
        live = {int(store._off[k, s]): int(store._cap[k, s])
                for k in range(store._n) for s in range(2) if store._cap[k, s]}
        free = _free_blocks(store)
        spans = sorted([(o, o + c) for o, c in live.items()]
                       + [(o, o + c) for o, c in free.items()])
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # no overlap
        assert spans[-1][1] <= store._pool_used
        assert store._pool_used - store._pool_live >= sum(free.values())
        assert store._pool_live == sum(live.values())
        if not store.compactions:  # (offsets from before a compaction mean nothing after)
            reused |= freed_before & set(live)
        freed_before = set(free)
        store.compactions = 0
    assert len(reused) >= 10  # blocks left by one key were taken by another


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


def test_burn_in_rows_are_lent_and_returned():
    # 300 keys start at once (the burn-in table grows past its 64 rows), finish their burn-in
    # (the rows return and the table shrinks back), then change (alarms restart the burn-in,
    # which takes rows again): every output as one operator per key gives it.
    fleet, objects = _pair({"burn_in": 20})
    store = fleet._store
    rng = np.random.default_rng(5)
    keys = [f"k{i}" for i in range(300)]
    peak = 0
    alarmed: set = set()
    for step in range(400):
        shift = 4.0 if step >= 200 else 0.0
        batch = [{"key": k, "value": float(v) + shift, "ts": float(step)}
                 for k, v in zip(keys, rng.normal(size=len(keys)), strict=True)]
        outs = fleet.process_batch(batch)
        assert _norm(outs) == _norm(objects.process_batch(batch))
        alarmed |= {o["key"] for o in outs if o["alarm"]}
        peak = max(peak, store._burn.shape[0])
        in_burn = int((store._brow[:store._n] >= 0).sum())
        assert in_burn == store._burn.shape[0] - int(store._bfree[0])
        if step == 150:
            assert in_burn == 0 and store._burn.shape[0] == 64
    assert peak >= 300
    assert len(alarmed) == len(keys)  # every key alarmed, and burned in again after it
    assert store._burn.shape[0] == 64
    from shiftwatch.operators.confseq.kernels import S_BURN, S_NBURN

    scal = store._scal[:store._n]  # a row is held exactly by the keys in burn-in
    assert ((store._brow[:store._n] >= 0) == (scal[:, S_NBURN] < scal[:, S_BURN])).all()


def test_a_key_in_burn_in_restores_with_its_values():
    fleet, objects = _pair({"burn_in": 30})
    first = [{"key": k, "value": float(i % 7) + 0.1 * j, "ts": float(i)}
             for i in range(12) for j, k in enumerate(("a", "b"))]
    objects.process_batch(first)
    state = loads_state(dumps_state(objects.state_dict()))
    fleet.load_state_dict(state)
    assert int((fleet._store._brow[:2] >= 0).sum()) == 2  # both keys hold their values
    more = _records(3000, 2, seed=8, bad=False)
    for r in more:
        r["key"] = "a" if r["key"] == "s0" else "b"
    assert _norm(fleet.process_batch(more)) == _norm(objects.process_batch(more))


def test_record_indices_beyond_int32_widen_the_pool(monkeypatch):
    # pool_x holds record indices as int32 until one could pass _X32; made small here, the
    # widening happens mid-stream and the outputs stay those of one operator per key.
    from shiftwatch.operators.confseq import fleet as confseq_fleet

    monkeypatch.setattr(confseq_fleet, "_X32", 500)
    fleet, objects = _pair({})
    rng = np.random.default_rng(11)  # no change: the record indices keep growing
    recs = [{"key": f"s{i % 3}", "value": float(v), "ts": float(i)}
            for i, v in enumerate(rng.normal(size=6000))]
    assert fleet._store._pool_x.dtype == np.int32
    for i in range(0, len(recs), 250):
        assert _norm(fleet.process_batch(recs[i:i + 250])) == \
            _norm(objects.process_batch(recs[i:i + 250]))
    assert fleet._store._pool_x.dtype == np.float64
    state = loads_state(dumps_state(objects.state_dict()))
    restored = Keyed(create("cs"))
    restored.load_state_dict(state)  # a restored index past _X32 widens at once
    assert restored._store._pool_x.dtype == np.float64


def test_steady_state_arrays_stay_under_a_kilobyte_per_key():
    # Issue 13's memory target, for the fleet's own arrays (the benchmark adds the key
    # dict): 1,000 keys after 400 N(0, 1) values each (hulls of about 7 points a side).
    keyed = Keyed(create("cs"))
    rng = np.random.default_rng(2)
    keys = [f"sensor-{i}" for i in range(1000)]
    for _ in range(400):
        keyed.process_batch([{"key": k, "value": float(v)}
                             for k, v in zip(keys, rng.normal(size=len(keys)), strict=True)])
    store = keyed._store
    assert store._burn.shape[0] == 64  # no key is in burn-in
    assert store.nbytes / len(keys) < 1000


def test_long_streams_stay_bit_for_bit():
    # The fleet's skip filter keeps its minima in float32, rounded the safe way; over long
    # streams with small changes (the running max moves often) every output must still be
    # the per-key operator's.
    rng = np.random.default_rng(21)
    n = 40_000
    shifts = np.repeat(rng.normal(0, 0.15, size=n // 2000), 2000)
    recs = [{"key": f"s{i % 4}", "value": float(v), "ts": float(i)}
            for i, v in enumerate(rng.normal(size=n) + shifts)]
    fleet, objects = _pair({"alpha": 0.05})
    a, o = fleet.process_batch(recs), objects.process_batch(recs)
    assert _norm(a) == _norm(o)
    assert sum(1 for r in a if r["alarm"]) >= 5


def test_checkpoint_bytes_of_a_slot_equal_its_state_dicts():
    # A checkpoint writes a fleet key from slot_state_encoded (parts encoded once): the same
    # bytes as encoding its state_dict, for keys in burn-in, past it, and after an alarm.
    from shiftwatch.deploy.kafka.checkpoint import key_state_bytes, state_bytes

    fleet, _ = _pair({})
    fleet.process_batch(_records(8000, 9, seed=6, bad=False))
    fleet.process_batch([{"key": "new", "value": 1.0}])
    store = fleet._store
    assert (store._brow[:store._n] >= 0).any() and (store._brow[:store._n] < 0).any()
    for key in fleet.keys:
        view = fleet.existing(key)
        assert key_state_bytes(view) == state_bytes(view.state_dict())


def test_scalar_keys_restore_into_the_fleet_without_objects_and_old_states_upgrade():
    # Restoring a fleet reads each scalar key's state into one scratch detector and copies it
    # into the arrays (no operator per key): the outputs after it are those of objects, also
    # for states written with the marginal burn-in layout of earlier releases.
    for params in ({}, {"scale": "marginal"}):
        writer = Keyed(create("cs", **params))  # a fleet
        recs = _records(3000, 30, seed=5, bad=False)
        writer.process_batch(recs)
        state = loads_state(dumps_state(writer.state_dict()))
        fleet, objects = _pair({})
        fleet.load_state_dict(state)
        objects.load_state_dict(state)
        assert isinstance(fleet._store, ConfSeqFleet) and not fleet._store._objs
        more = _records(3000, 30, seed=6, bad=False)
        assert _norm(fleet.process_batch(more)) == _norm(objects.process_batch(more))
