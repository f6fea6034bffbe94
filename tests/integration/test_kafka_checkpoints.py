"""Incremental checkpoints without a broker: a fake producer records what a stage writes.

These check the changelog protocol itself (which keys a checkpoint writes, the group entries
and when they are deleted, a checkpoint cut short between its group entry and its marker);
the broker tests in test_kafka_stage.py check the same end to end.
"""

from __future__ import annotations

import json
from collections import namedtuple

import pytest

from shiftwatch.deploy.kafka.changelog import decode_group, decode_message
from shiftwatch.deploy.kafka.changelog import restore as _restore
from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import parse_pipeline
from shiftwatch.operators.state_codec import dumps_state, inflate_state


def _plain(r):
    """``r`` with each state's bytes as plain JSON (checkpoint.compress writes them
    zlib-compressed; compared here with dumps_state of the live state)."""
    if r is not None:
        r.states = [{k: inflate_state(v) if v[:1] == b"x" else v for k, v in s.items()}
                    for s in r.states]
    return r


def restore(messages, topic, partition):
    return _plain(_restore(messages, topic, partition))

TP = namedtuple("TP", "topic partition")
Msg = namedtuple("Msg", "topic partition offset key value timestamp")


class _Done:
    is_done = True
    exception = None

    def failed(self):
        return False

    def get(self, timeout=None):
        return None


class _Held:
    """A send the fake broker has not acknowledged yet (it is not in the log until then)."""

    def __init__(self, producer, message):
        self.producer, self.message, self.is_done = producer, message, False
        self.exception = None

    def failed(self):
        return False

    def get(self, timeout=None):
        raise AssertionError("the stage waited for an acknowledgement")


class FakeProducer:
    """Keeps the changelog in log order; acknowledges every send at once, or (``hold``)
    only on :meth:`ack` (then the message reaches the log)."""

    def __init__(self):
        self.log: list[tuple[bytes, bytes | None]] = []
        self.hold = False
        self.held: list[_Held] = []

    def send(self, topic, key=None, value=None, partition=None, headers=None):
        message = (key, value) if topic.endswith(".changelog") else None
        if self.hold:
            self.held.append(_Held(self, message))
            return self.held[-1]
        if message is not None:
            self.log.append(message)
        return _Done()

    def ack(self, n=None):
        """Acknowledge the first ``n`` held sends (all by default), in order."""
        n = len(self.held) if n is None else n
        for h in self.held[:n]:
            h.is_done = True
            if h.message is not None:
                self.log.append(h.message)
        del self.held[:n]

    def flush(self, timeout=None):
        pass


class FakeConsumer:
    def __init__(self):
        self.committed: dict = {}

    def commit(self, offsets):
        self.committed.update({tp.partition: om.offset for tp, om in offsets.items()})

    def commit_async(self, offsets, callback=None):
        self.commit(offsets)


def _runner(chunk_bytes: int = 64, operators=("standardize", "river:ADWIN"),
            patches: bool = True):
    cfg = parse_pipeline({
        "pipeline": "p", "kafka": {"bootstrap_servers": "unused:9092"},
        "checkpoint": {"every_records": 10**9, "every_seconds": 1e6,
                       "chunk_bytes": chunk_bytes, "patches": patches},
        "stages": [{"name": "s", "input": "in", "output": "out", "key": "sensor",
                    "value": "temp", "operators": [{"operator": o} for o in operators]}]})
    r = StageRunner(cfg, cfg.stages[0])
    r._producer, r._consumer = FakeProducer(), FakeConsumer()
    r.checkpointer.producer, r.checkpointer.consumer = r._producer, r._consumer
    return r


def _feed(runner, task, records, start):
    msgs = [Msg("in", 0, start + i, r["sensor"].encode(), json.dumps(r).encode(), 0)
            for i, r in enumerate(records)]
    runner._process(TP("in", 0), task, msgs)
    return start + len(records)


def _recs(keys, n, seed=0):
    return [{"sensor": keys[i % len(keys)], "temp": float((i * 7919 + seed) % 13)}
            for i in range(n)]


def _key_entries(log, since):
    """(op, key) pairs written in group entries after log position ``since``."""
    chunks: dict[int, dict[int, bytes]] = {}
    for k, v in log[since:]:
        parts = k.decode().split("/")
        if parts[2] == "g" and v is not None:
            chunks.setdefault(int(parts[3]), {})[int(parts[4])] = decode_message(v)[1]
    out = set()
    for by_chunk in chunks.values():
        payload = b"".join(by_chunk[i] for i in range(len(by_chunk)))
        out.update((op, key) for op, key, _ in decode_group(payload))
    return out


def _states(task):
    return [{k: dumps_state(s) for k, s in op.state_dict()["keys"].items()}
            for op in task.executor.operators]


def test_checkpoint_writes_only_changed_keys_and_restores_exactly():
    runner = _runner()
    task = runner._new_task(0)
    runner._tasks[0] = task
    off = _feed(runner, task, _recs(["a", "b", "c"], 60), 0)
    runner.checkpointer.checkpoint([0])
    assert _key_entries(runner._producer.log, 0) == {(i, k) for i in (0, 1) for k in "abc"}
    first = _states(task)
    mark = len(runner._producer.log)
    off = _feed(runner, task, _recs(["b"], 10, seed=3), off)
    runner.checkpointer.checkpoint([0])
    assert _key_entries(runner._producer.log, mark) == {(0, "b"), (1, "b")}  # only b changed
    assert runner._consumer.committed == {0: off}
    r = restore(runner._producer.log, "in", 0)
    assert (r.id, r.offset) == (2, off)
    assert r.states == _states(task)
    assert r.states != first
    # "b" is in checkpoint 2's group; "a" is still in the group of checkpoint 1.
    assert (r.owners[(0, "b")], r.owners[(0, "a")]) == (2, 1)
    # A fresh runner restores the same state and goes on exactly like the original.
    other = _runner()
    t2 = other._new_task(0)
    other.checkpointer.load(t2, r)
    assert _states(t2) == _states(task)
    more = _recs(["a", "d"], 20, seed=5)
    _feed(runner, task, more, off)
    _feed(other, t2, more, off)
    assert _states(t2) == _states(task)


def test_entries_without_marker_are_ignored_then_deleted():
    """A crash between a checkpoint's key entries and its marker (simulated by dropping the
    marker): restore uses the previous marker's offset and the entries it covers."""
    runner = _runner(chunk_bytes=40)  # states in several chunks
    task = runner._new_task(0)
    off = _feed(runner, task, _recs(["a", "b"], 40), 0)
    runner._tasks[0] = task
    runner.checkpointer.checkpoint([0])
    committed = _states(task)
    committed_off = off
    # Checkpoint 2 changes a and creates "ghost"; its marker never reaches the broker.
    off = _feed(runner, task, _recs(["a", "ghost"], 30, seed=1), off)
    assert runner.checkpointer._snapshot(task)
    assert task.pendings[-1].id == 2  # entries sent; the marker is not
    log = list(runner._producer.log)
    assert not any(k.endswith(b"/m") for k, _ in log[-5:])
    r = restore(log, "in", 0)
    assert (r.id, r.offset) == (1, committed_off)
    assert r.states == committed  # a's old version, no ghost
    assert r.junk and r.next_id == 3
    # The restarted stage deletes the unfinished entries in its next checkpoint, before its
    # marker, and numbers that checkpoint above them.
    again = _runner(chunk_bytes=40)
    t2 = again._new_task(0)
    again.checkpointer.load(t2, r)
    again._tasks[0] = t2
    again._producer.log = log
    replay = _recs(["b"], 5, seed=9)  # touches neither a nor ghost
    off2 = _feed(again, t2, replay, committed_off)
    again.checkpointer.checkpoint([0])
    r2 = restore(again._producer.log, "in", 0)
    assert (r2.id, r2.offset) == (3, off2)
    assert r2.states == _states(t2)
    assert "ghost" not in r2.states[0] and not r2.junk
    # A second crash before a marker, then a restore, still finds checkpoint 3.
    _feed(again, t2, _recs(["ghost"], 3), off2)
    assert again.checkpointer._snapshot(t2)
    assert restore(again._producer.log, "in", 0).id == 3


def test_restore_refuses_a_marker_whose_entries_are_missing():
    runner = _runner()
    task = runner._new_task(0)
    runner._tasks[0] = task
    _feed(runner, task, _recs(["a", "b"], 20), 0)
    runner.checkpointer.checkpoint([0])
    assert any(k == b"in/0/g/1/1" for k, _ in runner._producer.log)
    log = [(k, v) for k, v in runner._producer.log if k != b"in/0/g/1/1"]  # a lost chunk
    try:
        restore(log, "in", 0)
    except ValueError as exc:
        assert "complete entries" in str(exc)
    else:
        raise AssertionError("a marker with missing entries was restored")


def test_list_keys_and_unhashable_keys():
    runner = _runner(operators=("river:ADWIN",))
    task = runner._new_task(0)
    runner._tasks[0] = task
    recs = [{"sensor": ["x", 1], "temp": 1.0}, {"sensor": {"bad": 1}, "temp": 2.0},
            {"sensor": "y", "temp": 3.0}]
    msgs = [Msg("in", 0, i, None, json.dumps(r).encode(), 0) for i, r in enumerate(recs)]
    runner._process(TP("in", 0), task, msgs)
    runner.checkpointer.checkpoint([0])
    r = restore(runner._producer.log, "in", 0)
    assert r.states == _states(task)
    assert len(r.states[0]) == 2


def test_checkpoints_in_flight_never_overwrite_each_other():
    """Snapshots go on while earlier markers are unacknowledged (up to three in flight);
    a key written by each of them is in a different group entry, and a restore at any
    acknowledged marker gives exactly the state of that snapshot. (Whole states only: with
    patches a key's chain keeps older groups live, test_patches_* below.)"""
    runner = _runner(operators=("river:ADWIN",), patches=False)
    task = runner._new_task(0)
    runner._tasks[0] = task
    producer = runner._producer
    producer.hold = True
    off = 0
    snapshots = {}
    for n in range(3):
        off = _feed(runner, task, _recs(["a", "b"][: n + 1], 10, seed=n), off)
        assert runner.checkpointer._snapshot(task)
        runner.checkpointer.advance(task)  # nothing acknowledged: returns at once
        snapshots[task.checkpoint_id] = (off, _states(task))
    assert len(task.pendings) == 3
    assert all((0, "a") in p.written for p in task.pendings)
    assert [{k.split(b"/")[3] for k in p.keys} for p in task.pendings] == [{b"1"}, {b"2"},
                                                                            {b"3"}]
    assert not producer.log  # nothing reached the broker yet
    # Acknowledge everything sent up to snapshot 2's entries: marker 1 then goes out.
    producer.ack()
    runner.checkpointer.advance(task)  # sends marker 1 (needs its ack next)
    assert restore(producer.log, "in", 0) is None
    producer.ack()
    runner.checkpointer.advance(task)  # commits 1, sends marker 2
    r = restore(producer.log, "in", 0)
    assert (r.id, r.offset) == (1, snapshots[1][0]) and r.states == snapshots[1][1]
    producer.ack()
    runner.checkpointer.advance(task)  # commits 2, sends marker 3
    r = restore(producer.log, "in", 0)
    assert (r.id, r.offset, r.states) == (2, *snapshots[2])
    assert runner._consumer.committed == {0: snapshots[2][0]}
    # A crash now (marker 3 lost) restores checkpoint 2; snapshot 3's entries are junk.
    assert len(task.pendings) == 1 and task.owners[(0, "a")] == 2
    assert r.junk and r.next_id == 4
    producer.ack()
    runner.checkpointer.advance(task)
    r = restore(producer.log, "in", 0)
    assert (r.id, r.offset, r.states) == (3, *snapshots[3])
    assert not task.pendings and task.owners[(0, "a")] == 3
    # The next version of a goes to a new group; groups 1 and 2 hold no live key any more
    # (3 rewrote a and b): the next snapshot deletes them, and only them.
    assert set(task.groups) == {3}
    off = _feed(runner, task, _recs(["a"], 5), off)
    runner.checkpointer._snapshot(task)
    assert task.pendings[-1].written == [(0, "a")]
    assert {k.split(b"/")[3] for k in task.pendings[-1].keys} == {b"4"}
    deleted = {h.message[0] for h in producer.held if h.message and h.message[1] is None}
    assert {k.split(b"/")[3] for k in deleted} == {b"1", b"2"}
    assert all(k.startswith(b"in/0/g/") for k in deleted)


def _compact(log):
    """What log compaction keeps: the last value of each key, deletes dropped."""
    latest: dict = {}
    for k, v in log:
        latest.pop(k, None)
        latest[k] = v
    return [(k, v) for k, v in latest.items() if v is not None]


@pytest.mark.parametrize("patches", [False, True])
def test_compacted_changelog_keeps_the_latest_state_of_every_key(patches):
    """Random subsets of keys change between checkpoints, so later group entries often lack
    keys of earlier ones; after every checkpoint, the compacted changelog restores exactly
    the stage's state, and the stored states stay within a small multiple of the live ones
    (groups that fall below half live are written again and deleted). With patches (the
    river:ADWIN keys), a key's chain stays live until its next whole state, so the bound is
    on bytes: twice the live states' whole bytes for the groups, times the chains' budget."""
    import random

    from shiftwatch.deploy.kafka.checkpoint import PATCH_BUDGET

    rnd = random.Random(7)
    keys = [f"k{i}" for i in range(12)]
    runner = _runner(chunk_bytes=300, patches=patches)
    task = runner._new_task(0)
    runner._tasks[0] = task
    off = 0
    # 40 random subsets, then shrinking sets (each leaves the previous group with a single
    # live key for good: without writing such groups again they would pile up).
    plan = [rnd.sample(keys, rnd.choice([1, 2, 3, 6, 12])) for _ in range(40)]
    plan += [keys[i:] for i in range(len(keys))]
    patched = 0
    for step, chosen in enumerate(plan):
        off = _feed(runner, task, _recs(chosen, rnd.randint(len(chosen), 30), seed=step), off)
        runner.checkpointer.checkpoint([0])
        log = runner._producer.log
        if rnd.random() < 0.5:
            runner._producer.log = log = _compact(log)
        compacted = _compact(log)
        r = restore(compacted, "in", 0)
        assert (r.id, r.offset) == (step + 1, off)
        assert r.states == _states(task)
        assert not r.junk
        if not patches:
            stored = sum(g.size for gid, g in r.groups.items())
            live = sum(len(s) for s in r.states)
            assert stored <= 3 * live, (step, stored, live)
        else:
            stored = sum(len(v) for k, v in compacted if b"/g/" in k)
            live = sum(len(b) for s in r.states for b in s.values())
            assert stored <= 2 * (1 + PATCH_BUDGET) * live + 2000, (step, stored, live)
            patched += bool(r.chains)
        assert len({k.split(b"/")[3] for k, _ in compacted if b"/g/" in k}) == len(r.groups)
    assert bool(patched) == patches
    # A stage restored from the compacted changelog goes on like the original.
    other = _runner(chunk_bytes=300, patches=patches)
    t2 = other._new_task(0)
    other.checkpointer.load(t2, restore(_compact(runner._producer.log), "in", 0))
    more = _recs(keys, 40, seed=99)
    _feed(runner, task, more, off)
    _feed(other, t2, more, off)
    assert _states(t2) == _states(task)


def test_format1_changelog_is_restored_then_migrated_to_groups():
    """A changelog of per-key entries (what releases up to 0.1 wrote) restores; the first
    checkpoint after it writes every key into its group entry, even unchanged ones, and only
    once its marker is written are the per-key entries deleted."""
    from shiftwatch.deploy.kafka.changelog import LEGACY, encode_entry, encode_marker

    runner = _runner()
    task = runner._new_task(0)
    off = _feed(runner, task, _recs(["a", "b", "c"], 45), 0)
    old = []
    for op, states in enumerate(_states(task)):
        for key, state in states.items():
            old += encode_entry("in", 0, 5, op, key, 1, state, 64)
            old += encode_entry("in", 0, 4, op, key, 0, b'"an older version"', 64)
    old.append(encode_marker("in", 0, 5, off, [3, 3], task.executor.deduper.state()))
    r = restore(old, "in", 0)
    assert (r.id, r.offset, r.states) == (5, off, _states(task))
    assert set(r.owners.values()) == {LEGACY} and r.slots[(0, "a")] == 1 and not r.junk
    again = _runner()
    t2 = again._new_task(0)
    again.checkpointer.load(t2, r)
    again._tasks[0] = t2
    again._producer.log = list(old)
    off2 = _feed(again, t2, _recs(["a"], 10, seed=2), off)
    # Checkpoint 6's group entry is written, its marker not (a crash): still checkpoint 5.
    assert again.checkpointer._snapshot(t2)
    assert _key_entries(again._producer.log, len(old)) == {(i, k) for i in (0, 1)
                                                           for k in "abc"}
    cut = list(again._producer.log)
    assert restore(cut, "in", 0).states == r.states
    assert all(v is not None for _, v in cut)  # no per-key entry deleted yet
    again.checkpointer.checkpoint([0])  # marker 6, then the per-key entries are deleted
    log = again._producer.log
    assert restore(log, "in", 0).states == _states(t2)
    assert {k for k, v in log if v is None} == {k for k, _ in old if b"/k/" in k}
    compacted = _compact(log)
    assert not any(b"/k/" in k for k, _ in compacted)
    r2 = restore(compacted, "in", 0)
    assert (r2.id, r2.offset, r2.states) == (6, off2, _states(t2))
    assert set(r2.owners.values()) == {6} and not r2.dead


def _group_heads(log, since=0):
    """Checkpoint id -> the index of its group entry ({"v", "keys"}) after ``since``."""
    heads = {}
    for k, v in log[since:]:
        parts = k.decode().split("/")
        if parts[2] == "g" and parts[4] == "0" and v is not None:
            heads[int(parts[3])] = json.loads(decode_message(v)[1].partition(b"\n")[0])
    return heads


def test_patches_restore_exactly_at_every_checkpoint():
    """river:ADWIN keys are written as patches of their previous version (the values their
    locate window got since), whole again once the patches outgrow the budget; restoring
    at any marker, from the whole log or the compacted one, gives the stage's state key by
    key, and a stage restored from patches goes on exactly like the uninterrupted one."""
    import random

    from shiftwatch.deploy.kafka.changelog import checkpoints_in

    rnd = random.Random(3)
    keys = ["a", "b", "c", "d"]
    runner = _runner(operators=("river:ADWIN",), chunk_bytes=4096)
    task = runner._new_task(0)
    runner._tasks[0] = task
    off, at = 0, {}
    for step in range(60):
        chosen = rnd.sample(keys, rnd.randint(1, 4))
        off = _feed(runner, task, _recs(chosen, rnd.randint(1, 25), seed=step), off)
        runner.checkpointer.checkpoint([0])
        at[step + 1] = (off, _states(task))
        r = restore(_compact(runner._producer.log), "in", 0)
        assert (r.id, r.offset, r.states) == (step + 1, *at[step + 1])
    heads = _group_heads(runner._producer.log)
    bases = [e[3] for h in heads.values() if h["v"] == 3 for e in h["keys"]]
    assert any(b >= 0 for b in bases) and any(b == -1 for b in bases)  # patches and wholes
    assert any(h["v"] == 2 for h in list(heads.values())[:1])  # the first: all whole
    seen = 0
    for got in map(_plain, checkpoints_in(runner._producer.log, "in", 0)):
        assert (got.offset, got.states) == at[got.id]
        seen += 1
    assert seen == 60
    r = restore(_compact(runner._producer.log), "in", 0)
    assert r.chains and all(len(c) >= 2 for c in r.chains.values())
    # Restored from patches, a stage goes on like the uninterrupted one; its first version
    # of each key is whole (its chain is not continued), and the old chains then die.
    other = _runner(operators=("river:ADWIN",), chunk_bytes=4096)
    t2 = other._new_task(0)
    other.checkpointer.load(t2, r)
    other._tasks[0] = t2
    other._producer.log = _compact(runner._producer.log)
    more = _recs(keys, 40, seed=99)
    _feed(runner, task, more, off)
    off2 = _feed(other, t2, more, off)
    assert _states(t2) == _states(task)
    mark = len(other._producer.log)
    other.checkpointer.checkpoint([0])
    (head,) = _group_heads(other._producer.log, mark).values()
    assert head["v"] == 2  # all whole
    r2 = restore(_compact(other._producer.log), "in", 0)
    assert (r2.offset, r2.states) == (off2, _states(t2)) and not r2.chains
    assert set(r2.groups) == {r2.id}  # every older group died with its chains


def test_patches_off_and_old_changelogs():
    """``checkpoint.patches: false`` writes whole states only (version 2 groups, as before);
    a changelog written so restores into a stage with patches on, which goes on from it."""
    off = 0
    runner = _runner(operators=("river:ADWIN",), patches=False)
    task = runner._new_task(0)
    runner._tasks[0] = task
    for step in range(5):
        off = _feed(runner, task, _recs(["a", "b"], 10, seed=step), off)
        runner.checkpointer.checkpoint([0])
    assert {h["v"] for h in _group_heads(runner._producer.log).values()} == {2}
    r = restore(runner._producer.log, "in", 0)
    other = _runner(operators=("river:ADWIN",))
    t2 = other._new_task(0)
    other.checkpointer.load(t2, r)
    other._tasks[0] = t2
    other._producer.log = list(runner._producer.log)
    for step in range(5):
        off = _feed(other, t2, _recs(["a", "b"], 10, seed=10 + step), off)
        other.checkpointer.checkpoint([0])
        assert restore(_compact(other._producer.log), "in", 0).states == _states(t2)
    assert 3 in {h["v"] for h in _group_heads(other._producer.log).values()}


def test_a_patch_without_its_base_is_refused():
    runner = _runner(operators=("river:ADWIN",))
    task = runner._new_task(0)
    runner._tasks[0] = task
    off = _feed(runner, task, _recs(["a"], 10), 0)
    runner.checkpointer.checkpoint([0])
    _feed(runner, task, _recs(["a"], 5, seed=1), off)
    runner.checkpointer.checkpoint([0])
    assert _group_heads(runner._producer.log)[2]["keys"][0][3] == 1  # a patch of 1
    log = [(k, v) for k, v in runner._producer.log if not k.startswith(b"in/0/g/1/")]
    with pytest.raises(ValueError, match="patch of key 'a'.*checkpoint 1"):
        restore(log, "in", 0)


@pytest.mark.parametrize("restore_mode", ["lazy", "eager"])
def test_a_shrunk_group_of_keys_never_built_is_rewritten_from_their_bytes(restore_mode):
    keys = list("abcdefghij")
    runner = _runner()
    task = runner._new_task(0)
    runner._tasks[0] = task
    off = _feed(runner, task, _recs(keys, 100), 0)
    runner.checkpointer.checkpoint([0])
    other = _runner()
    other.checkpointer.settings["restore"] = restore_mode
    t2 = other._new_task(0)
    other._tasks[0] = t2
    other.checkpointer.load(t2, restore(runner._producer.log, "in", 0))
    lazy = restore_mode == "lazy"
    assert [op.deferred_keys for op in t2.executor.operators] == [10 * lazy] * 2
    # six keys move to the next group: fewer than half of group 1's states are live, so at
    # the checkpoint after, its four others are written again (from their restored bytes,
    # never built) and it is deleted
    more = _recs(keys[:6], 30, seed=1)
    _feed(runner, task, more, off)
    off = _feed(other, t2, more, off)
    other.checkpointer.checkpoint([0])
    assert 1 in t2.shrunk
    more = _recs(["a"], 5, seed=2)
    _feed(runner, task, more, off)
    off = _feed(other, t2, more, off)
    mark = len(other._producer.log)
    other.checkpointer.checkpoint([0])
    assert [op.deferred_keys for op in t2.executor.operators] == [4 * lazy] * 2
    assert _key_entries(other._producer.log, mark) == {(i, k) for i in (0, 1) for k in "aghij"}
    r = restore(other._producer.log, "in", 0)
    assert r.offset == off and 1 not in r.groups
    assert r.states == _states(task)
    third = _runner()
    t3 = third._new_task(0)
    third.checkpointer.load(t3, r)
    assert _states(t3) == _states(task)
