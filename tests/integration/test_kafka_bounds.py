"""A stage's ``bounds:`` on Kafka (issue 51, item 5), against the test broker: a record with
a wild value or a ``ts`` far ahead goes to the stage's dead-letter topic with its reason, the
key's detector and the event clock are untouched (key expiry by ``state.ttl_seconds`` does
not fire), and the other records' outputs are those of a stream without them."""

from __future__ import annotations

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

KEYS = ["s0", "s1", "s2"]


def test_wild_values_and_times_far_ahead_are_dead_letters(kafka_bootstrap, real_kafka,
                                                          tmp_path):
    name = unique()
    raw, out, dlq = f"{name}.raw", f"{name}.out", f"{name}.watch.dlq"
    create_topics(kafka_bootstrap, 2, raw, out)
    clean = [{"sensor": k, "ts": float(t), "temp": 20.0 + (t % 3)}
             for t in range(120) for k in KEYS]
    wild = [{"sensor": "s1", "ts": 60.5, "temp": 1e149},
            {"sensor": "s2", "ts": 1e149, "temp": 20.0}]
    produce(kafka_bootstrap, raw, clean[:180] + wild + clean[180:])
    stage = {"name": "watch", "input": raw, "output": out, "key": "sensor", "value": "temp",
             "operator": "standardize", "params": {"burn_in": 5},
             "consumer": group_timing(real_kafka),
             "bounds": {"max_abs_value": 1e6, "max_future_seconds": 3600},
             "state": {"ttl_seconds": 30},
             "checkpoint": {"every_records": 50, "every_seconds": 600}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, out, min_count=len(clean)))
    assert len(outs) == len(clean)
    dead = values(read_topic(kafka_bootstrap, dlq, min_count=2))
    assert sorted((d["key"], d["reason"].split(":")[0], d["operator"]) for d in dead) == [
        ("s1", "implausible", "bounds"), ("s2", "future", "bounds")]
    assert all(d["origin"]["topic"] == raw for d in dead)
    # nothing expired: no key restarted (a restarted key burns in again)
    for k in KEYS:
        ts = [o["ts"] for o in outs if o["key"] == k]
        assert ts == sorted(ts) and len(ts) == 120
        assert not any(o.get("burn_in") for o in outs if o["key"] == k and o["ts"] > 10)

    # after a restart the clock is not a checkpointed 1e149: a record 10 s on passes
    produce(kafka_bootstrap, raw, [{"sensor": k, "ts": 130.0, "temp": 21.0} for k in KEYS])
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, out, min_count=len(clean) + len(KEYS)))
    assert len(outs) == len(clean) + len(KEYS)
    assert len(values(read_topic(kafka_bootstrap, dlq, min_count=2))) == 2
