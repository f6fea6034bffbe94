"""The Kafka runtime end to end against a broker the tests start (see conftest.py)."""

from __future__ import annotations

import base64
import json
import signal

import pytest
from kafka import KafkaProducer
from kafka_helpers import (
    by_key,
    checkpoints,
    create_topics,
    group_timing,
    key_states,
    produce,
    read_topic,
    reference,
    reference_key_states,
    sensor_records,
    start_stage_process,
    unique,
    values,
    wait_for,
    write_pipeline,
)

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.deduper import dedupe
from shiftwatch.deploy.kafka.changelog import encode_entry, restore
from shiftwatch.deploy.kafka.run import run_pipeline
from shiftwatch.deploy.pipeline import load_pipeline
from shiftwatch.operators.state_codec import dumps_state, loads_state

#: the stage's crash, restart and checkpoint guarantees, on each Kafka client
pytestmark = pytest.mark.both_clients

CHAIN = [("standardize", {"burn_in": 30}), ("river:ADWIN", {"delta": 0.01})]


def _chain_stages(name: str, timing: dict, **extra) -> list[dict]:
    return [
        {"name": "scale", "input": f"{name}.raw", "output": f"{name}.scaled", "key": "sensor",
         "value": "temp", "operator": "standardize", "params": {"burn_in": 30},
         "consumer": timing, **extra},
        {"name": "detect", "input": f"{name}.scaled", "output": f"{name}.alarms",
         "operator": "river:ADWIN", "params": {"delta": 0.01}, "consumer": timing, **extra},
    ]


def test_two_stage_chain_equals_replay(kafka_bootstrap, real_kafka, tmp_path):
    """Test 1: standardize -> ADWIN over a 3-partition topic == `shiftwatch replay`."""
    name = unique()
    records = sensor_records(1200, keys=6, seed=1)
    create_topics(kafka_bootstrap, 3, f"{name}.raw")
    produce(kafka_bootstrap, f"{name}.raw", records)
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap,
                          _chain_stages(name, group_timing(real_kafka)),
                          topics={"create": True, "partitions": 3})
    assert run_pipeline(load_pipeline(path), idle_exit_s=2.0, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    assert len(outs) == len(records)  # an uninterrupted run produces no duplicates
    # The same records through `shiftwatch replay`:
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    rc = main(["replay", str(jsonl), "--source-opt", "value=temp", "--source-opt",
               "key=sensor", "--source-opt", "ts=ts", "--operator", "standardize", "--param",
               "burn_in=30", "--operator", "river:ADWIN", "--param", "delta=0.01",
               "--out", str(tmp_path / "replay"), "--no-progress", "--no-plots", "--quiet"])
    assert rc == 0
    replayed = [json.loads(line) for line in
                (tmp_path / "replay" / "outputs.jsonl").read_text().splitlines()]
    fields = ("ts", "alarm", "statistic")
    assert by_key(outs, fields) == by_key(replayed, fields)
    assert sum(o["alarm"] for o in outs) > 0
    # Outputs are keyed like their input and carry the input coordinates.
    for o in outs:
        assert set(o["input"]) == {"topic", "partition", "offset", "n"}
        assert o["input"]["topic"] == f"{name}.scaled"


def test_kill_9_and_restart_no_double_counting(kafka_bootstrap, real_kafka, tmp_path):
    """Test 2: SIGKILL the stage process mid-stream, restart: same outputs and state."""
    name = unique()
    records = sensor_records(2400, keys=6, seed=2)
    first, second = records[:1200], records[1200:]
    create_topics(kafka_bootstrap, 3, f"{name}.raw")
    stages = _chain_stages(name, group_timing(real_kafka),
                           checkpoint={"every_records": 150, "every_seconds": 600,
                                       "chunk_bytes": 200},  # states in several chunks
                           batch={"max_records": 50, "timeout_ms": 100})
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, stages,
                          topics={"create": True, "partitions": 3})
    produce(kafka_bootstrap, f"{name}.raw", first)
    proc = start_stage_process(path, log=tmp_path / "run1.log")
    try:
        read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(first), timeout=90)
    finally:
        proc.kill()  # SIGKILL: no checkpoint, no commit, no leaving the group
        proc.wait()
    produce(kafka_bootstrap, f"{name}.raw", second)
    proc = start_stage_process(path, "--exit-when-idle", "2", log=tmp_path / "run2.log")
    assert proc.wait(timeout=120) == 0, (tmp_path / "run2.log").read_text()[-2000:]

    raw = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    scaled = values(read_topic(kafka_bootstrap, f"{name}.scaled", min_count=len(records)))
    # The crash made both stages replay records after their last checkpoint ...
    assert len(scaled) > len(records)
    assert len(raw) > len(records)
    outs = list(dedupe(raw))
    # ... and after de-duplication by coordinates the outputs equal the uninterrupted run.
    assert len(outs) == len(records)
    expected, ops = reference(records, CHAIN)
    assert by_key(outs) == {k: [(t, a, s, None) for t, a, s, _ in v]
                            for k, v in expected.items()}
    # Every checkpoint of the first stage equals the state an uninterrupted run has at the
    # same offset of the same partition (so the restored state counted nothing twice).
    by_part: dict[int, list[dict]] = {}
    for m in read_topic(kafka_bootstrap, f"{name}.raw", min_count=len(records)):
        r = json.loads(m.value)
        by_part.setdefault(m.partition, []).append({**r, "offset": m.offset})
    cps = checkpoints(kafka_bootstrap, f"{name}.scale.changelog")
    assert len(cps) >= 6
    for part, _cid, offset, state in cps:
        _, ref_ops = reference([r for r in by_part[part] if r["offset"] < offset], CHAIN[:1])
        assert key_states(loads_state(state)) == reference_key_states(ref_ops[0])
    # The final states of both stages equal the uninterrupted run's, key by key.
    for stage, index in (("scale", 0), ("detect", 1)):
        latest: dict[int, bytes] = {}
        for part, _cid, _offset, state in checkpoints(kafka_bootstrap,
                                                      f"{name}.{stage}.changelog"):
            latest[part] = state
        got: dict = {}
        for state in latest.values():
            got.update(key_states(loads_state(state)))
        assert got == reference_key_states(ops[index]), stage


def test_two_workers_one_killed_partitions_and_state_move(kafka_bootstrap, real_kafka,
                                                          tmp_path):
    """Test 3: two members of one group; kill one; the other takes over its partitions."""
    name = unique()
    records = sensor_records(2400, keys=8, seed=3)
    first, second = records[:1200], records[1200:]
    create_topics(kafka_bootstrap, 4, f"{name}.raw", f"{name}.alarms")
    stage = {"name": "watch", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp",
             "operators": [{"operator": op, "params": p} for op, p in CHAIN],
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 100, "every_seconds": 600},
             "batch": {"max_records": 50, "timeout_ms": 100}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          metrics={"interval_seconds": 0.3})
    produce(kafka_bootstrap, f"{name}.raw", first)
    metrics = {w: tmp_path / f"{w}.json" for w in ("a", "b")}
    procs = {w: start_stage_process(path, "--metrics-file", str(metrics[w]),
                                    log=tmp_path / f"{w}.log") for w in ("a", "b")}
    try:
        def both_own_partitions():
            try:
                parts = [json.loads(metrics[w].read_text())["partitions"] for w in "ab"]
            except (OSError, ValueError):
                return False
            return all(parts) and sorted(parts[0] + parts[1]) == [0, 1, 2, 3]
        wait_for(both_own_partitions, 90, "both workers to own partitions")
        read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(first), timeout=90)
        owned_by_b = json.loads(metrics["b"].read_text())["partitions"]
        procs["b"].kill()
        procs["b"].wait()
        produce(kafka_bootstrap, f"{name}.raw", second)
        wait_for(lambda: json.loads(metrics["a"].read_text())["partitions"] == [0, 1, 2, 3],
                 90, "worker a to take over every partition")
        raw = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records),
                                timeout=90, quiet=1.0))
        # SIGTERM: checkpoint, commit, leave the group, exit 0.
        procs["a"].send_signal(signal.SIGTERM)
        assert procs["a"].wait(timeout=60) == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    assert owned_by_b
    outs = list(dedupe(raw))
    expected, ops = reference(records, CHAIN)
    fields = ("ts", "alarm", "statistic")
    assert by_key(outs, fields) == {k: [v[:3] for v in vs] for k, vs in expected.items()}
    latest: dict[int, bytes] = {}
    for part, _cid, _offset, state in checkpoints(kafka_bootstrap, f"{name}.watch.changelog"):
        latest[part] = state
    got0: dict = {}
    got1: dict = {}
    for state in latest.values():
        got0.update(key_states(loads_state(state), 0))
        got1.update(key_states(loads_state(state), 1))
    assert got0 == reference_key_states(ops[0])
    assert got1 == reference_key_states(ops[1])


def test_poison_records_reach_the_dlq(kafka_bootstrap, real_kafka, tmp_path):
    """Test 4: bad JSON, wrong type, NaN, wrong shape -> DLQ with reasons; the rest runs."""
    name = unique()
    create_topics(kafka_bootstrap, 2, f"{name}.in", f"{name}.out")
    good = [{"sensor": f"s{i % 3}", "ts": float(i), "v": [float(i % 7), 1.0, -1.0]}
            for i in range(300)]
    poison = [
        (b"s1", b"{not json", "invalid JSON"),
        (b"s1", b"[1, 2, 3]", "JSON list"),
        (b"s2", b'{"sensor": "s2", "ts": 1, "v": "abc"}', "not a number"),
        (b"s0", b'{"sensor": "s0", "ts": 1, "v": [NaN, 1, 2]}', "NaN"),
        (b"s0", b'{"sensor": "s0", "ts": 1, "v": [1, 2]}', "shape"),
        (b"s1", b'{"sensor": "s1", "ts": 1, "v": [[1, 2], [3]]}', "numeric array"),
        (b"s2", b'{"sensor": "s2", "ts": 1}', "no field 'v'"),
        (b"s2", b"\xff\xfe\x00", "UTF-8"),
    ]
    msgs: list = []
    for i, r in enumerate(good):  # the poison records go between good ones
        msgs.append((r["sensor"].encode(), json.dumps(r).encode()))
        if i % 37 == 20 and i // 37 < len(poison):
            msgs.append(poison[i // 37][:2])
    produce(kafka_bootstrap, f"{name}.in", msgs)
    stage = {"name": "scale", "input": f"{name}.in", "output": f"{name}.out",
             "key": "sensor", "value": "v", "operator": "standardize",
             "params": {"burn_in": 5}, "consumer": group_timing(real_kafka)}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    dead = values(read_topic(kafka_bootstrap, f"{name}.scale.dlq", min_count=len(poison)))
    outs = values(read_topic(kafka_bootstrap, f"{name}.out", min_count=len(good)))
    assert len(outs) == len(good)
    assert sorted(o["ts"] for o in outs) == sorted(r["ts"] for r in good)
    assert len(dead) == len(poison) == 8
    by_raw = {base64.b64decode(d["raw_base64"]): d for d in dead}
    for _key, raw, reason in poison:
        d = by_raw[raw]
        assert reason in d["reason"], (reason, d["reason"])
        assert d["dead_letter"] is True and d["origin"]["topic"] == f"{name}.in"
        assert isinstance(d["origin"]["partition"], int)
        assert isinstance(d["origin"]["offset"], int)



def test_exactly_once_path_runs_transactions(kafka_bootstrap, real_kafka, tmp_path):
    """The exactly-once code path (transactional producer, offsets in the transaction).

    On tansu this shows the transactions are issued and the outputs and state are right; it
    cannot show that aborted outputs stay invisible (tansu's read_committed shows them).
    """
    name = unique()
    records = sensor_records(600, keys=4, seed=4)
    create_topics(kafka_bootstrap, 2, f"{name}.raw", f"{name}.alarms")
    produce(kafka_bootstrap, f"{name}.raw", records)
    stage = {"name": "watch", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp", "guarantee": "exactly-once",
             "operators": [{"operator": op, "params": p} for op, p in CHAIN],
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 100, "every_seconds": 600}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records),
                             isolation="read_committed"))
    expected, ops = reference(records, CHAIN)
    fields = ("ts", "alarm", "statistic")
    assert by_key(outs, fields) == {k: [v[:3] for v in vs] for k, vs in expected.items()}
    latest: dict[int, bytes] = {}
    for part, _cid, _offset, state in checkpoints(kafka_bootstrap, f"{name}.watch.changelog"):
        latest[part] = state
    for index in (0, 1):
        got: dict = {}
        for state in latest.values():
            got.update(key_states(loads_state(state), index))
        assert got == reference_key_states(ops[index])


def test_unfinished_checkpoint_is_ignored_on_restart(kafka_bootstrap, real_kafka, tmp_path):
    """A crash between a checkpoint's key entries and its marker: entries are in the
    changelog, the marker is not. Simulated by writing such entries (wrong states, and a key
    that does not exist) by hand; the restarted stage must restore the last marker's state,
    ignore them, and delete them."""
    name = unique()
    records = sensor_records(900, keys=4, seed=5)
    first, second = records[:600], records[600:]
    create_topics(kafka_bootstrap, 2, f"{name}.raw", f"{name}.alarms")
    stage = {"name": "watch", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp",
             "operators": [{"operator": op, "params": p} for op, p in CHAIN],
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 100, "every_seconds": 600, "chunk_bytes": 200}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    produce(kafka_bootstrap, f"{name}.raw", first)
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    changelog = f"{name}.watch.changelog"
    by_part: dict[int, list] = {}
    for m in read_topic(kafka_bootstrap, changelog, quiet=0.3):
        by_part.setdefault(m.partition, []).append((m.key, m.value))
    # Wrong but loadable states: those of an unrelated run.
    _, wrong = reference(sensor_records(80, keys=1, seed=99), CHAIN)
    bogus = [dumps_state(op.state_dict()["keys"]["s0"]) for op in wrong]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    injected = 0
    for part, msgs in by_part.items():
        r = restore(msgs, f"{name}.raw", part)
        assert r is not None and not r.junk
        for op in (0, 1):
            for key in [*r.states[op], "ghost"]:
                slot = 1 - r.slots.get((op, key), 1)
                for k, v in encode_entry(f"{name}.raw", part, r.next_id, op, key, slot,
                                         bogus[op], 200):
                    producer.send(changelog, key=k, value=v, partition=part)
                    injected += 1
    producer.flush()
    producer.close()
    assert injected > 10
    produce(kafka_bootstrap, f"{name}.raw", second)
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    assert len(outs) == len(records)  # resumed at the last marker: nothing replayed
    expected, ops = reference(records, CHAIN)
    fields = ("ts", "alarm", "statistic")
    assert by_key(outs, fields) == {k: [v[:3] for v in vs] for k, vs in expected.items()}
    by_part = {}
    for m in read_topic(kafka_bootstrap, changelog, quiet=0.3):
        by_part.setdefault(m.partition, []).append((m.key, m.value))
    for index in (0, 1):
        got: dict = {}
        for part, msgs in by_part.items():
            r = restore(msgs, f"{name}.raw", part)
            assert not r.junk  # deleted (tombstones) by the first checkpoint after restart
            got.update({k: dumps_state(loads_state(v)) for k, v in r.states[index].items()})
        assert "ghost" not in got
        assert got == reference_key_states(ops[index])


def test_missing_topic_is_one_line_error_before_consuming(kafka_bootstrap, tmp_path, capsys):
    name = unique()
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [
        {"name": "s", "input": f"{name}.absent", "output": f"{name}.out",
         "operator": "river:ADWIN"}])
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"topic '{name}.absent' does not exist" in err
