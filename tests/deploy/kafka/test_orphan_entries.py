"""A first checkpoint cut short (its group entry written, no marker yet: the member was
evicted or killed) must not make the next session's checkpoints reuse its changelog keys.

Seen under load: a session lost its partitions after sending group 1's chunks; the next
session restored nothing (no marker), numbered its checkpoints from 1 again, and its group 1
shared message keys with the orphan's, so a restore found group 1 with chunks of both and
failed ("checkpoint 2 covers [10040] keys per operator but [7040] complete entries").
"""

from __future__ import annotations

from kafka_fakes import Consumer, Log

from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.kafka.changelog import _orphans, restore
from shiftwatch.deploy.kafka.checkpoint import Checkpointer, PartitionTask
from shiftwatch.operators import create


def _session(log, chunk_bytes):
    ex = StageExecutor([create("cs")])
    task = PartitionTask(partition=0, executor=ex, dirty=[set()])
    cp = Checkpointer("in", "cl", {"every_records": 10**9, "every_seconds": 1e9,
                                   "chunk_bytes": chunk_bytes, "patches": True,
                                   "compress": False}, eos=False, tasks={0: task},
                      summary=RunSummary(), stage_name="s")
    cp.producer, cp.consumer = log, Consumer()
    return ex, task, cp


def _feed(ex, task, keys, start):
    batch = [{"key": k, "value": 0.5, "ts": float(i), "offset": start + i}
             for i, k in enumerate(keys)]
    ex.process(batch, dirty=task.dirty)
    task.next_offset = start + len(batch)
    task.since_checkpoint += len(batch)


def test_a_new_session_numbers_above_and_deletes_a_first_checkpoint_cut_short():
    log = Log()
    ex, task, cp = _session(log, chunk_bytes=4096)
    _feed(ex, task, [f"k{i}" for i in range(60)], 0)
    cp._snapshot(task)  # the group's chunks are sent; the session dies before its marker
    prefix = b"in/0/"
    latest = {k: v for k, v in log.messages}
    assert restore(log.messages, "in", 0) is None
    top, keys = _orphans(latest, prefix)
    assert top == 1 and len(keys) > 3  # many chunks
    # the next session: starts afresh from the input's beginning, fewer keys per checkpoint
    ex2, task2, cp2 = _session(log, chunk_bytes=4096)
    task2.checkpoint_id, task2.junk = top, list(keys)  # what the stage now does
    _feed(ex2, task2, [f"k{i}" for i in range(10)], 0)
    cp2.checkpoint([0])
    _feed(ex2, task2, [f"k{i}" for i in range(10, 60)], 10)
    cp2.checkpoint([0])
    r = restore(log.messages, "in", 0)
    assert r is not None and len(r.states[0]) == 60 and not r.junk and not r.dead
    assert r.id == 3  # above the orphan's id 1


def test_without_the_orphans_ids_the_restore_breaks():
    """The failure the fix prevents (the same sessions, the new one numbering from 1)."""
    log = Log()
    ex, task, cp = _session(log, chunk_bytes=4096)
    _feed(ex, task, [f"k{i}" for i in range(60)], 0)
    cp._snapshot(task)
    ex2, task2, cp2 = _session(log, chunk_bytes=4096)
    _feed(ex2, task2, [f"k{i}" for i in range(10)], 0)
    cp2.checkpoint([0])
    _feed(ex2, task2, [f"k{i}" for i in range(10, 60)], 10)
    cp2.checkpoint([0])
    try:
        r = restore(log.messages, "in", 0)
    except ValueError:
        return
    assert len(r.states[0]) != 60 or r.dead  # a mixed group 1: not the stage's state
