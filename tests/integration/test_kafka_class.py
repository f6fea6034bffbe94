"""The ``class`` detector (ClaSS) as a Kafka stage: kill -9 mid-stream and restart give the
outputs and the per-key states of an uninterrupted run (its windows, k-NN lists and profile
restored from the changelog), and the alarms are where the period changed."""

from __future__ import annotations

import numpy as np
import pytest
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
    start_stage_process,
    unique,
    values,
    write_pipeline,
)

from shiftwatch.deploy.deduper import dedupe
from shiftwatch.deploy.local import Pipeline
from shiftwatch.operators import create
from shiftwatch.operators.state_codec import loads_state

pytestmark = pytest.mark.both_clients

N_PER_KEY, KEYS, CHANGE = 1000, 3, 600
PARAMS = {"window": 600, "n_warmup": 200}


def _records(seed: int = 5) -> list[dict]:
    """Each sensor a noisy sine whose period changes from 30 to 17 at its record 600."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(N_PER_KEY):
        for k in range(KEYS):
            period = 30 if i < CHANGE else 17
            out.append({"sensor": f"s{k}", "ts": float(i * KEYS + k),
                        "temp": float(np.sin(2 * np.pi * (i + 7 * k) / period)
                                      + 0.2 * rng.standard_normal())})
    return out


def test_a_class_stage_killed_and_restarted_equals_the_uninterrupted_run(
        kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    records = _records()
    first, second = records[:1500], records[1500:]
    create_topics(kafka_bootstrap, 3, f"{name}.raw")
    stage = {"name": "seg", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp", "operator": "class", "params": PARAMS,
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 200, "every_seconds": 600},
             "batch": {"max_records": 50, "timeout_ms": 100}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          topics={"create": True, "partitions": 3})
    produce(kafka_bootstrap, f"{name}.raw", first)
    proc = start_stage_process(path, log=tmp_path / "run1.log")
    try:
        read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(first), timeout=120)
    finally:
        proc.kill()  # SIGKILL: no checkpoint, no commit
        proc.wait()
    produce(kafka_bootstrap, f"{name}.raw", second)
    proc = start_stage_process(path, "--exit-when-idle", "2", log=tmp_path / "run2.log")
    assert proc.wait(timeout=180) == 0, (tmp_path / "run2.log").read_text()[-2000:]

    raw = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    assert len(raw) > len(records)  # the restart processed records after its checkpoint again
    outs = list(dedupe(raw))
    assert len(outs) == len(records)
    _, ops = reference(records, [("class", PARAMS)])
    fields = ("ts", "alarm", "change_at")
    assert by_key(outs, fields) == _uninterrupted(records, fields)
    alarms = [o for o in outs if o["alarm"]]
    assert {o["key"] for o in alarms} == {f"s{k}" for k in range(KEYS)}
    for o in alarms:  # every key's change found near its record 600
        assert abs(o["change_at"] - CHANGE) <= 60, o
    latest: dict[int, bytes] = {}
    for part, _cid, _offset, state in checkpoints(kafka_bootstrap, f"{name}.seg.changelog"):
        latest[part] = state
    got: dict = {}
    for state in latest.values():
        got.update(key_states(loads_state(state)))
    assert got == reference_key_states(ops[0])


def _uninterrupted(records, fields):
    """The outputs of a local run fed every record in order (no stage, no restart)."""
    out: list = []

    class Collect:
        wants_inputs = False

        def open(self): pass
        def write(self, rs): out.extend(rs)
        def flush(self): pass
        def close(self): pass
        def summary(self): return {}

    Pipeline([{**r, "key": r["sensor"], "value": r["temp"]} for r in records],
             [create("class", **PARAMS)], [Collect()], progress=False).run()
    return by_key(out, fields)
