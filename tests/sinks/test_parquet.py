"""The Parquet outputs file: the rows of outputs.jsonl, typed, in bounded memory."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

try:
    import pyarrow.parquet as pq
except ImportError:  # the dev extra has it: CI must not skip these
    if os.environ.get("CI"):
        raise
    pytest.skip("needs pyarrow (pip install -c constraints.txt -e '.[dev]')",
                allow_module_level=True)

from shiftwatch.deploy.columnar import OutputColumns
from shiftwatch.sinks import JsonlSink, ParquetSink
from shiftwatch.sinks.atomic_file import WriteFailed

# ---- helpers -------------------------------------------------------------------------------


def same_value(got, want) -> bool:
    """Equal, with booleans never equal to numbers and lists compared element-wise."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, list):
        return (isinstance(got, list) and len(got) == len(want)
                and all(same_value(g, w) for g, w in zip(got, want, strict=True)))
    if isinstance(want, float) and isinstance(got, float) and math.isnan(want):
        return math.isnan(got)
    if want is None or got is None:
        return got is None and want is None
    return type(got) in (int, float) and got == want if type(want) in (int, float) else (
        got == want)


def assert_rows_match(parquet_path, jsonl_path, json_text=()):
    """Every row of the Parquet file is the JSON line's dict: each column (absent fields null),
    the columns in order of first appearance; ``json_text`` columns are decoded first, and a
    key that is not text is its JSON text."""
    table = pq.read_table(parquet_path)
    lines = [json.loads(line) for line in open(jsonl_path, encoding="utf-8")]
    names = list(dict.fromkeys(k for d in lines for k in d))
    assert table.schema.names == names
    rows = table.to_pylist()
    assert len(rows) == len(lines)
    for i, (row, line) in enumerate(zip(rows, lines, strict=True)):
        for name in names:
            got = row[name]
            if name in json_text and got is not None:
                got = json.loads(got)
            want = line.get(name)
            if name == "key" and want is not None and not isinstance(want, str):
                want = json.dumps(want, separators=(",", ":"))  # a key's JSON text
            assert same_value(got, want), (i, name, got, want)
    return table


def types(table) -> dict:
    return {f.name: str(f.type) for f in table.schema}


def row_groups(path) -> list[int]:
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def both(tmp_path, batches, alarms_only=False, row_group_size=7, columns=False):
    """Write ``batches`` with a JsonlSink and a ParquetSink; the two paths."""
    j = JsonlSink(tmp_path / "o.jsonl", alarms_only=alarms_only)
    p = ParquetSink(tmp_path / "o.parquet", alarms_only=alarms_only,
                    row_group_size=row_group_size)
    for sink in (j, p):
        sink.open()
        for b in batches:
            sink.write_columns(b) if columns else sink.write(b)
        sink.close()
        assert sink.written and sink.error is None
    assert sorted(x.name for x in tmp_path.iterdir()) == ["o.jsonl", "o.parquet"]  # no parts
    return j, p


def outputs(n=40, seed=0):
    """Output records as operators give them: NumPy values, NaN and inf, alarms with more
    fields, a vector field, a mapping, learners' text."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        r = {"key": f"s{i % 3}", "ts": float(i) / 2, "offset": i, "alarm": False,
             "statistic": np.float64(rng.normal()), "even": np.bool_(i % 2 == 0)}
        if i % 5 == 0:
            r["statistic"] = None
        if i == 6:
            r["statistic"] = float("nan")
        if i == 7:
            r["statistic"] = float("inf")
        if i % 4 == 1:
            r["vec"] = np.array([rng.normal(), 1.0])
        if i % 9 == 8:
            r.update(alarm=True, change_at=np.int64(i - 3), changes_at=[i - 5, i - 3],
                     change_at_operator="1:cs")
        if i >= 20:
            r["meta"] = {"n": i, "tag": "x"}
            r["y_pred"] = "up" if i % 2 else "down"
        recs.append(r)
    return recs


# ---- round trip ----------------------------------------------------------------------------


def test_the_rows_are_the_json_lines_with_their_types(tmp_path):
    recs = outputs()
    both(tmp_path, [recs[:3], recs[3:30], [], recs[30:]])
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl", json_text={"meta"})
    assert types(table) == {
        "key": "string", "ts": "double", "offset": "int64", "alarm": "bool",
        "statistic": "double", "even": "bool", "vec": "list<element: double>", "change_at": "int64",
        "changes_at": "list<element: double>", "change_at_operator": "string",
        "meta": "string", "y_pred": "string"}
    rows = table.to_pylist()
    assert rows[6]["statistic"] is None and rows[7]["statistic"] is None  # NaN, inf: null
    assert rows[8]["change_at"] == 5 and rows[0]["change_at"] is None
    assert rows[20]["meta"] == '{"n":20,"tag":"x"}'  # the text outputs.jsonl has
    assert row_groups(tmp_path / "o.parquet") == [7] * 5 + [5]


def test_an_empty_run_writes_a_file_with_no_rows(tmp_path):
    sink = ParquetSink(tmp_path / "o.parquet")
    sink.open()
    sink.close()
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 0
    assert sink.summary() == {"path": str(tmp_path / "o.parquet"), "records": 0,
                              "row_groups": 0}
    assert os.listdir(tmp_path) == ["o.parquet"]


def test_columns_that_come_and_go_between_row_groups(tmp_path):
    groups = [[{"key": "a", "x": 1}, {"key": "a", "x": 2}],
              [{"key": "b", "y": 0.5}, {"y": None, "key": "b"}],  # no x; y new
              [{"key": "c", "x": 2.5, "z": True}, {"key": "c", "x": 3, "z": False}]]
    both(tmp_path, groups, row_group_size=2)
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl")
    # ints in one group, a float in another: double (lossless); order of first appearance
    assert types(table) == {"key": "string", "x": "double", "y": "double", "z": "bool"}
    assert table.column("x").to_pylist() == [1.0, 2.0, None, None, 2.5, 3.0]
    assert row_groups(tmp_path / "o.parquet") == [2, 2, 2]


def test_conflicting_types_become_json_text(tmp_path):
    groups = [[{"v": 3, "w": 2**60, "n": 1}, {"v": None, "w": 1, "n": 2}],
              [{"v": "a", "w": 0.5, "n": 2**70}, {"v": [1.5, None], "w": None, "n": 3}],
              [{"v": True, "w": 2, "n": 4}, {"v": {"k": [1]}, "w": 3, "n": 5}]]
    both(tmp_path, groups, row_group_size=2)
    json_text = {"v", "w", "n"}
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl", json_text)
    assert types(table) == {"v": "string", "w": "string", "n": "string"}
    assert table.column("v").to_pylist() == ["3", None, '"a"', "[1.5,null]", "true",
                                             '{"k":[1]}']
    # 2**60 is not exact as a float: ints and floats stay JSON text, each as written
    assert table.column("w").to_pylist() == [str(2**60), "1", "0.5", None, "2", "3"]
    assert table.column("n").to_pylist()[2] == str(2**70)  # beyond int64
    # within one row group too
    (tmp_path / "o.parquet").unlink()
    (tmp_path / "o.jsonl").unlink()
    both(tmp_path, [[r for g in groups for r in g]], row_group_size=100)
    assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl", json_text)


def test_keys_that_are_not_text_are_their_json_text(tmp_path):
    recs = [{"key": 7, "x": 1.0}, {"key": "7", "x": 2.0}, {"key": [1, "b"], "x": 3.0},
            {"key": None, "x": 4.0}, {"key": 2.5, "x": 5.0}]
    both(tmp_path, [recs], row_group_size=2)
    table = pq.read_table(tmp_path / "o.parquet")
    assert types(table)["key"] == "string"
    assert table.column("key").to_pylist() == ["7", "7", '[1,"b"]', None, "2.5"]
    lines = [json.loads(x) for x in open(tmp_path / "o.jsonl")]
    for line, got in zip(lines, table.column("key").to_pylist(), strict=True):
        want = line["key"]
        assert got == (want if want is None or isinstance(want, str)
                       else json.dumps(want, separators=(",", ":")))


# ---- the columnar path ---------------------------------------------------------------------


def column_batches(n=50, seed=1, ts=True):
    """OutputColumns batches with special rows (alarms with change_at), NaN in a field."""
    rng = np.random.default_rng(seed)
    out = []
    offset = 0
    for size in (n, 1, 0, n // 2):
        keys = ["a", "b", 7] if seed else ["a", "b"]
        inv = rng.integers(0, len(keys), size)
        offsets = np.arange(offset, offset + size, dtype=np.int64)
        offset += size
        tcol = offsets.astype(np.float64) * 0.5 if ts else None
        alarm = rng.random(size) < 0.15
        lower, upper = rng.normal(size=size), rng.normal(size=size)
        lower[rng.random(size) < 0.2] = np.nan
        fields = {"lower": lower, "upper": upper, "flag": rng.random(size) < 0.5}
        cols = OutputColumns(keys, inv, offsets, tcol, alarm, fields, {})
        special = {}
        for i in np.flatnonzero(alarm).tolist():
            rec = cols.record(i)
            rec["change_at"] = int(i)
            if i % 2:
                rec["changes_at"] = [0, int(i)]
            special[i] = rec
        cols.special = special
        out.append(cols)
    return out


@pytest.mark.parametrize("alarms_only", [False, True])
def test_column_batches_give_the_rows_of_their_records(tmp_path, alarms_only):
    batches = column_batches()
    assert any(b.special for b in batches)
    j, p = both(tmp_path, batches, alarms_only=alarms_only, row_group_size=16, columns=True)
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl")
    assert p.summary()["records"] == j.summary()["records"]
    if alarms_only:
        assert p.summary()["skipped"] == j.summary()["skipped"] > 0
        assert all(table.column("alarm").to_pylist())
    # the same file as the records of the batches, written one by one
    (tmp_path / "r").mkdir()
    both(tmp_path / "r", [b.records() for b in batches], alarms_only=alarms_only,
         row_group_size=16)
    assert pq.read_table(tmp_path / "r" / "o.parquet").equals(table)
    assert types(table)["offset"] == "int64" and types(table)["key"] == "string"
    assert types(table)["lower"] == "double" and types(table)["flag"] == "bool"
    assert types(table)["change_at"] == "int64"


def test_alarms_only_writes_only_alarms(tmp_path):
    recs = outputs()
    j, p = both(tmp_path, [recs[:10], recs[10:]], alarms_only=True, row_group_size=2)
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl", {"meta"})
    assert table.num_rows == 4 and all(table.column("alarm").to_pylist())
    assert p.summary() == {"path": str(tmp_path / "o.parquet"), "records": 4,
                           "row_groups": 2, "skipped": 36}


# ---- bounded memory ------------------------------------------------------------------------


def test_at_most_a_row_group_is_held_in_memory(tmp_path, monkeypatch):
    sink = ParquetSink(tmp_path / "o.parquet", row_group_size=100)
    sink.open()
    parts_dir = sink._parts_dir
    written = []
    real = pq.write_table
    monkeypatch.setattr(pq, "write_table",
                        lambda table, *a, **k: (written.append(table.num_rows),
                                                real(table, *a, **k))[1])
    held = []
    for i in range(10):
        sink.write([{"key": "k", "offset": i * 333 + j, "x": float(j)} for j in range(333)])
        held.append(sink._rows)
        assert len(os.listdir(parts_dir)) == len(written)  # each full group is on disk
    assert max(held) < 100 and written == [100] * 33
    cols = column_batches(n=250)[0]
    sink.write_columns(cols)  # 250 rows: two whole groups more, the rest held
    assert written == [100] * 35 and sink._rows == 80
    sink.close()
    assert row_groups(tmp_path / "o.parquet") == [100] * 35 + [80]
    assert not os.path.exists(parts_dir)
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.num_rows == 3580 and table.column("offset").to_pylist()[:3330] == list(
        range(3330))


# ---- failures ------------------------------------------------------------------------------


def full_disk(monkeypatch, limit):
    """Make the files the sinks write fail with ENOSPC past ``limit`` bytes, all together."""
    from shiftwatch.sinks import atomic_file

    disk = {"used": 0}

    class Full(io.FileIO):
        def write(self, b):
            room = limit - disk["used"]
            if room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = super().write(bytes(b)[:room])  # a disk takes what fits, then refuses
            disk["used"] += n
            return n

    monkeypatch.setattr(atomic_file, "_disk_file", lambda fd: Full(fd, "w"))


def test_a_full_disk_mid_run_leaves_no_file_and_no_parts(tmp_path, monkeypatch):
    (tmp_path / "o.parquet").write_bytes(b"the previous run's")
    full_disk(monkeypatch, limit=8_000)  # the first part fits (5 kB), a later one does not
    sink = ParquetSink(tmp_path / "o.parquet", row_group_size=50)
    sink.open()
    recs = outputs(200)
    with pytest.raises(WriteFailed, match=r"cannot write .*o\.parquet: No space left on device"):
        for i in range(0, 200, 10):
            sink.write(recs[i:i + 10])
    assert sink._row_groups >= 1  # it failed mid-run, not at the first group
    assert os.listdir(tmp_path) == ["o.parquet"]  # no part, no temporary
    assert (tmp_path / "o.parquet").read_bytes() == b"the previous run's"
    with pytest.raises(WriteFailed):
        sink.write(recs[:1])  # no later part either
    sink.close()  # never raises
    assert sink.error == "No space left on device" and not sink.written
    assert sink.summary()["error"] == "No space left on device"
    assert (tmp_path / "o.parquet").read_bytes() == b"the previous run's"


def test_a_full_disk_while_writing_the_file_at_close(tmp_path, monkeypatch):
    sink = ParquetSink(tmp_path / "o.parquet", row_group_size=50)
    sink.write(outputs(120))  # two parts on the disk
    full_disk(monkeypatch, limit=500)  # the last part and the file do not fit
    sink.close()
    assert sink.error == "No space left on device" and not sink.written
    assert os.listdir(tmp_path) == []


def test_a_file_that_cannot_be_synced_at_close_is_not_left(tmp_path, monkeypatch):
    sink = ParquetSink(tmp_path / "o.parquet", row_group_size=5)
    sink.write(outputs(12))

    def refuse(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", refuse)
    sink.close()
    assert sink.error == "Input/output error" and not sink.written
    assert os.listdir(tmp_path) == []


def test_without_pyarrow_opening_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "import shiftwatch.sinks as s\n"
            "sink = s.ParquetSink(sys.argv[1])\n"  # importing needs no pyarrow
            "try:\n    sink.open()\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "o.parquet")],
                         capture_output=True, text=True, check=True)
    assert "pip install 'shiftwatch[parquet]'" in out.stdout
    assert os.listdir(tmp_path) == []


def test_row_group_size_must_be_positive():
    with pytest.raises(ValueError, match="row_group_size"):
        ParquetSink("x.parquet", row_group_size=0)


def test_the_arrays_built_from_buffers_are_valid():
    import pyarrow as pa

    from shiftwatch.sinks.parquet import _from_list, _numbers

    cases = {"float": [1.5, None, 2, -0.0], "int": [None, -(2**63), 2**63 - 1, 0],
             "bool": [True, None, False] * 5, "str": ["é", None, "", "a\ud800b"],
             "json": [{"a": [1, None]}, None, "x", 2.5],
             "list": [[1.0, None, 2], None, [], [3]]}
    for kind, values in cases.items():
        array = _from_list(pa, kind, values)
        array.validate(full=True)
        assert len(array) == len(values) and array.null_count == values.count(None)
    assert _from_list(pa, "str", cases["str"]).to_pylist() == ["é", None, "", "a?b"]
    assert _from_list(pa, "list", cases["list"]).to_pylist() == [[1.0, None, 2.0], None, [],
                                                                   [3.0]]
    assert _from_list(pa, "json", cases["json"]).to_pylist() == ['{"a":[1,null]}', None,
                                                                   '"x"', "2.5"]
    flags = np.array([True, False] * 9)
    got = _numbers(pa, "bool", flags, flags)
    got.validate(full=True)
    assert got.to_pylist() == [True, None] * 9


def test_writing_imports_neither_pandas_nor_pyarrow_compute(tmp_path):
    code = ("import sys\nfrom shiftwatch.sinks import ParquetSink\n"
            "s = ParquetSink(sys.argv[1], row_group_size=1)\n"
            "s.write([{'key': 'a', 'x': 1}, {'key': 'b', 'x': 2.5, 'l': [1.0], 'm': {}}])\n"
            "s.close(); assert s.written\n"
            "print(sorted({'pandas', 'pyarrow.compute'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "o.parquet")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # (pyarrow.array would import pandas: 50 MB)


def test_a_batch_column_of_nan_beside_integers_of_special_rows(tmp_path):
    # a float field all NaN in the column rows, ints in the special rows: int64, nulls
    cols = OutputColumns(["a"], np.zeros(4, dtype=np.int64), np.arange(4), None,
                         np.array([False, True, False, False]),
                         {"n": np.full(4, np.nan)}, {})
    cols.special = {1: {"key": "a", "offset": 1, "alarm": True, "n": 7}}
    both(tmp_path, [cols], columns=True)
    table = assert_rows_match(tmp_path / "o.parquet", tmp_path / "o.jsonl")
    assert types(table)["n"] == "int64" and table.column("n").to_pylist() == [None, 7, None,
                                                                              None]
