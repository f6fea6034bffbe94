"""What `shiftwatch replay` writes is byte for byte what a Kafka stage produces.

The same JSON lines (good records of several keys, and bad lines) go through `shiftwatch
replay` (a JSONL file: outputs.jsonl, dead_letters.jsonl) and through a one-stage pipeline
over a 3-partition topic. Per key, in input order, every output line must equal the Kafka
message value byte for byte once the runtime coordinates are taken out (``input``, which only
Kafka has, and ``offset``, the position in the file or in the partition), and the dead
letters must be equal apart from ``origin``.
"""

from __future__ import annotations

import json
import re

from kafka_helpers import (
    create_topics,
    group_timing,
    produce,
    read_topic,
    sensor_records,
    unique,
    write_pipeline,
)

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.kafka.run import run_pipeline
from shiftwatch.deploy.pipeline import load_pipeline

# The offset is the only field whose value differs (file position vs partition offset); it is
# cut out of the bytes, the rest of each line is compared as it is.
_OFFSET = re.compile(rb',"offset":\d+')
_INPUT = re.compile(rb',"input":\{"topic":"[^"]*","partition":\d+,"offset":\d+,"n":\d+\}')


def _strip(line: bytes) -> bytes:
    out, n = _OFFSET.subn(b"", line, count=1)
    assert n == 1, line
    return _INPUT.sub(b"", out)


def test_replay_and_kafka_stage_write_the_same_bytes(kafka_bootstrap, real_kafka, tmp_path):
    name = unique()
    good = sensor_records(900, keys=5, seed=11)
    for i, r in enumerate(good):  # vectors for one sensor, so an operator can reject shapes
        if r["sensor"] == "s4":
            r["temp"] = [r["temp"], float(i % 3)]
    bad = [
        (b"s1", b"{not json"),
        (b"s2", b"[1, 2, 3]"),
        (b"s0", b'{"sensor": "s0", "ts": 3.5}'),                      # no value field
        (b"s3", b'{"sensor": "s3", "ts": 4.5, "temp": "warm"}'),      # not a number
        (b"s1", b'{"sensor": "s1", "ts": 5.5, "temp": NaN}'),         # not finite
        (b"s4", b'{"sensor": "s4", "ts": 6.5, "temp": [1.0, 2.0, 3.0]}'),  # operator: shape
        (b"s2", b'{"sensor": "s2", "ts": 7.5, "temp": [[1, 2], [3]]}'),    # ragged
    ]
    lines: list[tuple[bytes, bytes]] = []
    for i, r in enumerate(good):
        lines.append((r["sensor"].encode(), json.dumps(r).encode()))
        if i % 100 == 50 and i // 100 < len(bad):
            lines.append(bad[i // 100])
    assert len(lines) == len(good) + len(bad)

    # Through `shiftwatch replay` ...
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes(b"".join(v + b"\n" for _, v in lines))
    out = tmp_path / "replay"
    assert main(["replay", str(jsonl), "--source-opt", "value=temp", "--source-opt",
                 "key=sensor", "--source-opt", "ts=ts", "--operator", "standardize",
                 "--param", "burn_in=20", "--operator", "river:ADWIN", "--out", str(out),
                 "--no-progress", "--no-plots", "--quiet", "--batch-size", "64"]) == 0
    replay_out = (out / "outputs.jsonl").read_bytes().splitlines()
    replay_dead = [json.loads(x) for x in (out / "dead_letters.jsonl").read_text().splitlines()]

    # ... and through a Kafka stage over three partitions.
    create_topics(kafka_bootstrap, 3, f"{name}.in")
    produce(kafka_bootstrap, f"{name}.in", lines)
    stage = {"name": "detect", "input": f"{name}.in", "output": f"{name}.out",
             "key": "sensor", "value": "temp", "ts": "ts",
             "operators": [{"operator": "standardize", "params": {"burn_in": 20}},
                           {"operator": "river:ADWIN"}],
             "consumer": group_timing(real_kafka), "batch": {"max_records": 50}}
    path = write_pipeline(tmp_path / "p.yaml", name, kafka_bootstrap, [stage],
                          topics={"create": True, "partitions": 3})
    assert run_pipeline(load_pipeline(path), idle_exit_s=2.0, install_signals=False) == 0
    kafka_out = read_topic(kafka_bootstrap, f"{name}.out", min_count=len(replay_out))
    kafka_dead = [json.loads(m.value) for m in
                  read_topic(kafka_bootstrap, f"{name}.detect.dlq", min_count=len(bad))]

    assert len(kafka_out) == len(replay_out) == len(good)  # one output per good record
    assert sum(b'"alarm":true' in x for x in replay_out) > 0

    def per_key(raw_lines: list[bytes]) -> dict[str, list[bytes]]:
        res: dict[str, list[bytes]] = {}
        for x in raw_lines:
            res.setdefault(json.loads(x)["key"], []).append(_strip(x))
        return res

    # Outputs arrive in input order in both runners, so per key the order is the same.
    assert per_key([m.value for m in kafka_out]) == per_key(replay_out)
    assert [json.loads(m.value)["input"]["topic"] for m in kafka_out[:1]] == [f"{name}.in"]

    def no_origin(dead: list[dict]) -> list[str]:
        return sorted(json.dumps({k: v for k, v in d.items() if k != "origin"},
                                 sort_keys=True) for d in dead)

    assert len(replay_dead) == len(kafka_dead) == len(bad)
    assert {d["origin"].get("file") for d in replay_dead if d["operator"] is None} == \
        {str(jsonl)}
    assert all(d["origin"]["topic"] == f"{name}.in" for d in kafka_dead)
    rejected_by_operator = [d for d in kafka_dead if d["operator"] is not None]
    assert [d["operator"] for d in rejected_by_operator] == ["standardize"]
    # An operator's rejection carries what it rejected: locally the record the source made
    # of the line, on Kafka the message bytes (raw_base64), which can be produced again.
    local_op = [d for d in replay_dead if d["operator"] is not None]
    assert [d["raw"] for d in local_op] == [{"key": "s4", "ts": 6.5,
                                              "value": [1.0, 2.0, 3.0]}]
    for d in rejected_by_operator + local_op:
        d.pop("raw"), d.pop("raw_base64", None)
    assert no_origin(kafka_dead) == no_origin(replay_dead)
