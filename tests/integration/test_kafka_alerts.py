"""A Kafka stage POSTs its alarms to a webhook (a real local HTTP server) and writes the same
outputs whether the webhook answers or fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kafka_helpers import (
    create_topics,
    group_timing,
    produce,
    read_topic,
    sensor_records,
    unique,
    values,
    write_pipeline,
)

from shiftwatch.deploy.kafka.run import run_pipeline
from shiftwatch.deploy.pipeline import load_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sinks"))
from test_alert_sink import Endpoint  # noqa: E402


def _run(kafka_bootstrap, real_kafka, tmp_path, url: str) -> list[dict]:
    name = unique("alerts")
    records = sensor_records(600, keys=3, seed=2)
    create_topics(kafka_bootstrap, 2, f"{name}.raw")
    produce(kafka_bootstrap, f"{name}.raw", records)
    stages = [{"name": "detect", "input": f"{name}.raw", "output": f"{name}.alarms",
               "key": "sensor", "value": "temp", "operator": "river:ADWIN",
               "params": {"delta": 0.01}, "consumer": group_timing(real_kafka),
               "alerts": {"url": url, "retries": 1, "backoff_s": 0.05,
                          "per_key_per_minute": 100}}]
    path = write_pipeline(tmp_path / f"{name}.yaml", name, kafka_bootstrap, stages,
                          topics={"create": True, "partitions": 2})
    assert run_pipeline(load_pipeline(path), idle_exit_s=2.0, install_signals=False) == 0
    return values(read_topic(kafka_bootstrap, f"{name}.alarms", min_count=len(records)))


def test_a_stage_posts_its_alarms_and_a_failing_webhook_costs_no_output(
        kafka_bootstrap, real_kafka, tmp_path):
    good, down = Endpoint(), Endpoint([(500, 0.0)] * 1000)
    try:
        outs = _run(kafka_bootstrap, real_kafka, tmp_path, good.url)
        alarms = [o for o in outs if o["alarm"]]
        assert alarms and len(good.bodies) == len(alarms)
        assert {b["alarm"]["offset"] for b in good.bodies} == {o["offset"] for o in alarms}
        assert all(b["stage"] == "detect" for b in good.bodies)
        outs_down = _run(kafka_bootstrap, real_kafka, tmp_path, down.url)
        assert len(outs_down) == len(outs) and down.hits >= 1 and not down.bodies
        key = ("key", "offset", "alarm")
        assert sorted(json.dumps([o[k] for k in key]) for o in outs_down) == \
            sorted(json.dumps([o[k] for k in key]) for o in outs)
    finally:
        good.close()
        down.close()
