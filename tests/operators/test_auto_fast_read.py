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


def _stream(seed: int, periodic: bool, n: int = 1500, new_period: bool = False) -> list:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    if periodic and new_period:  # a change of period, which class sees
        y = np.where(t < n // 2, np.sin(2 * np.pi * t / 12), np.sin(2 * np.pi * t / 19))
    elif periodic:  # a change of amplitude, which shape sees
        y = np.sin(2 * np.pi * t / 12) * np.where(t < n // 2, 1.0, 2.0)
    else:
        y = np.where(t < n // 2, 0.0, 2.0)
    return MIXED.mixed_records(y + 0.3 * rng.normal(size=n), rng)


def _process(op, record):
    try:
        return op.process(record)
    except BadInput as exc:
        return [op._dead_letter(record, exc)]


#: the default (class, a gated ADWIN beside it) and the one before it (shape or ADWIN)
OLD = {"period": "shape", "aperiodic": "level", "level_gate": None,
       "multichannel_delta": None}


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("level", ["adwin", "relay"])
@pytest.mark.parametrize("batch", [1, 50, 10_000])
@pytest.mark.parametrize("config", ["old", "mean", "median"])
def test_batches_equal_the_record_path_whatever_the_value_types(periodic, level, batch, config):
    recs = _stream(3, periodic, new_period=config != "old")
    params = {**(OLD if config == "old" else {"level_gate_stat": config}), "level": level}
    one = create("auto", **params)
    slow = [o for r in recs for o in _process(one, r)]
    op = create("auto", **params)
    fast = [o for k in range(0, len(recs), batch) for o in op.process_batch(recs[k:k + batch])]
    MIXED.same_outputs(fast, slow)
    assert any(not isinstance(o, dict) for o in fast)
    routes = {o["route"] for o in fast if isinstance(o, dict)}
    if config == "old":
        assert routes == ({"level", "shape"} if periodic else {"level"})
    else:  # class from its warm-up on (shape before it on a periodic key); "level" also
        # names a kept level alarm after it
        assert "class" in routes
        assert routes <= ({"level", "shape", "class"} if periodic else {"level", "class"})
    found = any(o.get("alarm") for o in fast if isinstance(o, dict))
    # The stream's hostile values include -1e150, in range: class's z-normalised
    # subsequences and a mean-form gate cannot see past it (auto.md, "A winsorised effect
    # size"), so on the default's ADWIN route only the relay's cs alarms are sure here; the
    # default's alarms on a clean stream, batch against record, are in test_auto_gate.py.
    assert found or (config != "old" and level == "adwin")
