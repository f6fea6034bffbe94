"""``shape``'s batch path reads plain numbers without ``as_array`` (a hot path): the same
outputs and dead letters as the record-at-a-time path, whatever the values' types."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.records import MAX_ABS


def _stream(seed: int, n: int = 900) -> list:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < n // 2, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    y = y + 0.1 * rng.normal(size=n)
    recs: list = []
    for i, v in enumerate(y):
        kind = rng.integers(12)
        value: object = float(v)
        if kind == 0:
            value = int(round(v * 3))
        elif kind == 1:
            value = np.float64(v)
        elif kind == 2 and i % 5 == 0:
            bad = ["x", float("nan"), float("inf"), True, None, 10 ** 400, MAX_ABS * 2,
                   [1.0, 2.0], -MAX_ABS]
            value = bad[int(rng.integers(len(bad)))]
        elif kind == 3:
            value = [float(v)]
        rec = {"key": "k", "ts": float(i) if kind != 4 else i, "value": value}
        if kind == 5:
            rec.pop("ts")
        recs.append(rec)
    return recs


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):
            assert x == y
        else:
            assert type(x) is type(y) and (x.reason, x.raw, x.origin) == (y.reason, y.raw, y.origin)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("batch", [1, 7, 100, 10_000])
def test_batches_equal_the_record_path_whatever_the_value_types(seed, batch):
    recs = _stream(seed)
    one = create("shape", period=10)
    slow = []
    for r in recs:
        slow += _process(one, r)
    op = create("shape", period=10)
    fast = [o for k in range(0, len(recs), batch) for o in op.process_batch(recs[k:k + batch])]
    _same(fast, slow)
    assert any(not isinstance(o, dict) for o in fast)  # the stream has dead letters
    assert any(o.get("alarm") for o in fast if isinstance(o, dict))


def _process(op, record):
    from shiftwatch.records import BadInput

    try:
        return op.process(record)
    except BadInput as exc:
        return [op._dead_letter(record, exc)]


def test_a_vector_after_scalars_in_one_batch_is_refused_as_before():
    recs = [{"value": float(i % 7)} for i in range(50)] + [{"value": [1.0, 2.0]}]
    out = create("shape").process_batch(recs)
    assert not isinstance(out[-1], dict) and "channels" in out[-1].reason
    vec = [{"value": [float(i % 7), 1.0]} for i in range(50)] + [{"value": 3.0}]
    out = create("shape").process_batch(vec)
    assert not isinstance(out[-1], dict) and "channels" in out[-1].reason
