"""The local trial: `shiftwatch broker`, `shiftwatch produce`, `shiftwatch demo --kafka`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafka_helpers import ROOT, read_topic, unique

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.demos.kafka import SHIFTS, sensor_rows, write_sensor_csv
from shiftwatch.deploy.kafka.broker import free_port
from shiftwatch.streams import open_source


def test_broker_command_serves_then_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "broker", "--port",
                             str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in first and "not for production" in first
        bootstrap = f"127.0.0.1:{port}"
        rc = main(["produce", "synth:gaussian-mean", "--topic", "trial", "--partitions", "1",
                   "--limit", "50", "--bootstrap", bootstrap, "--no-progress"])
        assert rc == 0
        assert len(read_topic(bootstrap, "trial", min_count=50, timeout=20)) == 50
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        assert len(children) == 1  # the tansu process
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=15)[0]
        assert time.monotonic() - t0 < 8
        assert proc.returncode == 0 and "stopped" in rest
        tansu = int(children[0])
        for _ in range(50):  # the broker process is gone too (reaped by its parent)
            if not os.path.exists(f"/proc/{tansu}") or "Z" in _state(tansu):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{tansu}") or "Z" in _state(tansu)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"


def test_produce_writes_each_record_as_json_keyed_and_reports_dead_letters(
        kafka_bootstrap, tmp_path, capsys):
    csv = write_sensor_csv(tmp_path / "s.csv", n=30)
    topic = unique("raw")
    dead = tmp_path / "dead.jsonl"
    rc = main(["produce", str(csv), "--topic", topic, "--key", "sensor", "--source-opt",
               "value=temp", "--source-opt", "ts=ts", "--partitions", "3", "--bootstrap",
               kafka_bootstrap, "--dead-letters", str(dead), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"produced 120 records to {topic}" in out and "created" in out
    assert "dead letters (not produced)" in out and "temp 'n/a' is not a number" in out
    assert "line 13" in out
    assert [json.loads(x)["origin"]["line"] for x in dead.read_text().splitlines()] == [13]
    msgs = read_topic(kafka_bootstrap, topic, min_count=120, timeout=30)
    assert len(msgs) == 120 and len({m.partition for m in msgs}) > 1
    expected = [r for r in open_source(str(csv), value="temp", key="sensor", ts="ts")
                if isinstance(r, dict)]
    got = sorted((json.loads(m.value) for m in msgs), key=lambda r: (r["ts"], r["key"]))
    want = sorted(({**r, "sensor": r["key"], "temp": r["value"]} for r in expected),
                  key=lambda r: (r["ts"], r["key"]))
    assert got == want
    for m in msgs:  # the message key is the sensor, so each sensor stays in one partition
        assert m.key.decode() == json.loads(m.value)["sensor"]
    by_key: dict[str, set] = {}
    for m in msgs:
        by_key.setdefault(m.key, set()).add(m.partition)
    assert all(len(p) == 1 for p in by_key.values())


def test_produce_warns_when_an_existing_topic_has_other_partitions(kafka_bootstrap, tmp_path,
                                                                    capsys):
    csv = write_sensor_csv(tmp_path / "s.csv", n=5)
    topic = unique("parts")
    args = ["produce", str(csv), "--topic", topic, "--key", "sensor", "--source-opt",
            "value=temp", "--bootstrap", kafka_bootstrap, "--no-progress"]
    assert main([*args, "--partitions", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--partitions", "5"]) == 0
    err = capsys.readouterr().err
    assert f"warning: topic {topic} exists with 3 partitions: --partitions 5 is not applied" \
        in err


def test_produce_paces_at_rate(kafka_bootstrap, capsys):
    topic = unique("paced")
    t0 = time.monotonic()
    assert main(["produce", "synth:gaussian", "--topic", topic, "--partitions", "1", "--limit",
                 "40", "--rate", "100", "--bootstrap", kafka_bootstrap, "--no-progress"]) == 0
    assert time.monotonic() - t0 >= 0.39
    assert len(read_topic(kafka_bootstrap, topic, min_count=40, timeout=20)) == 40


def test_demo_kafka_end_to_end(tmp_path, capsys):
    t0 = time.monotonic()
    rc = main(["demo", "--kafka", "--out", str(tmp_path)])
    seconds = time.monotonic() - t0
    out = capsys.readouterr().out
    assert rc == 0, out
    assert seconds < 45, seconds
    assert "produced 1600 records to sensors.raw" in out
    assert "1600 outputs on sensors.alarms" in out
    assert "temp 'hot' is not a number" in out  # rejected by the scale stage, read from its DLQ
    assert "temp 'n/a' is not a number" in out  # the source's dead letter, never produced
    alarms = [json.loads(x) for x in (tmp_path / "kafka" / "alarms.jsonl").read_text()
              .splitlines()]
    # Every changed sensor alarms after its change and locates it; s4 never changes.
    changed = {k: at for k, (at, _) in SHIFTS.items() if at is not None}
    t_first = sensor_rows(1)[0]["ts"]
    assert {a["key"] for a in alarms} == set(changed)
    for a in alarms:
        position = (a["ts"] - t_first) / 60
        assert position >= changed[a["key"]]
        assert abs(a["change_at"] - changed[a["key"]]) <= 10
    assert "broker stopped" in out
