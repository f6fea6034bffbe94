"""Helpers shared by the integration tests: topics, producing, reading back, references."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from shiftwatch.deploy.kafka.changelog import checkpoints_in
from shiftwatch.deploy.local import Pipeline
from shiftwatch.operators import create
from shiftwatch.operators.state_codec import dumps_state, loads_state

ROOT = Path(__file__).resolve().parents[2]


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def group_timing(real_kafka: bool) -> dict:
    # tansu: a group join waits about max_poll_interval_ms, so keep it small; Apache Kafka
    # refuses session timeouts below group.min.session.timeout.ms (6 s by default).
    if real_kafka:
        return {"max_poll_interval_ms": 6000, "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 1000}
    return {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000,
            "heartbeat_interval_ms": 1000}


def create_topics(bootstrap: str, partitions: int, *topics: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({t: {"num_partitions": partitions, "replication_factor": 1}
                             for t in topics})
    finally:
        admin.close()


def sensor_records(n: int, keys: int = 6, seed: int = 0, start: int = 0) -> list[dict]:
    """Readings of ``keys`` sensors; each sensor's mean jumps by 4 at its 60% point."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(start, start + n):
        k = i % keys
        shift = 4.0 if i >= 0.6 * (start + n) else 0.0
        out.append({"sensor": f"s{k}", "ts": float(i),
                    "temp": float(20 + k + shift + rng.normal())})
    return out


def produce(bootstrap: str, topic: str, records: list, key_field: str = "sensor") -> None:
    """Produce dicts as JSON keyed by ``key_field``; (key, bytes) pairs as they are."""
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for r in records:
        if isinstance(r, tuple):
            p.send(topic, key=r[0], value=r[1])
        else:
            p.send(topic, key=r[key_field].encode(), value=json.dumps(r).encode())
    p.flush()
    p.close()


def read_topic(bootstrap: str, topic: str, min_count: int = 0, timeout: float = 60.0,
               quiet: float = 0.5, isolation: str = "read_uncommitted") -> list:
    """Every message of ``topic`` (all partitions), once at least ``min_count`` arrived and
    nothing new came for ``quiet`` seconds. Fails after ``timeout`` seconds."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      isolation_level=isolation)
    try:
        parts = c.partitions_for_topic(topic) or set()
        deadline = time.monotonic() + timeout
        while not parts:
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic} does not exist")
            time.sleep(0.2)
            c.close()
            c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                              isolation_level=isolation)
            parts = c.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        # What the topic held when asked: quiet counts only once that much was read (a loaded
        # machine can take longer than ``quiet`` for the first fetch). tansu's end offsets can
        # be below the message count, never above it.
        try:
            ends = c.end_offsets(tps)
        except Exception:
            ends = {}
        # (read_committed stops at the last stable offset, below the end while a transaction
        # is open: no end to wait for there)
        reached = isolation == "read_committed" or not any(ends.values())
        msgs: list = []
        last_new = time.monotonic()
        while True:
            got = c.poll(timeout_ms=200)
            now = time.monotonic()
            for batch in got.values():
                msgs.extend(batch)
            if got:
                last_new = now
            if not reached:  # (the position moves past transaction markers too)
                try:
                    reached = all(c.position(tp) >= end for tp, end in ends.items())
                except Exception:
                    reached = True
            if reached and len(msgs) >= min_count and now - last_new >= quiet:
                return msgs
            if now > deadline:
                raise AssertionError(f"{topic}: {len(msgs)} messages after {timeout} s, "
                                     f"expected at least {min_count}")
    finally:
        c.close()


def values(msgs: list) -> list[dict]:
    return [json.loads(m.value) for m in msgs]


def write_pipeline(path: Path, name: str, bootstrap: str, stages: list[dict],
                   **top) -> Path:
    doc = {"pipeline": name, "kafka": {"bootstrap_servers": bootstrap}, **top,
           "stages": stages}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start_stage_process(pipeline: Path, *args: str, log: Path | None = None
                        ) -> subprocess.Popen:
    """``shiftwatch run PIPELINE ARGS`` in a subprocess (so it can be SIGKILLed)."""
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "run", str(pipeline),
                             *args],
                            cwd=ROOT, stdout=out, stderr=out)


def reference(records: list[dict], operators: list[tuple[str, dict]]):
    """Outputs per key and the keyed operators after a local run (the uninterrupted run)."""
    recs = [{**r, "key": r["sensor"], "value": r["temp"]} for r in records]
    ops = [create(name, **params) for name, params in operators]
    out: list = []

    class Collect:
        wants_inputs = False

        def open(self): pass
        def write(self, rs): out.extend(rs)
        def flush(self): pass
        def close(self): pass
        def summary(self): return {}

    pipe = Pipeline(recs, ops, [Collect()], progress=False)
    pipe.run()
    return by_key(out), pipe.operators


def by_key(outputs: list[dict], fields=("ts", "alarm", "statistic", "value")) -> dict:
    """key -> [(ts, alarm, statistic, ...)] in ts order: what must match across runs."""
    res: dict = {}
    for o in outputs:
        res.setdefault(o["key"], []).append(tuple(o.get(f) for f in fields))
    return {k: sorted(v) for k, v in res.items()}


def checkpoints(bootstrap: str, changelog: str) -> list[tuple[int, int, int, bytes]]:
    """Every checkpoint in a changelog, as restoring at its marker would see it:
    (partition, id, offset, full state bytes ``{"operators": [keyed states], "upstream"}``).
    Relies on the test broker not compacting (every marker is still there)."""
    by_part: dict[int, list] = {}
    for m in read_topic(bootstrap, changelog, quiet=0.3):
        by_part.setdefault(m.partition, []).append((m.key, m.value))
    out = []
    for part, msgs in sorted(by_part.items()):
        topics = {k.decode().split("/", 1)[0] for k, _ in msgs}
        for topic in sorted(topics):
            for r in checkpoints_in(msgs, topic, part):
                state = {"operators": [{"operator": "keyed",
                                        "keys": {k: loads_state(v) for k, v in s.items()}}
                                       for s in r.states], "upstream": r.upstream}
                out.append((part, r.id, r.offset, dumps_state(state)))
    return out


def key_states(state: dict, index: int = 0) -> dict[str, bytes]:
    """key -> dumps_state of that key's operator state, from a checkpoint's state."""
    return {k: dumps_state(v) for k, v in state["operators"][index]["keys"].items()}


def reference_key_states(keyed) -> dict[str, bytes]:
    return {k: dumps_state(v) for k, v in keyed.state_dict()["keys"].items()}


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
