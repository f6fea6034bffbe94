"""Changelog formats on a real broker: group entries (format 2) and a changelog of per-key
entries (format 1, what releases up to 0.1 wrote) restored, resumed and migrated."""

from __future__ import annotations

from kafka import KafkaProducer
from kafka_helpers import (
    by_key,
    create_topics,
    group_timing,
    produce,
    read_topic,
    reference,
    reference_key_states,
    sensor_records,
    unique,
    values,
    write_pipeline,
)

from shiftwatch.deploy.kafka.changelog import LEGACY, encode_entry, encode_marker, restore
from shiftwatch.deploy.kafka.run import run_pipeline
from shiftwatch.deploy.pipeline import load_pipeline
from shiftwatch.operators.state_codec import dumps_state, loads_state

CHAIN = [("standardize", {"burn_in": 30}), ("river:ADWIN", {"delta": 0.01})]


def _changelog(bootstrap: str, topic: str) -> dict[int, list]:
    by_part: dict[int, list] = {}
    for m in read_topic(bootstrap, topic, quiet=0.3):
        by_part.setdefault(m.partition, []).append((m.key, m.value))
    return by_part


def _compacted(msgs: list) -> list:
    latest: dict = {}
    for k, v in msgs:
        latest.pop(k, None)
        latest[k] = v
    return [(k, v) for k, v in latest.items() if v is not None]


def test_format1_changelog_is_resumed_and_migrated(kafka_bootstrap, real_kafka, tmp_path):
    """A stage runs (group entries); its changelog is then replaced by the same checkpoint in
    per-key entries, as the previous release wrote it. The restarted stage resumes from it
    exactly (nothing replayed, nothing lost, the reference states), writes every key into
    group entries and deletes all per-key entries."""
    name = unique()
    records = sensor_records(900, keys=4, seed=11)
    first, second = records[:600], records[600:]
    raw = f"{name}.raw"
    create_topics(kafka_bootstrap, 2, raw, f"{name}.alarms")
    stage = {"name": "watch", "input": raw, "output": f"{name}.alarms",
             "key": "sensor", "value": "temp",
             "operators": [{"operator": op, "params": p} for op, p in CHAIN],
             "consumer": group_timing(real_kafka),
             "checkpoint": {"every_records": 100, "every_seconds": 600, "chunk_bytes": 200}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage])
    produce(kafka_bootstrap, raw, first)
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    changelog = f"{name}.watch.changelog"
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    before = {}
    for part, msgs in _changelog(kafka_bootstrap, changelog).items():
        r = restore(msgs, raw, part)
        assert r is not None and r.groups and not r.slots and not r.junk
        assert LEGACY not in r.owners.values()
        before[part] = r
        for key in {k for k, v in _compacted(msgs) if b"/g/" in k}:
            producer.send(changelog, key=key, value=None, partition=part)
        cid = r.next_id
        for op, states in enumerate(r.states):
            for key, state in states.items():
                for k, v in encode_entry(raw, part, cid, op, key, 0, state, 200):
                    producer.send(changelog, key=k, value=v, partition=part)
        k, v = encode_marker(raw, part, cid, r.offset, [len(s) for s in r.states], r.upstream)
        producer.send(changelog, key=k, value=v, partition=part)
    producer.flush()
    producer.close()
    for part, msgs in _changelog(kafka_bootstrap, changelog).items():
        r = restore(_compacted(msgs), raw, part)
        assert set(r.owners.values()) == {LEGACY} and not r.groups.keys() - {LEGACY}
        assert (r.offset, r.states) == (before[part].offset, before[part].states)
    produce(kafka_bootstrap, raw, second)
    assert run_pipeline(load_pipeline(path), idle_exit_s=1.5, install_signals=False) == 0
    outs = values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))
    assert len(outs) == len(records)  # resumed at the format-1 marker: nothing replayed
    expected, ops = reference(records, CHAIN)
    fields = ("ts", "alarm", "statistic")
    assert by_key(outs, fields) == {k: [v[:3] for v in vs] for k, vs in expected.items()}
    got: list[dict] = [{}, {}]
    advanced = 0
    for part, msgs in _changelog(kafka_bootstrap, changelog).items():
        kept = _compacted(msgs)
        assert not any(b"/k/" in k for k, _ in kept)  # every per-key entry deleted
        r = restore(kept, raw, part)
        assert LEGACY not in r.owners.values() and not r.junk
        advanced += r.offset - before[part].offset
        for index in (0, 1):
            got[index].update({k: dumps_state(loads_state(v))
                               for k, v in r.states[index].items()})
    assert advanced == len(second)  # the final checkpoints cover every record
    for index in (0, 1):
        assert got[index] == reference_key_states(ops[index])
