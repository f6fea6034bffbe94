"""``auto``'s batch path reads a routed key's plain numbers without ``as_array`` (a hot
path): the same outputs and dead letters as the record-at-a-time path, on both routes."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.records import MAX_ABS, BadInput


def _stream(seed: int, periodic: bool, n: int = 1500) -> list:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    if periodic:
        y = np.sin(2 * np.pi * t / 12) * np.where(t < n // 2, 1.0, 2.0)
    else:
        y = np.where(t < n // 2, 0.0, 2.0)
    y = y + 0.3 * rng.normal(size=n)
    bad = ["x", float("nan"), float("inf"), True, None, 10 ** 400, MAX_ABS * 2, [1.0, 2.0],
           -MAX_ABS]
    recs: list = []
    for i, v in enumerate(y):
        kind = int(rng.integers(12))
        value: object = float(v)
        if kind == 0:
            value = int(round(v * 3))
        elif kind == 1:
            value = np.float64(v)
        elif kind == 2 and i % 5 == 0:
            value = bad[int(rng.integers(len(bad)))]
        elif kind == 3:
            value = [float(v)]
        rec = {"key": "k", "ts": float(i) if kind != 4 else i, "value": value}
        if kind == 5:
            rec.pop("ts")
        recs.append(rec)
    return recs


def _process(op, record):
    try:
        return op.process(record)
    except BadInput as exc:
        return [op._dead_letter(record, exc)]


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("level", ["adwin", "relay"])
@pytest.mark.parametrize("batch", [1, 50, 10_000])
def test_batches_equal_the_record_path_whatever_the_value_types(periodic, level, batch):
    recs = _stream(3, periodic)
    one = create("auto", level=level)
    slow = [o for r in recs for o in _process(one, r)]
    op = create("auto", level=level)
    fast = [o for k in range(0, len(recs), batch) for o in op.process_batch(recs[k:k + batch])]
    assert len(fast) == len(slow)
    for x, y in zip(fast, slow, strict=True):
        if isinstance(x, dict):
            assert x == y
        else:
            assert type(x) is type(y) and (x.reason, x.raw, x.origin) == (y.reason, y.raw,
                                                                            y.origin)
    assert any(not isinstance(o, dict) for o in fast)
    routes = {o["route"] for o in fast if isinstance(o, dict)}
    assert routes == ({"level", "shape"} if periodic else {"level"})
    assert any(o.get("alarm") for o in fast if isinstance(o, dict))
