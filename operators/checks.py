"""The shared check suite every registered operator passes (River ``checks``, scikit-learn's
``parametrize_with_checks``).

Each check takes an operator name and parameters, constructs the operator with
:func:`~shiftwatch.operators.registry.create`, feeds it the operator class's
``_test_stream(params)`` and ``_bad_records(params)`` and raises ``AssertionError`` describing
the first difference. ``tests/operators/test_checks.py`` runs every check over every name in
:func:`~shiftwatch.operators.registry.registered_names` and every ``_unit_test_params()`` set,
so a new operator is checked as soon as it is registered. An operator that cannot meet a check
says so, with the reason, in :data:`OPT_OUTS`.

Examples
--------
>>> from shiftwatch.operators.checks import check_operator, yield_checks
>>> [c.__name__ for c in yield_checks("river:PageHinkley", {})][:3]
['check_construct_repr_clone', 'check_state_roundtrip', 'check_batch_equals_process']
>>> check_operator("river:PageHinkley", {"threshold": 10.0})
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.registry import create
from shiftwatch.operators.state_codec import dumps_state, loads_state
from shiftwatch.records import BadInput, DeadLetter

__all__ = [
    "OPT_OUTS",
    "yield_checks",
    "check_operator",
    "outputs_equal",
    "check_construct_repr_clone",
    "check_state_roundtrip",
    "check_batch_equals_process",
    "check_bad_input",
    "check_huge_values",
    "check_no_input_mutation",
    "check_keyed",
]

#: ``{operator name: {check name: reason}}``: checks an operator is excused from, and why.
OPT_OUTS: dict[str, dict[str, str]] = {}


def _fail(msg: str) -> None:
    raise AssertionError(msg)


def outputs_equal(a: Any, b: Any) -> bool:
    """Equality of outputs that treats NaN as equal to NaN and compares arrays exactly.

    >>> outputs_equal({"x": [np.array([1.0, np.nan])]}, {"x": [np.array([1.0, np.nan])]})
    True
    >>> outputs_equal({"x": 1.0}, {"x": 1.0 + 1e-16}), outputs_equal({"x": 1.0}, {"x": 1.1})
    (True, False)
    """
    if isinstance(a, DeadLetter) or isinstance(b, DeadLetter):
        return (isinstance(a, DeadLetter) and isinstance(b, DeadLetter)
                and a.reason == b.reason and outputs_equal(a.raw, b.raw))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        if a_arr.shape != b_arr.shape or a_arr.dtype != b_arr.dtype:
            return False
        if a_arr.dtype.kind in "fc":
            return bool(np.array_equal(a_arr, b_arr, equal_nan=True))
        return bool(np.array_equal(a_arr, b_arr))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(outputs_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(outputs_equal(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return bool(a == b or (math.isnan(a) and math.isnan(b)))
    return bool(type(a) is type(b) and a == b) or (
        isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_)) and a == b)


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if not outputs_equal(x, y):
            return f"output {i} differs: {x!r} != {y!r}"
    return f"lengths differ: {len(a)} != {len(b)}"


def _expect_same(a: list, b: list, what: str) -> None:
    if not outputs_equal(a, b):
        _fail(f"{what}: {_first_difference(a, b)}")


def _hooks(op: Operator) -> type[Operator]:
    return type(op)


def _stream(name: str, params: dict, seed: int = 0) -> tuple[Operator, list[dict]]:
    op = create(name, **params)
    return op, _hooks(op)._test_stream(params, seed=seed)


def _run(op: Operator, records: list[dict]) -> list:
    out: list = []
    for r in records:
        out.extend(op.process(r))
    return out


# --------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------


def check_construct_repr_clone(name: str, params: dict) -> None:
    """Construct from params; ``repr`` works; a clone has equal params and fresh state."""
    op, stream = _stream(name, params)
    text = repr(op)
    if not isinstance(text, str) or not text:
        _fail(f"{name}: repr is empty")
    fresh = dumps_state(create(name, **params).state_dict())
    _run(op, stream[: len(stream) // 2])
    clone = op.clone()
    if type(clone) is not type(op):
        _fail(f"{name}: clone is a {type(clone).__name__}, not a {type(op).__name__}")
    if not outputs_equal(clone._get_params(), op._get_params()):
        _fail(f"{name}: clone params {clone._get_params()} != {op._get_params()}")
    if repr(clone) != text:
        _fail(f"{name}: repr of the clone differs: {repr(clone)} != {text}")
    if dumps_state(clone.state_dict()) != fresh:
        _fail(f"{name}: a clone of a used operator does not start from a fresh state")


def check_state_roundtrip(name: str, params: dict) -> None:
    """state_dict -> JSON bytes -> a fresh clone midway: identical outputs on the rest."""
    op, stream = _stream(name, params)
    for cut in (0, len(stream) // 3, len(stream) // 2):
        op = create(name, **params)
        _run(op, stream[:cut])
        blob = dumps_state(op.state_dict())
        if not isinstance(blob, bytes):
            _fail(f"{name}: dumps_state did not give bytes")
        json.loads(blob)  # plain JSON, readable without shiftwatch
        restored = op.clone()
        restored.load_state_dict(loads_state(blob))
        if dumps_state(restored.state_dict()) != blob:
            _fail(f"{name}: state_dict after load_state_dict differs from the one loaded "
                  f"(cut at record {cut})")
        _expect_same(_run(restored, stream[cut:]), _run(op, stream[cut:]),
                     f"{name}: restored at record {cut}")


def check_batch_equals_process(name: str, params: dict) -> None:
    """``process_batch(records)`` equals ``process`` in a loop, whole and in pieces."""
    a, stream = _stream(name, params)
    b = create(name, **params)
    c = create(name, **params)
    expected = _run(a, stream)
    _expect_same(b.process_batch(stream), expected, f"{name}: process_batch(all)")
    pieces: list = []
    for i in range(0, len(stream), 37):
        pieces.extend(c.process_batch(stream[i:i + 37]))
    _expect_same(pieces, expected, f"{name}: process_batch in batches of 37")


def check_bad_input(name: str, params: dict) -> None:
    """Each bad record, fed after the first half of the test stream, raises a one-line
    BadInput, leaves the state untouched, and becomes a DeadLetter in place under
    process_batch."""
    op, stream = _stream(name, params)
    bad_records = _hooks(op)._bad_records(params)
    if not bad_records:
        _fail(f"{name}: _bad_records gave no records")
    half = len(stream) // 2
    prefix, rest = stream[:half], stream[half:]
    for bad in bad_records:
        victim, twin = create(name, **params), create(name, **params)
        _run(victim, prefix)
        _run(twin, prefix)
        before = dumps_state(victim.state_dict())
        try:
            victim.process(copy.deepcopy(bad))
        except BadInput as exc:
            msg = str(exc)
            if not isinstance(exc, ValueError) or not msg.strip() or "\n" in msg:
                _fail(f"{name}: BadInput for {bad!r} needs a one-line message, got {msg!r}")
        except Exception as exc:  # the check reports any other exception as a failure
            _fail(f"{name}: {bad!r} raised {type(exc).__name__}: {exc} instead of BadInput")
        else:
            _fail(f"{name}: accepted the bad record {bad!r}")
        if dumps_state(victim.state_dict()) != before:
            _fail(f"{name}: rejecting {bad!r} changed the state")
        _expect_same(_run(victim, rest), _run(twin, rest), f"{name}: after rejecting {bad!r}")
        batcher, twin = create(name, **params), create(name, **params)
        out = batcher.process_batch([*prefix, bad, *rest])
        ref_prefix, ref_rest = twin.process_batch(prefix), twin.process_batch(rest)
        at = len(ref_prefix)
        if len(out) != at + 1 + len(ref_rest) or not isinstance(out[at], DeadLetter):
            _fail(f"{name}: process_batch did not put a DeadLetter in place of {bad!r}")
        letter = out[at]
        if not letter.reason or "\n" in letter.reason:
            _fail(f"{name}: dead letter for {bad!r} has reason {letter.reason!r}")
        _expect_same(out[:at] + out[at + 1:], ref_prefix + ref_rest,
                     f"{name}: process_batch around {bad!r}")
        json.dumps(letter.to_record(), allow_nan=False)


def _with_huge(value: Any, huge: float) -> Any:
    """``value`` (a number, vector or matrix) with one entry replaced by ``huge``: the first
    diagonal entry of a square matrix (so an SPD matrix stays symmetric), else the first."""
    if isinstance(value, list) and value:
        out = copy.deepcopy(value)
        if isinstance(out[0], list) and out[0]:
            if isinstance(out[0][0], list):  # deeper: recurse into the first entry
                out[0] = _with_huge(out[0], huge)
            else:
                out[0][0] = huge
        else:
            out[0] = huge
        return out
    return huge


def _set_path(record: dict, path: str, fn: Callable[[Any], Any]) -> dict:
    out = copy.deepcopy(record)
    cur = out
    parts = path.split(".")
    for part in parts[:-1]:
        cur = cur[part]
    cur[parts[-1]] = fn(cur[parts[-1]])
    return out


def check_huge_values(name: str, params: dict) -> None:
    """A value beyond the operator's ``max_abs`` (+-1e300, and twice ``max_abs``; for a
    vector or matrix, one such entry) is rejected like a bad record, fed after the first half
    of the test stream: a one-line BadInput naming ``max_abs``, the state untouched, a
    DeadLetter in place under process_batch. (Accepted, such a value can overflow a square or
    a product and leave the state infinite or NaN.)"""
    op, stream = _stream(name, params)
    field = getattr(getattr(op, "operator", op), "field", "value")  # (inside WithInput too)
    field = field if isinstance(field, str) else "value"
    limit = float(op.max_abs)
    hugs = [1e300, -1e300] + ([2 * limit, -2 * limit] if 2 * limit < 1e300 else [])
    half = len(stream) // 2
    template = next((r for r in stream[half:] if isinstance(r, dict)), None)
    if template is None:
        _fail(f"{name}: the test stream has no record to make huge")
    try:
        bads = [_set_path(template, field, lambda v, h=h: _with_huge(v, h)) for h in hugs]
    except (KeyError, TypeError):
        _fail(f"{name}: the test stream's records have no field {field!r}")
    # Lighter than check_bad_input (one prefix, all huge records in one place, a short rest):
    # the state comparison after each rejection is what matters.
    prefix, rest = stream[:half], stream[half:half + 20]
    _run(op, prefix)
    before = dumps_state(op.state_dict())
    for bad in bads:
        try:
            op.process(copy.deepcopy(bad))
        except BadInput as exc:
            msg = str(exc)
            if not msg.strip() or "\n" in msg or "max_abs" not in msg:
                _fail(f"{name}: BadInput for {bad!r} needs a one-line reason naming max_abs, "
                      f"got {msg!r}")
        except Exception as exc:  # the check reports any other exception as a failure
            _fail(f"{name}: {bad!r} raised {type(exc).__name__}: {exc} instead of BadInput")
        else:
            _fail(f"{name}: accepted the huge value in {bad!r}")
        if dumps_state(op.state_dict()) != before:
            _fail(f"{name}: rejecting {bad!r} changed the state")
    batcher, twin = create(name, **params), create(name, **params)
    out = batcher.process_batch([*prefix, *bads, *rest])
    ref_prefix, ref_rest = twin.process_batch(prefix), twin.process_batch(rest)
    at = len(ref_prefix)
    if len(out) != at + len(bads) + len(ref_rest) or not all(
            isinstance(o, DeadLetter) for o in out[at:at + len(bads)]):
        _fail(f"{name}: process_batch did not put DeadLetters in place of the huge values")
    _expect_same(out[:at] + out[at + len(bads):], ref_prefix + ref_rest,
                 f"{name}: process_batch around the huge values")


def check_no_input_mutation(name: str, params: dict) -> None:
    """Neither ``process`` nor ``process_batch`` changes the records it is given."""
    op, stream = _stream(name, params)
    bad = _hooks(op)._bad_records(params)
    records = stream + bad
    snapshot = copy.deepcopy(records)
    for r in stream:
        op.process(r)
    for r in bad:
        try:
            op.process(r)
        except BadInput:
            pass
    create(name, **params).process_batch(records)
    Keyed(create(name, **params)).process_batch(records)
    if not outputs_equal(records, snapshot):
        _fail(f"{name}: {_first_difference(records, snapshot)} (an input record was mutated)")


def check_keyed(name: str, params: dict) -> None:
    """Inside :class:`Keyed`, two interleaved keys give the outputs of two separate
    operators, through process, process_batch and a state round-trip midway."""
    op, a = _stream(name, params, seed=0)
    b = _hooks(op)._test_stream(params, seed=1)
    a = [{**r, "key": "a"} for r in a]
    b = [{**r, "key": 7} for r in b]
    interleaved = [r for pair in zip(a, b, strict=False) for r in pair]
    expected = {"a": _run(create(name, **params), a), 7: _run(create(name, **params), b)}

    def per_key(outputs: list) -> dict:
        groups: dict = {"a": [], 7: []}
        for o in outputs:
            groups[o["key"]].append(o)
        return groups

    keyed = Keyed(create(name, **params))
    got = per_key(_run(keyed, interleaved))
    for k in expected:
        _expect_same(got[k], expected[k], f"{name}: Keyed.process, key {k!r}")
    half = len(interleaved) // 2
    keyed = Keyed(create(name, **params))
    first = keyed.process_batch(interleaved[:half])
    restored = keyed.clone()
    restored.load_state_dict(loads_state(dumps_state(keyed.state_dict())))
    if sorted(map(str, restored.keys)) != ["7", "a"]:
        _fail(f"{name}: Keyed keys after a state round-trip are {restored.keys}")
    got = per_key(first + restored.process_batch(interleaved[half:]))
    for k in expected:
        _expect_same(got[k], expected[k], f"{name}: Keyed.process_batch + restore, key {k!r}")


_CHECKS: tuple[Callable[[str, dict], None], ...] = (
    check_construct_repr_clone,
    check_state_roundtrip,
    check_batch_equals_process,
    check_bad_input,
    check_huge_values,
    check_no_input_mutation,
    check_keyed,
)


def yield_checks(name: str, params: dict) -> Iterator[Callable[[str, dict], None]]:
    """The checks ``name`` takes part in (those not opted out in :data:`OPT_OUTS`)."""
    skipped = OPT_OUTS.get(name, {})
    for check in _CHECKS:
        if check.__name__ not in skipped:
            yield check


def check_operator(name: str, params: dict | None = None) -> None:
    """Run every check on ``name`` with ``params``; raise AssertionError on the first failure."""
    params = dict(params or {})
    for check in yield_checks(name, params):
        check(name, params)
