"""Keys that expire (issue 38, item 1): the rule, the stores, a replay, the settings.

The changelog side (deletion entries, restore) is in tests/deploy/kafka/
test_key_expiry_changelog.py; against the broker in tests/integration/test_key_expiry_kafka.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.deploy import cli
from shiftwatch.deploy.executor import StageExecutor
from shiftwatch.deploy.expiry import Expiry, check_state
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.operators import create
from shiftwatch.operators.keyed import Keyed


def test_event_time_ttl_forgets_keys_the_clock_has_passed():
    e = Expiry(ttl_seconds=10)
    e.touch([{"key": "a", "ts": 0}, {"key": "b", "ts": 3}, {"key": "c"}])  # c: no time
    assert e.due() == []
    e.touch([{"key": "b", "ts": 10.5}])  # the clock is 10.5: a (0) is over 10 s behind
    assert e.due() == ["a"]
    e.touch([{"key": "b", "ts": 13.5}])  # c counted as seen at the clock then (3)
    assert e.due() == ["c"]
    assert len(e) == 1 and e.evicted_ttl == 2


def test_a_late_ts_does_not_move_a_key_back_in_time():
    e = Expiry(ttl_seconds=5)
    e.touch([{"key": "a", "ts": 100}, {"key": "a", "ts": 50}])
    e.touch([{"key": "b", "ts": 104}])
    assert e.due() == []  # a's latest is 100, not 50


def test_wall_clock_ttl_and_max_keys_least_recently_seen_first():
    now = [0.0]
    e = Expiry(ttl_seconds=60, clock="wall", max_keys=3, now=lambda: now[0])
    e.touch([{"key": k} for k in "abcd"])
    assert e.due() == ["a"]  # over the maximum
    now[0] = 30
    e.touch([{"key": "b"}])
    now[0] = 61
    assert e.due() == ["c", "d"]  # idle since 0; b was seen at 30
    assert (e.evicted_max, e.evicted_ttl) == (1, 2)


def test_restored_keys_count_as_seen_at_the_checkpoint_clock_before_newer_ones():
    e = Expiry(ttl_seconds=10, max_keys=2)
    e.touch([{"key": "new", "ts": 100}])
    e.restored(["old1", "old2", "new"], clock=95.0)
    assert e.due() == ["old1"]  # over the maximum: a restored key is older than any new one
    e.touch([{"key": "new", "ts": 106}])
    assert e.due() == ["old2"]  # 95 is over 10 s behind 106


@pytest.mark.parametrize("bad", [{"ttl": 5}, {"ttl_seconds": 0}, {"ttl_seconds": "1h"},
                                 {"max_keys": 0}, {"max_keys": 1.5}, {"clock": "cpu"}, [1]])
def test_bad_settings_are_one_line(bad):
    with pytest.raises(ValueError) as got:
        check_state(bad)
    assert "\n" not in str(got.value)


def test_the_pipeline_file_state_section():
    base = {"pipeline": "p", "stages": [{"name": "d", "input": "i", "output": "o",
                                         "operator": "cs"}]}
    cfg = parse_pipeline(base)
    assert cfg.stages[0].state == {"ttl_seconds": None, "clock": "event", "max_keys": None}
    base["stages"][0]["state"] = {"ttl_seconds": 3600, "max_keys": 1000}
    assert parse_pipeline(base).stages[0].state["max_keys"] == 1000
    base["stages"][0]["state"] = {"max_keys": -1}
    with pytest.raises(PipelineError, match=r"stages\[0\] \(d\): state: max_keys must be"):
        parse_pipeline(base)


@pytest.mark.parametrize("template", [lambda: create("cs"), create("cs")],
                         ids=["clones", "cs fleet"])
def test_evicting_keys_gives_the_outputs_of_keys_started_afresh(template):
    """The cs fleet (slots moved on eviction, its pool compacted) against plain clones, and
    both against a key that is simply new: an evicted key's next records give exactly the
    outputs a fresh operator gives them."""
    rng = np.random.default_rng(5)
    keyed = Keyed(template)
    fresh: dict = {}
    outs, want = [], []
    for step in range(40):
        batch = [{"key": f"k{rng.integers(0, 60)}", "value": float(rng.normal() + (
            3.0 if step > 20 else 0.0)), "ts": float(step), "offset": step * 300 + j}
            for j in range(300)]
        outs += keyed.process_batch(batch)
        for r in batch:
            op = fresh.setdefault(r["key"], create("cs"))
            want += op.process(r)
        gone = [f"k{i}" for i in rng.choice(60, 3, replace=False)]
        if step % 2:  # one at a time, or all at once (the executor's way)
            for k in gone:
                assert keyed.evict(k) == (k in fresh)
        else:
            assert keyed.evict_many(gone) == [k for k in gone if k in fresh]
        for k in gone:
            fresh.pop(k, None)
        if step % 10 == 5 and hasattr(keyed._store, "_compact"):
            keyed._store._compact()  # the pool reclaims the evicted keys' hull blocks
    key = lambda o: o["offset"]  # noqa: E731
    pick = lambda o: (o["offset"], o["key"], o["alarm"], o.get("statistic"))  # noqa: E731
    assert [pick(o) for o in sorted(outs, key=key)] == [pick(o) for o in sorted(want, key=key)]
    assert sum(o["alarm"] for o in outs) > 0
    assert sorted(keyed.keys) == sorted(fresh)


def test_an_executor_removes_due_keys_from_every_operator_of_the_chain():
    ex = StageExecutor([create("standardize", burn_in=2), create("river:ADWIN")],
                       expiry=Expiry(max_keys=2))
    batch = ex.process([{"key": k, "value": 1.0, "offset": i} for i, k in enumerate("abcab")])
    assert batch.evicted == ["c"]
    assert [sorted(op.keys) for op in ex.operators] == [["a", "b"], ["a", "b"]]
    assert ex.summary.keys_evicted == 1 and "1 keys expired" in ex.summary.line()


def _series(tmp_path):
    """Key a: 300 records, silent while b runs on (past a's TTL), then 400 more with a change
    of level at its own record 500; the labels number a's records 0..699."""
    rng = np.random.default_rng(0)
    rows, ts = [], 0.0
    for _ in range(300):
        rows.append(("a", ts, rng.normal()))
        ts += 1
    for _ in range(400):
        rows.append(("b", ts, rng.normal()))
        ts += 1
    for i in range(300, 700):
        rows.append(("a", ts, rng.normal() + (4.0 if i >= 500 else 0.0)))
        ts += 1
    path = tmp_path / "s.csv"
    path.write_text("key,ts,value\n" + "".join(f"{k},{t},{v}\n" for k, t, v in rows))
    return path


def test_a_replay_with_a_ttl_restarts_a_returning_key_and_scores_in_the_labels_numbering(
        tmp_path, capsys):
    path = _series(tmp_path)
    out = tmp_path / "out"
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"a": [500], "b": []}))
    rc = cli.main(["replay", str(path), "--operator", "cs", "--source-opt", "key=key",
                   "--source-opt", "ts=ts", "--labels", str(labels), "--out", str(out),
                   "--no-plots", "--no-progress", "--key-ttl", "100"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "1 keys expired" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["keys_evicted"] == 1 and report["summary"]["keys_evicted"] == 1
    alarms = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    alarms = [o for o in alarms if o.get("alarm") and o["key"] == "a"]
    assert alarms, "the change of level is found"
    # the detector restarted at a's record 300: its own count would say ~200
    assert 480 <= alarms[0]["change_at"] <= 520
    assert alarms[0]["change_ts"] <= alarms[0]["ts"]


def test_replay_flags_are_checked(capsys):
    rc = cli.main(["replay", "synth:gaussian-mean", "--operator", "cs", "--out", "/tmp/x",
                   "--max-keys", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "max_keys must be" in err and len(err.strip().splitlines()) == 1


# ---- hostile input: nothing a stream holds makes the state outgrow the rule ----------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KEYS = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.none(), st.booleans(),
                  st.floats(allow_nan=True), st.lists(st.integers(0, 2), max_size=2),
                  st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
_TS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                st.just(10**400), st.text(max_size=4), st.booleans())
_RECORDS = st.lists(st.fixed_dictionaries(
    {"key": _KEYS, "ts": _TS, "value": st.one_of(st.floats(-5, 5), st.text(max_size=3))}),
    min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, database=None)
@given(batches=st.lists(_RECORDS, min_size=1, max_size=5),
       rule=st.sampled_from([{"max_keys": 3}, {"ttl_seconds": 2.0, "max_keys": 5},
                             {"ttl_seconds": 1.0, "clock": "wall", "max_keys": 4}]))
def test_hostile_keys_and_times_never_grow_the_state_past_max_keys(batches, rule):
    ex = StageExecutor([create("standardize", burn_in=2), create("cs")],
                       expiry=Expiry(**rule))
    offset = 0
    for records in batches:
        batch = []
        for r in records:
            batch.append({**r, "offset": offset})
            offset += 1
        got = ex.process(batch, dirty=[set(), set()])
        placed = {o["offset"] for o in got.outputs} | {
            d["origin"]["offset"] for d in got.dead_letters}
        assert placed == {r["offset"] for r in batch}  # an output or a dead letter each
        assert all(len(op) <= rule["max_keys"] for op in ex.operators)
        assert len(ex.expiry) <= rule["max_keys"]


def test_keyed_alone_takes_the_rule_too():
    """Keyed(op, expiry=...) for a library user without a stage: the same keys are kept as a
    stage with that rule keeps."""
    batches = [[{"key": f"k{(i * 7 + b) % 13}", "value": float(i), "ts": float(b * 10 + i),
                 "offset": b * 10 + i} for i in range(10)] for b in range(12)]
    alone = Keyed(create("cs"), expiry=Expiry(ttl_seconds=15, max_keys=6))
    ex = StageExecutor([create("cs")], expiry=Expiry(ttl_seconds=15, max_keys=6))
    for batch in batches:
        alone.process_batch(batch)
        ex.process(batch)
        assert sorted(alone.keys) == sorted(ex.operators[0].keys)
    assert alone.evicted == ex.summary.keys_evicted > 0
