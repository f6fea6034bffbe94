"""Bytes <-> records: the one decoding of a JSON message and the one encoding of an output.

Ground floor, like :mod:`shiftwatch.records` (the only shiftwatch module it imports),
so sources (:mod:`shiftwatch.streams`), sinks and the runtime all decode and encode the same way:

* :func:`parse_object` -- JSON text or bytes -> a mapping, or :class:`BadInput` saying why not
  (including input no record can legitimately be: see the limits below);
* :func:`as_value` -- the one check of a record's ``value`` (a finite number, or a numeric
  array as nested lists);
* :func:`decode_record` -- a Kafka message (value bytes, key bytes, timestamp) -> a record;
* :func:`jsonable`, :func:`dumps_record`, :func:`encode_record` -- one rule for values JSON
  cannot hold: NumPy scalars and arrays become numbers and lists, NaN and infinities ``null``,
  bytes UTF-8 text, tuples lists, anything else its ``repr``. Compact separators, so a record
  encodes to the same bytes in a replay's ``outputs.jsonl`` and on a Kafka topic.

Limits on hostile input. A JSONL line or a Kafka message comes from outside, so
:func:`parse_object` rejects, before any parser sees it, what no record can legitimately be
and what would make a parser crash or stall:

* :data:`MAX_MESSAGE_BYTES` (1 MiB): Kafka's default largest message (``message.max.bytes``,
  1 MiB plus 12 bytes of framing), so a record that can travel between two stages at all fits;
  a 100 x 100 matrix written with 17 digits per entry takes about 200 kB.
* :data:`MAX_DEPTH` (64 levels of objects and lists): a record is ``{"key", "ts", "value",
  "meta", ...}`` with a value at most a matrix (3 levels) and ``meta`` a few levels of tags.
  Deeper JSON is an attack or a bug: the standard library raises ``RecursionError`` at about
  1,000 levels and orjson 3.8 overflows the C stack (the process dies) at about 100,000.
* :data:`MAX_DIGITS` (100 digits per number): a float64 needs 17 significant digits to
  round-trip, an int64 19, a UUID read as an integer 39. Python refuses to convert integers of
  more than 4,300 digits (``ValueError``: converting them takes quadratic time), and an integer
  of more than 100 digits is beyond the magnitudes operators accept anyway
  (:data:`~shiftwatch.records.MAX_ABS`, 1e150).

Messages within the limits take the same path as before: orjson, or the standard library for
what orjson does not read exactly; checking the limits costs a length test and, for messages
longer than 64 bytes, counting their brackets.
"""

from __future__ import annotations

import enum
import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

try:  # a faster parser and encoder for the hot path; the standard library decides every
    import orjson  # other case

    _fast_loads = orjson.loads
    _fast_dumps = orjson.dumps
    # Dates, dataclasses and subclasses of str/int/dict/list go through the jsonable rule
    # (the hook) rather than orjson's own; Enum and UUID, which orjson always writes itself,
    # jsonable writes the same way (their value, and the UUID's text).
    _FAST_OPTIONS = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
                     | orjson.OPT_PASSTHROUGH_SUBCLASS)
except ImportError:  # pragma: no cover - orjson is a dependency; kept optional for vendoring
    _fast_loads = _fast_dumps = None

from shiftwatch.records import (
    MAX_ABS,
    BadInput,
    DeadLetter,
    as_array,
    as_scalar,
    get_field,
)

__all__ = ["parse_object", "as_value", "decode_record", "jsonable", "key_text", "dumps_record",
           "encode_record", "MAX_MESSAGE_BYTES", "MAX_DEPTH", "MAX_DIGITS"]

#: The largest message or JSONL line :func:`parse_object` takes, in bytes (of UTF-8 for text).
MAX_MESSAGE_BYTES = 1 << 20
#: The deepest nesting of objects and lists :func:`parse_object` takes.
MAX_DEPTH = 64
#: The most digits a number in a message may have (integer, fraction and exponent together).
MAX_DIGITS = 100


def _checked_int(text: str) -> int:
    # The standard library's parse_int hook: the digit limit before int() sees the text.
    if len(text) > MAX_DIGITS and len(text) - (text[0] == "-") > MAX_DIGITS:
        raise BadInput(f"number with more than {MAX_DIGITS} digits "
                       f"({len(text) - (text[0] == '-')} digits)")
    return int(text)


def _checked_float(text: str) -> float:
    if len(text) > MAX_DIGITS:
        digits = sum(c.isdigit() for c in text)
        if digits > MAX_DIGITS:
            raise BadInput(f"number with more than {MAX_DIGITS} digits ({digits} digits)")
    return float(text)


_DECODER = json.JSONDecoder()
# The same, checking the digits of each number: used on text with a long run of digits.
_DIGIT_DECODER = json.JSONDecoder(parse_int=_checked_int, parse_float=_checked_float)
# orjson reads integers of 19 or more digits as floats (json: exact ints); such text, like any
# text orjson rejects (NaN, a BOM, lone surrogates, bad JSON), goes to the standard library.
# ([0-9], not \d: the same for bytes, and faster.)
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
# A number of more than MAX_DIGITS digits has a run of more than a third of them (its digits
# come in at most three runs: integer part, fraction, exponent).
_MANY_DIGITS = re.compile(f"[0-9]{{{MAX_DIGITS // 3 + 1}}}")
# A JSON string, or an unterminated one up to the end (a lone backslash there included);
# DOTALL, so that a backslash escapes any byte as the parsers read it. Once begun at a quote a
# string always matches, so there is no backtracking: linear time on any input.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
# Brackets -> "(" and ")", every other byte deleted: the skeleton of the nesting.
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
# +1 for "(", -1 for ")".
_DEPTH_STEPS = np.zeros(256, dtype=np.int8)
_DEPTH_STEPS[ord("(")] = 1
_DEPTH_STEPS[ord(")")] = -1


def _nesting_depth(data: bytes) -> int:
    """The deepest nesting of objects and lists in JSON ``data`` (brackets in strings do not
    count). On invalid JSON it reads as the parsers do up to their first error, so it never
    underestimates the depth a parser would reach."""
    skeleton = (_STRING.sub(b"", data) if b'"' in data else data).translate(
        _BRACKETS, _NOT_BRACKETS)
    # Each pass removes the innermost pairs: on balanced brackets the passes count the depth
    # (a wide record, e.g. a matrix, needs a few passes over a short skeleton).
    rest, depth = skeleton, 0
    while rest and depth <= MAX_DEPTH:
        shorter = rest.replace(b"()", b"")
        if len(shorter) == len(rest):
            break
        rest, depth = shorter, depth + 1
    if not rest:
        return depth
    # Unbalanced, or deeper than the limit: the deepest prefix.
    steps = _DEPTH_STEPS[np.frombuffer(skeleton, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _check_limits(data: bytes | bytearray | str) -> None:
    """Raise :class:`BadInput` when ``data`` exceeds :data:`MAX_MESSAGE_BYTES` or
    :data:`MAX_DEPTH` (the digit limit is checked while parsing)."""
    n = len(data)
    if n <= MAX_DEPTH:  # too short to hold more than MAX_DEPTH opening brackets
        return
    text = isinstance(data, str)
    if text and n > MAX_MESSAGE_BYTES // 4:  # up to 4 bytes a character
        n = len(data.encode("utf-8", errors="surrogatepass"))
    if n > MAX_MESSAGE_BYTES:
        raise BadInput(f"message of {n} bytes is larger than {MAX_MESSAGE_BYTES} bytes")
    if (data.count("[") + data.count("{") if text
            else data.count(b"[") + data.count(b"{")) <= MAX_DEPTH:
        return  # the common case: few brackets at all
    depth = _nesting_depth(data.encode("utf-8", errors="surrogatepass") if text
                           else bytes(data))
    if depth > MAX_DEPTH:
        raise BadInput(f"JSON nested deeper than {MAX_DEPTH} levels ({depth} levels)")


def parse_object(data: bytes | bytearray | str | None) -> dict:
    """The JSON object ``data`` holds, or raise :class:`BadInput` saying why not.

    >>> parse_object(b'{"v": 1}')
    {'v': 1}
    >>> parse_object('{oops')
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: invalid JSON: Expecting property name enclosed in \
double quotes at column 2
    >>> parse_object("[1, 2]")
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: record is a JSON list, not an object
    """
    if type(data) is not bytes:
        if data is None:
            raise BadInput("message has no value (a tombstone)")
        if not isinstance(data, (bytes, bytearray, str)):
            raise BadInput(f"message is a {type(data).__name__}, not JSON text or bytes")
    if len(data) > MAX_DEPTH:  # (shorter messages are within every limit)
        _check_limits(data)
    if _fast_loads is not None and type(data) is bytes and not _LONG_DIGITS.search(data):
        try:
            obj = _fast_loads(data)
        except ValueError:
            pass  # the standard library gives the reason (or accepts what orjson does not)
        else:
            if type(obj) is dict:
                return obj
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("message is not UTF-8 text") from None
    try:
        obj = (_DIGIT_DECODER if _MANY_DIGITS.search(data) else _DECODER).decode(data)
    except json.JSONDecodeError as exc:
        raise BadInput(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise BadInput(f"record is a JSON {type(obj).__name__}, not an object")
    return obj


def as_value(raw: Any, name: str = "value", loose: bool = False) -> float | list:
    """A record's value checked: a finite float, or a finite numeric array as nested lists.

    ``name`` is the field it came from (for the reason of a :class:`BadInput`).

    >>> as_value(2.5), as_value([1, 2]), as_value("2.5", loose=True)
    (2.5, [1.0, 2.0], 2.5)
    >>> as_value(float("nan"), "temp")
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: temp is not finite: nan
    """
    if isinstance(raw, list):
        return as_array(raw, name=name, loose=loose).tolist()
    return as_scalar(raw, name, loose=loose)


def decode_record(data: bytes | bytearray | str | None, message_key: bytes | None = None, *,
                  value: str = "value", key: str | None = None, ts: str | None = None,
                  timestamp_ms: int | None = None, meta: Mapping | None = None,
                  loose: bool = False) -> dict:
    """The record a Kafka message holds, or raise :class:`BadInput` saying why not.

    The message's JSON object keeps all its fields; then ``value`` is set from the field
    ``value`` names (checked by :func:`as_value`: a JSON number or a list of them; with
    ``loose``, numeric strings and booleans are read as numbers too), ``key`` from the
    field ``key`` names (default: the record's own ``key``, else the message key), ``ts``
    from the field ``ts`` names (default: the record's own ``ts``, else the message
    timestamp in seconds; a numeric string is read, a boolean is not a time), and
    ``meta`` (e.g. ``{"kafka": {topic, partition, offset, timestamp}}``) is merged into the
    record's ``meta``.

    >>> decode_record(b'{"temp": 3, "sensor": "s1", "ts": 5}', None, value="temp", key="sensor")
    {'temp': 3, 'sensor': 's1', 'ts': 5.0, 'value': 3.0, 'key': 's1'}
    >>> decode_record(b'{"value": [1, 2]}', b"k", timestamp_ms=1500)
    {'value': [1.0, 2.0], 'ts': 1.5, 'key': 'k'}
    """
    record = parse_object(data)
    if ts is not None:
        record["ts"] = _ts(get_field(record, ts))
    elif "ts" in record:
        record["ts"] = _ts(record["ts"])
    elif timestamp_ms is not None and timestamp_ms >= 0:
        record["ts"] = timestamp_ms / 1000
    raw = record[value] if "." not in value and value in record else get_field(record, value)
    if loose:
        record["value"] = as_value(raw, value, loose=True)
    else:
        record["value"] = _scalar(raw, value) if type(raw) is not list else as_value(raw, value)
    if key is not None:
        k = get_field(record, key, None)
        if k is None and message_key is not None:
            k = message_key.decode("utf-8", errors="replace")
        if isinstance(k, dict):
            raise BadInput("key is an object; keys must be strings, numbers or lists")
        record["key"] = k
    elif "key" not in record and message_key is not None:
        record["key"] = message_key.decode("utf-8", errors="replace")
    if meta:
        old = record.get("meta")
        record["meta"] = {**old, **meta} if isinstance(old, dict) else dict(meta)
    return record


def _ts(raw: Any, _lo: float = -MAX_ABS, _hi: float = MAX_ABS) -> float:
    # A time may come as a numeric string ("1700000000.5"), as a file source reads it; a
    # boolean is not a time.
    if type(raw) is float and _lo <= raw <= _hi:
        return raw
    return as_scalar(raw, "ts", loose=type(raw) is str)


def _scalar(raw: Any, name: str, _lo: float = -MAX_ABS, _hi: float = MAX_ABS) -> float:
    # as_scalar, without its checks for the common case of a float within +-MAX_ABS (the
    # bounds as defaults: local lookups)
    if type(raw) is float and _lo <= raw <= _hi:
        return raw
    return as_scalar(raw, name)


def jsonable(obj: Any) -> Any:
    """Return ``obj`` as plain JSON values: NumPy types converted, NaN and infinities as None.

    Tuples and arrays become lists, mapping keys become strings, dead letters become their
    record, bytes their UTF-8 text, an ``Enum`` its value, a ``UUID`` its text, and anything
    else unknown becomes its ``repr``. The
    result always passes ``json.dumps(..., allow_nan=False)``.

    Examples
    --------
    >>> jsonable({"x": np.float32(0.5), "v": np.arange(3), "s": float("nan"), 1: (True,)})
    {'x': 0.5, 'v': [0, 1, 2], 's': None, '1': [True]}
    """
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, Mapping):
        return {(k if isinstance(k, str) else key_text(k)): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, DeadLetter):
        return jsonable(obj.to_record())
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("utf-8", errors="replace")
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, uuid.UUID):
        return str(obj)
    return repr(obj)


def key_text(key: Any) -> str:
    """A record key as a stable string (keys may be ints, or lists from JSON): how reports
    and JSON objects index per-key results."""
    if isinstance(key, str):
        return key
    if isinstance(key, (tuple, list)):
        return json.dumps(jsonable(key))
    return str(jsonable(key))


# The last resort, for what orjson refuses (integers beyond 64 bits, lone surrogates, keys
# that are not str): the standard library on the jsonable form.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _default(obj: Any) -> Any:
    # orjson's hook for what it does not write itself: NumPy values, dead letters, bytes, and
    # (passed through) dates, dataclasses and subclasses -- all by the jsonable rule.
    if isinstance(obj, str):
        return str(obj)
    return jsonable(obj)


def encode_record(record: Any) -> bytes:
    """One line of compact UTF-8 JSON for ``record``: the value of a Kafka message, and a
    line of a replay's ``outputs.jsonl``.

    Values JSON cannot hold follow the :func:`jsonable` rule (NaN and infinities ``null``,
    NumPy values as numbers and lists, ...). Floats are written in their shortest
    round-trip form (``1e-05`` as ``0.00001``, ``1e+16`` as ``1e16``) and text as UTF-8,
    by orjson; what orjson refuses (an integer beyond 64 bits, a lone surrogate, a key that
    is not a string) is written by the standard library from the :func:`jsonable` form.

    >>> encode_record({"key": "a", "alarm": np.bool_(True), "s": float("nan")})
    b'{"key":"a","alarm":true,"s":null}'
    >>> encode_record({1: 2**70})
    b'{"1":1180591620717411303424}'
    """
    if _fast_dumps is not None:
        try:
            return _fast_dumps(record, default=_default, option=_FAST_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError
            pass
        plain = jsonable(record)
        try:
            return _fast_dumps(plain, option=_FAST_OPTIONS)
        except TypeError:
            pass
    else:
        plain = jsonable(record)
    return _ENCODER.encode(plain).encode("utf-8")


def dumps_record(record: Any) -> str:
    """:func:`encode_record` as text.

    >>> dumps_record({"key": "a", "statistic": float("nan"), "v": np.array([1.5])})
    '{"key":"a","statistic":null,"v":[1.5]}'
    """
    return encode_record(record).decode("utf-8")
