"""The rule for time and duplicates (issue 38, item 5): deploy/time_rule.py, its wiring in the
stage executor and the replay CLI, and ``change_ts`` never after its alarm's ``ts``.

The three measured bugs, each run with and without the rule on the same file:

* time running backwards inside a key gave an alarm whose located change (``change_ts``) was
  after the alarm's own ``ts``;
* 50 exact duplicate lines shifted every later position (the change at 250 reported at 300);
* the same file replayed twice (as when it is produced twice into a topic) gave an alarm at
  the seam.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.deploy.time_rule import (
    TimeRule,
    check_time,
    clamp_change_ts,
    fingerprint,
    is_time_rule,
    rule_operator,
    rule_params,
)
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.state_codec import dumps_state, loads_state
from shiftwatch.records import BadInput, reason_kind

# --------------------------------------------------------------------------------------
# The rule on one key
# --------------------------------------------------------------------------------------


def _r(ts, value=1.0, key="a", **extra):
    return {"key": key, "ts": ts, "value": value, **extra}


def test_lateness_bound_is_inclusive_and_per_key():
    rule = Keyed(TimeRule(allowed_lateness_seconds=5.0))
    out = rule.process_batch([_r(100.0), _r(95.0), _r(94.9), _r(10.0, key="b"), _r(100.0),
                              _r(101.0), _r(96.0), _r(95.5)])
    kept = [o["ts"] for o in out if isinstance(o, dict)]
    dead = [o for o in out if not isinstance(o, dict)]
    # 95 is exactly 5 s before 100: kept; 94.9 is late; key b has its own latest; 95.5 is
    # 5.5 s before the new latest 101 (Keyed's outputs come grouped by key)
    assert kept == [100.0, 95.0, 100.0, 101.0, 96.0, 10.0]
    assert [d.origin["operator"] for d in dead] == ["time", "time"]
    assert all(d.reason.startswith("late: ") for d in dead)
    assert dead[0].reason == ("late: ts more than the allowed lateness (5 s) before the key's "
                              "latest ts, got ts 94.9, 5.099999999999994 s before 100")
    # one kind of reason whatever the values: counted together
    assert reason_kind(dead[0].reason) == reason_kind(dead[1].reason) == (
        "late: ts more than the allowed lateness (5 s) before the key's latest ts")


def test_records_without_a_numeric_ts_are_neither_checked_nor_move_the_latest():
    rule = TimeRule(allowed_lateness_seconds=0.0)
    for ts in (None, "yesterday", float("nan"), float("inf"), 10 ** 400, True):
        assert rule.process(_r(ts)) == [_r(ts)]
    assert rule._latest is None
    rule.process(_r(50.0))
    assert rule.process(_r(None)) == [_r(None)]
    with pytest.raises(BadInput, match="^late: "):
        rule.process(_r(49.0))


def test_no_limit_accepts_any_order():
    rule = TimeRule(allowed_lateness_seconds=None)
    assert [len(rule.process(_r(t))) for t in (100.0, 0.0, -5e9, 50.0)] == [1, 1, 1, 1]


def test_a_rejected_record_leaves_the_state_as_it_was():
    rule = TimeRule(allowed_lateness_seconds=1.0, drop_duplicates=3)
    rule.process(_r(10.0))
    before = dumps_state(rule.state_dict())
    with pytest.raises(BadInput):
        rule.process(_r(5.0, value=2.0))
    assert dumps_state(rule.state_dict()) == before


def test_exact_duplicates_within_the_window_are_dropped():
    rule = Keyed(TimeRule(drop_duplicates=2))
    recs = [_r(1.0, offset=0), _r(1.0, offset=1),                # a duplicate of the last
            _r(1.0, value=2.0, offset=2),                          # other value: kept
            _r(1.0, offset=3, meta={"kafka": {"offset": 9}}),     # meta is not compared
            _r(2.0, offset=4), _r(3.0, offset=5),
            _r(1.0, offset=6),                                     # 3 records back: kept
            _r(1.0, key="b", offset=7)]                            # another key
    assert [o["offset"] for o in rule.process_batch(recs)] == [0, 2, 4, 5, 6, 7]


def test_duplicates_are_checked_before_lateness():
    rule = TimeRule(allowed_lateness_seconds=0.0, drop_duplicates=10)
    for t in (1.0, 2.0, 3.0):
        rule.process(_r(t))
    assert rule.process(_r(1.0)) == []            # re-sent: dropped, not dead-lettered
    with pytest.raises(BadInput, match="^late: "):
        rule.process(_r(1.0, value=7.0))           # new content with an old ts: late


def test_fingerprint_ignores_runtime_coordinates_and_unencodable_records_are_no_duplicates():
    assert fingerprint(_r(1.0, offset=1, meta={"x": 1})) == fingerprint(_r(1.0, offset=2))
    assert fingerprint(_r(1.0)) != fingerprint(_r(1.0, key="b"))
    assert fingerprint(_r(1.0)) != fingerprint(_r(1.5))
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert fingerprint(_r(1.0, value=deep)) is None
    rule = TimeRule(drop_duplicates=5)
    assert len(rule.process(_r(1.0, value=deep))) == 1
    assert len(rule.process(_r(1.0, value=deep))) == 1


def test_state_round_trips_through_the_changelog_codec_and_a_smaller_window_keeps_the_newest():
    rule = TimeRule(allowed_lateness_seconds=3.0, drop_duplicates=4)
    for t in range(10):  # the ring wraps
        rule.process(_r(float(t)))
    state = loads_state(dumps_state(rule.state_dict()))
    same = TimeRule(allowed_lateness_seconds=3.0, drop_duplicates=4)
    same.load_state_dict(state)
    assert same._latest == 9.0
    assert same.process(_r(9.0)) == [] and same.process(_r(6.0)) == []  # remembered
    with pytest.raises(BadInput, match="^late: "):
        same.process(_r(5.0, value=0.0))
    smaller = TimeRule(allowed_lateness_seconds=None, drop_duplicates=2)
    smaller.load_state_dict(state)
    assert smaller._recent == [fingerprint(_r(8.0)), fingerprint(_r(9.0))]
    assert smaller.process(_r(8.0)) == [] and smaller.process(_r(7.0)) == [_r(7.0)]
    off = TimeRule(allowed_lateness_seconds=1.0, drop_duplicates=0)
    off.load_state_dict(state)
    assert off._recent == [] and off._index == {}


def test_a_ring_not_yet_full_keeps_every_fingerprint_through_a_restart():
    # found by the hostile-input property test: three remembered records in a window of four
    # came back as one (a negative slice), so a re-sent record became a late dead letter
    rule = TimeRule(allowed_lateness_seconds=0.0, drop_duplicates=4)
    for t in (100.0, 101.0, 102.0):
        rule.process(_r(t))
    again = TimeRule(allowed_lateness_seconds=0.0, drop_duplicates=4)
    again.load_state_dict(loads_state(dumps_state(rule.state_dict())))
    assert again._recent == rule._recent
    assert again.process(_r(100.0)) == []  # a duplicate, not a late record


def test_settings_and_where_the_rule_goes():
    assert rule_operator(None) is None and rule_operator(check_time(None)) is None
    assert rule_params(check_time(None)) == []
    op = rule_operator({"allowed_lateness_seconds": 2, "drop_duplicates": 0})
    assert isinstance(op, Keyed) and is_time_rule(op) and not is_time_rule(Keyed(Operator()))
    assert op.operator.allowed_lateness_seconds == 2.0
    assert rule_params({"allowed_lateness_seconds": None, "drop_duplicates": 3}) == [
        {"operator": "time", "params": {}}]
    for bad in ({"allowed_lateness_seconds": -1}, {"drop_duplicates": 10_001},
                {"allowed_lateness_seconds": True}, {"lateness": 3}, [1]):
        with pytest.raises(ValueError):
            check_time(bad)


def test_the_pipeline_file_time_section():
    doc = {"pipeline": "p", "kafka": {"bootstrap_servers": "x:9092"},
           "stages": [{"name": "s", "input": "a", "output": "b", "operator": "river:ADWIN",
                       "time": {"allowed_lateness_seconds": 30, "drop_duplicates": 100}}]}
    stage = parse_pipeline(doc).stages[0]
    assert stage.time == {"allowed_lateness_seconds": 30.0, "drop_duplicates": 100}
    doc["stages"][0]["time"] = {"drop_duplicates": -1}
    with pytest.raises(PipelineError, match="time: drop_duplicates must be an integer"):
        parse_pipeline(doc)


# --------------------------------------------------------------------------------------
# In the stage executor
# --------------------------------------------------------------------------------------


class _LocatesTheFirst(Operator):
    """A detector stand-in: alarms on its third record, locating the change at its first."""

    name = "locates-first"

    def __init__(self):
        self._reset()

    def _reset(self):
        self._n = 0
        self._first_ts = None

    def process(self, record):
        self._n += 1
        if self._n == 1:
            self._first_ts = record.get("ts")
        out = self._output(record, alarm=self._n == 3)
        if self._n == 3:
            out.update(change_at=0, change_ts=self._first_ts)
        return [out]


def test_change_ts_is_never_after_the_alarm_ts():
    ex = StageExecutor([_LocatesTheFirst()])
    batch = ex.process([_r(750.0, offset=0), _r(740.0, offset=1), _r(731.0, offset=2)])
    alarm = [o for o in batch.outputs if o["alarm"]][0]
    assert alarm["ts"] == 731.0 and alarm["change_ts"] == 731.0  # 750 without the clamp


def test_clamp_leaves_what_it_cannot_compare():
    outs = [{"ts": None, "change_ts": 5.0}, {"ts": "x", "change_ts": 5.0}, {"change_ts": 5.0},
            {"ts": 4.0, "change_ts": None}, {"ts": 4.0, "change_ts": 5.0}]
    clamp_change_ts(outs)
    assert [o["change_ts"] for o in outs] == [5.0, 5.0, 5.0, None, 4.0]


def test_executor_counts_duplicates_and_keeps_operator_numbering():
    ex = StageExecutor([rule_operator({"allowed_lateness_seconds": 0, "drop_duplicates": 5}),
                        _LocatesTheFirst()])
    recs = [_r(1.0, offset=0), _r(1.0, offset=1), _r(2.0, key="b", offset=2),
            _r(0.5, value=9.0, offset=3), _r(2.0, offset=4), _r(3.0, offset=5)]
    batch = ex.process(recs, dirty=[set(), set()])
    assert [r["offset"] for r in batch.inputs] == [0, 2, 4, 5]  # what the chain took
    assert [o["offset"] for o in batch.outputs] == [0, 2, 4, 5]
    assert [d["reason"][:5] for d in batch.dead_letters] == ["late:"]
    assert batch.dead_letters[0]["operator"] == "time"
    s = ex.summary
    assert (s.duplicates_dropped, s.dead_letters, s.outputs, s.alarms) == (1, 1, 4, 1)
    assert s.alarms_by_operator == {"0:locates-first": 1}  # the rule is not numbered
    assert "1 duplicates dropped" in s.line()


# --------------------------------------------------------------------------------------
# The replay CLI, end to end
# --------------------------------------------------------------------------------------


def _series(seed: int = 0, n: int = 500, change: int = 250) -> list[tuple[float, float]]:
    rnd = random.Random(seed)
    return [(10.0 * i, rnd.gauss(0, 1) + (4.0 if i >= change else 0.0)) for i in range(n)]


def _csv(path: Path, rows) -> Path:
    path.write_text("ts,sensor,temp\n" + "".join(f"{t:g},s1,{v:.4f}\n" for t, v in rows))
    return path


def _replay(tmp_path: Path, source: Path, name: str, *flags: str) -> tuple[list, list, str]:
    out = tmp_path / name
    argv = ["replay", str(source), "--source-opt", "value=temp", "--source-opt", "key=sensor",
            "--source-opt", "ts=ts", "--operator", "river:PageHinkley", "--labels", "250",
            "--out", str(out), "--no-progress", "--no-plots", "--quiet", *flags]
    assert main(argv) == 0
    outputs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    dead_path = out / "dead_letters.jsonl"
    dead = ([json.loads(line) for line in dead_path.read_text().splitlines()]
            if dead_path.exists() else [])
    return [o for o in outputs if o.get("alarm")], dead, (out / "report.json").read_text()


def test_replay_time_running_backwards(tmp_path, capsys):
    # Records 251..279 of the key carry ts 300 s behind: a clock that went back at the change.
    rows = [(t - 300.0 if 251 <= i <= 279 else t, v) for i, (t, v) in enumerate(_series())]
    path = _csv(tmp_path / "back.csv", rows)
    alarms, dead, _ = _replay(tmp_path, path, "plain")
    assert alarms and not dead
    # the alarm falls among the records whose ts went back; its change is at ts 2500
    assert alarms[0]["change_at"] == 250 and alarms[0]["ts"] < 2500.0
    assert all(a["change_ts"] <= a["ts"] for a in alarms)  # 2500 > ts before the clamp
    alarms, dead, _ = _replay(tmp_path, path, "late", "--allowed-lateness", "0")
    assert len(dead) == 29 and {d["origin"]["line"] for d in dead} == set(range(253, 282))
    assert all(d["reason"].startswith("late: ") and d["operator"] == "time" for d in dead)
    assert alarms and all(a["change_ts"] <= a["ts"] for a in alarms)
    assert alarms[0]["change_ts"] == 2500.0 and alarms[0]["ts"] > 2500.0
    text = capsys.readouterr().out
    assert ("29 x late: ts more than the allowed lateness (0 s) before the key's latest ts"
            in text)


def test_replay_drops_50_duplicate_lines_without_shifting_positions(tmp_path, capsys):
    rows = _series(seed=1)
    clean = _csv(tmp_path / "clean.csv", rows)
    dup = _csv(tmp_path / "dup.csv", rows[:150] + rows[100:150] + rows[150:])
    want, _, _ = _replay(tmp_path, clean, "clean")
    assert [a["change_at"] for a in want] == [250]
    shifted, _, _ = _replay(tmp_path, dup, "shifted")
    assert [a["change_at"] for a in shifted] == [300]  # the bug, without the rule
    got, dead, report = _replay(tmp_path, dup, "dropped", "--drop-duplicates", "100")
    assert not dead
    assert [(a["change_at"], a["change_ts"], a["ts"]) for a in got] == [
        (a["change_at"], a["change_ts"], a["ts"]) for a in want]
    assert [a["offset"] - 50 for a in got] == [a["offset"] for a in want]
    assert "50 duplicates dropped" in capsys.readouterr().out
    assert json.loads(report)["summary"] == json.loads(
        (tmp_path / "clean" / "report.json").read_text())["summary"]


@pytest.mark.parametrize("flags", [("--allowed-lateness", "0"), ("--drop-duplicates", "500")])
def test_replay_of_a_file_twice_has_no_alarm_at_the_seam(tmp_path, flags):
    rows = _series(seed=2)
    path = _csv(tmp_path / "twice.csv", rows + rows)
    plain, _, _ = _replay(tmp_path, path, "plain")
    assert any(a["offset"] >= 500 for a in plain)  # the spurious alarms, without the rule
    alarms, dead, _ = _replay(tmp_path, path, "rule", *flags)
    assert alarms and all(a["offset"] < 500 for a in alarms)
    assert [a["change_at"] for a in alarms] == [a["change_at"] for a in plain
                                                if a["offset"] < 500]
    if flags[0] == "--allowed-lateness":
        # the second copy's records are late but its last (ts equal to the key's latest)
        assert len(dead) == 499 and all(d["reason"].startswith("late: ") for d in dead)
    else:
        assert dead == []


@pytest.mark.parametrize("flags, fragment", [
    (("--allowed-lateness", "-1"), "allowed_lateness_seconds must be a number >= 0"),
    (("--drop-duplicates", "10001"), "drop_duplicates must be an integer from 0 to 10000"),
])
def test_replay_flags_are_checked(tmp_path, capsys, flags, fragment):
    path = _csv(tmp_path / "x.csv", _series(n=10))
    rc = main(["replay", str(path), "--operator", "river:ADWIN", "--out", str(tmp_path / "o"),
               *flags])
    assert rc != 0
    assert fragment in capsys.readouterr().err
