"""A stream's plausibility bounds (issue 51, item 5): deploy/bounds.py, its wiring in a replay
(``--max-abs-value``, ``--max-future-seconds``, both replay paths) and in a pipeline file's
``bounds:`` section.

The two measured bugs, each run with and without the bound on the same file:

* one record with value 1e149 (under the hard limit 1e150) left river:ADWIN's statistic at
  ~5e146 for the rest of the key: the shift at record 300 never alarmed;
* one record with ts 1e149 moved the event clock: with ``--key-ttl 3600`` every key expired
  at once.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shiftwatch.deploy.bounds import BOUNDS_DEFAULTS, StreamBounds, check_bounds
from shiftwatch.deploy.cli import main
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.records import reason_kind

# --------------------------------------------------------------------------------------
# The bounds of one stream
# --------------------------------------------------------------------------------------


def _r(ts, value=1.0, key="a"):
    return {"key": key, "ts": ts, "value": value}


def test_a_value_beyond_the_bound_is_refused_in_any_entry_and_moves_no_clock():
    b = StreamBounds(max_abs_value=100.0, max_future_seconds=None, now=lambda: 0.0)
    assert b.reason(_r(5.0, 100.0)) is None and b.reason(_r(6.0, -100.0)) is None
    assert b.clock == 6.0
    for v in (100.5, -1e149, [1.0, [2.0, 3e3]], float("inf")):
        why = b.reason(_r(1e9, v))
        assert why is not None and why.startswith("implausible: value "), v
    assert b.clock == 6.0  # refused records move nothing
    # what is not a number is not this bound's business (the operators say what it is)
    assert b.reason(_r(7.0, "hot")) is None and b.reason(_r(8.0, None)) is None
    import numpy as np

    assert b.reason(_r(9.0, np.array([[1.0, 2.0], [3.0, -400.0]]))).startswith(
        "implausible: value beyond")


def test_time_ahead_is_measured_from_the_later_of_the_stream_and_the_wall_clock():
    wall = [1000.0]
    b = StreamBounds(max_future_seconds=60.0, now=lambda: wall[0])
    # a history far behind the wall clock passes, and so does a gap inside it
    assert b.reason(_r(10.0)) is None and b.reason(_r(500.0)) is None
    assert b.reason(_r(1060.0)) is None  # exactly the bound: accepted
    why = b.reason(_r(1200.0))
    assert why == ("future: ts more than max_future_seconds=60 ahead of the stream's clock, "
                   "got ts 1200, 140 s ahead of 1060")
    assert b.clock == 1060.0
    # a simulation whose times run ahead may advance one bound at a time
    assert b.reason(_r(1120.0)) is None and b.reason(_r(1180.0)) is None
    # the wall clock moves the reference too
    wall[0] = 5000.0
    assert b.reason(_r(5050.0)) is None
    # milliseconds for seconds: said so
    wall[0] = 1.7e9
    assert b.reason(_r(1.7e9 * 1000)).endswith("(ts is in seconds)")
    assert not b.reason(_r(1.7e9 * 1e6)).endswith("(ts is in seconds)")
    # a ts that is no finite number is not checked and moves nothing
    for ts in (None, "noon", float("nan"), float("inf"), True, 10 ** 400):
        assert b.reason(_r(ts)) is None
    assert b.clock == 5050.0  # the refused ts moved nothing


def test_settings_are_checked_in_one_line():
    assert check_bounds(None) == BOUNDS_DEFAULTS
    assert check_bounds({"max_future_seconds": 0}) == {"max_abs_value": None,
                                                       "max_future_seconds": 0.0}
    for bad, fragment in [({"max_abs_value": 0}, "max_abs_value must be a finite number > 0"),
                          ({"max_abs_value": True}, "max_abs_value must be"),
                          ({"max_future_seconds": -1}, "max_future_seconds must be a finite "
                                                       "number >= 0"),
                          ({"max_future_seconds": float("inf")}, "max_future_seconds must"),
                          ({"max_abs": 3}, "unknown key 'max_abs'"),
                          ([1], "expected a mapping")]:
        with pytest.raises(ValueError, match=fragment) as e:
            check_bounds(bad)
        assert "\n" not in str(e.value)
    # both off: no bounds object, nothing checked
    assert StreamBounds.from_settings({"max_future_seconds": None}) is None
    assert StreamBounds.from_settings(None).max_future_seconds == 86400.0


def test_the_pipeline_file_bounds_section():
    def stage(**extra):
        return {"pipeline": "p", "kafka": {"bootstrap_servers": "127.0.0.1:9"},
                "stages": [{"name": "s", "input": "a", "output": "b",
                            "operator": "standardize", **extra}]}

    st = parse_pipeline(stage()).stages[0]
    assert st.bounds == BOUNDS_DEFAULTS
    st = parse_pipeline(stage(bounds={"max_abs_value": 1e4, "max_future_seconds": None}))
    assert st.stages[0].bounds == {"max_abs_value": 1e4, "max_future_seconds": None}
    with pytest.raises(PipelineError, match=r"bounds: max_abs_value must be a finite number"):
        parse_pipeline(stage(bounds={"max_abs_value": -3}))
    with pytest.raises(PipelineError, match=r"bounds: unknown key 'ttl'"):
        parse_pipeline(stage(bounds={"ttl": 3}))


# --------------------------------------------------------------------------------------
# A replay: both measured bugs, both replay paths
# --------------------------------------------------------------------------------------

PATHS = [pytest.param({}, id="columnar"), pytest.param({"SHIFTWATCH_RECORD_PATH": "1"},
                                                          id="records")]


def _csv(path: Path, rows) -> Path:
    path.write_text("ts,sensor,temp\n" + "".join(f"{t!r},{k},{v!r}\n" for t, k, v in rows))
    return path


def _replay(tmp_path: Path, source: Path, name: str, operator: str, *flags: str
            ) -> tuple[list, list, dict]:
    out = tmp_path / name
    argv = ["replay", str(source), "--source-opt", "value=temp", "--source-opt", "key=sensor",
            "--source-opt", "ts=ts", "--operator", operator,
            "--out", str(out), "--no-progress", "--no-plots", "--quiet", *flags]
    assert main(argv) == 0
    outputs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    dead_path = out / "dead_letters.jsonl"
    dead = ([json.loads(line) for line in dead_path.read_text().splitlines()]
            if dead_path.exists() else [])
    return outputs, dead, json.loads((out / "report.json").read_text())


def _wild_value_rows(seed: int = 0) -> list:
    rnd = random.Random(seed)
    rows = [(10.0 * i, "s1", rnd.gauss(0, 1) + (3.0 if i >= 300 else 0.0)) for i in range(600)]
    rows[100] = (rows[100][0], "s1", 1e149)
    return rows


@pytest.mark.parametrize("env", PATHS)
def test_one_wild_value_is_a_dead_letter_and_the_shift_still_alarms(tmp_path, monkeypatch,
                                                                    env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = _csv(tmp_path / "wild.csv", _wild_value_rows())
    outputs, dead, _ = _replay(tmp_path, path, "plain", "river:ADWIN")
    assert not dead and len(outputs) == 600
    assert not any(o.get("alarm") for o in outputs if o["offset"] > 100)  # the bug
    outputs, dead, report = _replay(tmp_path, path, "bounded", "river:ADWIN",
                                    "--max-abs-value", "1e6")
    assert len(outputs) == 599 and len(dead) == 1
    d = dead[0]
    assert d["reason"] == ("implausible: value beyond the stream's bound "
                           "(max_abs_value=1000000), got 1e+149")
    assert d["raw"]["value"] == 1e149 and d["raw"]["ts"] == 1000.0
    alarms = [o for o in outputs if o.get("alarm")]
    assert alarms and 300 <= alarms[0]["offset"] < 360
    assert report["dead_letters"]["by_reason"] == {reason_kind(d["reason"]): 1}


def test_both_replay_paths_write_the_same_dead_letters_and_outputs(tmp_path, monkeypatch):
    rows = _wild_value_rows(seed=3)
    rows[50] = (1e149, "s2", 1.0)  # and a ts far ahead, on another key
    rows[400] = (rows[400][0], "s1", "not a number")  # and a dead letter of its own
    path = _csv(tmp_path / "mixed.csv", rows)
    got = {}
    for name, env in (("columnar", None), ("records", "1")):
        if env:
            monkeypatch.setenv("SHIFTWATCH_RECORD_PATH", env)
        outputs, dead, _ = _replay(tmp_path, path, name, "river:ADWIN", "--max-abs-value",
                                   "1e6")
        got[name] = (outputs, [(d["reason"], d["origin"].get("line"), d["raw"])
                               for d in dead])
    assert got["columnar"] == got["records"]
    reasons = [r.split(":")[0] for r, _, _ in got["records"][1]]
    assert reasons == ["future", "implausible", reasons[2]] and reasons[2] != "future"
    assert [line for _, line, _ in got["records"][1]] == [52, 102, 402]


@pytest.mark.parametrize("env", PATHS)
def test_a_ts_far_ahead_does_not_expire_every_key(tmp_path, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    keys = [f"k{j}" for j in range(30)]
    rnd = random.Random(1)
    rows = [(float(i), k, rnd.gauss(0, 1) + (4.0 if k == "k7" and i >= 200 else 0.0))
            for i in range(400) for k in keys]
    rows.insert(150 * 30, (1e149, "k3", 0.0))
    path = _csv(tmp_path / "ahead.csv", rows)
    outputs, dead, report_off = _replay(tmp_path, path, "off", "river:PageHinkley", "--key-ttl",
                               "3600", "--max-future-seconds", "off")
    assert not dead
    # the bug: the clock jumped to 1e149 and every key expired at once
    assert report_off["summary"]["keys_evicted"] >= 30
    outputs, dead, report = _replay(tmp_path, path, "default", "river:PageHinkley",
                                    "--key-ttl", "3600")
    assert len(dead) == 1 and dead[0]["reason"].startswith(
        "future: ts more than max_future_seconds=86400 ahead of the stream's clock, got ts "
        "1e+149, ")
    assert dead[0]["origin"]["line"] == 150 * 30 + 2
    assert report["summary"].get("keys_evicted", 0) == 0  # (reported only when some are)
    alarms = [o for o in outputs if o.get("alarm") and o["key"] == "k7"]
    assert alarms and 200 <= alarms[0]["ts"] < 260


@pytest.mark.parametrize("flags, fragment", [
    (("--max-abs-value", "0"), "max_abs_value must be a finite number > 0"),
    (("--max-future-seconds", "soon"), "--max-future-seconds must be a number of seconds"),
    (("--max-future-seconds", "-5"), "max_future_seconds must be a finite number >= 0"),
])
def test_replay_flags_are_checked(tmp_path, capsys, flags, fragment):
    path = _csv(tmp_path / "x.csv", [(float(i), "s", 1.0) for i in range(10)])
    rc = main(["replay", str(path), "--operator", "river:ADWIN", "--out", str(tmp_path / "o"),
               *flags])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
