"""The changelog reader on a real broker, on both clients: one reader, reused for each
assignment as a stage reuses it, reads every message of the partitions it is given.

A stage on ``client: confluent`` once timed out restoring (CI, a graceful hand-over): the
reader assigned the changelog at the stored offset, then again at the beginning, and
librdkafka's late reply to the first assignment's offset query started a partition at its
end, so the read never reached the end it waited for."""

from __future__ import annotations

import numpy as np
import pytest
from kafka import KafkaProducer
from kafka_helpers import create_topics, unique

from shiftwatch.deploy.kafka.changelog import ChangelogReader


@pytest.mark.both_clients
def test_a_reused_reader_reads_every_message_of_its_partitions(kafka_bootstrap, kafka_client):
    topic = unique("cl")
    create_topics(kafka_bootstrap, 4, topic)
    reader = ChangelogReader({"bootstrap_servers": kafka_bootstrap}, topic, kind=kafka_client)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    rng = np.random.default_rng(3)
    sent = {p: [] for p in range(4)}
    try:
        assert reader.read_messages([0, 1, 2, 3], timeout_s=30) == {0: [], 1: [], 2: [], 3: []}
        for round_ in range(8):
            for p in range(4):
                for i in range(int(rng.integers(1, 6))):
                    key, value = f"k{i}".encode(), f"{round_}/{p}/{i}".encode()
                    producer.send(topic, key=key, value=value, partition=p)
                    sent[p].append((key, value))
            producer.flush()
            parts = sorted(int(p) for p in rng.choice(4, size=int(rng.integers(1, 5)),
                                                        replace=False))
            got = reader.read_messages(parts, timeout_s=30)
            assert got == {p: sent[p] for p in parts}, f"round {round_}, partitions {parts}"
            assert reader.last_messages == sum(len(sent[p]) for p in parts)
    finally:
        producer.close()
        reader.close()


def test_a_confluent_manual_assignment_reaches_librdkafka_once_with_its_seeks(kafka_bootstrap):
    from confluent_kafka import OFFSET_BEGINNING

    topic = unique("cl")
    create_topics(kafka_bootstrap, 3, topic)
    reader = ChangelogReader({"bootstrap_servers": kafka_bootstrap}, topic, kind="confluent")
    consumer = reader._consumer
    assigns: list[list[tuple[int, int]]] = []

    class Recording:
        def __init__(self, inner):
            self._inner = inner

        def assign(self, tps):
            assigns.append(sorted((tp.partition, tp.offset) for tp in tps))
            return self._inner.assign(tps)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    consumer._c = Recording(consumer._c)
    try:
        reader.read_messages([0, 1, 2], timeout_s=30)
        assert assigns == [[(0, OFFSET_BEGINNING), (1, OFFSET_BEGINNING),
                             (2, OFFSET_BEGINNING)]]
    finally:
        consumer._c = consumer._c._inner
        reader.close()
