"""``shape``'s batch path reads plain numbers without ``as_array`` (a hot path): the same
outputs and dead letters as the record-at-a-time path, whatever the values' types."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from shiftwatch.operators import create


def _mixed():
    path = Path(__file__).resolve().parents[1] / "mixed_values.py"
    spec = importlib.util.spec_from_file_location("mixed_values", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MIXED = _mixed()


def _stream(seed: int, n: int = 900) -> list:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = np.where(t < n // 2, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    return MIXED.mixed_records(y + 0.1 * rng.normal(size=n), rng)


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
    MIXED.same_outputs(fast, slow)
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
