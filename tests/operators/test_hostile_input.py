"""Hostile input (issue 22, "never lose a record"): property tests that nothing a source can
deliver makes the decoder or an operator raise anything but ``BadInput``.

* The decoder: arbitrary bytes, JSON-like fragments, deep nesting and long numbers into
  :func:`parse_object` and :func:`decode_record` give a dict or a ``BadInput``, and what
  decodes agrees with the standard library.
* Every registered operator (with each of its check-suite parameter sets), warmed up on the
  first records of its check-suite stream, then given arbitrary JSON values and records shaped
  like its own with hostile values in ``value`` (whole, one entry, scaled, an SPD matrix with
  hostile eigenvalues), ``key``, ``ts``, ``y``, ``task`` and the other fields it reads:

  - ``op.process(record)`` returns outputs or raises a one-line ``BadInput``, and a rejection
    leaves ``state_dict`` exactly as it was;
  - ``Keyed(op).process_batch(records)`` and the stage executor
    (:class:`~shiftwatch.deploy.executor.StageExecutor`, from the bytes of each record through
    ``admit``) give for every input its outputs or exactly one dead letter, never both, and
    a batch of only rejected records leaves the state as it was;
  - every output encodes (:func:`encode_record`).

Example counts keep the default run short (torch learners get the fewest); ``-m slow`` runs
many more.
"""

from __future__ import annotations

import copy
import json
import math
import re
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shiftwatch.codec import (
    MAX_DEPTH,
    decode_record,
    encode_record,
    parse_object,
)
from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.registry import create, registered_names, resolve
from shiftwatch.operators.state_codec import dumps_state, loads_state
from shiftwatch.records import BadInput, DeadLetter, as_scalar

LEARNERS = {"hare-tortoise", "cila"}
FAST = settings(max_examples=10, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
FAST_EXAMPLES, OTHER_EXAMPLES, LEARNER_EXAMPLES = 30, 10, 4  # per parameter set (-m slow: 300, 40)


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------

#: Numbers that break arithmetic: beyond max_abs, near the float limits, subnormal, non-finite,
#: integers beyond float range.
SPECIAL_NUMBERS = [1e300, -1e300, 1e308, -1.7976931348623157e308, 1.01e150, -2e150, 1e150,
                   1e38, 3.5e38, 1e-300, -5e-324, 1e-160, 0.0, -0.0, float("nan"), float("inf"),
                   float("-inf"), 10 ** 400, -(10 ** 400), 2 ** 64, -(2 ** 63) - 1]
numbers = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
    st.booleans(),
)
strings = st.one_of(st.text(max_size=8), st.sampled_from(
    ["1e400", "nan", "-inf", "1e300", " 3 ", "0x10", "1_000", "", "\u0663", "\ud800", "k"]))
scalars = st.one_of(st.none(), numbers, strings)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=10)


def _leaf_paths(value, prefix=()):
    if isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaf_paths(v, (*prefix, i))
    else:
        yield prefix


def _set_in(value, path, new):
    if not path:
        return new
    out = list(value)
    out[path[0]] = _set_in(value[path[0]], path[1:], new)
    return out


def _get_path(record, path):
    cur = record
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _put_path(record, path, new):
    out = copy.deepcopy(record)
    cur = out
    parts = path.split(".")
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = new
    return out


SCALES = [1e-200, 1e-160, 1e-75, 1e75, 1e140, 1e149, 1e151, 1e155, 1e200, 1e300, -1.0, 0.0]


@st.composite
def hostile_value(draw, value):
    """A hostile variant of a valid ``value`` (number, vector or matrix)."""
    kind = draw(st.sampled_from(["json", "leaf", "leaf", "scale", "eigen", "symmetric"]))
    if kind == "json" or not isinstance(value, (list, float, int)):
        return draw(json_values)
    arr = np.asarray(value, dtype=float)
    if kind == "scale":
        return (arr * draw(st.sampled_from(SCALES))).tolist()
    if kind == "eigen" and arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
        # An SPD matrix with hostile eigenvalues (beyond 1e+-150, or a huge condition number).
        n = arr.shape[0]
        lam = draw(st.lists(st.sampled_from([1e-320, 1e-300, 1e-160, 1e-150, 1e-20, 1.0, 1e20,
                                             1e150, 1e151, 1e200, 1e300, 1e308]),
                            min_size=n, max_size=n))
        q = np.linalg.qr(np.random.default_rng(draw(st.integers(0, 99))).normal(size=(n, n)))[0]
        m = (q * np.asarray(lam)) @ q.T
        return (0.5 * (m + m.T)).tolist()
    if kind == "symmetric" and arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
        i, j = draw(st.integers(0, arr.shape[0] - 1)), draw(st.integers(0, arr.shape[0] - 1))
        x = draw(numbers)
        out = [list(r) for r in value]
        out[i][j] = out[j][i] = x
        return out
    paths = list(_leaf_paths(value))
    path = draw(st.sampled_from(paths))
    return _set_in(value, path, draw(st.one_of(numbers, scalars, json_values)))


@st.composite
def hostile_record(draw, template, field):
    """A record shaped like ``template`` with something hostile in it."""
    kind = draw(st.sampled_from(["value", "value", "value", "value", "key", "ts", "y", "task",
                                 "extra", "drop", "whole", "valid"]))
    if kind == "valid":
        return copy.deepcopy(template)
    if kind == "whole":
        return draw(json_values)
    if kind == "value":
        return _put_path(template, field, draw(hostile_value(_get_path(template, field))))
    if kind == "drop":
        out = copy.deepcopy(template)
        name = draw(st.sampled_from(sorted(out)))
        del out[name]
        return out
    if kind == "extra":
        name = draw(st.sampled_from(["alarm", "train", "meta", "burn_in", "value", "y_pred"]))
        return {**copy.deepcopy(template), name: draw(json_values)}
    return {**copy.deepcopy(template), kind: draw(json_values)}


# --------------------------------------------------------------------------------------
# Operators, warmed up once per parameter set
# --------------------------------------------------------------------------------------


def _configs(learners: bool) -> list:
    out = []
    for name in registered_names():
        if (name in LEARNERS) != learners:
            continue
        for i, _ in enumerate(resolve(name)._unit_test_params()):
            out.append(pytest.param(name, i, id=f"{name}-{i}"))
    return out


def _params(name: str, index: int) -> dict:
    return dict(list(resolve(name)._unit_test_params())[index])


@cache
def _warm(name: str, index: int) -> tuple:
    """(stream, the operator's state bytes, Keyed's state bytes) after the warm-up."""
    params = _params(name, index)
    op = create(name, **params)
    stream = type(op)._test_stream(params)
    warm = stream[: 24 if name in LEARNERS else 45]
    op.process_batch(copy.deepcopy(warm))
    keyed = Keyed(create(name, **params))
    keyed.process_batch(copy.deepcopy(warm))
    return stream, dumps_state(op.state_dict()), dumps_state(keyed.state_dict())


def _field(op) -> str:
    field = getattr(getattr(op, "operator", op), "field", "value")
    return field if isinstance(field, str) else "value"


def _one_line(exc: BadInput) -> None:
    msg = str(exc)
    assert msg.strip() and "\n" not in msg, f"BadInput needs a one-line message, got {msg!r}"


def _dumps(obj):
    # JSON text as a hostile producer may write it: NaN/Infinity tokens, huge integers.
    try:
        return json.dumps(obj, allow_nan=True).encode("utf-8", errors="surrogatepass")
    except (TypeError, ValueError):
        return repr(obj).encode("utf-8", errors="surrogatepass")


def _account(inputs: int, items: list, offset_of) -> None:
    """Every input has its outputs or exactly one dead letter, never both."""
    dead: dict = {}
    produced: set = set()
    for item in items:
        off = offset_of(item)
        if isinstance(item, DeadLetter) or (isinstance(item, dict) and item.get("dead_letter")):
            assert off not in dead or off is None, f"two dead letters for input {off}"
            dead[off] = dead.get(off, 0) + 1
        else:
            assert isinstance(item, dict), f"an output is a {type(item).__name__}"
            produced.add(off)
            encode_record(item)  # every output can be written
    assert not (set(dead) - {None}) & produced, "an input has outputs and a dead letter"
    assert sum(dead.values()) <= inputs


def _exercise(name: str, index: int, data) -> None:
    params = _params(name, index)
    stream, state, keyed_state = _warm(name, index)
    template_op = create(name, **params)
    field = _field(template_op)
    rest = stream[45:] or stream[-5:]
    templates = st.sampled_from(rest)
    records = data.draw(st.lists(templates.flatmap(lambda t: hostile_record(t, field)),
                                 min_size=1, max_size=4), label="records")

    # 1. The operator itself: outputs or a one-line BadInput, and a rejection changes nothing.
    op = create(name, **params)
    op.load_state_dict(loads_state(state))
    for record in copy.deepcopy(records):
        before = dumps_state(op.state_dict())
        try:
            outs = op.process(record)
        except BadInput as exc:
            _one_line(exc)
            assert dumps_state(op.state_dict()) == before, f"rejecting {record!r} changed state"
        else:
            assert isinstance(outs, list)
            for o in outs:
                encode_record(o)

    # 2. Keyed: outputs or one dead letter per input; only rejections: state unchanged.
    batch = [{**r, "offset": 1000 + i} if isinstance(r, dict) else r
             for i, r in enumerate(copy.deepcopy(records))]
    keyed = Keyed(create(name, **params))
    keyed.load_state_dict(loads_state(keyed_state))
    out = keyed.process_batch(batch)

    def offset_of(item):
        origin = item.origin if isinstance(item, DeadLetter) else None
        return (origin.get("offset") if origin is not None else
                item.get("offset") if isinstance(item, dict) else None)

    _account(len(batch), out, offset_of)
    for item in out:
        if isinstance(item, DeadLetter):
            assert item.reason and "\n" not in item.reason
            json.dumps(item.to_record(), allow_nan=False)
    if len(out) == len(batch) and all(isinstance(o, DeadLetter) for o in out):
        assert dumps_state(keyed.state_dict()) == keyed_state, "only rejections changed state"

    # 3. The stage executor, from each record's bytes.
    keyed = Keyed(create(name, **params))
    keyed.load_state_dict(loads_state(keyed_state))
    ex = StageExecutor([keyed])
    admitted, letters = [], []
    for i, r in enumerate(records):
        item = ex.admit(_dumps(r), b"k", {"offset": i}, i)
        if isinstance(item, DeadLetter):
            _one_line(BadInput(item.reason))
            letters.append(ex.dead_letter(item))
        elif item is not None:
            admitted.append(item)
    result = ex.process(admitted)
    items = letters + result.dead_letters + result.outputs
    _account(len(records), items, lambda o: o.get("origin", {}).get("offset")
             if o.get("dead_letter") else o.get("offset"))
    if not result.outputs and len(letters) + len(result.dead_letters) == len(records):
        assert dumps_state(keyed.state_dict()) == keyed_state, "only rejections changed state"


def _check_property(name: str, index: int, examples: int) -> None:
    @settings(FAST, max_examples=examples)
    @given(data=st.data())
    def hostile_records_are_dead_letters(data):
        _exercise(name, index, data)

    hostile_records_are_dead_letters()


@pytest.mark.parametrize(("name", "index"), _configs(learners=False))
def test_operators_take_hostile_records(name, index):
    # The first parameter set of each operator gets most of the default run's examples.
    _check_property(name, index, FAST_EXAMPLES if index == 0 else OTHER_EXAMPLES)


@pytest.mark.parametrize(("name", "index"), _configs(learners=True))
def test_learners_take_hostile_records(name, index):
    pytest.importorskip("torch")
    _check_property(name, index, LEARNER_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "index"), _configs(learners=False))
def test_operators_take_hostile_records_many(name, index):
    _check_property(name, index, 300)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "index"), _configs(learners=True))
def test_learners_take_hostile_records_many(name, index):
    pytest.importorskip("torch")
    _check_property(name, index, 40)


# --------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------

FRAGMENTS = [b"[", b"]", b"{", b"}", b'"', b"\\", b":", b",", b" ", b"1", b"-", b".", b"e",
             b"9" * 40, b"0" * 120, b'"value"', b'"key"', b'"ts"', b"null", b"true", b"NaN",
             b"-Infinity", b"1e400", b"\xff", b"\xef\xbb\xbf", b"\\u0000", b"\\ud800", b"\n"]
fragments = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(b"".join)


@st.composite
def deep_json(draw):
    """(JSON text nested ``levels`` deep, closed or not, ``levels``)."""
    depth = draw(st.integers(1, 120_000))
    opener, per = draw(st.sampled_from([(b"[", 1), (b'{"a":', 1), (b'{"value": 1, "m":[', 2),
                                        (b'["[", ', 1), (b"[{}, ", 1)]))
    text = opener * depth
    if draw(st.booleans()):
        text += b"1" + b"]" * depth
    if draw(st.booleans()):
        return b'{"value": 1, "m": ' + text + b"}", per * depth + 1
    return text, per * depth


@st.composite
def record_text(draw):
    """JSON text of a record-like value, sometimes cut, spliced or with a long number."""
    value = draw(st.one_of(json_values, st.fixed_dictionaries(
        {"key": json_values, "value": json_values}, optional={"ts": json_values})))
    text = _dumps(value)
    how = draw(st.sampled_from(["as is", "as is", "cut", "splice", "digits"]))
    if how == "cut" and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif how == "splice":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(fragments) + text[at:]
    elif how == "digits":
        text = b'{"key": "s1", "value": ' + b"9" * draw(st.integers(1, 6000)) + b"}"
    return text


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _decode_checks(data) -> None:
    for text in ([data] + ([data.decode("utf-8")] if _utf8(data) else [])):
        try:
            got = parse_object(text)
        except BadInput as exc:
            _one_line(exc)
            got = None
        else:
            assert type(got) is dict
            want = json.loads(text)  # within the limits the standard library agrees
            assert _same(got, want), (got, want)
        try:
            rec = decode_record(text, b"k", timestamp_ms=5)
        except BadInput as exc:
            _one_line(exc)
        else:
            assert type(rec) is dict and got is not None
            encode_record(rec)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(FAST, max_examples=300)
@given(st.one_of(st.binary(max_size=200), fragments, record_text()))
def test_decoder_gives_a_dict_or_bad_input(data):
    _decode_checks(data)


@settings(FAST, max_examples=40)
@given(deep_json())
def test_decoder_rejects_deep_json(case):
    data, levels = case
    _decode_checks(data)
    if levels > MAX_DEPTH:
        with pytest.raises(BadInput, match=f"nested deeper than {MAX_DEPTH} levels|larger than"):
            parse_object(data)


@pytest.mark.slow
@settings(FAST, max_examples=5000)
@given(st.one_of(st.binary(max_size=400), fragments, record_text(),
                 deep_json().map(lambda case: case[0])))
def test_decoder_gives_a_dict_or_bad_input_many(data):
    _decode_checks(data)


# --------------------------------------------------------------------------------------
# The crashes the properties found, and the examples, pinned
# --------------------------------------------------------------------------------------


def test_adwin_dead_letters_1e308_and_still_detects_the_shift():
    # Accepted before, 1e308 made ADWIN's variance infinite: it never alarmed again.
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, 1000), rng.normal(5, 1, 300)]
    records = [{"key": "k", "ts": float(i), "value": float(v)} for i, v in enumerate(x)]
    records.insert(500, {"key": "k", "ts": 499.5, "value": 1e308})
    for out in (create("river:ADWIN").process_batch(records),
                Keyed(create("river:ADWIN")).process_batch(records)):
        assert isinstance(out[500], DeadLetter)
        assert out[500].reason == "value 1e+308 is beyond the magnitude limit max_abs=1e+150"
        alarms = [o["ts"] for o in out if isinstance(o, dict) and o["alarm"]]
        assert alarms and 1000 <= alarms[0] < 1050


KARCHER = {"manifold": "spd", "burn_in": 30, "threshold": 0.3, "update": "retraction"}


@pytest.mark.parametrize(("diag", "reason"), [
    ([1e308, 1, 1], "value 1e+308 is beyond the magnitude limit max_abs=1e+150"),
    ([1e-320, 1e-320, 1e-320], "value has eigenvalues in [1e-320, 1e-320], beyond the limits "
                               "[1e-150, 1e+150]"),  # the kernel raised ValueError
    ([1e-200, 1, 1], "value has eigenvalues in [1e-200, 1], beyond the limits [1e-150, 1e+150]"),
    ([1e13, 1, 1], "value has condition number 1e+13, above the limit 1e+12"),
])
def test_karcher_dead_letters_spd_matrices_the_geometry_cannot_take(diag, reason):
    stream = resolve("karcher")._test_stream(KARCHER)
    q = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0]
    rotated = (q * diag) @ q.T if max(diag) < 1e300 else np.diag(diag)
    for m, why in ((np.diag(diag), reason), (0.5 * (rotated + rotated.T), None)):
        op, twin = create("karcher", **KARCHER), create("karcher", **KARCHER)
        op.process_batch(stream[:50])
        twin.process_batch(stream[:50])
        before = dumps_state(op.state_dict())
        bad = {"key": "k", "value": m.tolist()}
        with pytest.raises(BadInput) as exc:
            op.process(bad)
        assert why is None or str(exc.value) == why
        assert dumps_state(op.state_dict()) == before
        out = op.process_batch([bad, *stream[50:]])
        assert isinstance(out[0], DeadLetter) and out[1:] == twin.process_batch(stream[50:])


def test_karcher_rejects_a_point_that_would_make_the_estimates_overflow(monkeypatch):
    # Validated points keep the estimates finite but for corner cases of the arithmetic; a
    # kernel that turns them NaN on one marked point stands in for those.
    from shiftwatch.operators.riemannian import karcher

    mark = np.array([0.0, 0.0, 1.0])
    real = karcher._KERNELS["sphere"]

    def poisoned(xs, p0, p1, s0, s1, retraction, out):
        for t in range(len(xs)):
            real(xs[t:t + 1], p0, p1, s0, s1, retraction, out[t:t + 1])
            if np.array_equal(xs[t], mark):
                p0[:] = np.nan

    monkeypatch.setitem(karcher._KERNELS, "sphere", poisoned)
    params = {"manifold": "sphere", "burn_in": 30, "threshold": 0.2}
    stream = resolve("karcher")._test_stream(params)
    marked = [*stream[:60], {"key": "k", "value": mark.tolist()}, *stream[60:]]
    want = create("karcher", **params).process_batch(stream)
    assert any(o["alarm"] for o in want)
    batch = create("karcher", **params).process_batch(marked)
    assert isinstance(batch[60], DeadLetter) and batch[60].reason == karcher.OVERFLOW_REASON
    assert batch[:60] + batch[61:] == want
    op = create("karcher", **params)
    looped = []
    for r in marked:
        try:
            looped += op.process(r)
        except BadInput as exc:
            assert str(exc) == karcher.OVERFLOW_REASON
            looped.append(None)
    assert looped[:60] + looped[61:] == want and looped[60] is None
    det = karcher.KarcherDetector("sphere", burn_in=30)
    xs = np.array([r["value"] for r in marked])
    with pytest.raises(BadInput, match=r"overflow \(not finite\) \(point 60 of 201\)"):
        det.update_many(xs)
    twin = karcher.KarcherDetector("sphere", burn_in=30)
    twin.update_many(xs[:60])
    assert dumps_state(det.state_dict()) == dumps_state(twin.state_dict())
    with pytest.raises(BadInput, match=r"overflow \(not finite\) \(xs\[60\]\)"):
        karcher.KarcherDetector("sphere").score_many(xs)


def test_huge_integer_ts_is_no_ts():
    # float(ts) raised OverflowError (River adapter's batch path, and every numeric_ts caller).
    for name, params in [("river:ADWIN", {"delta": 0.01, "clock": 8}),
                         ("river:DummyDriftDetector", {"seed": 3, "field": "meta.x"}),
                         ("cs", {}), ("karcher", KARCHER)]:
        stream = resolve(name)._test_stream(params)
        records = [{**r, "ts": 10 ** 400 + i} for i, r in enumerate(stream)]
        out = create(name, **params).process_batch(records)
        assert len(out) == len(records) and not any(isinstance(o, DeadLetter) for o in out)
        assert all("change_ts" not in o for o in out)


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learners_reject_what_float32_cannot_square_and_huge_labels(name):
    pytest.importorskip("torch")
    params = _params(name, 0)
    stream = resolve(name)._test_stream(params)
    op = create(name, **params)
    op.process_batch(stream[:24])
    before = dumps_state(op.state_dict())
    r = stream[30]
    for bad, reason in [({**r, "value": [1e20] + r["value"][1:]}, "max_abs=1e+15"),
                        ({**r, "value": [-1e39] + r["value"][1:]}, "max_abs=1e+15")]:
        with pytest.raises(BadInput, match=re.escape(reason)):
            op.process(bad)
        assert dumps_state(op.state_dict()) == before
    # float(y) raised OverflowError: Hare & Tortoise takes class indices, CILA any label
    huge = {**r, "y": 10 ** 400}
    if name == "hare-tortoise":
        with pytest.raises(BadInput, match="is not a class index"):
            op.process(huge)
        assert dumps_state(op.state_dict()) == before
    else:
        assert op.process(huge)[0]["y"] == 10 ** 400
    assert op.process({**r, "value": [1e15] + r["value"][1:]})  # the limit itself is taken


def test_as_scalar_rejects_lists_nested_beyond_numpy():
    x = 1.0
    for _ in range(10_000):
        x = [x]
    with pytest.raises(BadInput, match="value is a nested list, expected a number"):
        as_scalar(x)  # RecursionError before
    with pytest.raises(BadInput, match="not a numeric array"):
        create("river:ADWIN").process({"value": x})


# --------------------------------------------------------------------------------------
# The rule for time and duplicates (deploy/time_rule.py) ahead of a detector
# --------------------------------------------------------------------------------------

TIME_RULES = [{"allowed_lateness_seconds": 0.0, "drop_duplicates": 4},
              {"allowed_lateness_seconds": 7.5, "drop_duplicates": 0},
              {"allowed_lateness_seconds": None, "drop_duplicates": 2}]


@st.composite
def shuffled_stream(draw, stream):
    """Records of ``stream`` with ts jittered back and forth, exact duplicates of earlier
    ones, a second key, and hostile records among them."""
    out: list = []
    pos = 100
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["next", "next", "next", "late", "dup", "hostile", "key",
                                     "ts"]))
        template = stream[pos % len(stream)]
        if kind == "dup" and out:
            out.append(copy.deepcopy(draw(st.sampled_from(out))))
            continue
        pos += 1
        rec = copy.deepcopy(template)
        if kind == "late":
            rec["ts"] = rec["ts"] - draw(st.sampled_from([0.0, 1.0, 7.5, 7.50001, 30.0, 1e300]))
        elif kind == "key":
            rec["key"] = "k2"
        elif kind == "ts":
            rec["ts"] = draw(st.one_of(numbers, scalars, json_values))
        elif kind == "hostile":
            rec = draw(hostile_record(template, "value"))
        out.append(rec)
    return out


def _run_chain(name: str, time: dict, parts: list[list], restart: bool) -> tuple:
    """The stage executor (admit from bytes, then the rule and ``name``) over ``parts``,
    one batch each; with ``restart`` every operator's state goes through the changelog codec
    into fresh operators between batches. Returns (the executor, [(inputs, batch)])."""
    from shiftwatch.deploy.time_rule import rule_operator

    def fresh():
        return StageExecutor([rule_operator(time), create(name)])

    ex, runs, offset = fresh(), [], 0
    for part in parts:
        if restart:
            saved = [dumps_state(op.state_dict()) for op in ex.operators]
            summary = ex.summary
            ex = fresh()
            ex.summary = summary
            for op, state in zip(ex.operators, saved, strict=True):
                op.load_state_dict(loads_state(state))
        admitted, letters = [], []
        for r in part:
            item = ex.admit(_dumps(r), b"k", {"offset": offset}, offset)
            offset += 1
            if isinstance(item, DeadLetter):
                letters.append(ex.dead_letter(item))
            elif item is not None:
                admitted.append(item)
        batch = ex.process(admitted)
        runs.append((len(part), letters, admitted, batch))
    return ex, runs


@pytest.mark.parametrize("name", ["river:PageHinkley", "river:ADWIN"])
def test_time_rule_bounds_lateness_and_duplicates_on_hostile_records(name):
    from shiftwatch.deploy.time_rule import fingerprint

    stream = resolve(name)._test_stream({})

    @settings(FAST, max_examples=40)
    @given(data=st.data())
    def bounded(data):
        time = data.draw(st.sampled_from(TIME_RULES), label="time")
        records = data.draw(shuffled_stream(stream), label="records")
        cut = data.draw(st.integers(0, len(records)), label="cut")
        parts = [records[:cut], records[cut:]]
        ex, runs = _run_chain(name, time, parts, restart=False)
        limit, window = time["allowed_lateness_seconds"], time["drop_duplicates"]
        latest: dict = {}
        recent: dict = {}
        silent = 0
        for n, letters, admitted, batch in runs:
            items = letters + batch.dead_letters + batch.outputs
            _account(n, items, lambda o: o.get("origin", {}).get("offset")
                     if o.get("dead_letter") else o.get("offset"))
            answered = ({o["offset"] for o in batch.outputs}
                        | {d["origin"]["offset"] for d in batch.dead_letters})
            silent += sum(1 for r in admitted if r["offset"] not in answered)
            for d in batch.dead_letters:
                if d["operator"] == "time":
                    assert d["reason"].startswith("late: ") and "\n" not in d["reason"]
            for r in batch.inputs:  # what passed the rule, in input order
                k = repr(r.get("key"))
                ts = r.get("ts")
                if type(ts) is float and math.isfinite(ts):
                    if limit is not None and k in latest:
                        assert ts >= latest[k] - limit, "a record later than the bound passed"
                    latest[k] = max(latest.get(k, ts), ts)
                fp = fingerprint(r)
                if window:
                    assert fp is None or fp not in recent.get(k, [])[-window:], \
                        "an exact duplicate within the window passed"
                recent.setdefault(k, []).append(fp)
            for o in batch.outputs:
                c, ts = o.get("change_ts"), o.get("ts")
                if isinstance(c, float) and isinstance(ts, float):
                    assert c <= ts, "change_ts after the alarm's ts"
        assert ex.summary.duplicates_dropped == silent  # only duplicates give nothing
        # a restart between the batches (states through the changelog codec) changes nothing
        _, again = _run_chain(name, time, parts, restart=True)
        for (_, l1, _, b1), (_, l2, _, b2) in zip(runs, again, strict=True):
            assert encode_record([l1, b1.dead_letters, b1.outputs]) == \
                encode_record([l2, b2.dead_letters, b2.outputs])

    bounded()
