"""``[embed ->] window_covariance -> karcher`` on the columnar path writes what the record path
writes, byte for byte (every file and the summary line), on streams with bad rows: vectors
from a CSV's value columns, or numbers through ``embed``."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_columnar_chain import _same
from test_columnar_replay import _BAD, messy_csv

from shiftwatch.deploy import Pipeline, columnar
from shiftwatch.deploy.columnar import columnar_run
from shiftwatch.operators import create
from shiftwatch.operators.riemannian.window_kernel import cov_windows
from shiftwatch.sinks import JsonlSink
from shiftwatch.streams.files import CsvSource

KEYED = ["--source-opt", "key=key", "--source-opt", "ts=ts"]
VEC = ["--source-opt", "value=[a, b, c]"]


def vector_csv(path, n=3000, keys=5, seed=0, bad=0.04, huge=0.0, ts=True, key=True,
               order=("key", "ts", "a", "b", "c"), crlf=False, flat=False):
    """``n`` rows of 3 channels whose correlation changes half way, about ``bad`` of them
    broken; ``huge`` of them with a channel at 1e140 (a covariance beyond MAX_ABS, which
    ``karcher`` refuses); with ``flat``, key k0's channel c is constant and its channel a
    1e5 times larger for a while (without shrinkage a condition number above the limit)."""
    rng = random.Random(seed)
    cols = [c for c in order if (c != "ts" or ts) and (c != "key" or key)]
    out = [",".join(cols)]
    for i in range(n):
        k = f"k{rng.randrange(keys)}"
        z = [rng.gauss(0.0, 1.0) for _ in range(3)]
        if i > n // 2:  # channel b follows a
            z[1] = 0.9 * z[0] + 0.3 * z[1]
        cells = {"key": k, "ts": str(i), "a": repr(z[0]), "b": repr(z[1]), "c": repr(z[2])}
        if rng.random() < huge:
            cells["c"] = "1e140"
        if flat and k == "k0" and n // 4 < i < n // 2:
            cells["a"], cells["c"] = repr(z[0] * 1e5), "5.0"
        if rng.random() < bad:
            which = rng.randrange(3)
            if which == 0:
                cells[rng.choice("abc")] = rng.choice(_BAD)
            elif which == 1 and ts:
                cells["ts"] = rng.choice(_BAD)
            else:
                out.append(rng.choice(["", "x", "a,b", "k1,1,2,3,4,5", 'k,2,"3",1,1']))
                continue
        out.append(",".join(cells[c] for c in cols))
    path.write_text(("\r\n" if crlf else "\n").join(out) + "\n", newline="")
    return path


WC = ["--operator", "window_covariance", "--param", "window=20", "--operator", "karcher"]
CHAINS = {
    "adaptive": WC + ["--param", "threshold=adaptive"],
    "calibrated": WC + ["--param", "calibration=100", "--param", "target_arl=200"],
    "stride": ["--operator", "window_covariance", "--param", "window=12", "--param",
               "stride=3", "--param", "shrinkage=0.0", "--operator", "karcher", "--param",
               "threshold=0.4", "--param", "burn_in=30"],
    "log-euclidean": WC + ["--param", "manifold=spd-log-euclidean", "--param",
                           "threshold=adaptive", "--param", "locate=false"],
    "bures-wasserstein": WC + ["--param", "manifold=spd-bures-wasserstein", "--param",
                               "threshold=adaptive", "--param", "restart=true"],
    "no-reset": WC + ["--param", "threshold=0.5", "--param", "reset_on_alarm=false",
                      "--param", "burn_in=40"],
}


@pytest.mark.parametrize("emit", ["all", "alarms"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_vector_chains_write_what_the_record_path_writes(monkeypatch, capsys, tmp_path,
                                                         chain, emit):
    path = vector_csv(tmp_path / "v.csv", seed=1)
    got = _same(monkeypatch, capsys, tmp_path, path, CHAINS[chain] + VEC + KEYED, emit)
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    if emit == "all":
        assert got["outputs.jsonl"].count(b"\n") > (900 if chain == "stride" else 2000)
    if chain in ("adaptive", "stride", "bures-wasserstein", "no-reset"):
        assert b'"alarm":true' in got["outputs.jsonl"]
        assert b'"change_at"' in got["outputs.jsonl"] or chain == "log-euclidean"


@pytest.mark.parametrize("batch", ["1", "7", "64", "1000"])
@pytest.mark.parametrize("case", [dict(seed=2), dict(seed=3, ts=False),
                                  dict(seed=4, key=False, keys=1),
                                  dict(seed=5, order=("c", "ts", "a", "key", "b"), crlf=True),
                                  dict(seed=6, keys=40, n=4000)])
def test_layouts_and_batch_sizes(monkeypatch, capsys, tmp_path, case, batch):
    path = vector_csv(tmp_path / "v.csv", **case)
    opts = VEC + (["--source-opt", "key=key"] if case.get("key", True) else []) + (
        ["--source-opt", "ts=ts"] if case.get("ts", True) else [])
    _same(monkeypatch, capsys, tmp_path, path, CHAINS["adaptive"] + opts, "all",
          ["--batch-size", batch])


def test_points_karcher_refuses(monkeypatch, capsys, tmp_path):
    """Vectors of 1e140: the covariance overflows MAX_ABS; ``karcher``'s dead letters (raw:
    the point it got) are the record path's, in its order."""
    path = vector_csv(tmp_path / "v.csv", seed=7, huge=0.01)
    for batch in ("1", "50"):
        got = _same(monkeypatch, capsys, tmp_path / batch, path,
                    CHAINS["adaptive"] + VEC + KEYED, "all", ["--batch-size", batch])
        dead = got["dead_letters.jsonl"]
        assert dead.count(b'"operator":"karcher"') > 100
        assert b"beyond" in dead
    path = vector_csv(tmp_path / "f.csv", seed=8, flat=True)
    args = ["--operator", "window_covariance", "--param", "window=10", "--param",
            "shrinkage=0.0", "--operator", "karcher", "--param", "threshold=adaptive"]
    got = _same(monkeypatch, capsys, tmp_path / "flat", path, args + VEC + KEYED, "all",
                ["--batch-size", "30"])
    assert got["dead_letters.jsonl"].count(b"condition number") > 20


EMBED = ["--operator", "embed", "--param", "d=3", "--operator", "window_covariance",
         "--param", "window=20", "--operator", "karcher", "--param", "threshold=adaptive"]


@pytest.mark.parametrize("batch", ["1", "9", "1000"])
@pytest.mark.parametrize("tau", ["1", "4"])
def test_embed_chain_writes_what_the_record_path_writes(monkeypatch, capsys, tmp_path, batch,
                                                       tau):
    path = messy_csv(tmp_path / "s.csv", n=3000, seed=1)
    got = _same(monkeypatch, capsys, tmp_path, path, EMBED + ["--param", "burn_in=40"]
                + ["--source-opt", "key=key", "--source-opt", "ts=ts"], "all",
                ["--batch-size", batch])
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    assert got["outputs.jsonl"].count(b'"alarm":true') > 3


def test_embed_tau(monkeypatch, capsys, tmp_path):
    path = messy_csv(tmp_path / "s.csv", n=2000, seed=3, keys=3)
    args = ["--operator", "embed", "--param", "d=4", "--param", "tau=3", "--operator",
            "window_covariance", "--param", "window=15", "--param", "stride=2", "--operator",
            "karcher", "--param", "threshold=adaptive"]
    _same(monkeypatch, capsys, tmp_path, path, args + KEYED, "all", ["--batch-size", "13"])


def test_many_super_batches(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 64)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 1)
    path = vector_csv(tmp_path / "v.csv", n=2500, seed=8, huge=0.005)
    for batch in ("7", "1000"):
        _same(monkeypatch, capsys, tmp_path / batch, path, CHAINS["stride"] + VEC + KEYED,
              "all", ["--batch-size", batch])
    path = messy_csv(tmp_path / "s.csv", n=2500, seed=9)
    _same(monkeypatch, capsys, tmp_path / "e", path, EMBED + KEYED, "all",
          ["--batch-size", "20"])


def _run(path, ops, vector=True, columnar=None):
    src = CsvSource(path, key="key", ts="ts", value=["a", "b", "c"] if vector else "value")
    return columnar_run(Pipeline(src, ops, [JsonlSink(path.parent / "o.jsonl")],
                                 progress=False, columnar=columnar))


def test_what_takes_the_columnar_path(tmp_path):
    vec = vector_csv(tmp_path / "v.csv", n=50)
    num = messy_csv(tmp_path / "s.csv", n=50)
    wc, kar = create("window_covariance"), create("karcher")
    assert _run(vec, [wc, kar]) is not None
    assert _run(vec, [create("window_covariance"), create("karcher")], columnar=False) is None
    assert _run(num, [create("embed", d=3), create("window_covariance"),
                      create("karcher")], vector=False) is not None
    record_path = [
        (vec, [create("window_covariance"), create("karcher", manifold="grassmann")], True),
        (vec, [create("window_subspace"), create("karcher", manifold="grassmann")], True),
        (vec, [create("window_covariance", field="x"), create("karcher")], True),
        (vec, [create("river:ADWIN")], True),  # (a scalar kernel: vectors are not its)
        (num, [create("window_covariance"), create("karcher")], False),  # (numbers)
        (num, [create("embed"), create("window_covariance"), create("karcher")], False),
        (vec, [create("standardize", field="x"), create("window_covariance"),
               create("karcher")], True),
        (vec, [create("standardize"), create("standardize"), create("karcher")], True),
    ]
    assert _run(vec, [create("standardize"), create("window_covariance"),
                      create("karcher")]) is not None
    for path, ops, vector in record_path:
        assert _run(path, ops, vector) is None, ops


def test_one_window_or_many_give_the_same_bits():
    """The record path computes a window at a time, the columnar path many: the same
    compiled function, the same bits; and the formula of the docstring."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4)) * [1.0, 1e-3, 1e3, 7.0]
    many = cov_windows(x, np.arange(25, 301, dtype=np.int64), 25, 0.1, 1e-6)
    op = create("window_covariance", window=25)
    for e in (25, 26, 137, 300):
        one = np.array(op._point(x[e - 25:e]))
        assert one.tobytes() == many[e - 25].tobytes()
        c = x[e - 25:e] - x[e - 25:e].mean(axis=0)
        s = c.T @ c / 24
        s = 0.9 * s + (0.1 * np.trace(s) / 4 + 1e-6) * np.eye(4)
        np.testing.assert_allclose(one, s, rtol=1e-12, atol=1e-12)


def vector_jsonl(path, n=3000, keys=5, seed=0, bad=0.04, odd=None):
    """JSON Lines of 3-channel vectors (``value`` a list), the correlation changing half way;
    about ``bad`` of the lines broken; ``odd``: a line whose value columns cannot hold (the
    whole file then takes the record path)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        z = [rng.gauss(0.0, 1.0) for _ in range(3)]
        if i > n // 2:
            z[1] = 0.9 * z[0] + 0.3 * z[1]
        v = "[" + ",".join(repr(x) for x in z) + "]"
        if rng.random() < bad:
            v = rng.choice(['[1.0,"x",2.0]', "[1.0,NaN,0.0]", "[1e400,0,0]", "null", '"abc"',
                            "[1.0,2.0,3.0", "[1.0,true,2.0]"])
        out.append(f'{{"key":"k{rng.randrange(keys)}","ts":{i},"value":{v}}}')
        if rng.random() < bad / 4:
            out.append(rng.choice(["", "{", "not json", '{"key":"k1","ts":3}']))
    if odd is not None:
        out.insert(n // 3, odd)
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.parametrize("batch", ["1", "50", "1000"])
def test_json_lines_vectors(monkeypatch, capsys, tmp_path, batch):
    path = vector_jsonl(tmp_path / "v.jsonl", seed=11)
    got = _same(monkeypatch, capsys, tmp_path, path, CHAINS["adaptive"] + KEYED, "all",
                ["--batch-size", batch])
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    assert b'"alarm":true' in got["outputs.jsonl"]


@pytest.mark.parametrize("odd", ['{"key":"k1","ts":5,"value":2.5}',
                                 '{"key":"k1","ts":5,"value":[1.0,2.0]}',
                                 '{"key":"k1","ts":5,"value":[[1.0],[2.0],[3.0]]}'])
def test_json_lines_that_columns_cannot_hold_take_the_record_path(monkeypatch, capsys,
                                                                  tmp_path, odd):
    path = vector_jsonl(tmp_path / "v.jsonl", n=800, seed=12, odd=odd)
    _same(monkeypatch, capsys, tmp_path, path, CHAINS["adaptive"] + KEYED, "all",
          expect=False)


STD = ["--operator", "standardize"]


@pytest.mark.parametrize("params", [[], ["--param", "burn_in=5"],
                                    ["--param", "burn_in=200", "--param", "min_std=0.5"],
                                    ["--param", "emit_burn_in=false"]])
@pytest.mark.parametrize("batch", ["1", "64", "1000"])
def test_standardize_chain(monkeypatch, capsys, tmp_path, params, batch):
    """``standardize -> window_covariance -> karcher`` (the sensor demo's chain): a key's
    burn-in through its standardiser record by record, the frozen rest in arrays."""
    path = vector_csv(tmp_path / "v.csv", seed=21)
    got = _same(monkeypatch, capsys, tmp_path, path, STD + params + CHAINS["adaptive"]
                + VEC + KEYED, "all", ["--batch-size", batch])
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    assert b'"alarm":true' in got["outputs.jsonl"]


def test_standardize_chain_dead_letters_in_the_burn_in(monkeypatch, capsys, tmp_path):
    """A channel constant through a key's burn-in: its windows' covariances are beyond the
    condition number ``karcher`` takes, and its dead letters carry the record it got,
    ``burn_in: true`` included, as on the record path."""
    rng = random.Random(5)
    rows = ["key,ts,a,b,c"]
    seen = {"k0": 0, "k1": 0}
    for i in range(1500):
        k = rng.choice(["k0", "k1"])
        seen[k] += 1
        c = "5.0" if k == "k0" and seen[k] <= 300 else repr(rng.gauss(0.0, 1.0))
        rows.append(f"{k},{i},{rng.gauss(0.0, 1.0)!r},{rng.gauss(0.0, 1.0)!r},{c}")
    path = tmp_path / "v.csv"
    path.write_text("\n".join(rows) + "\n")
    args = STD + ["--param", "burn_in=100", "--operator", "window_covariance", "--param",
                  "window=10", "--param", "shrinkage=0.0", "--param", "min_eig=1.0e-14",
                  "--operator", "karcher", "--param", "threshold=adaptive"]
    for batch in ("1", "37"):
        got = _same(monkeypatch, capsys, tmp_path / batch, path, args + VEC + KEYED, "all",
                    ["--batch-size", batch])
        dead = got["dead_letters.jsonl"]
        assert dead.count(b"condition number") > 100
        assert dead.count(b"burn_in") > 50
