"""The codec's fast paths give exactly what the slow rules give: orjson parsing the same
records as the standard library; orjson encoding with a hook the same bytes as orjson on the
:func:`jsonable` form (the standard library where orjson refuses), and the same values as the
standard library's encoding of that form."""

from __future__ import annotations

import json
import random

import numpy as np
import orjson
import pytest

from shiftwatch.codec import (
    _ENCODER,
    decode_record,
    dumps_record,
    encode_record,
    jsonable,
    parse_object,
)
from shiftwatch.deploy.kafka.checkpoint import state_bytes
from shiftwatch.operators.state_codec import dumps_state, loads_state
from shiftwatch.records import BadInput, DeadLetter


def reference_dumps(record):
    plain = jsonable(record)
    try:
        return orjson.dumps(plain).decode()
    except TypeError:  # beyond 64 bits, a lone surrogate
        return _ENCODER.encode(plain)


class Sub(dict):
    pass


RECORDS = [
    {"key": "a", "v": np.float32(0.1), "n": np.int64(3), "b": np.bool_(True), "x": float("nan")},
    {"key": True, "d": {True: 1, None: 2, 1.5: 3, 2: 4}},
    {"a": (1, 2.5, np.inf)},
    {"a": np.array([1.0, np.nan])},
    {"a": np.array([[1, 2]]), "s": np.str_("x")},
    {"a": b"bytes", "e": "\u00e9\u2028\ud800"},
    {"dl": DeadLetter(raw=b"x", reason="r", origin={"offset": 1})},
    {"o": object},
    {"a": [{"b": {(1, 2): 3}}]},
    {"f": 1e16, "g": 1e-5, "h": -0.0, "i": np.float64(np.nan), "j": 2 ** 70},
    {"m": {"k": np.float64(2.5)}, "l": [np.int32(1), None], "sub": Sub({1.5: 2})},
    {"key": "k1", "ts": 1.0, "offset": 5, "alarm": False, "lower": None, "upper": 0.5,
     "input": {"topic": "t", "partition": 0, "offset": 5, "n": 0}},
]


@pytest.mark.parametrize("record", RECORDS, ids=range(len(RECORDS)))
def test_dumps_record_equals_the_jsonable_rule(record):
    assert dumps_record(record) == reference_dumps(record)
    assert json.loads(dumps_record(record)) == json.loads(_ENCODER.encode(jsonable(record)))


def test_floats_are_shortest_round_trip_and_text_is_utf8():
    assert encode_record({"f": 1e16, "g": 1e-5, "h": -0.0, "e": "\u00e9"}) == (
        '{"f":1e16,"g":0.00001,"h":-0.0,"e":"\u00e9"}'.encode())
    rng = random.Random(1)
    for _ in range(5000):
        x = rng.gauss(0, 1) * 10 ** rng.randint(-320, 300)
        assert json.loads(encode_record({"v": x}))["v"] == x


def test_parse_object_equals_json_on_random_numbers():
    rng = random.Random(0)
    for _ in range(3000):
        x = rng.choice([rng.random(), rng.uniform(-1e300, 1e300),
                        rng.gauss(0, 1) * 10 ** rng.randint(-300, 300),
                        rng.randint(-2 ** 70, 2 ** 70), rng.randint(-10 ** 6, 10 ** 6)])
        texts = [repr(x), str(x)] + ([f"{x:.17e}", f"{x:.3g}"] if isinstance(x, float) else [])
        for t in texts:
            data = f'{{"v": {t}, "w": [{t}], "s": "{t}"}}'.encode()
            got, want = parse_object(data), json.loads(data)
            assert got == want
            assert repr(got["v"]) == repr(want["v"]) and type(got["v"]) is type(want["v"])


@pytest.mark.parametrize("data", [b'{"v": NaN}', b'{"v": 1e400}', b'{"s": "\\ud800"}',
                                  b'{"a": 1, "a": 2}', b'{"big": 123456789012345678901}',
                                  "{\"v\": 1}".encode("utf-16"), b"\xef\xbb\xbf{}"])
def test_parse_object_falls_back_to_the_standard_rule(data):
    try:
        want = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        with pytest.raises(BadInput):
            parse_object(data)
    else:
        assert json.dumps(parse_object(data)) == json.dumps(want)  # NaN-safe


def test_decode_record_fast_path_keeps_the_checks():
    assert decode_record(b'{"value": 2, "ts": "3"}') == {"value": 2.0, "ts": 3.0}
    # a boolean is not a number (issue 38, 6), unless read loosely
    with pytest.raises(BadInput, match="boolean"):
        decode_record(b'{"value": true}')
    assert decode_record(b'{"value": true}', loose=True)["value"] == 1.0
    with pytest.raises(BadInput, match="boolean"):
        decode_record(b'{"value": 1.0, "ts": true}')
    with pytest.raises(BadInput, match="not finite"):
        decode_record(b'{"value": NaN}')
    with pytest.raises(BadInput, match="ts is not finite"):
        decode_record(b'{"value": 1.0, "ts": -Infinity}')
    got = decode_record(b'{"value": 1.5, "meta": {"a": 1}}', meta={"kafka": {"offset": 3}})
    assert got["meta"] == {"a": 1, "kafka": {"offset": 3}}


def test_state_bytes_round_trip_is_exact():
    rng = np.random.default_rng(0)
    state = {"x": rng.normal(size=50), "f": [float(v) for v in rng.normal(size=50) * 1e-300],
             "inf": float("inf"), "t": (1, "\u00e9"), 3: None, "big": 2 ** 70}
    for s in (state, {k: v for k, v in state.items() if k != "big"}):
        assert dumps_state(loads_state(state_bytes(s))) == dumps_state(s)


@pytest.mark.parametrize("data", [b'{"big": 123456789012345678901}', b'[-9999999999999999999]',
                                  b'[18446744073709551616, 1.5]', b'"\\ud800"', b'[1e400]',
                                  b'{"a": 1, "a": 2}', b'[0.1, -0.0, 9223372036854775807]'])
def test_loads_state_reads_what_json_reads(data):
    # orjson reads the states unless json would read them otherwise (integers beyond 64 bits
    # as floats, lone surrogates, 1e400): the same values and types either way
    from shiftwatch.operators.state_codec import loads_state

    for text in (data, data.decode()):
        got, want = loads_state(text), json.loads(data)
        assert json.dumps(got) == json.dumps(want)
        assert [type(v) for v in (got if isinstance(got, list) else [got])] == \
            [type(v) for v in (want if isinstance(want, list) else [want])]
