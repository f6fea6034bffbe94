"""Back on a cluster after losing it, a join under ``cooperative-sticky`` can keep the
partitions the member held: a kept partition whose position is past its end offset is of a
log that is gone (a broker restarted empty; tansu then answers fetches beyond the end with
nothing, not an error), so the stage loses it as after a dropped membership and starts a
new session (:meth:`ClusterSession.check_kept`; the end-to-end case is
tests/integration/test_broker_outage.py, where kafka-python keeps them now and then)."""

from __future__ import annotations

from types import SimpleNamespace

from kafka import TopicPartition

from shiftwatch.deploy.kafka.session import ClusterSession


class _Consumer:
    def __init__(self, ends, positions, fail=False):
        self.ends, self.positions, self.fail = ends, positions, fail

    def end_offsets(self, tps):
        if self.fail:
            raise TimeoutError("no answer")
        return {tp: self.ends[tp.partition] for tp in tps}

    def position(self, tp):
        return self.positions[tp.partition]


def _runner(consumer, tasks=(0, 1, 2)):
    lost = []
    r = SimpleNamespace(stage=SimpleNamespace(input="in", name="det"),
                        _tasks={p: object() for p in tasks}, _consumer=consumer,
                        on_lost=lambda tps: lost.extend(tp.partition for tp in tps))
    return r, lost


def test_kept_partitions_past_their_end_are_lost():
    r, lost = _runner(_Consumer({0: 12, 1: 500, 2: 0}, {0: 150, 1: 140, 2: 60}))
    ClusterSession.check_kept(r, [TopicPartition("in", 3)])
    assert lost == [0, 2]  # (1 is within its log: the same cluster's)


def test_added_partitions_and_other_topics_are_not_checked():
    r, lost = _runner(_Consumer({0: 12, 1: 0, 2: 0}, {0: 150, 1: 140, 2: 60}))
    ClusterSession.check_kept(r, [TopicPartition("in", 1), TopicPartition("in", 2),
                                  TopicPartition("other", 0)])
    assert lost == [0]


def test_within_their_end_or_no_answer_nothing_is_lost():
    r, lost = _runner(_Consumer({0: 150, 1: 140, 2: 61}, {0: 150, 1: 140, 2: 60}))
    ClusterSession.check_kept(r, [])
    assert lost == []
    r, lost = _runner(_Consumer({}, {0: 150, 1: 140, 2: 60}, fail=True))
    ClusterSession.check_kept(r, [])
    assert lost == []
