"""CsvSource and JsonlSource: column mapping, dead letters with line numbers, gz, ts."""

from __future__ import annotations

import gzip
import json

import pytest

from shiftwatch.operators.records import DeadLetter
from shiftwatch.streams.files import CsvSource, JsonlSource, parse_ts


def write(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def split(items):
    good = [i for i in items if isinstance(i, dict)]
    dead = [i for i in items if isinstance(i, DeadLetter)]
    assert len(good) + len(dead) == len(items)
    return good, dead


CSV_TEXT = (
    "ts,sensor,value,label\n"    # line 1
    "0,a,1.5,0\n"                # 2 good
    "1,a,2.5\n"                  # 3 wrong column count
    "2,b,abc,1\n"                # 4 non-number
    "3,b,nan,1\n"                # 5 NaN
    "4,b,,1\n"                   # 6 empty
    "\n"                         # 7 blank: skipped
    "5,a,3.5,1\n"                # 8 good
    "x,a,4.5,1\n"                # 9 bad ts
    "7,a,inf,0\n"                # 10 infinite
    '8,"a,b",5.5,cat\n'          # 11 good, quoted key with a comma
)


def test_csv_dead_letters_carry_line_numbers_and_good_records_survive(tmp_path):
    path = write(tmp_path / "log.csv", CSV_TEXT)
    src = CsvSource(path, value="value", key="sensor", ts="ts", y="label")
    good, dead = split(list(src))
    assert good == [
        {"key": "a", "ts": 0.0, "value": 1.5, "y": 0},
        {"key": "a", "ts": 5.0, "value": 3.5, "y": 1},
        {"key": "a,b", "ts": 8.0, "value": 5.5, "y": "cat"},
    ]
    assert [d.origin["line"] for d in dead] == [3, 4, 5, 6, 9, 10]
    assert all(d.origin["file"] == str(path) for d in dead)
    reasons = [d.reason for d in dead]
    assert "expected 4 fields, got 3" in reasons[0]
    assert "not a number" in reasons[1]
    assert "not finite" in reasons[2]
    assert "empty" in reasons[3]
    assert reasons[4].startswith("ts")
    assert "not finite" in reasons[5]
    assert dead[0].raw == "1,a,2.5"
    assert dead[1].to_record()["raw"] == "2,b,abc,1"
    assert src.name == "log" and src.length is None and src.annotations is None


def test_csv_multi_column_value_default_key_and_index_ts(tmp_path):
    path = write(tmp_path / "v.csv", "x,y,z\n1,2,3\n4,5,6\n7,8,bad\n9,10,11\n")
    src = CsvSource(path, value=["z", "x"])
    good, dead = split(list(src))
    # ts without a ts column is the index among good records; key defaults to None.
    assert good == [{"key": None, "ts": 0.0, "value": [3.0, 1.0]},
                    {"key": None, "ts": 1.0, "value": [6.0, 4.0]},
                    {"key": None, "ts": 2.0, "value": [11.0, 9.0]}]
    assert [d.origin["line"] for d in dead] == [4]
    assert src.columns == ["z", "x"]


def test_csv_gz_tsv_and_ts_format(tmp_path):
    text = "when\tv\n2024-01-01 00:00:00\t1\n2024-01-01 00:00:30\t2\n01/01/2024\t3\n"
    path = write(tmp_path / "d.tsv.gz", text, gz=True)
    src = CsvSource(path, value="v", ts="when", delimiter="\t", ts_format="%Y-%m-%d %H:%M:%S")
    good, dead = split(list(src))
    assert [r["ts"] for r in good] == [1704067200.0, 1704067230.0]
    assert [d.origin["line"] for d in dead] == [4]
    assert "does not match format" in dead[0].reason
    assert src.name == "d"


def test_csv_iso_ts_with_timezone(tmp_path):
    path = write(tmp_path / "d.csv", "t,v\n2024-01-01T01:00:00+01:00,1\n2024-01-01T00:00:00Z,2\n")
    good = list(CsvSource(path, value="v", ts="t", ts_format="iso"))
    assert [r["ts"] for r in good] == [1704067200.0, 1704067200.0]


def test_csv_construction_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        CsvSource(tmp_path / "missing.csv")
    path = write(tmp_path / "h.csv", "a,b\n1,2\n")
    with pytest.raises(ValueError, match="no column 'value' in the header; columns: a, b"):
        CsvSource(path)
    with pytest.raises(ValueError, match="header row is required"):
        CsvSource(write(tmp_path / "e.csv", ""))
    with pytest.raises(ValueError, match="delimiter"):
        CsvSource(path, value="a", delimiter=";;")


def test_csv_annotations_argument(tmp_path):
    path = write(tmp_path / "a.csv", "value\n1\n2\n")
    assert CsvSource(path, annotations=[5, 2]).annotations == {"truth": [2, 5]}
    assert CsvSource(path, annotations={1: [3]}).annotations == {"1": [3]}
    with pytest.raises(ValueError, match="annotations"):
        CsvSource(path, annotations=[-1])


def test_csv_close_releases_open_iteration(tmp_path):
    path = write(tmp_path / "c.csv", "value\n1\n2\n3\n")
    src = CsvSource(path)
    it = iter(src)
    assert next(it)["value"] == 1.0
    src.close()
    assert list(it) == []


JSONL_TEXT = "\n".join([
    json.dumps({"id": "s1", "t": 10, "meta": {"temp": 20.5}, "y": 1}),     # 1 good
    '{"id": "s1", "t": 11, "meta": {"temp": ',                             # 2 bad JSON
    json.dumps([1, 2, 3]),                                                  # 3 not an object
    json.dumps({"id": "s1", "t": 12, "meta": {}}),                          # 4 missing field
    json.dumps({"id": "s2", "t": 13, "meta": {"temp": "warm"}}),            # 5 non-number
    json.dumps({"id": "s2", "t": 14, "meta": {"temp": None}}),              # 6 null
    "",                                                                     # 7 blank
    json.dumps({"id": "s2", "t": 15, "meta": {"temp": 21.0}, "task": 2}),  # 8 good
    json.dumps({"id": "s2", "meta": {"temp": 22.0}}),                       # 9 missing ts
]) + "\n"


def test_jsonl_bad_lines_become_dead_letters(tmp_path):
    path = write(tmp_path / "log.jsonl", JSONL_TEXT)
    src = JsonlSource(path, value="meta.temp", key="id", ts="t", y="y", task="task")
    good, dead = split(list(src))
    assert good == [
        {"key": "s1", "ts": 10.0, "value": 20.5, "y": 1, "task": None},
        {"key": "s2", "ts": 15.0, "value": 21.0, "y": None, "task": 2},
    ]
    assert [d.origin["line"] for d in dead] == [2, 3, 4, 5, 6, 9]
    assert dead[0].reason.startswith("invalid JSON")
    assert "not an object" in dead[1].reason
    assert dead[2].reason == "record has no field 'meta.temp'"
    assert "not a number" in dead[3].reason
    assert dead[5].reason == "record has no field 't'"


def test_jsonl_vector_and_matrix_values_gz(tmp_path):
    rows = [{"a": 1, "b": {"c": 2}, "m": [[1, 2], [3, 4]]},
            {"a": 3, "b": {"c": 4}, "m": [[1, 2], [3]]},
            {"a": 5, "b": {"c": float("nan")}, "m": [[1, float("nan")], [0, 1]]}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    path = write(tmp_path / "m.ndjson.gz", text, gz=True)
    good, dead = split(list(JsonlSource(path, value=["a", "b.c"])))
    assert [r["value"] for r in good] == [[1.0, 2.0], [3.0, 4.0]]
    assert [d.origin["line"] for d in dead] == [3]
    good, dead = split(list(JsonlSource(path, value="m")))
    assert good[0]["value"] == [[1.0, 2.0], [3.0, 4.0]]
    assert [d.origin["line"] for d in dead] == [2, 3]


def test_jsonl_missing_file():
    with pytest.raises(FileNotFoundError):
        JsonlSource("/nonexistent/x.jsonl")


def test_parse_ts():
    assert parse_ts("3", None) == 3.0
    assert parse_ts("2024-01-01", "%Y-%m-%d") == 1704067200.0


def test_extra_fields_are_copied(tmp_path):
    import pytest

    from shiftwatch.streams.files import CsvSource, JsonlSource

    j = tmp_path / "a.jsonl"
    j.write_text('{"value": 1, "train": false, "meta": {"s": 2}}\n{"value": 2}\n')
    recs = list(JsonlSource(j, extra=["train", "meta"]))
    assert recs[0]["train"] is False and recs[0]["meta"] == {"s": 2}
    assert "train" not in recs[1]
    c = tmp_path / "a.csv"
    c.write_text("value,train,site\n1,false,7\n2,true,x\n")
    recs = list(CsvSource(c, extra=["train", "site"]))
    assert [(r["train"], r["site"]) for r in recs] == [(False, 7), (True, "x")]
    with pytest.raises(ValueError, match="extra"):
        CsvSource(c, extra=["value"])
    with pytest.raises(ValueError, match="no column"):
        CsvSource(c, extra=["nope"])
