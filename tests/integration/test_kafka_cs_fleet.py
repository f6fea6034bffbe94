"""A `cs` stage (its keys kept as a fleet: arrays, one kernel call per batch) through Kafka:
SIGKILL mid-stream and restart give, after de-duplication, the outputs and the final
per-key states of an uninterrupted run, and those outputs are the ones one ConfSeqOperator
per key gives."""

from __future__ import annotations

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
    write_pipeline,
)

from shiftwatch.deploy.deduper import dedupe
from shiftwatch.operators import Keyed, create
from shiftwatch.operators.state_codec import loads_state

PARAMS = {"alpha": 0.01, "burn_in": 20}
FIELDS = ("ts", "alarm", "lower", "upper", "change_at", "change_ts")


def test_cs_fleet_stage_kill_9_and_restart(kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    records = sensor_records(2400, keys=6, seed=5)
    first, second = records[:1300], records[1300:]
    create_topics(kafka_bootstrap, 3, f"{name}.raw")
    stage = {"name": "detect", "input": f"{name}.raw", "output": f"{name}.alarms",
             "key": "sensor", "value": "temp", "operator": "cs", "params": PARAMS,
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 150, "every_seconds": 600},
             "batch": {"max_records": 50, "timeout_ms": 100}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          topics={"create": True, "partitions": 3})
    produce(kafka_bootstrap, f"{name}.raw", first)
    proc = start_stage_process(path, log=tmp_path / "run1.log")
    try:
        read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(first), timeout=90)
    finally:
        proc.kill()  # SIGKILL: no checkpoint, no commit
        proc.wait()
    produce(kafka_bootstrap, f"{name}.raw", second)
    proc = start_stage_process(path, "--exit-when-idle", "2", log=tmp_path / "run2.log")
    assert proc.wait(timeout=120) == 0, (tmp_path / "run2.log").read_text()[-2000:]

    raw = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    assert len(raw) > len(records)  # the restart replayed records after its checkpoint
    outs = list(dedupe(raw))
    assert len(outs) == len(records)
    _, ops = reference(records, [("cs", PARAMS)])
    got = by_key(outs, FIELDS)
    ref = by_key(_local(records, lambda: Keyed(create("cs", **PARAMS))), FIELDS)
    objects = by_key(_local(records, lambda: Keyed(lambda: create("cs", **PARAMS))), FIELDS)
    assert got == ref == objects
    assert sum(a for v in got.values() for _, a, *_ in v) >= 6  # each sensor's shift found
    # The final per-key states equal the uninterrupted run's (the fleet's state_dicts).
    latest: dict[int, bytes] = {}
    for part, _cid, _offset, state in checkpoints(kafka_bootstrap, f"{name}.detect.changelog"):
        latest[part] = state
    states: dict = {}
    for state in latest.values():
        states.update(key_states(loads_state(state)))
    assert states == reference_key_states(ops[0])


def _local(records: list[dict], make) -> list[dict]:
    """Outputs of a Keyed cs over the records as the stage sees them, in batches of 50."""
    keyed = make()
    recs = [{"key": r["sensor"], "ts": r["ts"], "value": r["temp"]} for r in records]
    out: list[dict] = []
    for i in range(0, len(recs), 50):
        out.extend(keyed.process_batch(recs[i:i + 50]))
    return out
