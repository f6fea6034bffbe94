"""The columnar River path's batch helpers give what the record path's pieces give, bit for
bit: the locate window's slice push and its slice-wise growth, the compiled mean-split search,
the ADWIN statistics written for all keys at once, and the key-by-key loop."""

from __future__ import annotations

import numpy as np
import pytest

from shiftwatch.operators.keyed import Keyed, columns_by_key, key_segments, sort_by_key
from shiftwatch.operators.locate import ValueWindow, mean_change_split
from shiftwatch.operators.river import columns as rc


def _windows_equal(a: ValueWindow, b: ValueWindow) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        if isinstance(sa[k], np.ndarray):
            assert np.array_equal(sa[k], sb[k], equal_nan=True), k
        else:
            assert sa[k] == sb[k], k
    assert (a.start, a.count, len(a)) == (b.start, b.count, len(b))


@pytest.mark.parametrize("seed", range(6))
def test_push_slice_is_push_many(seed):
    rng = np.random.default_rng(seed)
    cap = int(rng.integers(2, 300))
    a, b = ValueWindow(cap), ValueWindow(cap)
    xs = rng.normal(size=5000)
    ts = np.where(rng.random(5000) < 0.1, np.nan, np.arange(5000.0))
    with_ts = seed % 2 == 0
    i = 0
    while i < xs.shape[0]:
        k = int(rng.integers(0, 2 * cap + 3))
        j = min(xs.shape[0], i + k)
        t = ts if with_ts and i > 50 else None  # (no ts at first, then ts)
        a.push_many(xs[i:j], None if t is None else t[i:j].tolist())
        b.push_slice(xs, t, i, j)
        _windows_equal(a, b)
        if rng.random() < 0.2:  # an alarm: keep the post-change values
            at = int(rng.integers(a.start, a.count + 1))
            a.drop_before(at)
            b.drop_before(at)
        i = j


@pytest.mark.parametrize("seed", range(4))
def test_mean_split_is_mean_change_split(seed):
    rng = np.random.default_rng(100 + seed)
    assert rc._mean_ok()
    for _ in range(300):
        cap = int(rng.integers(2, 1200))
        w = ValueWindow(cap)
        level = rng.normal(0.0, 10.0 ** rng.integers(-2, 5))
        n = int(rng.integers(2, 3 * cap))
        x = level + rng.normal(size=n) * rng.uniform(0.01, 3.0)
        x[n // 2:] += rng.normal(0.0, 3.0) * (rng.random() < 0.7)
        if rng.random() < 0.2:
            x = np.round(x)  # ties
        w.push_many(x)
        if rng.random() < 0.3:
            w.drop_before(int(rng.integers(w.start, w.count)))
        if len(w) < 2:
            continue
        want = mean_change_split(w.values())[0]
        assert rc._mean_split(w._buf, w._phys, w.start, len(w)) == want


def test_fill_runs_is_cumsum_over_width():
    rng = np.random.default_rng(5)
    xs = rng.normal(size=1000)
    order = rng.permutation(1000)
    stat = np.full(1000, np.nan)
    lo, hi = np.array([0, 300, 301]), np.array([300, 301, 1000])
    width, total = np.array([7.0, 0.0, 40.0]), np.array([3.25, 0.0, -11.5])
    rc._fill_runs(xs, order, lo, hi, width, total, stat)
    for a, b, w, t in zip(lo, hi, width, total, strict=True):
        run = np.cumsum(np.concatenate(([t], xs[a:b])))[1:]
        want = run / (w + np.arange(1, b - a + 1, dtype=np.float64))
        assert np.array_equal(stat[order[a:b]], want)


def test_key_segments_split_at_bad_values_and_first_records():
    from shiftwatch.operators.river.adapter import RiverDetector

    keyed = Keyed(lambda: RiverDetector("ADWIN"))
    keys = ["a", "b", "c"]
    inv = np.array([0, 1, 0, 2, 0, 0, 1, 0, 2, 0])
    values = np.array([1.0, 2.0, np.nan, 3.0, 4.0, 1e300, 5.0, 6.0, 7.0, 8.0])

    def record(i):
        return {"key": keys[inv[i]], "value": float(values[i]), "ts": float(i)}

    n = values.shape[0]
    accepted, alarm, special, dead = np.ones(n, bool), np.zeros(n, bool), {}, []
    by_key = sort_by_key(inv, values, len(keys), 1e12)
    order = by_key[0]
    got = [(k, order[lo:hi].tolist()) for op, lo, hi in key_segments(
        keyed, keys, by_key, record, lambda op: True, accepted, alarm, special, dead)
        for k in [next(k for k in keys if keyed.existing(k) is op)]]
    # a's rows 0, 2, 4, 5, 7, 9: 0 is its first record, 2 (NaN) and 5 (beyond max_abs) bad
    assert got == [("a", [4]), ("a", [7, 9]), ("b", [6]), ("c", [8])]
    assert sorted(special) == [0, 1, 3] and len(dead) == 2
    assert accepted.tolist() == [i not in (2, 5) for i in range(n)]
    seen: list = []
    keyed2 = Keyed(lambda: RiverDetector("ADWIN"))
    columns_by_key(keyed2, keys, inv, values, record, 1e12, lambda op: True,
                   lambda op, rows, xs: seen.append((rows.tolist(), xs.tolist())),
                   np.ones(n, bool), np.zeros(n, bool), {}, [])
    assert seen == [([4], [4.0]), ([7, 9], [6.0, 8.0]), ([6], [5.0]), ([8], [7.0])]


def test_order_by_key_is_a_stable_argsort():
    rng = np.random.default_rng(9)
    for n_keys in (1, 7, 300, 70_000):
        inv = rng.integers(0, n_keys, 50_000)
        want = np.argsort(inv, kind="stable")
        assert np.array_equal(rc._order_by_key(inv, n_keys), want)
        assert np.array_equal(sort_by_key(inv, inv * 1.0, n_keys, 1e12)[0], want)
    assert rc._order_by_key(np.zeros(0, dtype=np.int64), 3).shape == (0,)


def _replay_files(monkeypatch, capsys, path, out, args, record):
    import os

    from shiftwatch.deploy.cli import main
    from shiftwatch.deploy.columnar import RECORD_PATH_ENV

    if record:
        monkeypatch.setenv(RECORD_PATH_ENV, "1")
    else:
        monkeypatch.delenv(RECORD_PATH_ENV, raising=False)
    assert main(["replay", str(path), *args, "--out", str(out), "--no-plots",
                 "--no-progress", "--quiet"]) == 0
    capsys.readouterr()
    return {name: open(os.path.join(out, name), "rb").read().replace(str(out).encode(), b"O")
            for name in ("outputs.jsonl", "dead_letters.jsonl", "keys.jsonl", "report.json")}


@pytest.mark.parametrize("args", [
    ["--param", "delta=0.2", "--param", "locate_window=40"],  # many alarms, a small window
    ["--param", "delta=0.2", "--param", "locate=meanvar"],
    ["--param", "delta=0.2", "--param", "locate=false"],
    ["--param", "clock=1", "--param", "locate_window=3", "--batch-size", "7"],
])
@pytest.mark.parametrize("ts", [True, False])
def test_adwin_columns_are_the_record_path(monkeypatch, capsys, tmp_path, args, ts):
    rng = np.random.default_rng(len(args) + ts)
    n, keys = 6000, 37
    key = rng.integers(0, keys, n)
    level = np.where(np.arange(n) > n // 3, 3.0, 0.0) * (key % 3 == 0)
    value = np.round(level + rng.normal(size=n), int(rng.integers(1, 9)))
    lines = ["key,ts,value" if ts else "key,value"]
    for i in range(n):
        v = "nan" if rng.random() < 0.004 else repr(float(value[i]))
        lines.append(f"k{key[i]},{i},{v}" if ts else f"k{key[i]},{v}")
    path = tmp_path / "s.csv"
    path.write_text("\n".join(lines) + "\n")
    op = ["--operator", "river:ADWIN", "--source-opt", "key=key", *args] + (
        ["--source-opt", "ts=ts"] if ts else [])
    calls: list = []
    real = rc._adwin_segment
    monkeypatch.setattr(rc, "_adwin_segment", lambda *a: calls.append(1) or real(*a))
    a = _replay_files(monkeypatch, capsys, path, tmp_path / "rec", op, True)
    assert not calls
    b = _replay_files(monkeypatch, capsys, path, tmp_path / "col", op, False)
    assert calls  # (the columnar path was taken)
    assert a == b
    assert b"change_at" in a["outputs.jsonl"] or "locate=false" in args
