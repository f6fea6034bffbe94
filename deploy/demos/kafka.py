"""``shiftwatch demo --kafka``: the production path end to end on a local broker.

Starts the local broker (:mod:`shiftwatch.deploy.kafka.broker`) on a free port, writes a seeded
sensor stream to ``sensors.csv`` and produces it to ``sensors.raw``
(:mod:`shiftwatch.deploy.kafka.produce`), runs the two stages of ``deploy/examples/sensors.yaml``
(``standardize``, then ``river:ADWIN``) in this process as Kafka consumer-group members
(:func:`shiftwatch.deploy.kafka.run.run_pipeline`) until they are idle, reads the alarms
back from ``sensors.alarms`` and the dead letters from the stages' DLQ topics, prints them,
and stops the broker. The stream holds one unreadable CSV row (a dead letter of the
source, never produced) and one message the ``scale`` stage rejects (a dead letter on
``sensors.scale.dlq``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["run_kafka_demo", "sensor_rows", "write_sensor_csv", "SHIFTS"]

#: Each sensor's change: (position in its stream, mean shift); s4 never changes.
SHIFTS = {"s1": (250, 3.0), "s2": (150, -2.5), "s3": (320, 2.0), "s4": (None, 0.0)}

#: Demo stages: deploy/examples/sensors.yaml's, with timings for a quick local run (a group
#: join on tansu waits about max_poll_interval_ms).
DEMO_PIPELINE = {
    "pipeline": "sensors",
    "topics": {"create": True, "partitions": 2},
    "guarantee": "at-least-once",
    "checkpoint": {"every_records": 5000, "every_seconds": 10},
    "batch": {"max_records": 1000, "timeout_ms": 200},
    "consumer": {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000,
                 "heartbeat_interval_ms": 1000},
    "metrics": {"interval_seconds": 60},
}

#: The example file whose stages the demo runs.
EXAMPLE = Path(__file__).parents[1] / "examples" / "sensors.yaml"


def sensor_rows(n: int = 400, seed: int = 0) -> list[dict]:
    """``n`` readings of each sensor of :data:`SHIFTS`, interleaved, one a minute.

    >>> rows = sensor_rows(5)
    >>> len(rows), rows[0]["sensor"], rows[1]["ts"] - rows[0]["ts"]
    (20, 's1', 0)
    """
    rng = np.random.default_rng(seed)
    rows = []
    t0 = 1767225600  # 2026-01-01T00:00:00Z
    for i in range(n):
        for j, (sensor, (at, shift)) in enumerate(SHIFTS.items()):
            mean = 20.0 + 2 * j + (shift if at is not None and i >= at else 0.0)
            rows.append({"sensor": sensor, "ts": t0 + 60 * i,
                         "temp": round(float(mean + 0.5 * rng.normal()), 3)})
    return rows


def write_sensor_csv(path: Path, n: int = 400, seed: int = 0, bad_row: bool = True) -> Path:
    """Write :func:`sensor_rows` as CSV (``sensor,ts,temp``), with one unreadable row."""
    lines = ["sensor,ts,temp"]
    for i, r in enumerate(sensor_rows(n, seed)):
        lines.append(f"{r['sensor']},{r['ts']},{r['temp']}")
        if bad_row and i == 10:
            lines.append(f"s3,{r['ts']},n/a")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _pipeline(bootstrap: str, out_dir: Path):
    import yaml

    from shiftwatch.deploy.pipeline import parse_pipeline

    example = yaml.safe_load(EXAMPLE.read_text())
    data = {**DEMO_PIPELINE, "kafka": {"bootstrap_servers": bootstrap},
            "stages": example["stages"]}
    data["metrics"] = {**data["metrics"], "file": str(out_dir / "metrics-{stage}.json")}
    return parse_pipeline(data, source=str(EXAMPLE))


def _read_all(bootstrap: str, topic: str, client: dict) -> list:
    """Every message of ``topic`` up to its current end (all partitions)."""
    from kafka import KafkaConsumer

    from shiftwatch.deploy.kafka.consume import ConsumeSummary, read_messages
    from shiftwatch.streams.kafka import no_auto_create

    c = no_auto_create(KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                     **{**client, "allow_auto_create_topics": False}))
    try:
        if not c.partitions_for_topic(topic):
            return []
        return list(read_messages(c, topic, from_beginning=True, follow=False,
                                  summary=ConsumeSummary(topic=topic), idle_timeout_s=15))
    finally:
        c.close()


def run_kafka_demo(out_dir: Path = Path("shiftwatch-demo") / "kafka", n: int = 400,
                   stream=None, idle_exit_s: float = 3.0, max_rows: int = 20) -> int:
    """Run the demo; returns the exit status (0, or 1 if a stage failed)."""
    from shiftwatch.deploy.kafka.broker import start_broker, stop_broker
    from shiftwatch.deploy.kafka.connect import client_defaults
    from shiftwatch.deploy.kafka.produce import produce_source
    from shiftwatch.deploy.kafka.run import run_pipeline
    from shiftwatch.streams import open_source

    stream = stream or sys.stdout
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    csv_path = write_sensor_csv(out_dir / "sensors.csv", n=n)
    client = client_defaults()
    proc, bootstrap = start_broker()
    try:
        config = _pipeline(bootstrap, out_dir)
        config.kafka.update(client)
        scale, detect = config.stages[0], config.stages[-1]
        print(f"shiftwatch demo --kafka: local broker (tansu) on {bootstrap}; stages of "
              f"{EXAMPLE.relative_to(EXAMPLE.parents[2])}: "
              + " -> ".join(f"{s.name} ({', '.join(o.name for o in s.operators)})"
                            for s in config.stages), file=stream, flush=True)
        source = open_source(str(csv_path), value="temp", key="sensor", ts="ts")
        summary = produce_source(source, scale.input, bootstrap, partitions=2, progress=False,
                                 client=client)
        _produce_raw(bootstrap, scale.input, client)
        print(f"{summary.line()}, plus 1 message the scale stage rejects; source dead "
              f"letters: " + _reasons(summary.reasons, summary.first_dead), file=stream)
        t_run = time.monotonic()
        rc = run_pipeline(config, idle_exit_s=idle_exit_s, install_signals=False)
        run_s = time.monotonic() - t_run
        outputs = [json.loads(m.value) for m in _read_all(bootstrap, detect.output, client)]
        dead = []
        for s in config.stages:
            dead += [json.loads(m.value) for m in _read_all(bootstrap, config.dlq_topic(s),
                                                            client)]
    finally:
        stop_broker(proc, grace_s=0)
    alarms = sorted((o for o in outputs if o.get("alarm")),
                    key=lambda o: (str(o.get("key")), o.get("ts") or 0))
    print(f"stages ran {run_s:.1f} s (until idle {idle_exit_s:g} s): {len(outputs)} outputs "
          f"on {detect.output}, {len(alarms)} alarms", file=stream)
    _alarm_table(alarms, stream, max_rows)
    print(f"dead letters on {', '.join(config.dlq_topic(s) for s in config.stages)}: "
          f"{len(dead)}", file=stream)
    for d in dead[:max_rows]:
        origin = d.get("origin") or {}
        print(f"  {origin.get('topic')}[{origin.get('partition')}]@{origin.get('offset')}: "
              f"{d.get('reason')}  raw={d.get('raw')}", file=stream)
    truth = {k: at for k, (at, _) in SHIFTS.items()}
    print("true changes (position in each sensor's stream): "
          + ", ".join(f"{k} {'-' if v is None else v}" for k, v in truth.items()), file=stream)
    (out_dir / "alarms.jsonl").write_text("".join(json.dumps(a) + "\n" for a in alarms))
    print(f"wrote {csv_path}, {out_dir / 'alarms.jsonl'}; broker stopped "
          f"({time.monotonic() - t_start:.1f} s in all)", file=stream)
    return rc


def _produce_raw(bootstrap: str, topic: str, client: dict) -> None:
    from kafka import KafkaProducer

    from shiftwatch.streams.kafka import no_auto_create

    p = no_auto_create(KafkaProducer(bootstrap_servers=bootstrap,
                                     **{**client, "allow_auto_create_topics": False}))
    try:
        p.send(topic, key=b"s2", value=b'{"sensor": "s2", "ts": 1767225600, "temp": "hot"}')
        p.flush()
    finally:
        p.close()


def _reasons(reasons, first: dict | None) -> str:
    if not reasons:
        return "none"
    text = ", ".join(f"{n} x {r}" for r, n in reasons.most_common())
    if first:
        text += " (first at " + ", ".join(f"{k} {v}" for k, v in first.items()) + ")"
    return text


def _alarm_table(alarms: list[dict], stream, max_rows: int) -> None:
    """The alarms as ``shiftwatch consume --alarms-only`` shows them."""
    if not alarms:
        return
    from shiftwatch.deploy.kafka.consume import ALARM_COLUMNS, output_row

    rows = [ALARM_COLUMNS, *(output_row(a, alarms_only=True) for a in alarms[:max_rows])]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(),
              file=stream)
    if len(alarms) > max_rows:
        print(f"  ... {len(alarms) - max_rows} more", file=stream)
