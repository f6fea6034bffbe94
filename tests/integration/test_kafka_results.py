"""Reading what a stage wrote (issue 24, items 5 and 6): `emit: alarms` and `shiftwatch
consume`, against the broker the tests start."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaProducer
from kafka_helpers import (
    ROOT,
    by_key,
    checkpoints,
    create_topics,
    group_timing,
    produce,
    read_topic,
    sensor_records,
    start_stage_process,
    unique,
    values,
    write_pipeline,
)

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.deduper import coordinates, dedupe
from shiftwatch.deploy.kafka.consume import ALARM_COLUMNS, OUTPUT_COLUMNS
from shiftwatch.operators import create

#: the stage's crash, restart and checkpoint guarantees, on each Kafka client
pytestmark = pytest.mark.both_clients

FIELDS = ("ts", "alarm", "statistic", "change_at")


def _consume(capsys, *argv: str) -> tuple[int, list[str], str]:
    rc = main(["consume", *argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def test_emit_alarms_writes_only_alarms_and_a_kill_9_restart_gives_each_once_after_dedupe(
        kafka_bootstrap, real_kafka, tmp_path, capsys):
    name = unique()
    records = sensor_records(2400, keys=6, seed=3)
    create_topics(kafka_bootstrap, 3, f"{name}.raw")
    produce(kafka_bootstrap, f"{name}.raw", [(b"s0", b"not json")])  # a dead letter
    produce(kafka_bootstrap, f"{name}.raw", records)
    params = {"delta": 0.002}
    stage = {"name": "detect", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp", "operator": "river:ADWIN", "params": params,
             "emit": "alarms", "consumer": group_timing(real_kafka),
             "batch": {"max_records": 200, "timeout_ms": 100},
             # no checkpoint before the kill: the restart processes every record again
             "checkpoint": {"every_records": 10**9, "every_seconds": 3600}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          topics={"create": True})
    proc = start_stage_process(path, log=tmp_path / "run1.log")
    try:
        read_topic(kafka_bootstrap, f"{name}.alarms", min_count=1, timeout=90)
    finally:
        proc.kill()  # SIGKILL: no checkpoint, no commit
        proc.wait()
    proc = start_stage_process(path, "--exit-when-idle", "2", log=tmp_path / "run2.log")
    assert proc.wait(timeout=120) == 0, (tmp_path / "run2.log").read_text()[-2000:]

    # The alarms of an uninterrupted run (one detector per key, as the stage keeps them).
    ref_outputs: list[dict] = []
    detectors: dict = {}
    for r in records:
        det = detectors.setdefault(r["sensor"], create("river:ADWIN", **params))
        ref_outputs += det.process({**r, "key": r["sensor"], "value": r["temp"]})
    want = by_key([o for o in ref_outputs if o.get("alarm")], FIELDS)
    n_alarms = sum(len(v) for v in want.values())
    assert n_alarms >= 3
    raw = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=n_alarms))
    assert raw and all(o["alarm"] is True for o in raw)  # only alarms on the topic
    once = list(dedupe(raw))
    assert len(raw) > len(once) == n_alarms  # the restart wrote them again ...
    assert by_key(once, FIELDS) == want  # ... and deduplicated they are those, each once
    # The dead-letter topic is as with emit: all (the bad message, written again by the
    # restart, once after dedupe).
    dead = values(read_topic(kafka_bootstrap, f"{name}.detect.dlq", min_count=1))
    assert {(d["origin"]["partition"], d["origin"]["offset"]) for d in dead} == {
        (dead[0]["origin"]["partition"], 0)}
    # Every input was processed and committed, outputs or not: the last checkpoint of each
    # partition resumes at its end.
    ends: dict[int, int] = {}
    for m in read_topic(kafka_bootstrap, f"{name}.raw", min_count=len(records) + 1):
        ends[m.partition] = max(ends.get(m.partition, 0), m.offset + 1)
    last: dict[int, int] = {}
    for part, _cid, offset, _state in checkpoints(kafka_bootstrap, f"{name}.detect.changelog"):
        last[part] = max(last.get(part, 0), offset)
    assert last == ends

    # shiftwatch consume: --dedupe drops what the restart repeated ...
    rc, lines, err = _consume(capsys, f"{name}.alarms", "--from-beginning", "--dedupe",
                              "--format", "jsonl", "--bootstrap", kafka_bootstrap)
    assert rc == 0, err
    got = [json.loads(x) for x in lines]
    assert sorted(map(coordinates, got)) == sorted(map(coordinates, once))
    assert f"{len(raw) - len(once)} duplicates dropped" in err
    # ... which without it are all there, and counted.
    rc, lines, err = _consume(capsys, f"{name}.alarms", "--from-beginning", "--format", "jsonl",
                              "--bootstrap", kafka_bootstrap)
    assert rc == 0 and len(lines) == len(raw)
    assert f"{len(raw) - len(once)} repeat earlier input coordinates (--dedupe drops them)" in err
    # The table: one row per alarm, the demo's columns.
    rc, lines, err = _consume(capsys, f"{name}.alarms", "--from-beginning", "--dedupe",
                              "--alarms-only", "--bootstrap", kafka_bootstrap)
    assert rc == 0
    assert lines[0].split("  ")[0] == "key" and "alarm at (UTC)" in lines[0]
    assert len(lines) == 1 + n_alarms
    # The dead-letter topic, de-duplicated by origin: one row.
    rc, lines, err = _consume(capsys, f"{name}.detect.dlq", "--from-beginning", "--dedupe",
                              "--bootstrap", kafka_bootstrap)
    assert rc == 0 and len(lines) == 2, lines
    assert lines[0].split() == ["origin", "key", "reason", "raw"]
    assert lines[1].startswith(f"{name}.raw[") and "not json" in lines[1]


def _outputs(topic: str, n: int) -> list[dict]:
    return [{"key": f"s{i % 3}", "ts": 1767225600 + 60 * i, "alarm": i % 10 == 9,
             "statistic": i / 7, **({"change_at": i - 2, "change_ts": 1767225600 + 60 * (i - 2)}
                                    if i % 10 == 9 else {}),
             "input": {"topic": topic, "partition": i % 2, "offset": i // 2, "n": 0}}
            for i in range(n)]


def _produce_outputs(bootstrap: str, topic: str, outputs: list[dict]) -> None:
    produce(bootstrap, topic, [(o["key"].encode(), json.dumps(o).encode()) for o in outputs])


def test_consume_prints_a_table_stops_at_the_end_it_found_and_follows(kafka_bootstrap, capsys):
    topic = unique("out")
    create_topics(kafka_bootstrap, 2, topic)
    outputs = _outputs("up", 30)
    _produce_outputs(kafka_bootstrap, topic, outputs + [outputs[5]])  # a repeat
    produce(kafka_bootstrap, topic, [(b"x", b"[1, 2")])  # not a JSON object
    read_topic(kafka_bootstrap, topic, min_count=32)
    rc, lines, err = _consume(capsys, topic, "--from-beginning", "--bootstrap", kafka_bootstrap)
    assert rc == 0
    assert lines[0].split("  ")[0] == "key" and all(c in lines[0] for c in OUTPUT_COLUMNS)
    assert len(lines) == 1 + 31
    assert "consume " + topic in err and "1 repeat earlier input coordinates" in err
    assert "1 not JSON objects" in err and "shown 31" in err
    rc, lines, err = _consume(capsys, topic, "--from-beginning", "--alarms-only", "--dedupe",
                              "--bootstrap", kafka_bootstrap)
    assert rc == 0
    assert all(c in lines[0] for c in ALARM_COLUMNS) and len(lines) == 1 + 3
    alarm = outputs[9]
    assert [alarm["key"], "2026-01-01", "00:09", "#7", "(2026-01-01", "00:07)",
            f"{alarm['statistic']:.4g}", "up[1]@4"] in [ln.split() for ln in lines[1:]]

    # Without --follow it stops at the end the topic had when it started, however much
    # arrives meanwhile.
    stop = threading.Event()
    sent = [0]

    def keep_producing():
        p = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
        i = 0
        while not stop.is_set():
            p.send(topic, value=json.dumps({"key": "k", "i": i}).encode())
            i += 1
            if i % 20 == 0:
                p.flush()
                sent[0] = i
                time.sleep(0.05)
        p.flush()
        sent[0] = i
        p.close()

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        time.sleep(1.0)
        proc = subprocess.run([sys.executable, "-m", "shiftwatch.deploy.cli", "consume", topic,
                               "--from-beginning", "--format", "jsonl", "--bootstrap",
                               kafka_bootstrap], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
    finally:
        stop.set()
        producer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    printed = len(proc.stdout.splitlines())
    assert 31 < printed < 32 + sent[0], (printed, sent[0])

    # --follow (from the end): only what arrives after it started, until Ctrl-C.
    follow = subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "consume", topic,
                               "--follow", "--format", "jsonl", "--bootstrap", kafka_bootstrap],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(follow.stdout.readline()),
                                  daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while reader.is_alive() and time.monotonic() < deadline:
            produce(kafka_bootstrap, topic, [(b"k", json.dumps({"key": "late"}).encode())])
            reader.join(timeout=0.5)
        assert first and json.loads(first[0]) == {"key": "late"}
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=20)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 130, err
    assert all(json.loads(x) == {"key": "late"} for x in out.splitlines())
    assert "(interrupted)" in err


def test_consume_of_a_missing_topic_names_the_ones_that_look_alike(kafka_bootstrap, capsys):
    topic = unique("alarms")
    create_topics(kafka_bootstrap, 1, topic)
    rc, lines, err = _consume(capsys, topic + "x", "--from-beginning", "--bootstrap",
                              kafka_bootstrap)
    assert rc == 2 and not lines
    err_lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(err_lines) == 1
    assert f"topic '{topic}x' does not exist (topics that look alike: {topic}" in err_lines[0]
