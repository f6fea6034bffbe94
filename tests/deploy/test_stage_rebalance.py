"""The stage's rebalance callbacks under the cooperative and the eager protocols (no broker:
a fake metrics object and checkpointer)."""

from __future__ import annotations

import pytest
from kafka import TopicPartition

from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import parse_pipeline


class Metrics:
    def __init__(self):
        self.ready = None
        self.rebalances = 0

    def set_ready(self, ready):
        self.ready = ready

    def rebalance(self):
        self.rebalances += 1


def runner(assignor: str) -> StageRunner:
    cfg = parse_pipeline({"pipeline": "p", "kafka": {"bootstrap_servers": "k:9092"},
                          "consumer": {"assignor": assignor},
                          "stages": [{"name": "s", "input": "in", "output": "out",
                                      "operator": "cs"}]})
    r = StageRunner(cfg, cfg.stages[0], metrics=Metrics())
    r.checkpointed = []
    r.checkpointer.checkpoint = r.checkpointed.append
    for p in (0, 1, 2):
        r._tasks[p] = r._new_task(p)
    r.metrics.set_ready(True)
    return r


@pytest.mark.parametrize("assignor, ready", [("cooperative-sticky", True), ("range", False)])
def test_a_revoke_checkpoints_and_drops_only_the_revoked_partitions(assignor, ready):
    r = runner(assignor)
    r.on_revoke({TopicPartition("in", 1), TopicPartition("other", 0)})
    assert r.checkpointed == [[1]]
    assert sorted(r._tasks) == [0, 2] and r.stats.partitions == [0, 2]
    # cooperative: the member goes on with what it keeps; eager: ready once assigned again
    assert r.metrics.ready is ready


def test_an_assignment_that_adds_nothing_keeps_the_partitions_and_is_ready():
    r = runner("cooperative-sticky")
    kept = {p: r._tasks[p] for p in (0, 1, 2)}
    r.metrics.set_ready(False)
    r.on_assign(set())  # what the poll loop does for a join that added none
    assert r._fatal is None and r._tasks == kept
    assert r.metrics.ready is True and r.metrics.rebalances == 1
