"""No client of shiftwatch creates a topic by naming it (issue 51, item 4).

tansu, like Apache Kafka by default, creates any topic a metadata request names, with its
default partition count. A stage's clients name their input, output, changelog and
dead-letter topics all the time; on a broker restarted empty under a running stage they
created them with the broker's default instead of the pipeline's ``topics: {partitions:
N}``. Each test here starts a private tansu, kills it under a running stage and restarts it
empty: no topic may appear but those the stage creates itself with the declared counts, and
the input only once the test creates it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka_helpers import (
    create_topics,
    group_timing,
    produce,
    read_topic,
    sensor_records,
    wait_for,
    write_pipeline,
)

from shiftwatch.deploy.kafka.broker import free_port, start_broker, stop_broker
from shiftwatch.deploy.kafka.clients import make_admin, make_consumer, make_producer
from shiftwatch.deploy.kafka.produce import produce_source
from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import load_pipeline
from shiftwatch.streams.kafka import KafkaSource

pytestmark = pytest.mark.both_clients

TIMING = group_timing(False)
#: what the pipeline declares, against tansu's default for a topic made by naming it
DECLARED = {"noauto.raw": 3, "noauto.out": 3, "noauto.det.changelog": 3, "noauto.det.dlq": 1}


def _topics(bootstrap: str) -> dict[str, int]:
    """Every user topic and its partition count."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        names = [t for t in admin.list_topics() if not t.startswith("__")]
        return {d["name"]: len(d["partitions"]) for d in admin.describe_topics(names)}
    finally:
        admin.close()


def test_every_client_the_project_makes_names_a_missing_topic_without_creating_it(
        kafka_client):
    proc, bootstrap = start_broker(port=free_port())
    try:
        consumer = make_consumer(kafka_client, {"bootstrap_servers": bootstrap,
                                                "group_id": "noauto", **TIMING})
        consumer.subscribe(["missing.in"])
        try:
            consumer.poll(timeout_ms=2000)
        except Exception as exc:  # librdkafka says so: the topic is not there
            assert "missing.in" in str(exc), exc
        consumer.close()
        reader = make_consumer(kafka_client, {"bootstrap_servers": bootstrap,
                                              "group_id": None})
        reader.assign([TopicPartition("missing.assigned", 0)])
        reader.poll(timeout_ms=1000)
        reader.close()
        extra = ({"max_block_ms": 2000} if kafka_client == "kafka-python"
                 else {"librdkafka": {"message.timeout.ms": 2000}})
        producer = make_producer(kafka_client, {"bootstrap_servers": bootstrap, **extra})
        with pytest.raises(Exception):  # noqa: B017 - each client has its own timeout type
            producer.send("missing.out", value=b"x").get(10)
        producer.close()
        admin = make_admin({"bootstrap_servers": bootstrap})
        assert admin.describe_topics(["missing.admin"])[0]["error_code"] != 0
        admin.close()
        # the history source and `produce` (a missing topic is refused in one line)
        with pytest.raises(ValueError, match="does not exist"):
            list(KafkaSource("missing.history", bootstrap=bootstrap, timeout_s=2))
        with pytest.raises(ValueError, match="--partitions N creates it"):
            produce_source(iter([{"key": "a", "value": 1.0}]), "missing.produced", bootstrap,
                           progress=False)
        assert _topics(bootstrap) == {}
    finally:
        stop_broker(proc, grace_s=0)


def test_a_broker_restarted_empty_under_a_stage_gets_only_the_declared_topics(
        tmp_path, caplog, kafka_client):
    caplog.set_level(logging.INFO, logger="shiftwatch.kafka")
    log = open(tmp_path / "tansu.log", "ab")
    port = free_port()
    broker, bootstrap = start_broker(port=port, log=log)
    stop = threading.Event()
    result: dict = {}
    thread = None
    try:
        create_topics(bootstrap, 3, "noauto.raw")
        produce(bootstrap, "noauto.raw", sensor_records(120, keys=6))
        path = write_pipeline(
            tmp_path / "p.yaml", "noauto", bootstrap,
            [{"name": "det", "input": "noauto.raw", "output": "noauto.out", "key": "sensor",
              "value": "temp", "operator": "river:ADWIN", "consumer": TIMING,
              "checkpoint": {"every_records": 50, "every_seconds": 1},
              "batch": {"max_records": 50, "timeout_ms": 100}}],
            topics={"create": True, "partitions": 3})
        cfg = load_pipeline(path)
        cfg.kafka["bootstrap_timeout_ms"] = 3000
        runner = StageRunner(cfg, cfg.stages[0], stop=stop)

        def run():
            try:
                result["stats"] = runner.run()
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                result["error"] = exc

        thread = threading.Thread(target=run, name="noauto-stage")
        thread.start()
        assert len(read_topic(bootstrap, "noauto.out", min_count=120, timeout=90)) >= 120
        assert _topics(bootstrap) == DECLARED

        broker.send_signal(signal.SIGKILL)
        broker.wait(timeout=10)
        broker, bootstrap = start_broker(port=port, log=log)  # empty: tansu is in memory
        # The stage reconnects to the empty broker, checks its topics and waits for its
        # input (documented in operations.md); meanwhile its clients name every topic.
        wait_for(lambda: any("is not on the cluster" in r.getMessage()
                             for r in caplog.records) or not thread.is_alive(), 180,
                 "the stage to wait for its input on the empty broker")
        assert thread.is_alive(), f"the stage stopped: {result}"
        time.sleep(3)  # several metadata refreshes, polls and checkpoint turns later
        seen = _topics(bootstrap)
        assert "noauto.raw" not in seen, seen  # nobody made it by asking for it
        assert all(DECLARED[t] == n for t, n in seen.items()), seen
        # The input appears (as an operator creates it): the stage goes on with it and
        # every topic has the declared count.
        create_topics(bootstrap, 3, "noauto.raw")
        produce(bootstrap, "noauto.raw", sensor_records(30, keys=6, seed=3))
        outputs = read_topic(bootstrap, "noauto.out", min_count=30, timeout=180)
        assert len({(m.partition, m.offset) for m in outputs}) >= 30
        assert _topics(bootstrap) == DECLARED
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=60)
        stop_broker(broker, grace_s=0)
        log.close()
    assert "error" not in result, result
