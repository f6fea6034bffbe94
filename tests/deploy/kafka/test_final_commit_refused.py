"""The final checkpoint of a stage stopped while another member leaves (a deployment rolled,
every member SIGTERMed at once): the group refuses its offset commit with
RebalanceInProgressError. The checkpoint's markers are already durable and restoring reads
the markers, so every partition is still checkpointed, nothing is processed again, and the
stage says the group's offsets lag rather than that the checkpoint failed."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError, RebalanceInProgressError
from kafka_fakes import Log

from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.kafka.changelog import restore
from shiftwatch.deploy.kafka.checkpoint import Checkpointer, OffsetsNotCommitted, PartitionTask
from shiftwatch.operators import create


class Refusing:
    """A consumer whose synchronous commits the group refuses (``error``), counted."""

    def __init__(self, error):
        self.error, self.calls = error, 0

    def commit(self, offsets):
        self.calls += 1
        raise self.error

    def commit_async(self, offsets, callback=None):
        pass


def _stage(log, consumer, partitions=(0, 1)):
    tasks = {p: PartitionTask(partition=p, executor=StageExecutor([create("cs")]),
                              dirty=[set()]) for p in partitions}
    cp = Checkpointer("in", "cl", {"every_records": 10**9, "every_seconds": 1e9,
                                   "chunk_bytes": 4096, "patches": True, "compress": False},
                      eos=False, tasks=tasks, summary=RunSummary(), stage_name="s")
    cp.producer, cp.consumer = log, consumer
    for p, task in tasks.items():
        batch = [{"key": f"k{i % 5}", "value": 0.5, "ts": float(i), "offset": i}
                 for i in range(40 + p)]
        task.executor.process(batch, dirty=task.dirty)
        task.next_offset = len(batch)
    return cp, tasks


def test_a_refused_final_commit_still_checkpoints_every_partition():
    log, consumer = Log(), Refusing(RebalanceInProgressError("a rebalance is under way"))
    cp, tasks = _stage(log, consumer)
    with pytest.raises(OffsetsNotCommitted, match="RebalanceInProgressError"):
        cp.checkpoint([0, 1], final=True)
    assert consumer.calls >= 2  # partition 1's checkpoint went on after partition 0's refusal
    for p in (0, 1):  # the markers are written: the next owner resumes at each end
        r = restore(log.messages, "in", p)
        assert r is not None and r.offset == 40 + p and len(r.states[0]) == 5


def test_outside_a_final_checkpoint_the_refusal_is_raised_as_before():
    log, consumer = Log(), Refusing(RebalanceInProgressError("a rebalance is under way"))
    cp, _ = _stage(log, consumer)
    with pytest.raises(RebalanceInProgressError):
        cp.checkpoint([0, 1])
    assert restore(log.messages, "in", 1) is None  # (stopped at partition 0)


def test_another_error_of_the_final_commit_is_a_failed_checkpoint():
    log, consumer = Log(), Refusing(KafkaTimeoutError("no answer"))
    cp, _ = _stage(log, consumer)
    with pytest.raises(KafkaTimeoutError):
        cp.checkpoint([0, 1], final=True)
