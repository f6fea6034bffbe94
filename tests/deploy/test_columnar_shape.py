"""``shape`` on the replay's columnar path writes what the record path writes, byte for byte
(``outputs.jsonl``, ``dead_letters.jsonl``, ``keys.jsonl``, ``report.json``,
``report.html`` and the summary line), on periodic streams with bad rows; and its outputs do
not depend on where runs of records end."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from test_columnar_chain import _all_files
from test_columnar_replay import _BAD
from test_columnar_replay import _same as _replay_same

from shiftwatch.deploy import columnar
from shiftwatch.operators import create
from shiftwatch.operators.shape.operator import ShapeOperator

KEYED = ["--source-opt", "key=key", "--source-opt", "ts=ts"]


def _same(*args, **kwargs):
    return _replay_same(*args, files=_all_files, **kwargs)


def periodic_csv(path, n=6000, keys=4, seed=0, bad=0.03, ts=True):
    """``n`` rows over ``keys`` keys, each a noisy sine whose period changes (10 -> 17)
    half-way and again (17 -> 6) at three quarters; about ``bad`` of the rows broken."""
    rng = random.Random(seed)
    pos = [0] * keys
    out = ["key,ts,value" if ts else "key,value"]
    for i in range(n):
        u = rng.randrange(keys)
        t = pos[u]
        pos[u] += 1
        per = 10 if t < n // keys // 2 else 17 if t < 3 * n // keys // 4 else 6
        v = repr(round(math.sin(2 * math.pi * t / per) + rng.gauss(0, 0.15),
                       rng.randrange(2, 9)))
        stamp = str(i) if rng.random() > 0.02 else rng.choice(["", "x", str(i - 50)])
        if rng.random() < bad:
            v = rng.choice(_BAD)
        out.append(",".join([f"k{u}", *([stamp] if ts else []), v]))
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize("emit", ["all", "alarms"])
@pytest.mark.parametrize("params", [[], ["--param", "period=10", "--param", "threshold=4.0"],
                                    ["--param", 'threshold="null"'],
                                    ["--param", "asymmetry=true"]])
def test_same_files_as_the_record_path(monkeypatch, capsys, tmp_path, params, emit):
    path = periodic_csv(tmp_path / "s.csv", seed=1)
    got = _same(monkeypatch, capsys, tmp_path, path, ["--operator", "shape", *params] + KEYED,
                emit)
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    assert b'"change_at":' in got["outputs.jsonl"]  # alarms, located
    if emit == "all":
        assert got["outputs.jsonl"].count(b"\n") > 5000


@pytest.mark.parametrize("batch", ["1", "37", "5000"])
def test_same_files_for_batch_sizes_and_super_batches(monkeypatch, capsys, tmp_path, batch):
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 300)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 1)
    path = periodic_csv(tmp_path / "s.csv", n=4000, keys=3, seed=2, ts=batch != "37")
    opts = KEYED if batch != "37" else ["--source-opt", "key=key"]
    _same(monkeypatch, capsys, tmp_path, path, ["--operator", "shape"] + opts, "all",
          ["--batch-size", batch])


def _outputs(op, records, cuts):
    out, start = [], 0
    for end in [*cuts, len(records)]:
        out.extend(op.process_batch(records[start:end]))
        start = end
    return out


def test_change_ts_does_not_depend_on_where_runs_end(monkeypatch):
    """``change_ts`` is the ts of the record at ``change_at`` when that record is among the
    last ``TS_MEMORY`` at the alarm: the same whether the records come one by one, in a
    replay's micro-batches or in a Kafka stage's polls (it used to be the last
    ``TS_MEMORY`` at the end of the run, so a long run lost it)."""
    monkeypatch.setattr(ShapeOperator, "TS_MEMORY", 64)
    rng = np.random.default_rng(3)
    t = np.arange(1500)
    y = np.where(t < 700, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    y = y + 0.1 * rng.normal(size=t.size)
    records = [{"key": "k", "ts": 1000.0 + i, "offset": i, "value": float(v)}
               for i, v in enumerate(y)]
    one = _outputs(create("shape"), records, range(1, len(records)))
    alarms = [o for o in one if o["alarm"]]
    assert alarms and all("change_ts" in o for o in alarms if o["offset"] - o["change_at"] < 64)
    assert any("change_ts" in o for o in alarms)
    for cuts in ([], [300, 301, 1100], list(range(0, 1500, 97))):
        assert _outputs(create("shape"), records, cuts) == one
