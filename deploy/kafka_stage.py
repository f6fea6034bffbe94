"""The Kafka stage runner: one pipeline stage as a member of a Kafka consumer group.

A stage consumes its input topic in micro-batches, groups each batch by partition and key,
runs its operators (one :class:`~shiftwatch.operators.base.Keyed` chain per input partition, so
state moves with partitions), and produces every output to the output topic keyed like its input,
with the input's coordinates ``{"input": {"topic", "partition", "offset", "n"}}``.

State: every ``checkpoint.every_records`` records of a partition, every
``checkpoint.every_seconds`` seconds, on revoke and on shutdown, the stage checkpoints the
partition incrementally to ``<pipeline>.<stage>.changelog`` (see
:mod:`shiftwatch.deploy.kafka_changelog`): the state of each key that changed since the previous
checkpoint, then a commit marker with the next input offset, then it commits the offset. On
assignment the stage restores each partition as of its newest marker and seeks to its offset,
so the state never counts a record twice nor misses one.

* ``at-least-once``: a checkpoint snapshots the changed keys and sends their entries at once,
  without waiting; its marker is sent only once every output, dead letter and entry sent
  before the snapshot is acknowledged (checked between batches, so the stage never stalls on
  a flush), and the offset is committed once the marker is acknowledged. Up to three
  checkpoints per partition are in flight (a fourth first waits for the oldest). On
  revoke and shutdown the checkpoint is synchronous (flush, marker, flush, commit). A crash
  replays (and re-produces) at most the records after the last marker; the outputs carry
  coordinates so duplicates can be dropped (:mod:`shiftwatch.deploy.kafka_dedupe`, which a
  downstream stage applies to its input by itself).
* ``exactly-once``: a transactional producer; outputs, dead letters, changelog entries, the
  markers and the consumed offsets go into one transaction committed at each checkpoint;
  consumers read ``read_committed``. A crash aborts the open transaction and the stage
  resumes from the last committed marker.

Bad input (not JSON, not an object, a missing field, a value an operator rejects) goes to
``<pipeline>.<stage>.dlq`` with the original bytes, the reason and its coordinates.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shiftwatch.deploy.kafka_changelog import (
    ChangelogReader,
    Restored,
    encode_entry,
    encode_marker,
)
from shiftwatch.deploy.kafka_dedupe import Deduper
from shiftwatch.deploy.pipeline import PipelineConfig, PipelineError, StageConfig
from shiftwatch.operators.base import (
    BadInput,
    DeadLetter,
    Keyed,
    dumps_state,
    get_field,
    loads_state,
)

__all__ = ["StageRunner", "StageStats", "run_pipeline", "encode_output", "decode_input"]

log = logging.getLogger("shiftwatch.kafka")

_SEND_TIMEOUT_S = 120.0  # a blocking checkpoint waits this long for an acknowledgement
# At-least-once checkpoints of one partition in flight (entries sent, marker not yet
# acknowledged); a key's versions then use up to _IN_FLIGHT + 1 changelog slots.
_IN_FLIGHT = 3


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _default(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default)
_DECODER = json.JSONDecoder()


def encode_output(record: Mapping) -> bytes:
    """JSON bytes of an output record; NaN and infinities become null (strict JSON).

    >>> encode_output({"key": "a", "statistic": float("nan")})
    b'{"key":"a","statistic":null}'
    """
    try:
        return _ENCODER.encode(record).encode()
    except ValueError:
        return json.dumps(_finite(json.loads(json.dumps(record, default=_default))),
                          separators=(",", ":"), allow_nan=False).encode()


def decode_input(value: bytes | None, key: bytes | None, value_field: str = "value",
                 key_field: str | None = None) -> dict:
    """The record a message holds, or raise :class:`BadInput` saying why not.

    ``value_field`` names the field copied to ``value``; ``key_field`` the field used as the
    record key (default: the record's ``key``, else the message key).

    >>> decode_input(b'{"temp": 3.5, "sensor": "s1"}', None, "temp", "sensor")
    {'temp': 3.5, 'sensor': 's1', 'value': 3.5, 'key': 's1'}
    >>> decode_input(b'[1, 2]', None)
    Traceback (most recent call last):
    ...
    shiftwatch.operators.base.BadInput: message is a JSON list, expected an object
    """
    if value is None:
        raise BadInput("message has no value (a tombstone)")
    try:
        record = _DECODER.decode(value.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput("message is not UTF-8 text") from None
    except ValueError as exc:
        raise BadInput(f"invalid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(record, dict):
        kind = {list: "list", str: "string"}.get(type(record), type(record).__name__)
        raise BadInput(f"message is a JSON {kind}, expected an object")
    if value_field != "value":
        record["value"] = get_field(record, value_field)
    if key_field is not None:
        record["key"] = get_field(record, key_field)
    elif "key" not in record and key is not None:
        record["key"] = key.decode("utf-8", errors="replace")
    return record


# --------------------------------------------------------------------------------------
# Per-partition state
# --------------------------------------------------------------------------------------


@dataclass
class _Pending:
    """A checkpoint whose entries are sent and whose marker is not acknowledged yet."""

    id: int
    offset: int
    marker: tuple[bytes, bytes]
    futures: list                       # outputs, dead letters, entries sent before it
    flips: dict[tuple[int, str], int]   # (op, key) -> slot written, committed with the marker
    done: int = 0                       # futures[:done] are acknowledged
    marker_future: Any = None


@dataclass
class _PartitionTask:
    partition: int
    ops: list[Keyed]
    deduper: Deduper
    next_offset: int | None = None       # next input offset the state has not seen
    checkpoint_id: int = 0               # id of the last checkpoint snapshot
    checkpointed_offset: int | None = None
    since_checkpoint: int = 0
    dirty: list[set] = field(default_factory=list)   # per operator: keys changed since
    slots: dict[tuple[int, str], int] = field(default_factory=dict)  # committed slots
    junk: list[bytes] = field(default_factory=list)  # entries of an unfinished checkpoint
    futures: list = field(default_factory=list)      # sends since the last snapshot
    pendings: deque[_Pending] = field(default_factory=deque)  # oldest first


@dataclass
class StageStats:
    """Counters of a running stage (also what the metrics file holds)."""

    stage: str
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    duplicates_dropped: int = 0
    checkpoints: int = 0
    last_checkpoint_unix: float | None = None
    last_checkpoint_offsets: dict = field(default_factory=dict)
    lag: int | None = None
    rate: float = 0.0
    partitions: list = field(default_factory=list)
    started_unix: float = field(default_factory=time.time)

    def line(self) -> str:
        ago = ("never" if self.last_checkpoint_unix is None
               else f"{time.time() - self.last_checkpoint_unix:.1f} s ago")
        return (f"stage {self.stage}: in {self.records_in} ({self.rate:,.0f}/s), "
                f"out {self.records_out}, dead letters {self.dead_letters}, "
                f"lag {self.lag if self.lag is not None else '?'}, "
                f"partitions {self.partitions}, last checkpoint {ago}")


# --------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------


class StageRunner:
    """Run one stage of a pipeline as a consumer-group member until stopped.

    Parameters
    ----------
    config, stage
        The validated pipeline and the stage to run.
    stop
        Set it (e.g. from a SIGTERM handler) to stop: the stage finishes the batch at hand,
        checkpoints every partition, commits and leaves the group.
    idle_exit_s
        Stop by itself after this many seconds without input (batch jobs, tests).
    instance
        Distinguishes members for the transactional id (exactly-once); default: host and pid.
    """

    def __init__(self, config: PipelineConfig, stage: StageConfig,
                 stop: threading.Event | None = None, idle_exit_s: float | None = None,
                 instance: str | None = None):
        self.config = config
        self.stage = stage
        self.stop = stop or threading.Event()
        self.idle_exit_s = idle_exit_s
        self.instance = instance or f"{socket.gethostname()}-{os.getpid()}"
        self.client = dict(config.kafka)
        self.eos = stage.guarantee == "exactly-once"
        self.group_id = config.group_id(stage)
        self.changelog = config.changelog_topic(stage)
        self.dlq = config.dlq_topic(stage)
        self.stats = StageStats(stage=stage.name)
        self._tasks: dict[int, _PartitionTask] = {}
        self._consumer = None
        self._producer = None
        self._reader: ChangelogReader | None = None
        self._in_txn = False
        self._last_checkpoint_time = time.monotonic()
        self._input_partitions = 0
        self._rate_window = (time.monotonic(), 0)

    # ---- setup ----------------------------------------------------------------------

    def prepare(self) -> None:
        """Check (or create) the topics, before anything is consumed.

        Called by :meth:`run` first. Raises :class:`~shiftwatch.deploy.pipeline.PipelineError` (one
        line) when the input or output topic is missing and ``topics.create`` is false, or the
        changelog has fewer partitions than the input; kafka-python errors when the cluster
        cannot be reached.
        """
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(**self.client)
        try:
            parts = self._partition_counts(admin, [self.stage.input, self.stage.output,
                                                   self.changelog, self.dlq])
            topics = self.config.topics
            create: dict[str, dict] = {}
            for t in (self.stage.input, self.stage.output):
                if parts[t] is None:
                    if not topics["create"]:
                        raise PipelineError(
                            f"{self.config.source}: stage {self.stage.name}: topic {t!r} does "
                            "not exist (create it, or set topics: {create: true})")
                    create[t] = {"num_partitions": topics["partitions"],
                                 "replication_factor": topics["replication_factor"]}
            n_in = parts[self.stage.input] or topics["partitions"]
            if parts[self.changelog] is None:
                create[self.changelog] = {"num_partitions": n_in,
                                          "replication_factor": topics["replication_factor"],
                                          "configs": {"cleanup.policy": "compact"}}
            elif parts[self.changelog] < n_in:
                raise PipelineError(
                    f"{self.config.source}: stage {self.stage.name}: changelog "
                    f"{self.changelog!r} has {parts[self.changelog]} partitions, input "
                    f"{self.stage.input!r} has {n_in}; grow the changelog to match")
            if parts[self.dlq] is None:
                create[self.dlq] = {"num_partitions": 1,
                                    "replication_factor": topics["replication_factor"]}
            if create:
                admin.create_topics(create, raise_errors=False)
            self._input_partitions = n_in
        finally:
            admin.close()

    @staticmethod
    def _partition_counts(admin, topics: list[str]) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for d in admin.describe_topics(topics):
            ok = d.get("error_code", 0) == 0 and d.get("partitions")
            out[d["name"]] = len(d["partitions"]) if ok else None
        return {t: out.get(t) for t in topics}

    def _clients(self) -> None:
        from kafka import KafkaConsumer, KafkaProducer

        c = self.stage.consumer
        self._consumer = KafkaConsumer(
            **self.client, group_id=self.group_id, enable_auto_commit=False,
            auto_offset_reset=c["auto_offset_reset"],
            max_poll_interval_ms=c["max_poll_interval_ms"],
            session_timeout_ms=c["session_timeout_ms"],
            heartbeat_interval_ms=c["heartbeat_interval_ms"],
            max_poll_records=self.stage.batch["max_records"],
            isolation_level="read_committed" if self.eos else "read_uncommitted",
            **{k: c[k] for k in ("fetch_max_bytes", "max_partition_fetch_bytes") if k in c})
        extra: dict[str, Any] = {"acks": "all", "linger_ms": 5,
                                 "max_request_size": 4 * 1024 * 1024}
        if self.eos:
            extra["transactional_id"] = f"{self.group_id}.{self.instance}"
        self._producer = KafkaProducer(**self.client, **extra)
        if self.eos:
            self._producer.init_transactions()
        self._reader = ChangelogReader(self.client, self.changelog, read_committed=self.eos)

    # ---- lifecycle hooks --------------------------------------------------------------

    def on_assign(self, partitions) -> None:
        """Called inside ``poll`` when the group gives this member partitions.

        Restores each partition's newest checkpoint and seeks to its offset (to the beginning
        when there is none). May raise kafka-python errors or ``TimeoutError`` (the stage
        stops; the group reassigns the partitions).
        """
        mine = [tp for tp in partitions if tp.topic == self.stage.input]
        if not mine:
            return
        restored = self._reader.read(self.stage.input, [tp.partition for tp in mine])
        for tp in mine:
            task = self._new_task(tp.partition)
            cp = restored.get(tp.partition)
            if cp is not None:
                self._load(task, cp)
                self._consumer.seek(tp, cp.offset)
            else:
                self._consumer.seek_to_beginning(tp)
            self._tasks[tp.partition] = task
        log.info("stage %s: assigned %s (restored %s)", self.stage.name,
                 sorted(tp.partition for tp in mine),
                 {p: (c.offset if c else None) for p, c in restored.items()})
        self.stats.partitions = sorted(self._tasks)

    def _load(self, task: _PartitionTask, cp: Restored) -> None:
        """Put a restored checkpoint into a fresh task (raises ``ValueError`` on bad state)."""
        if cp.legacy_state is not None:  # an old full-state checkpoint: rewrite every key
            state = loads_state(cp.legacy_state)
            for op, s in zip(task.ops, state["operators"], strict=True):
                op.load_state_dict(s)
            task.deduper.load(state.get("upstream", []))
            task.dirty = [set(op.keys) for op in task.ops]
        else:
            if len(cp.states) != len(task.ops):
                raise ValueError(f"changelog {self.changelog}: checkpoint {cp.id} of partition "
                                 f"{task.partition} has {len(cp.states)} operators, the stage "
                                 f"{len(task.ops)}")
            for op, states in zip(task.ops, cp.states, strict=True):
                op.load_state_dict({"operator": "keyed", "keys": {
                    k: loads_state(v) for k, v in states.items()}})
            task.deduper.load(cp.upstream)
            task.slots = dict(cp.slots)
            task.junk = list(cp.junk)
        task.next_offset = task.checkpointed_offset = cp.offset
        task.checkpoint_id = cp.next_id - 1

    def on_revoke(self, partitions) -> None:
        """Called inside ``poll`` before partitions move to another member (and on close).

        Checkpoints and commits the revoked partitions, then drops their state. Errors are
        logged: the last checkpoint still holds, so the next owner replays from it.
        """
        mine = [tp.partition for tp in partitions
                if tp.topic == self.stage.input and tp.partition in self._tasks]
        try:
            self._checkpoint(mine)
        except Exception as exc:  # the next owner replays from the previous checkpoint
            log.warning("stage %s: checkpoint on revoke failed: %s", self.stage.name, exc)
            if self.eos and self._in_txn:
                self._abort()
        for p in mine:
            self._tasks.pop(p, None)
        self.stats.partitions = sorted(self._tasks)

    def _new_task(self, partition: int) -> _PartitionTask:
        return _PartitionTask(partition=partition,
                              ops=[Keyed(spec.build()) for spec in self.stage.operators],
                              deduper=Deduper(),
                              dirty=[set() for _ in self.stage.operators])

    # ---- main loop ----------------------------------------------------------------------

    def run(self) -> StageStats:
        """Consume until :attr:`stop` is set (or idle for ``idle_exit_s``), then shut down.

        Shutdown checkpoints every partition, commits, and leaves the group (``close``).
        """
        from kafka import ConsumerRebalanceListener

        runner = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                runner.on_revoke(revoked)

            def on_partitions_assigned(self, assigned):
                runner.on_assign(assigned)

        self.prepare()
        self._clients()
        self._consumer.subscribe([self.stage.input], listener=_Listener())
        max_poll_s = self.stage.consumer["max_poll_interval_ms"] / 1000
        metrics_every = self.config.metrics["interval_seconds"]
        last_metrics = last_input = time.monotonic()
        try:
            while not self.stop.is_set():
                batches = self._consumer.poll(timeout_ms=self.stage.batch["timeout_ms"])
                t0 = time.monotonic()
                n = sum(len(m) for m in batches.values())
                if n:
                    last_input = t0
                    if self.eos and not self._in_txn:
                        self._producer.begin_transaction()
                        self._in_txn = True
                    for tp, msgs in batches.items():
                        task = self._tasks.get(tp.partition)
                        if task is not None and tp.topic == self.stage.input:
                            self._process(tp, task, msgs)
                if not self.eos:
                    for task in self._tasks.values():
                        if task.pendings:
                            self._advance(task)
                self._maybe_checkpoint()
                now = time.monotonic()
                if now - t0 > 0.5 * max_poll_s:
                    log.warning("stage %s: a batch took %.1f s, over half of "
                                "max_poll_interval_ms (%.0f s): lower batch.max_records or "
                                "raise consumer.max_poll_interval_ms, or the group will evict "
                                "this member", self.stage.name, now - t0, max_poll_s)
                if now - last_metrics >= metrics_every:
                    self._metrics()
                    last_metrics = now
                if not self._tasks:
                    last_input = now  # idle time counts from the first assignment
                elif self.idle_exit_s is not None and now - last_input > self.idle_exit_s:
                    break
        finally:
            self._shutdown()
        return self.stats

    def _process(self, tp, task: _PartitionTask, msgs) -> None:
        stage = self.stage
        by_offset = {}
        records = []
        for m in msgs:
            if task.next_offset is not None and m.offset < task.next_offset:
                continue  # already in the state (a re-fetch after a seek)
            by_offset[m.offset] = m
            task.next_offset = m.offset + 1
            try:
                record = decode_input(m.value, m.key, stage.value, stage.key)
            except BadInput as exc:
                self._dead_letter(m, str(exc), None, task=task)
                continue
            if stage.dedupe and not task.deduper.admit(record):
                self.stats.duplicates_dropped += 1
                continue
            record["offset"] = m.offset
            records.append(record)
        self.stats.records_in += len(by_offset)
        task.since_checkpoint += len(by_offset)
        for i, op in enumerate(task.ops):
            _mark_dirty(task.dirty[i], records)
            outs = op.process_batch(records)
            records = []
            for o in outs:
                if isinstance(o, DeadLetter):
                    m = by_offset.get(o.origin.get("offset"))
                    self._dead_letter(m, o.reason, stage.operators[i].name, o.raw,
                                      task)
                else:
                    records.append(o)
        # Keyed groups outputs by key; put them back in input order, so that each upstream
        # partition's offsets increase along every output partition (what Deduper relies on).
        records.sort(key=_offset_of)
        counts: dict[int, int] = {}
        send = self._producer.send
        futures = task.futures
        for o in records:
            off = o.get("offset")
            n = counts.get(off, 0)
            counts[off] = n + 1
            o["input"] = {"topic": tp.topic, "partition": tp.partition, "offset": off, "n": n}
            m = by_offset.get(off)
            key = m.key if m is not None and m.key is not None else _key_bytes(o.get("key"))
            futures.append(send(stage.output, key=key, value=encode_output(o)))
        self.stats.records_out += len(records)
        if len(futures) > 20_000:  # long intervals: keep only what is unacknowledged or failed
            task.futures = [f for f in futures if not f.is_done or f.failed()]

    def _dead_letter(self, m, reason: str, operator: str | None, record: Any = None,
                     task: _PartitionTask | None = None) -> None:
        self.stats.dead_letters += 1
        env: dict[str, Any] = {"error": reason, "pipeline": self.config.name,
                               "stage": self.stage.name, "operator": operator}
        key = None
        if m is not None:
            raw = m.value or b""
            key = m.key
            env.update(topic=m.topic, partition=m.partition, offset=m.offset,
                       timestamp=m.timestamp,
                       key=None if m.key is None else m.key.decode("utf-8", "replace"),
                       raw=raw.decode("utf-8", errors="replace"),
                       raw_base64=base64.b64encode(raw).decode("ascii"))
        else:
            env["raw"] = DeadLetter(record, reason).to_record()["raw"]
        fut = self._producer.send(self.dlq, key=key, value=encode_output(env),
                                  headers=[("error", reason.encode()[:1000])])
        if task is not None:
            task.futures.append(fut)

    # ---- checkpoints --------------------------------------------------------------------

    def _maybe_checkpoint(self) -> None:
        cp = self.stage.checkpoint
        timed = time.monotonic() - self._last_checkpoint_time >= cp["every_seconds"]
        due = [p for p, t in self._tasks.items()
               if t.since_checkpoint >= cp["every_records"] or (timed and t.since_checkpoint)]
        if self.eos:
            if due or (timed and self._in_txn):
                self._checkpoint(list(self._tasks))  # one transaction covers every partition
        else:
            for p in due:
                task = self._tasks[p]
                if len(task.pendings) >= _IN_FLIGHT:
                    self._advance(task, until=_IN_FLIGHT - 1)
                self._snapshot(task)
                self._advance(task)
        if timed:
            self._last_checkpoint_time = time.monotonic()

    def _snapshot(self, task: _PartitionTask) -> bool:
        """Send the entries of the keys changed since the last checkpoint (and tombstones of
        an unfinished checkpoint's entries); queue the marker that commits them on
        ``task.pendings``. Returns False if there is nothing new to checkpoint. A key's new
        version goes to a slot that holds neither its committed version nor a version of a
        checkpoint still in flight. May raise kafka-python errors (``send``)."""
        if task.next_offset is None or (task.next_offset == task.checkpointed_offset
                                        and not self.eos):
            return False
        assert len(task.pendings) < _IN_FLIGHT
        topic, p = self.stage.input, task.partition
        send = self._producer.send
        futures = task.futures
        for key in task.junk:  # before a marker could cover their ids
            futures.append(send(self.changelog, key=key, value=None, partition=p))
        task.junk = []
        task.checkpoint_id += 1
        cid = task.checkpoint_id
        chunk_bytes = self.stage.checkpoint["chunk_bytes"]
        flips: dict[tuple[int, str], int] = {}
        in_flight = [pend.flips for pend in task.pendings]
        slots = task.slots
        for i, op in enumerate(task.ops):
            for key in task.dirty[i]:
                kop = op.existing(key)
                if kop is None:  # only bad records: the key was never kept
                    continue
                name = Keyed.key_name(key)
                ref = (i, name)
                slot = 0
                if in_flight:
                    used = {slots.get(ref), *(f.get(ref) for f in in_flight)}
                    while slot in used:
                        slot += 1
                elif slots.get(ref) == 0:
                    slot = 1
                flips[ref] = slot
                for k, v in encode_entry(topic, p, cid, i, name, slot,
                                         dumps_state(kop.state_dict()), chunk_bytes):
                    futures.append(send(self.changelog, key=k, value=v, partition=p))
            task.dirty[i] = set()
        task.pendings.append(_Pending(
            id=cid, offset=task.next_offset, futures=futures, flips=flips,
            marker=encode_marker(topic, p, cid, task.next_offset, [len(op) for op in task.ops],
                                 task.deduper.state())))
        task.futures = []
        task.checkpointed_offset = task.next_offset
        task.since_checkpoint = 0
        return True

    def _advance(self, task: _PartitionTask, until: int | None = None) -> None:
        """Move the pending checkpoints of ``task`` on, oldest first (at-least-once): send a
        checkpoint's marker once everything sent before its snapshot is acknowledged, commit
        its offset and flip its keys' slots once the marker is.

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
                        self._producer.flush()  # send now rather than after linger_ms
                        f.get(timeout=_SEND_TIMEOUT_S)
                    if f.failed():
                        raise f.exception
                    i += 1
                pend.done = i
                key, value = pend.marker
                pend.marker_future = self._producer.send(self.changelog, key=key, value=value,
                                                         partition=task.partition)
            if not pend.marker_future.is_done:
                if not block:
                    return
                self._producer.flush()
                pend.marker_future.get(timeout=_SEND_TIMEOUT_S)
            if pend.marker_future.failed():
                raise pend.marker_future.exception
            self._commit_offsets({task.partition: pend.offset}, sync=block)
            task.slots.update(pend.flips)
            pendings.popleft()

    def _commit_offsets(self, offsets: dict[int, int], sync: bool = True) -> None:
        """Commit consumed offsets (what lag monitoring sees; restoring uses the markers, so
        a lost asynchronous commit only delays the group's view of progress)."""
        from kafka import OffsetAndMetadata, TopicPartition

        commit = {TopicPartition(self.stage.input, p): OffsetAndMetadata(o, "", -1)
                  for p, o in offsets.items()}
        if sync:
            self._consumer.commit(commit)
        else:
            self._consumer.commit_async(commit, callback=self._commit_done)
        self._checkpointed(offsets)

    def _commit_done(self, offsets, result) -> None:
        if isinstance(result, Exception):
            log.warning("stage %s: offset commit failed (the next one repeats it): %s",
                        self.stage.name, result)

    def _checkpointed(self, offsets: dict[int, int]) -> None:
        self.stats.checkpoints += 1
        self.stats.last_checkpoint_unix = time.time()
        self.stats.last_checkpoint_offsets.update({str(p): o for p, o in offsets.items()})

    def _checkpoint(self, partitions: list[int]) -> None:
        """Checkpoint ``partitions`` now and wait until it is committed (revoke, shutdown,
        and every exactly-once checkpoint: entries, markers and offsets in one transaction).

        May raise kafka-python errors; the previous checkpoint then still holds."""
        from kafka import OffsetAndMetadata, TopicPartition

        tasks = [self._tasks[p] for p in partitions if p in self._tasks]
        if not self.eos:
            for task in tasks:
                if len(task.pendings) >= _IN_FLIGHT:
                    self._advance(task, until=_IN_FLIGHT - 1)
                self._snapshot(task)
                self._advance(task, until=0)
            done = {t.partition: t.checkpointed_offset for t in tasks
                    if t.checkpointed_offset is not None}
            if done:  # synchronously, after any asynchronous commit of older offsets
                self._consumer.commit({TopicPartition(self.stage.input, p):
                                       OffsetAndMetadata(o, "", -1) for p, o in done.items()})
            return
        if not self._in_txn:
            self._producer.begin_transaction()
            self._in_txn = True
        done = []
        for task in tasks:
            if self._snapshot(task):
                key, value = task.pendings[-1].marker
                self._producer.send(self.changelog, key=key, value=value,
                                    partition=task.partition)
                done.append(task)
        offsets = {TopicPartition(self.stage.input, t.partition):
                   OffsetAndMetadata(t.pendings[-1].offset, "", -1) for t in done}
        if offsets:
            self._producer.send_offsets_to_transaction(offsets, self._consumer.group_metadata())
        self._producer.commit_transaction()
        self._in_txn = False
        for task in done:
            task.slots.update(task.pendings.pop().flips)
            task.futures = []
        if done:
            self._checkpointed({t.partition: t.checkpointed_offset for t in done})

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction()
        finally:
            self._in_txn = False

    # ---- metrics and shutdown -----------------------------------------------------------

    def _metrics(self) -> None:
        from kafka import TopicPartition

        now = time.monotonic()
        then, n = self._rate_window
        if now > then:
            self.stats.rate = (self.stats.records_in - n) / (now - then)
        self._rate_window = (now, self.stats.records_in)
        lag = 0
        known = False
        for p, task in self._tasks.items():
            hw = self._consumer.highwater(TopicPartition(self.stage.input, p))
            if hw is not None and task.next_offset is not None:
                lag += max(0, hw - task.next_offset)
                known = True
        self.stats.lag = lag if known else None
        log.info(self.stats.line())
        path = self.config.metrics.get("file")
        if path:
            path = Path(path.replace("{stage}", self.stage.name))
            tmp = path.with_suffix(path.suffix + ".tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(asdict(self.stats), default=str))
            os.replace(tmp, path)

    def _shutdown(self) -> None:
        try:
            if self._consumer is not None and self._producer is not None:
                try:
                    self._checkpoint(list(self._tasks))
                except Exception as exc:
                    log.warning("stage %s: final checkpoint failed: %s", self.stage.name, exc)
                    if self.eos and self._in_txn:
                        self._abort()
                self._metrics()
                self._tasks.clear()  # on_revoke during close() has nothing left to do
        finally:
            for client in (self._consumer, self._producer, self._reader):
                if client is not None:
                    try:
                        client.close()
                    except Exception as exc:  # closing must not hide the reason we stop
                        log.warning("stage %s: close: %s", self.stage.name, exc)


def _mark_dirty(dirty: set, records: list) -> None:
    """Add the keys of ``records`` (as :class:`~shiftwatch.operators.base.Keyed` hashes them) to
    ``dirty``; unhashable keys (dead letters) are skipped."""
    try:
        dirty.update([r.get("key") for r in records])
    except TypeError:  # a list key (a tuple in Keyed) or an unhashable one
        for r in records:
            try:
                dirty.add(Keyed.normalize_key(r.get("key")))
            except TypeError:
                pass


def _offset_of(record: Mapping) -> int:
    return record.get("offset", -1)


def _key_bytes(key: Any) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        return key.encode()
    return json.dumps(key).encode()


# --------------------------------------------------------------------------------------


def run_pipeline(config: PipelineConfig, stages: list[str] | None = None,
                 idle_exit_s: float | None = None, install_signals: bool = True) -> int:
    """Run the named stages (default: all) of ``config``, one thread each, until SIGTERM/SIGINT.

    Returns 0 after a clean stop, 1 if a stage failed (the others are then stopped too).
    """
    chosen = [config.stage(s) for s in stages] if stages else list(config.stages)
    stop = threading.Event()
    if install_signals and threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            log.info("signal %s: checkpointing and leaving the group", signum)
            stop.set()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
    runners = [StageRunner(config, s, stop=stop, idle_exit_s=idle_exit_s) for s in chosen]
    for r in runners:  # topics are checked before any stage consumes
        r.prepare()
    errors: list[BaseException] = []

    def target(r: StageRunner) -> None:
        try:
            r.run()
        except BaseException as exc:
            errors.append(exc)
            log.error("stage %s failed: %s: %s", r.stage.name, type(exc).__name__, exc)
            stop.set()

    threads = [threading.Thread(target=target, args=(r,), name=f"stage-{r.stage.name}")
               for r in runners]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.2)
    if errors and isinstance(errors[0], PipelineError):
        raise errors[0]
    return 1 if errors else 0
