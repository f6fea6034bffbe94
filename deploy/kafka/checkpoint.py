"""Checkpointing a Kafka stage's partitions: changelog entries, markers, offset commits.

:class:`Checkpointer` owns everything between "the state of partition P reflects the input
below offset O" and "a restart resumes from O with that state" (format in
:mod:`shiftwatch.deploy.kafka.changelog`):

* ``at-least-once``: a checkpoint snapshots the changed keys and sends their group entry at once,
  without waiting; its marker is sent only once every output, dead letter and entry sent
  before the snapshot is acknowledged (checked between batches, so the stage never stalls on
  a flush), and the offset is committed once the marker is acknowledged. Up to three
  checkpoints per partition are in flight (a fourth first waits for the oldest). On revoke
  and shutdown the checkpoint is synchronous (flush, marker, flush, commit).
* ``exactly-once``: outputs, dead letters, changelog entries, the markers and the consumed
  offsets go into one transaction committed at each checkpoint.

:class:`PartitionTask` is one assigned input partition: its
:class:`~shiftwatch.deploy.executor.StageExecutor` (operators and de-duplication state) and
its checkpoint bookkeeping.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.kafka.changelog import (
    DELETED,
    WHOLE,
    Group,
    Restored,
    encode_group,
    encode_marker,
)
from shiftwatch.operators.keyed import DeferredStateError, Keyed
from shiftwatch.operators.state_codec import compress_state, dumps_state, encode_state

try:
    from orjson import dumps as _fast_dumps
except ImportError:  # pragma: no cover - orjson is a dependency
    _fast_dumps = None

__all__ = ["Checkpointer", "PartitionTask", "StateLoadError"]

log = logging.getLogger("shiftwatch.kafka")

SEND_TIMEOUT_S = 120.0  # a blocking checkpoint waits this long for an acknowledgement
#: Messages above this many bytes are tracked with their input offset (see ``track``).
LARGE_MESSAGE = 64 * 1024
# At-least-once checkpoints of one partition in flight (group sent, marker not yet
# acknowledged).
_IN_FLIGHT = 3
#: A key whose operator offers ``state_patch`` is written as a patch of its previous version
#: until the patches since its last whole state add up to this many times that state's size,
#: or there are :data:`MAX_PATCHES` of them; then whole again (a chain costs restore time
#: and changelog space: see :mod:`~shiftwatch.deploy.kafka.changelog`).
PATCH_BUDGET = 2.0
MAX_PATCHES = 32


#: What a group answers an offset commit of a member that is leaving while others join or
#: leave: the commit is refused, the checkpoint's markers are already durable.
_COMMIT_REFUSED = ("RebalanceInProgressError", "CommitFailedError", "IllegalGenerationError",
                   "UnknownMemberIdError")


class OffsetsNotCommitted(Exception):
    """The final checkpoint is written (its markers are durable: the partitions' next owner
    resumes from them, as restoring reads the markers) but the group refused its offset
    commit, e.g. while another member left at the same moment; only the group's committed
    offsets, what lag monitoring sees, are behind until that owner commits."""


class StateLoadError(ValueError):
    """A restored key's state could not be loaded into its operator."""

    def __init__(self, operator: int, key: str, reason: str):
        super().__init__(f"operator {operator}, key {key!r}: {reason}")
        self.operator, self.key, self.reason = operator, key, reason


@dataclass
class _Base:
    """A key's newest written version, which its next patch applies to."""

    id: int          # the checkpoint that wrote it
    obj: Any         # the key's operator (a key restarted by quarantine gets a new one)
    token: Any       # its patch_token() then
    whole: int       # bytes of the key's last whole state
    patches: int = 0  # patches written since it
    patch_bytes: int = 0


@dataclass
class _Pending:
    """A checkpoint whose group entry is sent and whose marker is not acknowledged yet."""

    id: int
    offset: int
    marker: tuple[bytes, bytes]
    futures: list                       # outputs, dead letters, entries sent before it
    written: list[tuple[int, str]]      # the (op, key) states in its group entry
    patched: set = field(default_factory=set)  # those of them written as patches
    deleted: set = field(default_factory=set)  # those of them written as deletions
    keys: list[bytes] = field(default_factory=list)  # the group entry's message keys
    done: int = 0                       # futures[:done] are acknowledged
    marker_future: Any = None


@dataclass
class PartitionTask:
    """One assigned input partition: its executor and its checkpoint bookkeeping."""

    partition: int
    executor: StageExecutor
    next_offset: int | None = None       # next input offset the state has not seen
    checkpoint_id: int = 0               # id of the last checkpoint snapshot
    restored_id: int | None = None       # the checkpoint restored on assignment
    #: (partition, changelog message key) -> offset, of the changelog read that restored it
    changelog_offsets: dict = field(default_factory=dict)
    checkpointed_offset: int | None = None
    since_checkpoint: int = 0
    dirty: list[set] = field(default_factory=list)   # per operator: keys changed since
    # (op, key) -> id of the committed group holding its newest committed state
    owners: dict[tuple[int, str], int] = field(default_factory=dict)
    # (op, key) -> ids of the committed groups of its chain (its last whole state first),
    # for the keys whose newest committed version is a patch
    chains: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    # (op, key) -> _Base: its newest written version, for the next patch
    bases: dict[tuple[int, str], _Base] = field(default_factory=dict)
    # (op, key) -> (id of the committed group holding its deletion, ids of the older groups
    # still holding a version of it): an expired key's deletion is live in its group until
    # those are deleted (else restoring would find the older version again)
    erasures: dict[tuple[int, str], tuple[int, set]] = field(default_factory=dict)
    waits: dict[int, set] = field(default_factory=dict)  # group id -> erasures waiting on it
    groups: dict[int, Group] = field(default_factory=dict)  # committed groups with live keys
    shrunk: set[int] = field(default_factory=set)    # groups whose live keys to write again
    junk: list[bytes] = field(default_factory=list)  # entries of an unfinished checkpoint
    dead: list[bytes] = field(default_factory=list)  # entries of groups with no live key
    futures: list = field(default_factory=list)      # sends since the last snapshot
    pendings: deque[_Pending] = field(default_factory=deque)  # oldest first
    # id(future) -> (future, what, input offset) of large outputs and dead letters in flight:
    # if the broker refuses one (over its message limit), it becomes a dead letter instead
    large: dict[int, tuple[Any, str, int]] = field(default_factory=dict)


def _clock(executor: Any) -> float | None:
    """The executor's event clock for key expiry (None without expiry or before any ts)."""
    expiry = getattr(executor, "expiry", None)
    return expiry.state()["clock"] if expiry is not None else None


def state_bytes(state: Any) -> bytes:
    """``state`` as changelog bytes: :func:`~shiftwatch.operators.state_codec.encode_state`
    written by orjson (several times faster than
    ``json.dumps``), read back by :func:`~shiftwatch.operators.state_codec.loads_state` (any
    JSON parser gives the same values: floats are written shortest-exact). Falls back to
    :func:`~shiftwatch.operators.state_codec.dumps_state` for what orjson refuses (integers
    beyond 64 bits, lone surrogates).

    >>> import numpy as np
    >>> from shiftwatch.operators.state_codec import loads_state
    >>> s = {"n": 3, "x": np.array([0.1, 1e-300]), "t": (1.5, None)}
    >>> back = loads_state(state_bytes(s))
    >>> back["n"], back["x"].tolist(), back["t"]
    (3, [0.1, 1e-300], (1.5, None))
    """
    return _encoded_bytes(encode_state(state), lambda: state)


def key_state_bytes(kop: Any) -> bytes:
    """A key's changelog bytes: ``state_bytes(kop.state_dict())``, or the same state from
    ``kop.encoded_state()`` when the key has it (a fleet's slot: parts encoded once)."""
    encoded = getattr(kop, "encoded_state", None)
    if encoded is None:
        return state_bytes(kop.state_dict())
    return _encoded_bytes(encoded(), kop.state_dict)


def _encoded_bytes(enc: Any, state: Callable[[], Any]) -> bytes:
    # orjson on the encoded state; dumps_state(state()) for what orjson refuses
    if _fast_dumps is not None:
        try:
            return _fast_dumps(enc)
        except TypeError:  # orjson.JSONEncodeError: an int over 64 bits, a lone surrogate
            pass
    return dumps_state(state())


class Checkpointer:
    """Writes the checkpoints of a stage's partitions and commits their offsets.

    Parameters
    ----------
    topic
        The stage's input topic (whose offsets are committed).
    changelog
        The changelog topic (co-partitioned with the input).
    settings
        The stage's ``checkpoint`` section (``every_records``, ``every_seconds``,
        ``chunk_bytes``).
    eos
        Exactly-once: one transaction per checkpoint.
    tasks
        The runner's live ``partition -> PartitionTask`` map (shared, not copied).
    summary
        Counters: ``checkpoints``, ``last_checkpoint_unix``, ``last_checkpoint_offsets``.
    stage_name
        For log lines.

    The producer and consumer are set by the runner (:attr:`producer`, :attr:`consumer`)
    once its clients exist.
    """

    def __init__(self, topic: str, changelog: str, settings: dict, eos: bool,
                 tasks: dict[int, PartitionTask], summary: RunSummary, stage_name: str):
        self.topic = topic
        self.changelog = changelog
        self.settings = settings
        self.eos = eos
        self.tasks = tasks
        self.summary = summary
        self.stage_name = stage_name
        self.producer: Any = None
        self.consumer: Any = None
        self.in_txn = False
        #: commit offsets without waiting (inside a rebalance callback, which runs on the
        #: consumer's I/O thread: a blocking consumer call there cannot complete). Restoring
        #: reads the markers, so a lost asynchronous commit only delays the group's lag view.
        self.async_commits = False
        #: during the final checkpoint: the offset commits the group refused (see
        #: :class:`OffsetsNotCommitted`), the other partitions' checkpoints going on
        self._refused_commits: list[BaseException] | None = None
        self.metrics: Any = None  # told how long each checkpoint write took (optional)
        #: ``(task, future, what, offset) -> future or None``: the runner's handler of a large
        #: message the broker refused (it sends a dead letter instead and returns its future)
        self.on_refused: Callable[..., Any] | None = None
        #: the operators' parameters, written into every marker (checked on restore)
        self.params: list = []
        self._last_checkpoint_time = time.monotonic()

    def begin(self) -> None:
        """Open a transaction if none is open (exactly-once, before a batch's sends)."""
        if self.eos and not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True

    def track(self, task: PartitionTask, future: Any, size: int = 0, what: str = "output",
              offset: int | None = None) -> None:
        """Remember a send the next checkpoint's marker must wait for (at-least-once).

        A message of ``size`` bytes over :data:`LARGE_MESSAGE` also remembers ``what`` it is
        and the input ``offset`` it came from, so that a broker refusing it for its size
        (:attr:`on_refused`) costs that record only."""
        task.futures.append(future)
        if size > LARGE_MESSAGE and offset is not None:
            task.large[id(future)] = (future, what, offset)
        if len(task.futures) > 20_000:  # long intervals: keep what is unacknowledged or failed
            task.futures = [f for f in task.futures if not f.is_done or f.failed()]

    def after_batch(self) -> None:
        """Between batches: move pending checkpoints on (never waits), checkpoint what is
        due."""
        if not self.eos:
            for task in self.tasks.values():
                if task.pendings:
                    self.advance(task)
        self.maybe_checkpoint()

    def maybe_checkpoint(self) -> None:
        cp = self.settings
        timed = time.monotonic() - self._last_checkpoint_time >= cp["every_seconds"]
        due = [p for p, t in self.tasks.items()
               if t.since_checkpoint >= cp["every_records"] or (timed and t.since_checkpoint)]
        if self.eos:
            if due or (timed and self.in_txn):
                self.checkpoint(list(self.tasks))  # one transaction covers every partition
        else:
            for p in due:
                t0 = time.monotonic()
                task = self.tasks[p]
                if len(task.pendings) >= _IN_FLIGHT:
                    self.advance(task, until=_IN_FLIGHT - 1)
                wrote = self._snapshot(task)
                self.advance(task)
                if wrote and self.metrics is not None:
                    self.metrics.checkpoint(time.monotonic() - t0)
        if timed:
            self._last_checkpoint_time = time.monotonic()

    def _snapshot(self, task: PartitionTask) -> bool:
        """Send one group entry with the states of the keys changed since the last checkpoint
        (and of the live keys of groups that fell below half live, see
        :mod:`~shiftwatch.deploy.kafka.changelog`), after tombstones of an unfinished
        checkpoint's entries and of dead groups; queue the marker that commits them on
        ``task.pendings``. Returns False if there is nothing new to checkpoint. May raise
        kafka-python errors (``send``)."""
        if task.next_offset is None or (task.next_offset == task.checkpointed_offset
                                        and not self.eos and not any(task.dirty)):
            return False  # (dirty with no new input: keys that expired while idle)
        assert len(task.pendings) < _IN_FLIGHT
        topic, p, changelog = self.topic, task.partition, self.changelog
        send = self.producer.send
        futures = task.futures
        for key in (*task.junk, *task.dead):  # junk before a marker could cover its ids
            futures.append(send(changelog, key=key, value=None, partition=p))
        task.junk = []
        task.dead = []
        task.checkpoint_id += 1
        cid = task.checkpoint_id
        ops = task.executor.operators
        states: list[tuple[int, str, bytes, int]] = []
        key_name = Keyed.key_name
        bases = task.bases
        # the live keys of groups to delete are written whole (a patch keeps its chain live)
        rewrite = {ref for gid in task.shrunk if gid in task.groups
                   for ref in task.groups[gid].live}
        if not self.settings.get("patches", True):
            bases = {}  # every key whole (nothing is remembered for a patch)
        pending = None  # the keys written by checkpoints not committed yet (built if needed)
        for i, op in enumerate(ops):
            existing = op.existing
            for key in task.dirty[i]:
                kop = existing(key)
                if kop is not None:
                    ref = (i, key_name(key))
                    states.append((*ref, *self._key_version(kop, ref, bases, cid,
                                                            ref in rewrite)))
                    continue
                # None: only bad records (the key was never kept), or the key expired
                ref = (i, key_name(key))
                if pending is None:
                    pending = {r for pend in task.pendings for r in pend.written}
                if ref in task.owners or ref in pending:
                    bases.pop(ref, None)
                    states.append((*ref, b"", DELETED))
            task.dirty[i] = set()
        if task.shrunk:
            seen = {(i, name) for i, name, _, _ in states}
            for gid in sorted(task.shrunk):
                group = task.groups.get(gid)
                for ref in sorted(group.live) if group is not None else ():
                    if ref not in seen and ref not in task.erasures:
                        key = Keyed.key_from_name(ref[1])
                        data = ops[ref[0]].deferred_state(key)
                        if data is not None:  # restored, not built: its bytes as they are
                            if isinstance(data, str):
                                data = data.encode()
                            bases.pop(ref, None)
                            states.append((*ref, data, WHOLE))
                            seen.add(ref)
                            continue
                        kop = ops[ref[0]].existing(key)
                        if kop is not None:
                            states.append((*ref, *self._key_version(kop, ref, bases, cid,
                                                                    True)))
                            seen.add(ref)
            task.shrunk = set()
        if states and self.settings.get("compress", True):  # zlib, self-describing
            states = [(i, name, compress_state(data), base) for i, name, data, base in states]
        keys: list[bytes] = []
        if states:
            for k, v in encode_group(topic, p, cid, states, self.settings["chunk_bytes"]):
                futures.append(send(changelog, key=k, value=v, partition=p))
                keys.append(k)
        task.pendings.append(_Pending(
            id=cid, offset=task.next_offset, futures=futures,
            written=[(i, name) for i, name, _, _ in states], keys=keys,
            patched={(i, name) for i, name, _, base in states if base >= 0},
            deleted={(i, name) for i, name, _, base in states if base == DELETED},
            marker=encode_marker(topic, p, cid, task.next_offset,
                                 [len(op) for op in ops], task.executor.deduper.state(),
                                 params=self.params, clock=_clock(task.executor))))
        task.futures = []
        task.checkpointed_offset = task.next_offset
        task.since_checkpoint = 0
        return True

    @staticmethod
    def _key_version(kop: Any, ref: tuple[int, str], bases: dict, cid: int, whole: bool
                     ) -> tuple[bytes, int]:
        """A key's bytes for checkpoint ``cid`` and what they patch (``WHOLE``: nothing): a
        patch of its previous version when its operator offers one and the key's chain
        has room, else its whole state. Remembers this version for the next patch."""
        patch_of = getattr(kop, "state_patch", None)
        base = bases.get(ref)
        if patch_of is None:
            return key_state_bytes(kop), WHOLE
        if not whole and base is not None and base.obj is kop and base.patches < MAX_PATCHES:
            patch, token = patch_of(base.token)
            if patch is not None:
                data = state_bytes(patch)
                if base.patch_bytes + len(data) <= PATCH_BUDGET * base.whole:
                    bases[ref] = _Base(cid, kop, token, base.whole, base.patches + 1,
                                       base.patch_bytes + len(data))
                    return data, base.id
        state, token = kop.state_with_token()
        data = state_bytes(state)
        bases[ref] = _Base(cid, kop, token, len(data))
        return data, WHOLE

    @staticmethod
    def _committed(task: PartitionTask, pend: _Pending) -> None:
        """Checkpoint ``pend``'s marker is durable: its group now holds the committed state
        of the keys it wrote; groups left with no live key are queued for deletion, groups
        below half live for writing their live keys again."""
        if not pend.written:
            return
        owners, groups, chains = task.owners, task.groups, task.chains
        touched = set()
        patched, deleted = pend.patched, pend.deleted
        live = set(pend.written)
        for ref in pend.written:
            old = owners.get(ref)
            if ref in patched and old is not None:  # its chain grows: all of it stays live
                chains[ref] = [*chains.get(ref, (old,)), pend.id]
                owners[ref] = pend.id
                continue
            is_del = ref in deleted
            erased = None if is_del else task.erasures.pop(ref, None)
            if erased is not None:  # a newer version: the key's deletion is moot
                Checkpointer._unwait(task, ref, erased, touched)
            olds = chains.pop(ref, ()) or ((old,) if old is not None else ())
            for gid in olds:
                group = groups.get(gid)
                if group is not None:
                    group.live.discard(ref)
                    touched.add(gid)
            if is_del:
                owners.pop(ref, None)
                waiting = {g for g in olds if g in groups}
                if waiting and ref not in task.erasures:  # (else an earlier deletion holds)
                    task.erasures[ref] = (pend.id, waiting)
                    for g in waiting:
                        task.waits.setdefault(g, set()).add(ref)
                else:
                    live.discard(ref)
                continue
            owners[ref] = pend.id
        if pend.written:
            groups[pend.id] = Group(size=len(pend.written), live=live, keys=pend.keys)
            if not live:
                task.dead.extend(groups.pop(pend.id).keys)
        Checkpointer._settle(task, touched)

    @staticmethod
    def _settle(task: PartitionTask, touched: set) -> None:
        """Groups ``touched`` lost live keys: those left with none are queued for deletion
        (releasing the deletions that waited on them, which may empty more groups), those
        below half live for writing their live keys again."""
        groups = task.groups
        touched = set(touched)
        while touched:
            gid = min(touched)  # older first: an old group's tombstones before its erasure's
            touched.discard(gid)
            group = groups.get(gid)
            if group is None:
                continue
            if not group.live:
                task.dead.extend(groups.pop(gid).keys)
                task.shrunk.discard(gid)
                for ref in task.waits.pop(gid, ()):
                    erased = task.erasures.get(ref)
                    if erased is None:
                        continue
                    erased[1].discard(gid)
                    if not erased[1]:
                        del task.erasures[ref]
                        holder = groups.get(erased[0])
                        if holder is not None:
                            holder.live.discard(ref)
                            touched.add(erased[0])
            elif group.to_rewrite(gid):
                task.shrunk.add(gid)

    @staticmethod
    def _unwait(task: PartitionTask, ref: tuple, erased: tuple, touched: set) -> None:
        """Drop the deletion of ``ref`` (a newer version of the key is committed)."""
        gid, waiting = erased
        for g in waiting:
            refs = task.waits.get(g)
            if refs is not None:
                refs.discard(ref)
                if not refs:
                    del task.waits[g]
        holder = task.groups.get(gid)
        if holder is not None:
            holder.live.discard(ref)
            touched.add(gid)

    def advance(self, task: PartitionTask, until: int | None = None) -> None:
        """Move the pending checkpoints of ``task`` on, oldest first (at-least-once): send a
        checkpoint's marker once everything sent before its snapshot is acknowledged, commit
        its offset and make its group hold its keys' committed states once the marker is.

        With ``until=None`` it only looks at what is already acknowledged (called between
        batches, so processing never waits); otherwise it waits (flushing only if something
        is still unacknowledged) until at most ``until`` checkpoints are pending. A failed
        send raises its kafka-python error: the stage stops and a restart resumes from the
        last marker."""
        pendings = task.pendings
        while pendings:
            block = until is not None and len(pendings) > until
            pend = pendings[0]
            if pend.marker_future is None:
                futs = pend.futures
                i = pend.done
                while i < len(futs):
                    f = futs[i]
                    if not f.is_done:
                        if not block:
                            pend.done = i
                            return
                        self.producer.flush()  # send now rather than after linger_ms
                        f.get(timeout=SEND_TIMEOUT_S)
                    if f.failed():
                        self._refused(task, f, futs)
                    i += 1
                pend.done = i
                key, value = pend.marker
                pend.marker_future = self.producer.send(self.changelog, key=key, value=value,
                                                         partition=task.partition)
            if not pend.marker_future.is_done:
                if not block:
                    return
                self.producer.flush()
                pend.marker_future.get(timeout=SEND_TIMEOUT_S)
            if pend.marker_future.failed():
                raise pend.marker_future.exception
            self._commit_offsets({task.partition: pend.offset},
                                 sync=block and not self.async_commits)
            self._committed(task, pend)
            pendings.popleft()
            if not pendings:
                task.large = {k: v for k, v in task.large.items() if not v[0].is_done}

    def _refused(self, task: PartitionTask, f: Any, futs: list) -> None:
        """A send failed: if it was a large output or dead letter the broker refused for its
        size, its dead letter goes in its place (and is waited for like it); otherwise
        raise the send's error (the stage stops; a restart resumes from the last marker)."""
        from kafka.errors import (
            InvalidRecordError,
            MessageSizeTooLargeError,
            RecordListTooLargeError,
        )

        entry = task.large.pop(id(f), None)
        if (entry is None or self.on_refused is None or not isinstance(
                f.exception, (MessageSizeTooLargeError, RecordListTooLargeError,
                              InvalidRecordError))):
            raise f.exception
        replacement = self.on_refused(task, f, entry[1], entry[2])
        if replacement is None:
            raise f.exception
        futs.append(replacement)

    def _commit_offsets(self, offsets: dict[int, int], sync: bool = True) -> None:
        """Commit consumed offsets (what lag monitoring sees; restoring uses the markers, so
        a lost asynchronous commit only delays the group's view of progress)."""
        from kafka import OffsetAndMetadata, TopicPartition

        commit = {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                  for p, o in offsets.items()}
        if sync:
            self._commit_sync(commit)
        else:
            self.consumer.commit_async(commit, callback=self._commit_done)
        self._checkpointed(offsets)

    def _commit_done(self, offsets, result) -> None:
        if isinstance(result, Exception):
            log.warning("stage %s: offset commit failed (the next one repeats it): %s",
                        self.stage_name, result)

    def _checkpointed(self, offsets: dict[int, int]) -> None:
        self.summary.checkpoints += 1
        self.summary.last_checkpoint_unix = time.time()
        self.summary.last_checkpoint_offsets.update({str(p): o for p, o in offsets.items()})

    def checkpoint(self, partitions: list[int], final: bool = False) -> None:
        """Checkpoint ``partitions`` now and wait until it is committed (revoke, shutdown,
        and every exactly-once checkpoint: entries, markers and offsets in one transaction).

        May raise kafka-python errors; the previous checkpoint then still holds. ``final``
        (at-least-once, on shutdown): an offset commit the group refuses (a rebalance under
        way) does not stop the checkpoints of the other partitions, and is raised at the end
        as :class:`OffsetsNotCommitted` (the markers are written: nothing is processed
        again)."""
        t0 = time.monotonic()
        tasks = [self.tasks[p] for p in partitions if p in self.tasks]
        self._refused_commits = [] if final and not self.eos else None
        try:
            self._checkpoint_now(tasks)
            refused = self._refused_commits
            if refused:
                exc = refused[-1]
                raise OffsetsNotCommitted(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._refused_commits = None
            if tasks and self.metrics is not None:
                self.metrics.checkpoint(time.monotonic() - t0)

    def _commit_sync(self, offsets: dict) -> None:
        """``consumer.commit(offsets)``; in a final checkpoint, a refusal is noted instead."""
        if self._refused_commits is None:
            self.consumer.commit(offsets)
            return
        try:
            self.consumer.commit(offsets)
        except Exception as exc:
            if type(exc).__name__ not in _COMMIT_REFUSED:
                raise
            self._refused_commits.append(exc)

    def _checkpoint_now(self, tasks: list[PartitionTask]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        if not self.eos:
            for task in tasks:
                if len(task.pendings) >= _IN_FLIGHT:
                    self.advance(task, until=_IN_FLIGHT - 1)
                self._snapshot(task)
                self.advance(task, until=0)
                for key in task.dead:  # committed: delete dead groups now, not next time
                    self.producer.send(self.changelog, key=key, value=None,
                                       partition=task.partition)
                task.dead = []
            done = {t.partition: t.checkpointed_offset for t in tasks
                    if t.checkpointed_offset is not None}
            if done:  # synchronously, after any asynchronous commit of older offsets
                offsets = {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                           for p, o in done.items()}
                if self.async_commits:
                    self.consumer.commit_async(offsets, callback=self._commit_done)
                else:
                    self._commit_sync(offsets)
            return
        if not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True
        done = []
        for task in tasks:
            if self._snapshot(task):
                key, value = task.pendings[-1].marker
                self.producer.send(self.changelog, key=key, value=value,
                                    partition=task.partition)
                done.append(task)
        offsets = {TopicPartition(self.topic, t.partition):
                   OffsetAndMetadata(t.pendings[-1].offset, "", -1) for t in done}
        if offsets:
            self.producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
        self.producer.commit_transaction()
        self.in_txn = False
        for task in done:
            self._committed(task, task.pendings.pop())
            task.futures = []
        if done:
            self._checkpointed({t.partition: t.checkpointed_offset for t in done})

    def abort(self) -> None:
        try:
            self.producer.abort_transaction()
        finally:
            self.in_txn = False

    def load(self, task: PartitionTask, cp: Restored) -> None:
        """Put a restored checkpoint into a fresh task.

        With ``checkpoint.restore: lazy`` (the default) each key's bytes are handed to its
        operator unread (:meth:`Keyed.load_encoded`): a key is decoded and built on its first
        record, and a state that cannot be loaded is found there (the stage stops naming it,
        see ``StageRunner._unloadable``). With ``eager`` every key is built here. Raises
        :class:`StateLoadError` (a ``ValueError``) naming the operator and key of a state that
        cannot be loaded, ``ValueError`` if the checkpoint's operators are not the stage's.
        """
        ops = task.executor.operators
        if len(cp.states) != len(ops):
            raise ValueError(f"changelog {self.changelog}: checkpoint {cp.id} of partition "
                             f"{task.partition} has {len(cp.states)} operators, the stage "
                             f"{len(ops)}")
        # the bookkeeping first: a state that cannot be loaded is then found in it
        task.executor.deduper.load(cp.upstream)
        task.owners = dict(cp.owners)
        task.chains = {ref: list(c) for ref, c in cp.chains.items()}
        task.bases = {}  # each key's next version is whole (its chain is not continued)
        task.groups = {gid: Group(g.size, set(g.live), list(g.keys))
                       for gid, g in cp.groups.items()}
        task.shrunk = {gid for gid, g in task.groups.items()
                       if g.to_rewrite(gid)}
        task.erasures, task.waits = {}, {}
        released = set()
        for ref, (gid, older) in cp.erasures.items():
            waiting = {g for g in older if g in task.groups}
            if waiting:
                task.erasures[ref] = (gid, waiting)
                for g in waiting:
                    task.waits.setdefault(g, set()).add(ref)
            elif gid in task.groups:  # the older groups are deleted already (cp.dead)
                task.groups[gid].live.discard(ref)
                released.add(gid)
        task.junk = list(cp.junk)
        task.dead = list(cp.dead)
        self._settle(task, released)
        task.next_offset = task.checkpointed_offset = cp.offset
        task.checkpoint_id = cp.next_id - 1
        task.restored_id = cp.id
        lazy = self.settings.get("restore", "lazy") == "lazy"
        for i, (op, states) in enumerate(zip(ops, cp.states, strict=True)):
            # each key's operator is built on its first record (Keyed.load_encoded), or
            # (eager) every one now, by the same code
            try:
                op.load_encoded(states)
                if not lazy:
                    op.load_deferred()
            except DeferredStateError as exc:
                raise StateLoadError(i, exc.key, exc.reason) from None
        expiry = task.executor.expiry
        if expiry is not None:  # restored keys count as seen at the checkpoint's clock
            expiry.restored(dict.fromkeys(k for op in ops for k in op.keys), cp.clock)

