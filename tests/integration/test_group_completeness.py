"""A stage says when its group does not cover its input (issue 51, item 3).

``shiftwatch run --exit-when-idle`` used to stop with status 0 as soon as its own partitions
were quiet, while members killed a moment before still held the others: most of the input
unread and a clean finish reported. The stage now asks the cluster for the input's
partitions, their ends and the group's committed offsets (deploy/kafka/coverage.py). These
tests run that check against a real broker, the other members' progress written as the
group's committed offsets (what a member that died leaves behind), and the idle exit's wait
with the check's answers.
"""

from __future__ import annotations

import logging
import threading
import types

import pytest
from kafka import KafkaAdminClient, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka_helpers import create_topics, produce, sensor_records, unique, write_pipeline

from shiftwatch.deploy.kafka import coverage as cov_mod
from shiftwatch.deploy.kafka.connect import SessionLost
from shiftwatch.deploy.kafka.coverage import Coverage
from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.observability import MetricsServer
from shiftwatch.deploy.pipeline import load_pipeline

N = 300  # over 6 keys: every partition of 3 gets some


def _runner(tmp_path, bootstrap, name, guarantee="at-least-once"):
    path = write_pipeline(
        tmp_path / "p.yaml", name, bootstrap,
        [{"name": "det", "input": f"{name}.in", "output": f"{name}.out", "key": "sensor",
          "value": "temp", "operator": "river:ADWIN", "guarantee": guarantee,
          "consumer": {"session_timeout_ms": 3000, "max_poll_interval_ms": 3000,
                       "heartbeat_interval_ms": 500}}], topics={"create": True})
    cfg = load_pipeline(path)
    return StageRunner(cfg, cfg.stages[0], stop=threading.Event(), idle_exit_s=1.0)


def _ends(bootstrap, topic):
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        return {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


def _commit(bootstrap, group, offsets: dict[tuple[str, int], int]):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_group_offsets(group, {TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                          for (t, p), o in offsets.items()})
    finally:
        admin.close()


class _Owned:
    """Stands for the stage's consumer: its position in the partitions it owns."""

    def __init__(self, positions):
        self.positions = positions

    def position(self, tp):
        return self.positions[tp.partition]


def test_partitions_another_member_left_behind_are_named(tmp_path, kafka_bootstrap):
    name = unique("cov")
    topic = f"{name}.in"
    create_topics(kafka_bootstrap, 3, topic)
    produce(kafka_bootstrap, topic, sensor_records(N, keys=6))
    ends = _ends(kafka_bootstrap, topic)
    assert all(e > 0 for e in ends.values()), ends
    r = _runner(tmp_path, kafka_bootstrap, name)
    try:
        # this member owns partition 1 and is at its end; nobody committed 0 or 2
        r._tasks[1] = types.SimpleNamespace(next_offset=ends[1])
        r._consumer = _Owned({1: ends[1]})
        cov = r._ask_coverage()
        assert cov.partitions == [0, 1, 2] and cov.owned == [1]
        assert cov.behind == {0: (None, ends[0]), 2: (None, ends[2])}
        assert not cov.complete
        line = cov.describe()
        assert "partitions 0, 2 of 3" in line and "0: nothing committed" in line
        assert "this member owns 1" in line
        # another member got partition 0 halfway; this member is behind in its own
        _commit(kafka_bootstrap, r.group_id, {(topic, 0): ends[0] // 2})
        r._consumer.positions[1] = ends[1] - 1
        r._tasks[1].next_offset = ends[1] - 1
        cov = r._ask_coverage()
        assert cov.behind[0] == (ends[0] // 2, ends[0])
        assert cov.behind[1] == (ends[1] - 1, ends[1])
        assert f"1: this member's position {ends[1] - 1} of {ends[1]}" in cov.describe()
        # everything committed or read to the end: complete
        _commit(kafka_bootstrap, r.group_id, {(topic, 0): ends[0], (topic, 2): ends[2]})
        r._consumer.positions[1] = ends[1]
        r._tasks[1].next_offset = ends[1]
        cov = r._ask_coverage()
        assert cov.complete and cov.behind == {}
    finally:
        r._consumer = None
        r._close_admin()


def test_only_transaction_markers_left_is_complete(tmp_path, kafka_bootstrap):
    """An exactly-once upstream ends each partition with a commit marker: a group committed at
    the last record + 1 is done, though one offset short of the end."""
    name = unique("cov")
    topic = f"{name}.in"
    create_topics(kafka_bootstrap, 3, topic)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{name}.tx")
    p.init_transactions()
    p.begin_transaction()
    for i in range(30):
        p.send(topic, partition=i % 3, value=b'{"sensor": "a", "temp": 1.0}')
    p.commit_transaction()
    p.close()
    ends = _ends(kafka_bootstrap, topic)
    assert all(e == 11 for e in ends.values()), ends  # 10 records and the marker
    r = _runner(tmp_path, kafka_bootstrap, name, guarantee="exactly-once")
    from shiftwatch.deploy.kafka.changelog import ChangelogReader

    r._reader = ChangelogReader({"bootstrap_servers": kafka_bootstrap}, r.changelog,
                                read_committed=True)
    try:
        _commit(kafka_bootstrap, r.group_id, {(topic, q): 10 for q in range(3)})
        assert r._ask_coverage().complete
        _commit(kafka_bootstrap, r.group_id, {(topic, 0): 9})  # one record left: behind
        assert r._ask_coverage().behind == {0: (9, 11)}
    finally:
        r._reader.close()
        r._reader = None
        r._close_admin()


def test_an_input_topic_gone_from_the_cluster_ends_the_session(tmp_path, kafka_bootstrap):
    name = unique("cov")
    create_topics(kafka_bootstrap, 3, f"{name}.other")
    r = _runner(tmp_path, kafka_bootstrap, name)
    try:
        with pytest.raises(SessionLost, match="is not on the cluster"):
            r._ask_coverage()
    finally:
        r._close_admin()


def test_the_idle_exit_waits_bounded_then_stops_incomplete(tmp_path, kafka_bootstrap,
                                                           monkeypatch, caplog):
    """Idle but incomplete: a warning, a wait of INCOMPLETE_WAIT_SESSIONS session timeouts,
    then :attr:`incomplete` (status 1 from run_pipeline); complete: at once. The /readyz body
    and the metrics show the view."""
    r = _runner(tmp_path, kafka_bootstrap, unique("cov"))
    server = MetricsServer(port=0, address="127.0.0.1").start()
    try:
        r.metrics = server.stage("p", "det")
        views = iter([Coverage("t", [0, 1, 2], [1], {0: (None, 50), 2: (10, 40)})] * 3)
        monkeypatch.setattr(StageRunner, "_ask_coverage", lambda self: next(views))
        caplog.set_level(logging.INFO, logger="shiftwatch.kafka")
        assert r._idle_exit(100.0) is False  # the wait starts
        assert any("not complete" in rec.getMessage() for rec in caplog.records)
        wait_s = cov_mod.INCOMPLETE_WAIT_SESSIONS * 3.0
        assert r._idle_exit(100.0 + wait_s - 0.5) is False
        assert r.incomplete is None
        assert server.value("shiftwatch_input_partitions_behind", pipeline="p",
                            stage="det") == 2
        assert server.value("shiftwatch_input_partitions", pipeline="p", stage="det") == 3
        import json
        from urllib.error import HTTPError
        from urllib.request import urlopen

        try:
            body = json.loads(urlopen(f"http://127.0.0.1:{server.port}/readyz").read())
        except HTTPError as e:
            body = json.loads(e.read())
        view = body["why"]["p/det"]["input"]
        assert view["behind"] == {"0": {"done": None, "end": 50}, "2": {"done": 10, "end": 40}}
        assert r._idle_exit(100.0 + wait_s + 0.5) is True
        assert "stopped incomplete" in r.incomplete and "0: nothing committed" in r.incomplete
        # complete at once
        r2 = _runner(tmp_path, kafka_bootstrap, unique("cov"))
        monkeypatch.setattr(StageRunner, "_ask_coverage",
                            lambda self: Coverage("t", [0, 1, 2], [0, 1, 2], {}))
        assert r2._idle_exit(5.0) is True and r2.incomplete is None
    finally:
        server.close()
        r._close_admin()
