"""``auto``'s batch path reads a routed key's plain numbers without ``as_array`` (a hot
path): the same outputs and dead letters as the record-at-a-time path, on both routes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from shiftwatch.operators import create
from shiftwatch.records import BadInput


def _mixed():
    path = Path(__file__).resolve().parent / "mixed_values.py"
    spec = importlib.util.spec_from_file_location("mixed_values", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MIXED = _mixed()


def _stream(seed: int, periodic: bool, n: int = 1500) -> list:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    if periodic:
        y = np.sin(2 * np.pi * t / 12) * np.where(t < n // 2, 1.0, 2.0)
    else:
        y = np.where(t < n // 2, 0.0, 2.0)
    return MIXED.mixed_records(y + 0.3 * rng.normal(size=n), rng)


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
    MIXED.same_outputs(fast, slow)
    assert any(not isinstance(o, dict) for o in fast)
    routes = {o["route"] for o in fast if isinstance(o, dict)}
    assert routes == ({"level", "shape"} if periodic else {"level"})
    assert any(o.get("alarm") for o in fast if isinstance(o, dict))
