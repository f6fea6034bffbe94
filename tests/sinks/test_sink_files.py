"""File, console, memory and dead-letter sinks."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from shiftwatch import sinks
from shiftwatch.records import DeadLetter
from shiftwatch.sinks import (
    ConsoleAlarmSink,
    CsvSink,
    DeadLetterSink,
    JsonlSink,
    MemorySink,
    Sink,
    jsonable,
)
from shiftwatch.sinks.files import alarm_statistic
from shiftwatch.sinks.time_axis import is_epoch_seconds, iso_utc, time_axis_ts


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
    # written to a temporary beside it until close: never visible in part
    assert not path.exists() and len(list(path.parent.glob("out.jsonl.*.tmp"))) == 1
    sink.write([])
    sink.close()
    sink.close()  # a second close does nothing
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        NUMPY_RECORD_AS_JSON,
        {"key": "k", "offset": 8, "alarm": False},
    ]
    assert list(path.parent.iterdir()) == [path] and sink.written
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
        "key       offset  ts             change_at  statistic\n"
        "a             12  12.0                   -  4\n"
        "long-key     130  1712345678.25          -  -\n"
        "... 1 more\n"
        "3 alarms\n"
    )
    assert sink.summary() == {"alarms": 3}


def _alarm_rows(operator, values, ts0=1767225600.0, **params):
    """Real outputs of a registered detector on ``values`` (one key), then the table rows."""
    from shiftwatch.operators import create

    op = create(operator, **params)
    records = [{"key": "k", "offset": i, "ts": ts0 + 60.0 * i, "value": v}
               for i, v in enumerate(values)]
    outputs = op.process_batch(records)
    sink = ConsoleAlarmSink(stream=io.StringIO(), max_rows=100)
    sink.write(outputs)
    lines = sink.table().splitlines()
    assert lines[0].split() == ["key", "offset", "ts", "change_at", "statistic"]
    alarms = [o for o in outputs if o.get("alarm")]
    assert alarms and lines[-1] == f"{len(alarms)} alarm{'s' if len(alarms) > 1 else ''}"
    rows = [line.split(None, 4) for line in lines[1:-1]]
    return alarms, rows


def _shifted(n=400, at=200, shift=3.0):
    rng = np.random.default_rng(1)
    return [float(x) + (shift if i >= at else 0.0) for i, x in enumerate(rng.normal(size=n))]


def test_console_table_for_cs_shows_the_gap_that_triggered():
    alarms, rows = _alarm_rows("cs", _shifted())
    for alarm, (key, offset, ts, change_at, stat) in zip(alarms, rows, strict=True):
        assert key == "k" and int(offset) == alarm["offset"]
        assert ts == iso_utc(alarm["ts"]) and ts.endswith("Z")
        assert int(change_at) == alarm["change_at"]
        word, number = stat.split()
        assert word == "gap"  # the interval is empty at a cs alarm: lower >= upper
        assert float(number) == pytest.approx(alarm["lower"] - alarm["upper"], rel=1e-5)


def test_console_table_for_adwin_shows_its_statistic():
    alarms, rows = _alarm_rows("river:ADWIN", _shifted())
    for alarm, (_, _, ts, change_at, stat) in zip(alarms, rows, strict=True):
        assert ts == iso_utc(alarm["ts"])
        assert int(change_at) == alarm["change_at"]
        assert float(stat) == pytest.approx(alarm["statistic"], rel=1e-5)


def test_console_table_for_karcher_shows_statistic_against_threshold():
    rng = np.random.default_rng(3)
    values = []
    for i in range(300):
        a = rng.normal(size=(3, 3)) * (3.0 if i >= 150 else 1.0)
        values.append((a @ a.T + np.eye(3)).tolist())
    alarms, rows = _alarm_rows("karcher", values, manifold="spd", step_slow=0.05,
                               step_fast=0.2, burn_in=20, threshold=0.5)
    for alarm, (_, _, _, _, stat) in zip(alarms, rows, strict=True):
        assert stat == f"{alarm['statistic']:.6g} > threshold {alarm['threshold']:.6g}"
        assert alarm["statistic"] > alarm["threshold"]


def test_console_table_vector_statistic_is_max_over_coordinates():
    assert alarm_statistic({"statistic": [0.5, np.float64(2.5), float("nan")]}) == \
        "2.5 (max of 2)"
    assert alarm_statistic({"lower": [0.0, 1.2], "upper": [1.0, 1.0]}) == "gap 0.2 (max of 2)"
    assert alarm_statistic({"lower": [0.0, 1.2, 3.0], "upper": [1.0, 1.0, 2.0]}) == \
        "gap 1 (max of 3)"
    assert alarm_statistic({"alarm": True}) == "-"


def test_console_table_keeps_raw_ts_unless_all_are_dates():
    sink = ConsoleAlarmSink(stream=io.StringIO())
    sink.write([{"key": "a", "offset": 1, "ts": 1767225600.0, "alarm": True},
                {"key": "a", "offset": 2, "ts": 1767225600000.0, "alarm": True}])
    assert [line.split()[2] for line in sink.table().splitlines()[1:3]] == \
        ["1767225600.0", "1767225600000.0"]
    sink = ConsoleAlarmSink(stream=io.StringIO())
    sink.write([{"key": "a", "offset": 1, "ts": 1767225600.5, "alarm": True}])
    assert sink.table().splitlines()[1].split()[2] == "2026-01-01T00:00:00.500Z"


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


@pytest.mark.parametrize("values, dates", [
    ([1767225600.0, 1767225601.0], True),       # 2026
    ([-1798761600.0, 1483228800.0], True),      # 1913 .. 2017 (UK coal, yearly)
    ([0.0, 1.0, 2.0, 3.0], False),              # the index a source uses without a date
    ([1767225600000.0], False),                 # milliseconds: not seconds of 1900..2100
    ([1767225600.0, float("nan")], False),
    ([1767225600.0, "2026-01-01"], False),
    ([True], False),
    ([], False),
])
def test_epoch_seconds_choice(values, dates):
    assert is_epoch_seconds(values) is dates


def test_time_axis_needs_ordered_dates():
    assert time_axis_ts([1767225600, 1767225660]) == [1767225600.0, 1767225660.0]
    assert time_axis_ts([1767225660.0, 1767225600.0]) is None
    assert time_axis_ts([1767225600.0, 1767225600.0]) is None  # no span
    assert time_axis_ts([0.0, 1.0]) is None


def test_console_table_cuts_long_keys_and_keeps_them_apart():
    huge = "s" * 1_000_000
    sink = ConsoleAlarmSink(stream=io.StringIO())
    sink.write([{"key": huge + "1", "offset": 1, "alarm": True, "statistic": 2.0},
                {"key": huge + "2", "offset": 2, "alarm": True, "statistic": 3.0}])
    lines = sink.table().splitlines()
    assert max(map(len, lines)) < 150
    keys = [line.split()[0] for line in lines[1:3]]
    assert keys[0] != keys[1] and all(len(k) == 60 and k.startswith("sss") for k in keys)


# ---- a full disk: every file is written whole or not at all --------------------------------


def full_disk(monkeypatch, limit):
    """Make every file the sinks write fail with ENOSPC past ``limit`` bytes."""
    import errno

    from shiftwatch.sinks import atomic_file

    class Full(io.FileIO):
        written = 0

        def write(self, b):
            room = limit - self.written
            if room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = super().write(bytes(b)[:room])  # a disk takes what fits, then refuses
            self.written += n
            return n

    monkeypatch.setattr(atomic_file, "_disk_file", lambda fd: Full(fd, "w"))


@pytest.mark.parametrize("make", [JsonlSink, DeadLetterSink, CsvSink],
                         ids=["jsonl", "dead letters", "csv"])
def test_a_file_sink_that_runs_out_of_space_leaves_nothing_behind(tmp_path, monkeypatch, make):
    from shiftwatch.sinks.atomic_file import WriteFailed

    full_disk(monkeypatch, limit=10_000)
    (tmp_path / "out.x").write_text("the previous run's\n")
    sink = make(tmp_path / "out.x")
    sink.open()
    rows = [{"dead_letter": True, "reason": "r", "key": "k", "offset": i, "x": "y" * 50}
            for i in range(100)]
    with pytest.raises(WriteFailed, match=r"cannot write .*out\.x: No space left on device"):
        for _ in range(10):
            sink.write(rows)  # buffered: the disk refuses when a buffer is written out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.x"]  # no temporary left
    assert (tmp_path / "out.x").read_text() == "the previous run's\n"  # never a part
    with pytest.raises(WriteFailed):
        sink.write(rows[:1])  # what was written before is gone: no later part either
    sink.close()  # never raises
    assert sink.error == "No space left on device" and not sink.written
    assert sink.summary()["error"] == "No space left on device"


def test_a_file_that_cannot_be_synced_or_renamed_at_close_is_not_left(tmp_path, monkeypatch):
    import errno
    import os

    sink = JsonlSink(tmp_path / "out.jsonl")
    sink.write([{"i": 1}])

    def refuse(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", refuse)
    sink.close()  # the runner closes every sink: close must not raise
    assert sink.error == "Input/output error" and not sink.written
    assert list(tmp_path.iterdir()) == []
