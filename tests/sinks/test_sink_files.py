"""File, console, memory and dead-letter sinks."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from shiftwatch import sinks
from shiftwatch.operators.records import DeadLetter
from shiftwatch.sinks import (
    ConsoleAlarmSink,
    CsvSink,
    DeadLetterSink,
    JsonlSink,
    MemorySink,
    Sink,
    jsonable,
)


def test_every_public_name_imports():
    for name in sinks.__all__:
        assert getattr(sinks, name) is not None, name
    assert "Sink" in sinks.__all__ and issubclass(JsonlSink, Sink)


NUMPY_RECORD = {
    "key": "k",
    "ts": np.float64(1.5),
    "offset": np.int64(7),
    "alarm": np.bool_(True),
    "statistic": np.float32(0.25),
    "threshold": None,
    "value": np.array([[1.0, 2.0]]),
    "lower": float("nan"),
    "upper": float("inf"),
    "meta": {"pair": (1, np.int32(2)), 3: "x"},
}
NUMPY_RECORD_AS_JSON = {
    "key": "k",
    "ts": 1.5,
    "offset": 7,
    "alarm": True,
    "statistic": 0.25,
    "threshold": None,
    "value": [[1.0, 2.0]],
    "lower": None,
    "upper": None,
    "meta": {"pair": [1, 2], "3": "x"},
}


def test_jsonable_converts_numpy_and_non_finite():
    out = jsonable(NUMPY_RECORD)
    assert out == NUMPY_RECORD_AS_JSON
    json.dumps(out, allow_nan=False)
    assert jsonable(DeadLetter(raw=b"\xff", reason="bad"))["raw"] == "\ufffd"
    assert isinstance(jsonable(object()), str)


def test_jsonl_round_trip_creates_dirs_and_flushes(tmp_path):
    path = tmp_path / "a" / "b" / "out.jsonl"
    sink = JsonlSink(path)
    sink.open()
    sink.write([NUMPY_RECORD, {"key": "k", "offset": 8, "alarm": False}])
    sink.flush()
    # visible before close
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        NUMPY_RECORD_AS_JSON,
        {"key": "k", "offset": 8, "alarm": False},
    ]
    sink.write([])
    sink.close()
    sink.close()  # a second close does nothing
    assert sink.summary() == {"path": str(path), "records": 2}


def test_jsonl_append(tmp_path):
    path = tmp_path / "out.jsonl"
    for append in (False, True):
        sink = JsonlSink(path, append=append)
        sink.open()
        sink.write([{"i": 1}])
        sink.close()
    assert path.read_text().count("\n") == 2


def test_jsonl_open_error_is_oserror(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        JsonlSink(tmp_path / "file" / "out.jsonl").open()


def test_csv_round_trip(tmp_path):
    path = tmp_path / "sub" / "out.csv"
    sink = CsvSink(path)
    sink.open()
    sink.write(
        [
            {
                "key": "k",
                "offset": np.int64(0),
                "value": np.array([1.0, 2.5]),
                "alarm": np.bool_(False),
                "statistic": None,
            },
            {
                "key": "k",
                "offset": 1,
                "value": [[1, 0], [0, 1]],
                "alarm": True,
                "statistic": float("nan"),
                "extra": 1,
            },
        ]
    )
    sink.close()
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == ["key", "offset", "value", "alarm", "statistic"]
    assert rows[0] == {
        "key": "k",
        "offset": "0",
        "value": "[1.0,2.5]",
        "alarm": "false",
        "statistic": "",
    }
    assert json.loads(rows[1]["value"]) == [[1, 0], [0, 1]]
    assert rows[1]["alarm"] == "true" and rows[1]["statistic"] == ""
    assert sink.summary() == {"path": str(path), "records": 2, "dropped_fields": ["extra"]}


def test_csv_explicit_fields(tmp_path):
    path = tmp_path / "out.csv"
    sink = CsvSink(path, fields=["offset", "alarm"])
    sink.open()
    sink.write([{"offset": 3}])
    sink.close()
    assert path.read_text() == "offset,alarm\n3,\n"


def test_console_alarm_table():
    out = io.StringIO()
    sink = ConsoleAlarmSink(stream=out, max_rows=2)
    sink.open()
    sink.write(
        [
            {"key": "a", "offset": 1, "ts": 1.0, "alarm": False, "statistic": 0.5},
            {"key": "a", "offset": 12, "ts": 12.0, "alarm": True, "statistic": np.float64(4)},
            {"key": "long-key", "offset": 130, "ts": 1712345678.25, "alarm": 1},
        ]
    )
    sink.write([{"key": "a", "offset": 200, "alarm": True}, DeadLetter(raw="x", reason="r")])
    sink.close()
    sink.close()  # printed once
    assert out.getvalue() == (
        "key       offset  ts             statistic\n"
        "a             12  12.0           4\n"
        "long-key     130  1712345678.25  -\n"
        "... 1 more\n"
        "3 alarms\n"
    )
    assert sink.summary() == {"alarms": 3}


def test_console_no_alarms(capsys):
    sink = ConsoleAlarmSink()
    sink.write([{"alarm": False}])
    sink.close()
    assert capsys.readouterr().out == "0 alarms\n"
    with pytest.raises(ValueError, match="max_rows"):
        ConsoleAlarmSink(max_rows=-1)


def test_memory_sink_lifecycle():
    sink = MemorySink(keep_inputs=True)
    assert sink.wants_inputs and not MemorySink().wants_inputs
    sink.open()
    sink.write([{"a": 1}])
    sink.write_inputs([{"value": 2}])
    sink.flush()
    sink.close()
    assert (sink.records, sink.inputs, sink.opened, sink.closed, sink.flushes) == (
        [{"a": 1}],
        [{"value": 2}],
        True,
        True,
        1,
    )


def test_dead_letter_sink_file(tmp_path):
    path = tmp_path / "dl" / "dead.jsonl"
    sink = DeadLetterSink(path)
    sink.open()
    sink.write(
        [
            DeadLetter(raw="1,abc", reason="not a number", origin={"file": "x", "line": 2}),
            DeadLetter(raw={"value": np.float64(np.nan)}, reason="not finite"),
            {"dead_letter": True, "reason": "not a number", "origin": {}, "raw": "2,?"},
        ]
    )
    sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {
        "dead_letter": True,
        "reason": "not a number",
        "operator": None,
        "key": None,
        "origin": {"file": "x", "line": 2},
        "raw": "1,abc",
        "raw_base64": "MSxhYmM=",
    }
    assert lines[1]["reason"] == "not finite"
    assert lines[2]["raw"] == "2,?"
    assert sink.count == 3 and sink.records == []
    assert sink.by_reason == {"not a number": 2, "not finite": 1}
    assert sink.summary() == {
        "dead_letters": 3,
        "path": str(path),
        "by_reason": {"not a number": 2, "not finite": 1},
    }


def test_dead_letter_sink_memory():
    sink = DeadLetterSink()
    sink.open()
    sink.write([{"reason": "no field 'value'", "raw": {"key": "k"}}, "garbage"])
    sink.close()
    assert sink.count == 2
    assert sink.records[0] == {
        "reason": "no field 'value'",
        "raw": {"key": "k"},
        "dead_letter": True,
    }
    assert sink.records[1]["reason"] == "unknown"
    assert sink.summary(top=1) == {"dead_letters": 2, "by_reason": {"no field 'value'": 1}}
