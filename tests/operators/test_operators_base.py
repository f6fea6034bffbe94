"""The ground floor (records, state_codec, contract, registry, keyed, with_input): the state codec,
the registry, Keyed, DeadLetter and record helpers."""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest

import shiftwatch.operators.registry
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.registry import create, list_operators, register, registered_names
from shiftwatch.operators.state_codec import decode_state, dumps_state, encode_state, loads_state
from shiftwatch.records import BadInput, DeadLetter, as_array, as_scalar, get_field

# ---- codec ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "uint8", "bool", "complex128"])
def test_arrays_round_trip_bit_exact(dtype):
    rng = np.random.default_rng(0)
    arr = (rng.normal(size=(3, 4)) * 1e3).astype(dtype)
    back = loads_state(dumps_state({"a": arr}))["a"]
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()
    assert back.flags.writeable


def test_special_floats_bit_exact():
    vals = [math.inf, -math.inf, 0.1 + 0.2, -0.0, 5e-324, 1.7976931348623157e308]
    back = loads_state(dumps_state(vals))
    assert [np.float64(v).tobytes() for v in back] == [np.float64(v).tobytes() for v in vals]
    nan = loads_state(dumps_state(float("nan")))
    assert math.isnan(nan)
    arr = np.array([np.nan, np.inf, -0.0])
    assert loads_state(dumps_state(arr)).tobytes() == arr.tobytes()


def test_tuples_and_non_string_keys():
    state = {1: "one", (2, "b"): [(), (3,)], None: {"x": (1.5, None)}, 2.5: True}
    back = loads_state(dumps_state(state))
    assert back == state
    assert isinstance(back[(2, "b")][1], tuple)


def test_plain_dicts_with_marker_keys_are_escaped():
    state = {"__ndarray__": "not an array", "__tuple__": [1], "__object__": 3}
    assert loads_state(dumps_state(state)) == state


def test_codec_output_is_plain_json_and_refuses_unknown_objects():
    blob = dumps_state({"m": np.eye(2), "t": (1, 2)})
    assert isinstance(blob, bytes)
    json.loads(blob)
    with pytest.raises(TypeError, match="cannot encode"):
        encode_state({"f": object()})
    assert decode_state(encode_state({"n": np.int64(3)})) == {"n": 3}


# ---- registry ------------------------------------------------------------------------


def test_unknown_operator_message_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown operator 'nope'.*river:ADWIN"):
        create("nope")
    with pytest.raises(ValueError, match=r"unknown operator 'river:Nope'; did you mean"):
        create("river:Nope")


def test_unknown_parameter_is_one_clear_line():
    with pytest.raises(ValueError) as exc:
        create("river:PageHinkley", treshold=3.0)
    msg = str(exc.value)
    assert "'treshold'" in msg and "threshold" in msg and "\n" not in msg


def test_register_rejects_a_second_class_under_a_taken_name():
    @register("test-dummy-op")
    class A(Operator):
        pass

    assert register("test-dummy-op")(A) is A  # same class again is fine
    with pytest.raises(ValueError, match="already registered"):
        register("test-dummy-op")(type("B", (Operator,), {}))
    assert "test-dummy-op" in registered_names()
    shiftwatch.operators.registry._REGISTRY.pop("test-dummy-op")


def test_list_operators_shows_params_with_defaults():
    infos = {i.name: i for i in list_operators()}
    ph = infos["river:PageHinkley"]
    assert ph.params["threshold"] == 50.0 and ph.params["field"] == "value"
    assert ph.summary and ph.input_kind


# ---- Keyed ---------------------------------------------------------------------------


class Count(Operator):
    """Counts records and sums values per operator."""

    def __init__(self, start: int = 0):
        self.start = start
        self._reset()

    def _reset(self):
        self._n = self.start
        self._sum = np.zeros(2)

    def process(self, record):
        x = as_scalar(get_field(record, "value"))
        self._n += 1
        self._sum = self._sum + x
        return [self._output(record, n=self._n, total=float(self._sum[0]))]


def test_keyed_state_round_trip_with_odd_keys():
    keyed = Keyed(Count(start=10))
    keys = ["a", 3, None, ["x", 1], "\x00json:5", [["n"], 2]]
    recs = [{"key": k, "value": float(i)} for i, k in enumerate(keys * 3)]
    keyed.process_batch(recs[:8])
    restored = Keyed(Count(start=10))
    restored.load_state_dict(loads_state(dumps_state(keyed.state_dict())))
    assert set(restored.keys) == set(keyed.keys)
    assert restored.process_batch(recs[8:]) == keyed.process_batch(recs[8:])


def test_keyed_bad_record_does_not_create_a_key():
    keyed = Keyed(Count)
    with pytest.raises(BadInput):
        keyed.process({"key": "new", "value": "abc"})
    assert len(keyed) == 0
    out = keyed.process_batch([{"key": "n2", "value": None}, {"key": {"a": 1}, "value": 1.0},
                               {"key": "ok", "value": 1.0}])
    assert [type(o).__name__ for o in out] == ["DeadLetter", "DeadLetter", "dict"]
    assert keyed.keys == ["ok"]
    with pytest.raises(ValueError, match="keys"):
        keyed.load_state_dict({"operator": "keyed"})


def test_keyed_batch_matches_process_per_key():
    recs = [{"key": k, "value": float(i)} for i, k in enumerate("abcabbca")]
    a, b = Keyed(Count), Keyed(Count)
    loop = [o for r in recs for o in a.process(r)]
    batch = b.process_batch(recs)
    for k in "abc":
        assert [o for o in loop if o["key"] == k] == [o for o in batch if o["key"] == k]


# ---- DeadLetter and record helpers ---------------------------------------------------


def test_dead_letter_to_record_is_json():
    for raw in [b"\xff\xfebad", {"value": float("nan")}, object(), "line"]:
        rec = DeadLetter(raw=raw, reason="r", origin={"line": 1}).to_record()
        json.dumps(rec, allow_nan=False)
        assert rec["dead_letter"] is True and rec["reason"] == "r"
    assert DeadLetter(raw=b"abc", reason="x").to_record()["raw"] == "abc"


def test_get_field():
    rec = {"value": 1, "meta": {"t": {"u": 2}}}
    assert get_field(rec, "meta.t.u") == 2
    assert get_field(rec, "meta.x", default=None) is None
    with pytest.raises(BadInput, match="no field 'meta.x'"):
        get_field(rec, "meta.x")
    with pytest.raises(BadInput, match="not a mapping"):
        get_field([1], "value")
    with pytest.raises(BadInput):
        get_field({"value": 3}, "value.x")


@pytest.mark.parametrize(("value", "expected"), [
    (2, 2.0), (np.float32(0.5), 0.5), ([3.0], 3.0), (np.array([[4.0]]), 4.0),
])
def test_as_scalar_accepts(value, expected):
    assert as_scalar(value) == expected == as_scalar(value, loose=True)


@pytest.mark.parametrize(("value", "expected"), [
    ("2.5", 2.5), (True, 1.0), (np.bool_(False), 0.0), (["1e3"], 1000.0),
])
def test_as_scalar_takes_text_and_booleans_only_loosely(value, expected):
    with pytest.raises(BadInput, match="string|boolean"):
        as_scalar(value)
    assert as_scalar(value, loose=True) == expected


@pytest.mark.parametrize("value", [
    float("nan"), float("inf"), "abc", "", None, {"a": 1}, [1.0, 2.0], [], [[1.0, 2.0], [3.0]],
    10**400, ["x"],
])
def test_as_scalar_rejects_with_bad_input(value):
    with pytest.raises(BadInput):
        as_scalar(value)


def test_as_array_edge_cases():
    assert as_array([[1, 2], [3, 4]], shape=(None, 2)).shape == (2, 2)
    for bad, kw in [([[1.0], [2.0, 3.0]], {}), ([1.0, float("nan")], {}), ("x", {"ndim": 1}),
                    ([1.0, 2.0], {"ndim": 2}), ([[1.0, 2.0]], {"shape": (2, 2)}),
                    ([10**400], {}), ({"a": 1}, {})]:
        with pytest.raises(BadInput):
            as_array(bad, **kw)


# ---- the package's public names ------------------------------------------------------


def test_every_public_name_of_the_operator_modules_imports():
    # The packages' own __all__ are checked in tests/test_package_exports.py.
    for module in ["shiftwatch.records", "shiftwatch.operators.state_codec",
                   "shiftwatch.operators.contract", "shiftwatch.operators.registry",
                   "shiftwatch.operators.keyed", "shiftwatch.operators.with_input",
                   "shiftwatch.operators.source_info",
                   "shiftwatch.operators.object_state",
                   "shiftwatch.operators.river.adapter", "shiftwatch.operators.checks"]:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.{name}"


@pytest.mark.parametrize("name, params", [("river:PageHinkley", {"threshold": 10.0}),
                                          ("standardize", {"burn_in": 5}),
                                          ("cs", {})])
def test_keep_input_wrapper_passes_the_shared_checks(name, params):
    from shiftwatch.operators.checks import check_operator

    check_operator(name, {**params, "keep_input": True})


def test_keep_input_outputs_carry_input_fields_and_own_fields_win():
    from shiftwatch.operators import create

    op = create("standardize", burn_in=2, keep_input=True)
    recs = [{"key": "a", "offset": i, "value": float(i), "y": i % 2, "meta": {"s": 1}}
            for i in range(4)]
    outs = op.process_batch(recs)
    assert [o["meta"] for o in outs] == [{"s": 1}] * 4
    assert outs[-1]["value"] != recs[-1]["value"]  # the transform's value wins
    assert op.state_dict()["operator"] == "standardize"
    with pytest.raises(ValueError, match="keep_input"):
        create("standardize", keep_input="yes")
