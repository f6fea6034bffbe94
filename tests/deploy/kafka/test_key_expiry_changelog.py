"""Expired keys in the changelog: deletion entries, the old entries deleted, restore exact.

A stage's checkpoints are simulated with a producer that acknowledges at once and a log that
compacts (the newest message per key; a ``None`` value deletes). After every checkpoint the
log restores to exactly the live keys and states, expired keys included (they must not come
back), and under key churn the compacted log stays bounded; a restore in the middle (the
deletions' bookkeeping read back from the log) continues to the same states as a run that
never stopped. The same against a real broker is in tests/integration/test_key_expiry_kafka.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from kafka_fakes import Consumer, Log

from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.expiry import Expiry
from shiftwatch.deploy.kafka.changelog import restore
from shiftwatch.deploy.kafka.checkpoint import Checkpointer, PartitionTask, key_state_bytes
from shiftwatch.operators import create
from shiftwatch.operators.keyed import Keyed
from shiftwatch.operators.state_codec import inflate_state

CHAINS = {"cs": ["cs"], "adwin (patches)": ["river:ADWIN"],
          "standardize -> adwin": ["standardize", "river:ADWIN"]}


def _stage(names, expiry, log):
    ops = [create(n) for n in names]
    ex = StageExecutor(ops, expiry=expiry)
    task = PartitionTask(partition=0, executor=ex, dirty=[set() for _ in ops])
    cp = Checkpointer("in", "in.changelog", {"every_records": 1, "every_seconds": 1e9,
                                             "chunk_bytes": 2048, "patches": True},
                      eos=False, tasks={0: task}, summary=RunSummary(), stage_name="s")
    cp.producer, cp.consumer = log, Consumer()
    return task, cp


def _live(task) -> list[dict[str, bytes]]:
    return [{Keyed.key_name(k): key_state_bytes(op.existing(k)) for k in op.keys}
            for op in task.executor.operators]


def _plain(data: bytes) -> bytes:
    return inflate_state(data) if data[:1] == b"x" else data  # (checkpoint.compress)


def _batches(seed, n_batches=60, size=40):
    """Key churn: a few long-lived keys and many that are seen for a short while."""
    rng = np.random.default_rng(seed)
    off = 0
    for b in range(n_batches):
        batch = []
        for _ in range(size):
            if rng.random() < 0.3:
                key = f"dev{rng.integers(0, 4)}"
            else:
                key = f"k{b * 3 + rng.integers(0, 6)}"
            batch.append({"key": key, "value": float(rng.normal() + (4 if b > 30 else 0)),
                          "ts": float(off), "offset": off})
            off += 1
        yield batch


def _run(task, cp, batches, check=True):
    for batch in batches:
        task.executor.process(batch, dirty=task.dirty)
        task.next_offset = batch[-1]["offset"] + 1
        task.since_checkpoint += len(batch)
        cp.after_batch()
        cp.advance(task, until=0)
        if check:
            got = restore(cp.producer.messages, "in", 0)
            assert got is not None and got.offset == task.next_offset
            assert [{k: _plain(v) for k, v in s.items()} for s in got.states] == _live(task)


@pytest.mark.parametrize("names", list(CHAINS.values()), ids=list(CHAINS))
@pytest.mark.parametrize("rule", [{"max_keys": 8}, {"ttl_seconds": 150.0}], ids=["max", "ttl"])
def test_every_checkpoint_restores_the_live_keys_and_no_expired_one(names, rule):
    log = Log()
    expiry = Expiry(**rule)
    task, cp = _stage(names, expiry, log)
    _run(task, cp, _batches(1))
    assert task.executor.summary.keys_evicted > 50
    # bounded: the compacted log holds a few groups' worth, not every key ever seen
    live = sum(len(s) for s in _live(task))
    groups = {k.rsplit(b"/", 1)[0] for k in log.compacted() if b"/g/" in k}
    assert len(_live(task)[0]) <= 30  # (ttl: the keys of about the last 4 batches)
    assert len(groups) <= 4 * live + 8, (len(groups), live)


@pytest.mark.parametrize("names", list(CHAINS.values()), ids=list(CHAINS))
def test_a_restore_in_the_middle_continues_like_a_run_that_never_stopped(names):
    batches = list(_batches(2))
    log = Log()
    task, cp = _stage(names, Expiry(max_keys=6), log)
    _run(task, cp, batches[:25], check=False)
    # a restart: a fresh stage restores the log (deletions and their bookkeeping included)
    task2, cp2 = _stage(names, Expiry(max_keys=6), log)
    cp2.load(task2, restore(log.messages, "in", 0))
    assert _live(task2) == _live(task)
    _run(task2, cp2, batches[25:])
    ref_log = Log()
    ref, ref_cp = _stage(names, Expiry(max_keys=6), ref_log)
    _run(ref, ref_cp, batches, check=False)
    assert _live(task2) == _live(ref)


def test_without_expiry_the_changelog_keeps_every_key():
    log = Log()
    task, cp = _stage(["cs"], None, log)
    _run(task, cp, _batches(1), check=False)
    got = restore(log.messages, "in", 0)
    assert len(got.states[0]) > 150  # the arm the expiry tests are compared with
