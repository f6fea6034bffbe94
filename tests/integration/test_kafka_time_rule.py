"""The rule for time and duplicates on Kafka (issue 38, item 5), against the test broker: late
records go to the stage's dead-letter topic with a ``late`` reason, exact duplicates are
dropped, and a restarted stage keeps each key's latest ``ts`` and recent records (the rule's
state is in the changelog like every operator's)."""

from __future__ import annotations

from collections import Counter

from kafka_helpers import (
    create_topics,
    group_timing,
    produce,
    read_topic,
    unique,
    values,
    write_pipeline,
)

from shiftwatch.deploy.kafka.run import run_pipeline
from shiftwatch.deploy.pipeline import load_pipeline

KEYS = ["s0", "s1", "s2", "s3"]


def test_late_records_are_dead_letters_and_a_restart_keeps_the_latest_ts(
        kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    raw, out, dlq = f"{name}.raw", f"{name}.out", f"{name}.watch.dlq"
    create_topics(kafka_bootstrap, 2, raw, out)
    first = [{"sensor": k, "ts": float(t), "temp": 20.0 + (t % 3)}
             for t in range(100) for k in KEYS]
    late = [{"sensor": k, "ts": 50.0, "temp": 99.0} for k in KEYS]  # 49 s behind: late
    produce(kafka_bootstrap, raw, first + late + [dict(first[-1])])  # and one duplicate
    stage = {"name": "watch", "input": raw, "output": out, "key": "sensor", "value": "temp",
             "operator": "standardize", "params": {"burn_in": 5},
             "consumer": group_timing(real_kafka),
             "time": {"allowed_lateness_seconds": 10, "drop_duplicates": 5},
             "checkpoint": {"every_records": 50, "every_seconds": 600}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, out, min_count=len(first)))
    assert len(outs) == len(first)  # no output for the late records nor the duplicate
    dead = values(read_topic(kafka_bootstrap, dlq, min_count=len(KEYS)))
    assert len(dead) == len(KEYS)
    for d in dead:
        assert d["reason"] == ("late: ts more than the allowed lateness (10 s) before the "
                               "key's latest ts, got ts 50, 49 s before 99")
        assert d["operator"] == "time" and d["origin"]["topic"] == raw

    # After the restart: ts 85 is 14 s before each key's latest (99) and a duplicate of the
    # key's last record: a fresh rule would take both as the key's first records.
    second = ([{"sensor": k, "ts": 85.0, "temp": 1.0} for k in KEYS]
              + [{"sensor": k, "ts": 95.0, "temp": 2.0} for k in KEYS]
              + [dict(r) for r in first[-len(KEYS):]])
    produce(kafka_bootstrap, raw, second)
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, out, min_count=len(first) + len(KEYS)))
    assert len(outs) == len(first) + len(KEYS)
    # per key: ts 95 twice (the first run's and the new one), ts 85 and 99 once each
    counts = Counter((o["key"], o["ts"]) for o in outs)
    for k in KEYS:
        assert (counts[k, 95.0], counts[k, 85.0], counts[k, 99.0]) == (2, 1, 1)
    dead = values(read_topic(kafka_bootstrap, dlq, min_count=2 * len(KEYS)))
    assert len(dead) == 2 * len(KEYS)
    assert sorted(d["key"] for d in dead if "got ts 85, 14 s before 99" in d["reason"]) == KEYS
