"""The replay's columnar path writes what the record path writes, byte for byte.

Seeded CSV streams with bad rows in them (non-numeric, empty, NaN/inf, huge and overlong
numbers, broken quoting, wrong field counts, bad keys, bytes that are not UTF-8, blank
lines, duplicate and decreasing ts) are replayed twice, once with
``SHIFTWATCH_RECORD_PATH=1``: every output file (``outputs.jsonl``, ``dead_letters.jsonl``,
``keys.jsonl``, ``report.json``) and the summary line must be the same.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

from shiftwatch.deploy import Pipeline, columnar
from shiftwatch.deploy.cli import main
from shiftwatch.deploy.columnar import RECORD_PATH_ENV, columnar_run
from shiftwatch.deploy.local import AllDeadLetters
from shiftwatch.operators import create
from shiftwatch.records import DeadLetter
from shiftwatch.sinks import DeadLetterSink, EvaluationSink, JsonlSink
from shiftwatch.streams.columns import csv_columns
from shiftwatch.streams.files import CsvSource

_BAD = ["abc", "", " ", "nan", "inf", "-inf", "1e400", "1e200", "1_000", ".5", "007", "5.",
        "1" * 120, " 2.5 ", "+3", '"4"', '"5', "1,2", "0x10", "NaN", "1e-400", "-0",
        "1e1234567890", "0.5e-05"]


def _load_helpers():
    """tests/streams' column-chunk helpers, loaded by path (whichever worker collects this)."""
    path = Path(__file__).resolve().parents[1] / "streams" / "test_columnar_replay_helpers.py"
    spec = importlib.util.spec_from_file_location("columnar_replay_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_HELPERS = _load_helpers()


def messy_csv(path, n=2000, keys=7, seed=0, ts=True, key=True, crlf=False, bad=0.06,
              gz=False, shift=3.0):
    """A CSV of ``n`` rows (``key,ts,value``), about ``bad`` of them broken in some way."""
    rng = random.Random(seed)
    cols = (["key"] if key else []) + (["ts"] if ts else []) + ["value"]
    out = [",".join(cols)]
    for i in range(n):
        k = f"k{rng.randrange(keys)}"
        t = str(i // 2) if rng.random() > 0.03 else str(i - 40)  # duplicates, going back
        level = shift if i > n // 2 else 0.0
        v = repr(round(rng.gauss(level, 1.0), rng.randrange(1, 17)))
        if rng.random() < 0.01:
            v = f"{rng.gauss(level, 1.0):.3e}"
        if rng.random() < bad:
            which = rng.randrange(4)
            if which == 0:
                v = rng.choice(_BAD)
            elif which == 1 and ts:
                t = rng.choice(_BAD)
            elif which == 2 and key:
                k = rng.choice(["", "é", 'a"b', '"q"', " sp", "k,1"])
            else:
                out.append(rng.choice(["", "   ", "x", "a,b,c,d", "k1,1", "k,2,\"3\"",
                                       "k1,3,4,"]))
                continue
        out.append(",".join(([k] if key else []) + ([t] if ts else []) + [v]))
    text = ("\r\n" if crlf else "\n").join(out) + ("\n" if seed % 2 else "")
    data = text.encode("utf-8")
    if seed % 3 == 0:
        data = data.replace(b"k3,", b"k\xff3,", 2)  # not UTF-8
    if gz:
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _replay(monkeypatch, capsys, path, out, op_args, emit, record, extra=()):
    if record:
        monkeypatch.setenv(RECORD_PATH_ENV, "1")
    else:
        monkeypatch.delenv(RECORD_PATH_ENV, raising=False)
    argv = ["replay", str(path), *op_args, "--out", str(out), "--no-plots", "--no-progress",
            "--emit", emit, *extra]
    try:
        rc = main(argv)
        err = None
    except AllDeadLetters as exc:  # (main turns user errors into messages: kept as text)
        rc, err = None, str(exc)
    text = capsys.readouterr().out.replace(str(out), "OUT")
    return rc, err, re.sub(r"records in [0-9.]+ s \([0-9,]+/s\)", "records in", text)


def _files(out):
    got = {}
    for name in ("outputs.jsonl", "dead_letters.jsonl", "keys.jsonl", "report.json"):
        p = os.path.join(out, name)
        got[name] = (open(p, "rb").read().replace(str(out).encode(), b"OUT")
                     if os.path.exists(p) else None)
    return got


def layout(tmp_path, case: dict) -> tuple:
    """A messy CSV for ``case`` (messy_csv's arguments, ``batch`` a --batch-size) and its
    source options and extra arguments: ``(path, opts, extra)``."""
    case = dict(case)
    batch = case.pop("batch", None)
    path = messy_csv(tmp_path / ("s.csv.gz" if case.get("gz") else "s.csv"), n=1200, **case)
    opts = (["--source-opt", "key=key"] if case.get("key", True) else []) + (
        ["--source-opt", "ts=ts"] if case.get("ts", True) else [])
    return path, opts, ["--batch-size", batch] if batch else []


def _same(monkeypatch, capsys, tmp_path, path, op_args, emit="all", extra=(), expect=True,
          files=None):
    """Replay ``path`` by both paths; their console lines and files (``files(out)``, default
    :func:`_files`) must be the same. Returns the columnar run's files."""
    files = files or _files
    runs = []
    real = columnar._ColumnarRun.run
    monkeypatch.setattr(columnar._ColumnarRun, "run",
                        lambda self, *a: runs.append(1) or real(self, *a))
    a = _replay(monkeypatch, capsys, path, tmp_path / "rec", op_args, emit, True, extra)
    assert runs == []
    b = _replay(monkeypatch, capsys, path, tmp_path / "col", op_args, emit, False, extra)
    assert runs == ([1] if expect else [])  # the columnar path was taken (or not)
    assert a == b
    fa, fb = files(tmp_path / "rec"), files(tmp_path / "col")
    for name in fa:
        assert fa[name] == fb[name], name
    return fb


KEYED = ["--source-opt", "key=key", "--source-opt", "ts=ts"]


@pytest.mark.parametrize("emit", ["all", "alarms"])
@pytest.mark.parametrize("op", [["--operator", "cs"], ["--operator", "river:ADWIN"],
                                ["--operator", "cs", "--param", "cs=hoeffding",
                                 "--param", "lower=-2", "--param", "upper=4"]])
def test_same_files_as_the_record_path(monkeypatch, capsys, tmp_path, op, emit):
    path = messy_csv(tmp_path / "s.csv", seed=1)
    got = _same(monkeypatch, capsys, tmp_path, path, op + KEYED, emit)
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    if emit == "all":
        assert got["outputs.jsonl"].count(b"\n") > 1500
    if "hoeffding" in op[-1] or "upper=4" in op:
        assert b'"operator":"cs"' in got["dead_letters.jsonl"]  # rejected by the operator


@pytest.mark.parametrize("case", [
    dict(seed=2, batch="7"), dict(seed=3, batch="1"), dict(seed=4, ts=False, batch="64"),
    dict(seed=5, key=False), dict(seed=6, crlf=True), dict(seed=7, gz=True, batch="333"),
])
@pytest.mark.parametrize("op", ["cs", "river:ADWIN", "river:PageHinkley"])
def test_same_files_for_other_layouts_and_batch_sizes(monkeypatch, capsys, tmp_path, case,
                                                      op):
    path, opts, extra = layout(tmp_path, case)
    fallback = op == "cs" and case["seed"] == 5  # cs locating by a split: no fleet
    args = ["--operator", op] + (["--param", "locate=meanvar"] if fallback else [])
    _same(monkeypatch, capsys, tmp_path, path, args + opts, "all", extra, expect=not fallback)


@pytest.mark.parametrize("emit", ["all", "alarms"])
def test_operators_without_a_column_kernel_take_the_record_path(monkeypatch, capsys, tmp_path,
                                                                 emit):
    path = messy_csv(tmp_path / "s.csv", n=700, seed=13)
    _same(monkeypatch, capsys, tmp_path, path, ["--operator", "standardize"] + KEYED, emit,
          expect=False)


def test_a_damaged_gz_file(monkeypatch, capsys, tmp_path):
    path = messy_csv(tmp_path / "s.csv.gz", n=3000, seed=8, gz=True)
    data = path.read_bytes()
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    got = _same(monkeypatch, capsys, tmp_path, cut, ["--operator", "river:ADWIN"] + KEYED)
    assert b"file is truncated after line" in got["dead_letters.jsonl"]


def test_a_file_of_dead_letters_stops_the_same_way(monkeypatch, capsys, tmp_path):
    rows = ["key,ts,value"] + [f"k,{i},oops" if i % 9 else "" for i in range(160)] + [
        "k,1,2.0"]  # (blank lines too: the count of those read before the stop is printed)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(rows) + "\n")
    a = _replay(monkeypatch, capsys, path, tmp_path / "rec", ["--operator", "cs"] + KEYED,
                "all", True)
    b = _replay(monkeypatch, capsys, path, tmp_path / "col", ["--operator", "cs"] + KEYED,
                "all", False)
    assert a == b
    assert _files(tmp_path / "rec") == _files(tmp_path / "col")
    few = tmp_path / "few.csv"
    few.write_text("\n".join(rows[:6]) + "\n")
    a = _replay(monkeypatch, capsys, few, tmp_path / "rec2", ["--operator", "cs"] + KEYED,
                "all", True)
    b = _replay(monkeypatch, capsys, few, tmp_path / "col2", ["--operator", "cs"] + KEYED,
                "all", False)
    assert a == b
    assert _files(tmp_path / "rec2") == _files(tmp_path / "col2")


def _pipeline(path, op, out, columnar, batch_size=50):
    src = CsvSource(path, key="key", ts="ts")
    sinks = [JsonlSink(out / "outputs.jsonl"), EvaluationSink(out, plots=False, html=False)]
    return Pipeline(src, [op], sinks, dead_letters=DeadLetterSink(out / "dead_letters.jsonl"),
                    batch_size=batch_size, progress=False, columnar=columnar)


def test_river_dead_letters_come_key_by_key_as_keyed_gives_them(tmp_path):
    """An operator that rejects values (a River detector with a small ``max_abs``): its
    dead letters are grouped by key within a micro-batch on both paths."""
    cls = type(create("river:ADWIN"))
    small = type("SmallADWIN", (cls,), {"max_abs": 2.5, "__slots__": ()})
    path = messy_csv(tmp_path / "s.csv", n=1500, seed=9, bad=0.0)
    outs = {}
    for mode in (False, None):
        out = tmp_path / f"o{mode}"
        p = _pipeline(path, small(), out, mode)
        assert (columnar_run(p) is None) == (mode is False)
        summary = p.run()
        outs[mode] = (_files(out), summary.dead_letters, summary.alarms)
    assert outs[False] == outs[None]
    assert outs[None][1] > 100


def test_what_takes_the_columnar_path(tmp_path):
    path = messy_csv(tmp_path / "s.csv", n=100, seed=10)
    out = tmp_path / "o"
    assert columnar_run(_pipeline(path, create("cs"), out, None)) is not None
    assert columnar_run(_pipeline(path, create("river:ADWIN"), out, None)) is not None
    assert columnar_run(_pipeline(path, create("cs"), out, False)) is None
    assert columnar_run(_pipeline(path, create("shape"), out, None)) is not None
    assert columnar_run(_pipeline(path, create("standardize"), out, None)) is None  # no kernel
    assert columnar_run(_pipeline(path, create("river:DDM"), out, None)) is None  # binary
    assert columnar_run(_pipeline(path, create("cs", pfa=True), out, None)) is None  # no fleet
    p = _pipeline(path, create("cs"), out, None)
    p.speed = 10.0
    assert columnar_run(p) is None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [1 << 16, 211, 40])
def test_column_reader_gives_the_record_path_items(tmp_path, seed, chunk):
    kw = [dict(), dict(ts=False), dict(key=False), dict(crlf=True), dict(gz=True),
          dict(bad=0.3)][seed]
    path = messy_csv(tmp_path / ("s.csv.gz" if kw.get("gz") else "s.csv"), n=800, seed=seed,
                     **kw)
    opts = {"key": "key"} if kw.get("key", True) else {}
    if kw.get("ts", True):
        opts["ts"] = "ts"
    src = CsvSource(path, **opts)
    want = [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", it.get("key"), it.get("ts"), it["value"]) for it in src]
    blank = src.blank_lines
    src = CsvSource(path, **opts)
    chunks = list(csv_columns(src, chunk))
    got = _HELPERS.chunk_items(chunks, lambda c, i: (
        "rec", c.keys[i], None if c.ts is None else float(c.ts[i]), float(c.values[i])))
    for c in chunks:
        assert np.all(np.diff(c.lines) > 0)
    assert got == want
    assert src.blank_lines == blank


def test_a_write_that_fails_midway_leaves_the_same_files(monkeypatch, capsys, tmp_path):
    """A full disk stops both paths after the same micro-batch, with the same report."""
    from shiftwatch.sinks import files as files_mod
    from shiftwatch.sinks.atomic_file import WriteFailed

    calls = []

    def failing(real):
        def write(self, records):
            calls.append(1)
            if len(calls) == 3:
                raise WriteFailed({str(self.path): "No space left on device"})
            return real(self, records)
        return write

    monkeypatch.setattr(files_mod.JsonlSink, "write", failing(files_mod.JsonlSink.write))
    monkeypatch.setattr(files_mod.JsonlSink, "write_columns",
                        failing(files_mod.JsonlSink.write_columns))
    path = messy_csv(tmp_path / "s.csv", n=5000, seed=11)
    got = []
    for record in (True, False):
        calls.clear()
        out = tmp_path / ("rec" if record else "col")
        got.append((_replay(monkeypatch, capsys, path, out, ["--operator", "river:ADWIN"]
                            + KEYED, "all", record, ["--batch-size", "500"]), _files(out)))
    assert got[0] == got[1]
    assert b'"records_read": 1' in got[1][1]["report.json"]  # 1,5xx: three batches read


@pytest.mark.parametrize("op", ["cs", "river:ADWIN"])
def test_many_super_batches(monkeypatch, capsys, tmp_path, op):
    """Super-batches (the kernels' calls) of 70 rows over micro-batches of 7 and 1000."""
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 64)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 1)
    path = messy_csv(tmp_path / "s.csv", n=1500, seed=12)
    for batch in ("7", "1000"):
        _same(monkeypatch, capsys, tmp_path / batch, path, ["--operator", op] + KEYED, "all",
              ["--batch-size", batch])


def test_super_batches_grow_with_the_keys(monkeypatch, capsys, tmp_path):
    """With many keys a super-batch holds ``KEY_ROWS`` rows a key (up to ``MAX_SUPER_ROWS``):
    the kernels that go key by key pay their fixed cost per key and call less often; the
    files are the same."""
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 64)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 30)  # 40 keys: 1,200 rows, 700
    monkeypatch.setattr(columnar._ColumnarRun, "MAX_SUPER_ROWS", 700)
    sizes = []
    real = columnar._ColumnarRun._process
    monkeypatch.setattr(columnar._ColumnarRun, "_process",
                        lambda self, ex, batch, *a, **k: sizes.append(len(batch[0]))
                        or real(self, ex, batch, *a, **k))
    path = messy_csv(tmp_path / "s.csv", n=5000, keys=40, seed=14)
    _same(monkeypatch, capsys, tmp_path, path, ["--operator", "river:ADWIN"] + KEYED, "all",
          ["--batch-size", "10"])
    assert sizes[0] == 70 and sizes[1] == 700 and len(sizes) < 10


@pytest.mark.parametrize("op", ["cs", "river:ADWIN"])
def test_many_keys(monkeypatch, capsys, tmp_path, op):
    """300 keys, most of them in every micro-batch (the sinks keep each key's number)."""
    path = messy_csv(tmp_path / "s.csv", n=8000, keys=300, seed=15)
    _same(monkeypatch, capsys, tmp_path, path, ["--operator", op] + KEYED, "all",
          ["--batch-size", "700"])


def test_an_endless_line_is_a_dead_letter(monkeypatch, capsys, tmp_path):
    """A line of MAX_LINE_CHARS characters or more (17 million here) is a dead letter on both
    paths, read in pieces; the lines around it are records."""
    from shiftwatch.streams.lines import MAX_LINE_CHARS

    path = tmp_path / "long.csv"
    with open(path, "w") as f:
        f.write("key,ts,value\n" + "".join(f"k{i % 3},{i},{i / 9:.3f}\n" for i in range(400)))
        f.write("k1,400," + "8" * (MAX_LINE_CHARS + 10**6) + "\n")
        f.write("".join(f"k{i % 3},{i},{i / 9:.3f}\n" for i in range(401, 800)))
    got = _same(monkeypatch, capsys, tmp_path, path, ["--operator", "cs"] + KEYED, "all")
    dead = got["dead_letters.jsonl"].decode()
    assert dead.count("\n") == 1 and "characters or more: not read" in dead
    assert '"line":402' in dead and len(dead) < 2000
    assert got["outputs.jsonl"].count(b"\n") == 799
