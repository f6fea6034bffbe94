"""Keyed.load_encoded: restored keys are built on first use, and a restore that defers equals
one that loads every key at once (outputs and state, key by key)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftwatch.operators.keyed import DeferredStateError, Keyed
from shiftwatch.operators.registry import create
from shiftwatch.operators.state_codec import dumps_state, encode_state, loads_state

KEYS = ["a", 3, ["x", 1], "\x00json:5", None]


def _records(n: int, seed: int, keys=KEYS) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = keys[int(rng.integers(len(keys)))]
        shift = 3.0 if i > n // 2 else 0.0
        out.append({"key": k, "value": float(rng.normal() + shift), "ts": float(i)})
    return out


def _encoded(keyed: Keyed) -> dict[str, bytes]:
    return {k: dumps_state(s) for k, s in keyed.state_dict()["keys"].items()}


def _pair(name: str, params: dict, recs: list[dict]) -> tuple[Keyed, Keyed, Keyed]:
    """(uninterrupted, restored eagerly, restored lazily) after ``recs``."""
    first = Keyed(create(name, **params))
    first.process_batch(recs)
    eager = Keyed(create(name, **params))
    eager.load_state_dict(loads_state(dumps_state(first.state_dict())))
    lazy = Keyed(create(name, **params))
    lazy.load_encoded(_encoded(first))
    return first, eager, lazy


OPERATORS = [
    ("river:ADWIN", {}),
    ("cs", {"lower": -20.0, "upper": 20.0}),  # a keyed store (the fleet), not clones
    ("standardize", {}),
]


@pytest.mark.parametrize("name, params", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_a_deferred_restore_equals_an_eager_one_key_by_key(name, params):
    recs = _records(600, seed=1)
    first, eager, lazy = _pair(name, params, recs[:300])
    assert lazy.deferred_keys == len(first) == len(lazy)
    assert sorted(map(str, lazy.keys)) == sorted(map(str, first.keys))
    rest = recs[300:]
    # in batches of varied size, and some through process (one record)
    i, cuts = 0, [1, 7, 50, 2, 100]
    while i < len(rest):
        n = cuts[i % len(cuts)]
        chunk = rest[i:i + n]
        want = first.process_batch(chunk)
        assert eager.process_batch(chunk) == want
        got = lazy.process(chunk[0]) if n == 1 else lazy.process_batch(chunk)
        assert got == want
        i += n
    assert lazy.deferred_keys == 0
    want = encode_state(first.state_dict())
    assert encode_state(lazy.state_dict()) == want == encode_state(eager.state_dict())


@pytest.mark.parametrize("name, params", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_state_dict_and_existing_of_deferred_keys_read_the_restored_state(name, params):
    first, _, lazy = _pair(name, params, _records(200, seed=2))
    k = lazy.keys[0]
    assert lazy.deferred_state(k) is not None
    assert encode_state(lazy.existing(k).state_dict()) == \
        encode_state(first.existing(k).state_dict())
    assert lazy.deferred_state(k) is None and lazy.deferred_keys == len(first) - 1
    assert encode_state(lazy.state_dict()) == encode_state(first.state_dict())
    assert lazy.deferred_keys == 0
    assert lazy.existing("never seen") is None


def test_keys_that_never_come_back_stay_deferred_and_keep_their_bytes():
    first, _, lazy = _pair("river:ADWIN", {}, _records(200, seed=3))
    data = _encoded(first)
    lazy.process_batch([{"key": "a", "value": 0.5}, {"key": "new", "value": 1.0}])
    assert lazy.deferred_keys == len(first) - 1
    assert set(map(str, lazy.keys)) == set(map(str, first.keys)) | {"new"}
    assert len(lazy) == len(first) + 1
    assert lazy.deferred_state(3) == data["\x00json:3"]  # exactly what was given


def test_a_state_that_cannot_be_loaded_names_its_key_and_stays_deferred():
    first = Keyed(create("river:ADWIN"))
    first.process_batch(_records(100, seed=4))
    states = _encoded(first)
    states["a"] = b'{"not": "an adwin"'            # not JSON at all
    states["\x00json:3"] = dumps_state({"operator": "river:ADWIN", "bogus": 1})
    lazy = Keyed(create("river:ADWIN"))
    lazy.load_encoded(states)                          # nothing is decoded here
    with pytest.raises(DeferredStateError) as info:
        lazy.process_batch([{"key": "a", "value": 1.0}])
    assert info.value.key == "a" and info.value.keyed is lazy
    assert "not a state" in info.value.reason
    assert lazy.deferred_state("a") == states["a"]    # kept, so a rewrite loses nothing
    with pytest.raises(DeferredStateError) as info:
        lazy.existing(3)
    assert info.value.key == "\x00json:3"
    # the other keys are unharmed
    assert lazy.process_batch([{"key": None, "value": 1.0}]) == \
        first.process_batch([{"key": None, "value": 1.0}])
    with pytest.raises(DeferredStateError):
        lazy.state_dict()


def test_a_bad_key_name_is_refused_at_load_and_leaves_nothing_behind():
    lazy = Keyed(create("river:ADWIN"))
    with pytest.raises(DeferredStateError, match="not a key name"):
        lazy.load_encoded({"ok": b"{}", "\x00json:[1,": b"{}"})
    assert lazy.deferred_keys == 0 and len(lazy) == 0


def test_unhashable_and_missing_keys_beside_deferred_keys_are_dead_letters():
    first, eager, lazy = _pair("river:ADWIN", {}, _records(200, seed=5))
    batch = [{"key": {"a": 1}, "value": 1.0}, {"key": ["x", {"b": 2}], "value": 1.0},
             "not a record", {"value": 1.0}, {"key": "a", "value": 2.0},
             {"key": "a", "value": "abc"}]
    want = eager.process_batch(batch)
    got = lazy.process_batch(batch)
    assert [type(o).__name__ for o in got] == [type(o).__name__ for o in want]
    assert [getattr(o, "reason", o) for o in got] == [getattr(o, "reason", o) for o in want]
    assert lazy.deferred_keys == len(first) - 2  # "a", and None (a record without a key)
    assert lazy.deferred_state("a") is None and lazy.deferred_state(None) is None


def test_load_encoded_replaces_what_was_there():
    first, _, lazy = _pair("river:ADWIN", {}, _records(100, seed=6))
    lazy.process_batch([{"key": "z", "value": 1.0}])
    lazy.load_encoded({"a": _encoded(first)["a"]})
    assert lazy.keys == ["a"] and lazy.deferred_keys == 1
    lazy.load_state_dict({"operator": "keyed", "keys": {}})
    assert lazy.keys == [] and lazy.deferred_keys == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]),
                          st.floats(-5, 5, allow_nan=False)), min_size=1, max_size=60),
       st.integers(0, 60))
def test_any_split_point_restores_to_the_same_outputs(pairs, cut):
    recs = [{"key": k, "value": v} for k, v in pairs]
    cut = min(cut, len(recs))
    first = Keyed(create("river:ADWIN"))
    first.process_batch(recs[:cut])
    lazy = Keyed(create("river:ADWIN"))
    lazy.load_encoded(_encoded(first))
    assert lazy.process_batch(recs[cut:]) == first.process_batch(recs[cut:])
    assert encode_state(lazy.state_dict()) == encode_state(first.state_dict())
