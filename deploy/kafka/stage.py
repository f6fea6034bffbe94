"""The Kafka stage runner: one pipeline stage as a member of a Kafka consumer group.

A stage consumes its input topic in micro-batches, groups each batch by partition and key,
runs its operators (one :class:`~shiftwatch.operators.keyed.Keyed` chain per input partition, so
state moves with partitions), and produces every output to the output topic keyed like its input,
with the input's coordinates ``{"input": {"topic", "partition", "offset", "n"}}``.

State: every ``checkpoint.every_records`` records of a partition, every
``checkpoint.every_seconds`` seconds, on revoke and on shutdown, the stage checkpoints the
partition incrementally to ``<pipeline>.<stage>.changelog`` (see
:mod:`shiftwatch.deploy.kafka.changelog`): the states of the keys that changed since the previous
checkpoint, in one group entry, then a commit marker with the next input offset, then it commits
the offset. On assignment the stage restores each partition as of its newest marker and seeks
to its offset, so the state never counts a record twice nor misses one.

* ``at-least-once``: a checkpoint snapshots the changed keys and sends their group at once,
  without waiting; its marker is sent only once every output, dead letter and entry sent
  before the snapshot is acknowledged (checked between batches, so the stage never stalls on
  a flush), and the offset is committed once the marker is acknowledged. Up to three
  checkpoints per partition are in flight (a fourth first waits for the oldest). On
  revoke and shutdown the checkpoint is synchronous (flush, marker, flush, commit). A crash
  replays (and re-produces) at most the records after the last marker; the outputs carry
  coordinates so duplicates can be dropped (:mod:`shiftwatch.deploy.kafka.dedupe`, which a
  downstream stage applies to its input by itself).
* ``exactly-once``: a transactional producer; outputs, dead letters, changelog entries, the
  markers and the consumed offsets go into one transaction committed at each checkpoint;
  consumers read ``read_committed``. A crash aborts the open transaction and the stage
  resumes from the last committed marker.

Rebalancing: ``consumer.assignor`` (default ``cooperative-sticky``, KIP-429) revokes only the
partitions that move; the others keep their state and go on while the group rebalances
(:meth:`StageRunner._poll` on kafka-python; librdkafka delivers them through the rebalance by
itself). The eager assignors (``range``, ``roundrobin``, ``sticky``) revoke every partition at
every membership change.

Each micro-batch goes through the same :class:`~shiftwatch.deploy.executor.StageExecutor` as a
local replay (decode, validate, de-duplicate, the keyed operator chain, dead letters, outputs
in input order), so a stage's outputs are byte for byte what ``shiftwatch replay`` writes,
plus the ``input`` coordinates. This module is the consumer loop (assignment, restore, poll,
produce, metrics, shutdown); :mod:`shiftwatch.deploy.kafka.checkpoint` writes checkpoints.

Bad input (not JSON, not an object, a missing field, a value an operator rejects) goes to
``<pipeline>.<stage>.dlq`` in the one dead-letter schema (``reason``, ``operator``, ``key``,
``origin`` = ``{topic, partition, offset}``, ``raw``, ``raw_base64``), keyed like its input.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.kafka.changelog import ChangelogError, ChangelogReader
from shiftwatch.deploy.kafka.checkpoint import Checkpointer, PartitionTask, StateLoadError
from shiftwatch.deploy.kafka.clients import check_client, client_kind, make_consumer, make_producer
from shiftwatch.deploy.kafka.connect import Outage, SessionLost, lost_cluster
from shiftwatch.deploy.kafka.dedupe import Deduper, end_slack
from shiftwatch.deploy.kafka.topics import missing_topic, not_created
from shiftwatch.deploy.pipeline import (
    ASSIGNORS,
    PipelineConfig,
    PipelineError,
    StageConfig,
    client_settings,
)
from shiftwatch.operators.codec import encode_record
from shiftwatch.operators.keyed import DeferredStateError
from shiftwatch.operators.records import DeadLetter

__all__ = ["StageRunner", "run_pipeline"]

log = logging.getLogger("shiftwatch.kafka")

#: Bytes of a produced message besides its value (key, headers, record framing) that the
#: producer's ``max_request_size`` must also hold.
MESSAGE_OVERHEAD = 4096

#: Milliseconds a stage that lost its cluster gives its consumer to leave the group.
LEAVE_GROUP_MS = 2000


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
    metrics
        Optional :class:`~shiftwatch.deploy.observability.StageMetrics` the stage reports to
        (counters, lag per partition, batch and checkpoint times, liveness and readiness);
        :func:`run_pipeline` makes one per stage when ``metrics.port`` is set.
    reset_state
        Input partitions whose changelog state is dropped when they are assigned (``"all"``
        for every one): the stage deletes the partition's changelog entries, starts it with
        fresh operators and resumes from the group's committed offset. The way out of a
        changelog that cannot be restored (damaged, or written with other parameters).
    """

    def __init__(self, config: PipelineConfig, stage: StageConfig,
                 stop: threading.Event | None = None, idle_exit_s: float | None = None,
                 instance: str | None = None, metrics: Any = None,
                 reset_state: Iterable[int] | str | None = None):
        self.config = config
        self.stage = stage
        self.stop = stop or threading.Event()
        self.idle_exit_s = idle_exit_s
        self.instance = instance or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = metrics
        self.client = dict(config.kafka)
        self.kind = client_kind(self.client)
        problem = check_client(self.kind)
        if problem is not None:
            raise PipelineError(f"{config.source}: {problem}")
        self.eos = stage.guarantee == "exactly-once"
        self.group_id = config.group_id(stage)
        self.changelog = config.changelog_topic(stage)
        self.dlq = config.dlq_topic(stage)
        self.stats = RunSummary(stage=stage.name)
        self._tasks: dict[int, PartitionTask] = {}
        self._consumer: Any = None
        self._producer: Any = None
        self._reader: ChangelogReader | None = None
        self.checkpointer = Checkpointer(stage.input, self.changelog, stage.checkpoint,
                                         self.eos, self._tasks, self.stats, stage.name)
        self.checkpointer.metrics = metrics
        self.checkpointer.on_refused = self._refused
        self.checkpointer.params = [operator_params(spec.build()) for spec in stage.operators]
        self.reset_state = (reset_state if reset_state in (None, "all")
                            else {int(p) for p in reset_state})
        # consumer.assignor cooperative-sticky: a rebalance revokes (and assigns) only the
        # partitions that move; the others keep their task and go on (on both clients;
        # _clients() reads what librdkafka was told, kafka.librdkafka may override it)
        self.cooperative = stage.consumer.get("assignor", "cooperative-sticky") == \
            "cooperative-sticky"
        self._joined = False  # a join completed whose assignment the listener has not seen
        self._fatal: BaseException | None = None  # raised by a rebalance callback
        self._failed = False  # the loop stopped on an error: no checkpoint on the way out
        self._asked: set[tuple[str, int]] = set()
        self._upstream_ends: dict[tuple[str, int], int] = {}
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

        admin = KafkaAdminClient(**client_settings(self.client, "admin"))
        try:
            parts = self._partition_counts(admin, [self.stage.input, self.stage.output,
                                                   self.changelog, self.dlq])
            topics = self.config.topics
            create: dict[str, dict] = {}
            for t in (self.stage.input, self.stage.output):
                if parts[t] is None:
                    fix = not_created(t, self.stage, self.config)
                    if fix is not None and getattr(self, "_outage", None) is not None:
                        # reconnecting to a cluster that came back empty: wait for the input
                        raise SessionLost(f"input topic {t!r} is not on the cluster (yet)")
                    if fix is not None:
                        raise PipelineError(
                            f"{self.config.source}: stage {self.stage.name}: "
                            f"{missing_topic(t, admin.list_topics())}; {fix}")
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
        self._drop_clients()  # what a session that failed while starting left behind
        self._seen_connected = False  # a coordinator not found yet is not a lost one
        self._group_lost: list[int] | None = None  # partitions lost when the group dropped us
        self._lost_at = float("-inf")  # when this session last stopped reaching the cluster
        self._back_at = float("-inf")  # when it reached it again
        c = self.stage.consumer
        settings = {
            **self._settings("consumer"), "group_id": self.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": c["auto_offset_reset"],
            "max_poll_interval_ms": c["max_poll_interval_ms"],
            "session_timeout_ms": c["session_timeout_ms"],
            "heartbeat_interval_ms": c["heartbeat_interval_ms"],
            "isolation_level": "read_committed" if self.eos else "read_uncommitted",
            **{k: c[k] for k in ("fetch_max_bytes", "max_partition_fetch_bytes") if k in c}}
        assignor = c.get("assignor", "cooperative-sticky")
        if self.kind == "confluent":
            # librdkafka's own assignors: cooperative-sticky (incremental), range and
            # roundrobin (eager); it has no eager sticky, which runs as range there (a
            # librdkafka partition.assignment.strategy under kafka.librdkafka still wins)
            strategy = assignor if assignor in ("range", "roundrobin",
                                                "cooperative-sticky") else "range"
            settings["librdkafka"] = {"partition.assignment.strategy": strategy,
                                      **(settings.get("librdkafka") or {})}
        else:
            settings["partition_assignment_strategy"] = [self._assignor(assignor)]
        self._consumer = make_consumer(self.kind, settings,
                                       max_poll_records=self.stage.batch["max_records"])
        if self.kind == "confluent":
            self.cooperative = self._consumer.cooperative
        # Larger batches than kafka-python's 16 KiB: fewer batches to build and send, and
        # less contention with the producer's I/O thread (which holds the accumulator's lock
        # while it drains). linger_ms bounds the added latency.
        pr = self.stage.producer
        extra: dict[str, Any] = {
            "acks": "all", "linger_ms": pr["linger_ms"], "batch_size": pr["batch_size"],
            "max_request_size": pr["max_request_size"],
            "compression_type": None if pr["compression_type"] == "none"
            else pr["compression_type"]}
        if self.eos:
            extra["transactional_id"] = f"{self.group_id}.{self.instance}"
        self._producer = make_producer(self.kind, {**self._settings("producer"), **extra})
        if self.eos:
            self._producer.init_transactions()
        self.checkpointer.producer = self._producer
        self.checkpointer.consumer = self._consumer
        self._reader = ChangelogReader(self._settings("consumer"), self.changelog,
                                       read_committed=self.eos, kind=self.kind)

    def _settings(self, client: str) -> dict:
        """The ``kafka:`` settings of one client (with ``client: confluent``, also the
        ``librdkafka:`` pass-through)."""
        out = client_settings(self.client, client)
        if self.kind == "confluent" and self.client.get("librdkafka"):
            out["librdkafka"] = dict(self.client["librdkafka"])
        return out

    def _assignor(self, name: str) -> Any:
        """An instance of the kafka-python assignor ``name`` (:data:`ASSIGNORS`) that also
        notes each completed join in :attr:`_joined`: under the cooperative protocol the
        group calls ``on_partitions_assigned`` only with partitions added, so a join that
        adds none (a member that keeps what it had, or gets nothing) is seen here."""
        import importlib

        module, _, cls = ASSIGNORS[name].rpartition(".")
        base = getattr(importlib.import_module(module), cls)
        runner = self

        class _Noting(base):
            def on_assignment(self, assignment, generation):
                runner._joined = True
                return super().on_assignment(assignment, generation)

        _Noting.__name__ = base.__name__
        self._joined = False
        return _Noting()

    def _drop_clients(self) -> None:
        """Close the clients without waiting for their work and forget them: after losing
        the cluster nothing of theirs can complete, so no checkpoint is written and no
        pending send waited for. The consumer still gets :data:`LEAVE_GROUP_MS` to leave its
        group (a member that never leaves can keep the group from settling)."""
        consumer, producer, reader = self._consumer, self._producer, self._reader
        self._consumer = self._producer = self._reader = None
        for client, kwargs in ((consumer, {"autocommit": False, "timeout_ms": LEAVE_GROUP_MS}),
                               (producer, {"timeout": 0}), (reader, {})):
            if client is None:
                continue
            try:
                client.close(**kwargs)
            except Exception as exc:
                log.debug("stage %s: close after losing the cluster: %s", self.stage.name, exc)
                # KafkaProducer.close flushes first and gives up before stopping its I/O
                # thread when sends are pending: stop it without them
                sender = getattr(client, "_sender", None)
                if sender is not None:
                    sender.force_close()

    # ---- lifecycle hooks --------------------------------------------------------------

    def on_assign(self, partitions) -> None:
        """Called inside ``poll`` (on the consumer's I/O thread) when the group gives this
        member partitions (under ``cooperative-sticky`` only those added: the ones it keeps
        keep their state; a join that adds none calls it with none).

        Restores each partition's newest checkpoint and seeks to its offset (to the beginning
        when there is none; partitions in :attr:`reset_state` start afresh). A checkpoint
        that cannot be used (damaged, from other operator parameters, past the end of the
        input) is a :class:`~shiftwatch.deploy.kafka.changelog.ChangelogError`; it and any
        other error are kept and raised by the poll loop (the stage stops without a
        checkpoint), so the cause is what the user sees.
        """
        try:
            self._assign(partitions)
        except Exception as exc:
            log.error("stage %s: assignment failed: %s: %s", self.stage.name,
                      type(exc).__name__, exc)
            self._fatal = exc

    def _assign(self, partitions) -> None:
        mine = [tp for tp in partitions if tp.topic == self.stage.input]
        if self.metrics is not None:
            self.metrics.rebalance()
        if not mine:
            if self.metrics is not None:
                self.metrics.set_ready(True)  # joined; more members than partitions
            return
        reset = {tp.partition for tp in mine
                 if self.reset_state == "all" or (self.reset_state and
                                                  tp.partition in self.reset_state)}
        keep = [tp.partition for tp in mine if tp.partition not in reset]
        # The cyclic garbage collector is paused while the states are read and loaded: a
        # restore makes several objects per key (about 100,000 keys restored in 2 s), and
        # each of the collections they would start walks the whole heap (River, NumPy and
        # Numba's objects included): half of the restore's decoding time, measured. Nothing
        # a restore makes is cyclic garbage; the collector runs again after it.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            self._assign_partitions(mine, reset, keep)
        finally:
            if gc_was_on:
                gc.enable()

    def _assign_partitions(self, mine: list, reset: set, keep: list[int]) -> None:
        t0 = time.monotonic()
        restored = self._reader.read(self.stage.input, keep) if keep else {}
        t_read = time.monotonic()
        ends = self._reader.end_offsets(self.stage.input, keep) if keep else {}
        tasks = {}
        for tp in mine:
            task = self._new_task(tp.partition)
            if tp.partition in reset:
                self._reset_partition(task)  # resumes from the group's committed offset
                tasks[tp.partition] = task
                continue
            cp = restored.get(tp.partition)
            if cp is not None:
                self._check_restored(tp.partition, cp, ends.get(tp.partition))
                self._load(task, cp)
                self._consumer.seek(tp, cp.offset)
            else:
                self._consumer.seek_to_beginning(tp)
            tasks[tp.partition] = task
        self._tasks.update(tasks)
        t_end = time.monotonic()
        log.info("stage %s: assigned %s (restored %s)", self.stage.name,
                 sorted(tp.partition for tp in mine),
                 {p: (c.offset if c else None) for p, c in restored.items()})
        if keep:
            r = self._reader
            rate = r.last_messages / r.last_read_s if r.last_read_s > 0 else float("nan")
            states = sum(len(c.owners) for c in restored.values() if c is not None)
            log.info("stage %s: restore of partitions %s: %d key states from %d changelog "
                     "messages (%.1f MB) read in %.2f s (%.0f messages/s; %.2f s with "
                     "decoding), loaded in %.2f s; %.2f s in all (%s)", self.stage.name,
                     keep, states, r.last_messages, r.last_bytes / 1e6, r.last_read_s, rate,
                     t_read - t0, t_end - t_read, t_end - t0,
                     "restore: lazy, each key built on its first record"
                     if self.checkpointer.settings.get("restore", "lazy") == "lazy"
                     else "restore: eager, every key built")
        self.stats.partitions = sorted(self._tasks)
        if self.metrics is not None:
            self.metrics.set_ready(True)

    def on_revoke(self, partitions) -> None:
        """Called inside ``poll`` before partitions move to another member (and on close):
        under the eager assignors every partition before each join, under
        ``cooperative-sticky`` only those that move, after the join that takes them away
        (kafka-python then joins again, and the group gives them to their new member).

        Checkpoints and commits the revoked partitions, then drops their state. Errors are
        logged: the last checkpoint still holds, so the next owner replays from it.
        """
        if self.metrics is not None and not self.cooperative:
            # eager: every partition goes, ready again once assigned; cooperative: only
            # these go, the member goes on with the others (and may have none left: a
            # member without partitions is ready, as after an empty assignment)
            self.metrics.set_ready(False)
        mine = [tp.partition for tp in partitions
                if tp.topic == self.stage.input and tp.partition in self._tasks]
        # This runs on the consumer's I/O thread, while the poll loop waits inside poll():
        # the checkpoint waits only on the producer (its own client) and commits the offsets
        # without waiting (restoring reads the markers, not the committed offsets).
        self.checkpointer.async_commits = True
        try:
            if self._fatal is None and not self._failed:
                self.checkpointer.checkpoint(mine)
        except Exception as exc:  # the next owner replays from the previous checkpoint
            log.warning("stage %s: checkpoint on revoke failed: %s", self.stage.name, exc)
            if self.eos and self.checkpointer.in_txn:
                self.checkpointer.abort()
        finally:
            self.checkpointer.async_commits = False
        for p in mine:
            self._tasks.pop(p, None)
        self.stats.partitions = sorted(self._tasks)
        if mine:
            log.info("stage %s: revoked %s (keeps %s)", self.stage.name, sorted(mine),
                     self.stats.partitions)

    def _check_restored(self, partition: int, cp, end: int | None) -> None:
        """Refuse a checkpoint the stage cannot resume from (one line with the way out)."""
        # (a few brokers report an end offset short of the true one: some room, end_slack)
        if end is not None and cp.offset > end + end_slack(end):
            raise ChangelogError(
                self.changelog, partition,
                f"its checkpoint {cp.id} resumes input {self.stage.input}[{partition}] at "
                f"offset {cp.offset}, beyond the partition's end offset {end} (a changelog "
                "from another history of the topic, or damaged)")
        if cp.params is None:
            log.warning("stage %s: partition %d's checkpoint %d does not record its "
                        "operators' parameters (written by an earlier release): not checked",
                        self.stage.name, partition, cp.id)
            return
        mismatch = params_mismatch(cp.params, self.checkpointer.params)
        if mismatch is not None:
            raise ChangelogError(
                self.changelog, partition, f"its state was computed with {mismatch}; a "
                "state from other parameters gives outputs that match neither",
                hint=f"restart with --reset-state {partition} (or all) to start afresh, or "
                "give the pipeline a new name")

    def _load(self, task: PartitionTask, cp) -> None:
        """Load a restored checkpoint into ``task``; a key state that cannot be read is a
        :class:`~shiftwatch.deploy.kafka.changelog.ChangelogError` naming the key."""
        # the changelog offsets of this read (a later assignment's read replaces the
        # reader's): a lazily restored key that cannot be loaded names its entry's offset
        task.changelog_offsets = self._reader.offsets
        try:
            self.checkpointer.load(task, cp)
        except StateLoadError as exc:
            raise self._unloadable(task, exc.operator, exc.key, exc.reason, cp.id) from None

    def _unloadable(self, task: PartitionTask, operator: int, key: str, reason: str,
                    checkpoint: int) -> ChangelogError:
        """The error of a restored key state that cannot be loaded (on assignment, or on the
        key's first record under ``checkpoint.restore: lazy``), naming the key and where its
        entry is in the changelog."""
        group = task.owners.get((operator, key))
        keys = task.groups[group].keys if group in task.groups else []
        where = keys[0] if keys else None
        return ChangelogError(
            self.changelog, task.partition,
            f"the state of key {key!r} (operator {operator}) in checkpoint {checkpoint} "
            f"cannot be loaded: {reason}",
            offset=task.changelog_offsets.get((task.partition, where)), key=where)

    def _reset_partition(self, task: PartitionTask) -> None:
        """--reset-state: delete the partition's changelog entries (tombstones), number the
        next checkpoint above every id they used, and start the partition afresh."""
        msgs = self._reader.read_messages([task.partition]).get(task.partition, [])
        prefix = f"{self.stage.input}/{task.partition}/".encode()
        live: dict[bytes, bool] = {}
        for key, value in msgs:
            if key is not None and key.startswith(prefix):
                live[key] = value is not None
        top = 0
        for key in live:
            parts = key[len(prefix):].split(b"/")
            if len(parts) >= 2 and parts[0] == b"g" and parts[1].isdigit():
                top = max(top, int(parts[1]))
        for key, alive in live.items():
            if alive:
                self._producer.send(self.changelog, key=key, value=None,
                                    partition=task.partition)
        self._producer.flush()
        task.checkpoint_id = top
        log.warning("stage %s: --reset-state: partition %d starts with fresh state from the "
                    "group's committed offset (%d changelog entries deleted)", self.stage.name,
                    task.partition, sum(live.values()))

    def _refused(self, task: PartitionTask, future, what: str, offset: int):
        """The broker refused a large ``what`` (output or dead letter) of input ``offset``:
        send a small dead letter in its place, return its future (see Checkpointer)."""
        origin = {"topic": self.stage.input, "partition": task.partition, "offset": offset}
        record = task.executor.dead_letter(DeadLetter(
            raw=b"", reason=f"the broker refused this record's {what}: "
            f"{type(future.exception).__name__}: {future.exception} (the input is at origin)",
            origin=origin))
        return self._producer.send(self.dlq, value=encode_record(record),
                                   headers=[("reason", record["reason"].encode()[:1000])])

    def _upstream_end(self, topic: str, partition: int) -> int | None:
        """The end offset of an upstream partition (for the de-duplication check), asked of
        the broker at most once per batch and partition; None if it cannot be known."""
        from kafka import TopicPartition

        key = (topic, partition)
        if key in self._asked:
            return self._upstream_ends.get(key)
        self._asked.add(key)
        try:
            tp = TopicPartition(topic, partition)
            end = self._consumer.end_offsets([tp], timeout_ms=5000).get(tp)
        except Exception as exc:  # unknown topic or partition, timeout: not checked
            log.debug("end offset of %s[%d] unknown: %s", topic, partition, exc)
            end = None
        if end is not None:
            self._upstream_ends[key] = end
        return end

    def _new_task(self, partition: int) -> PartitionTask:
        st = self.stage
        deduper = Deduper(upstream=st.upstream, end_offset=self._upstream_end)
        executor = StageExecutor([spec.build() for spec in st.operators],
                                 names=[spec.name for spec in st.operators], value=st.value,
                                 key=st.key, ts=st.ts, dedupe=st.dedupe, summary=self.stats,
                                 observer=self.metrics, deduper=deduper,
                                 max_message_bytes=st.producer["max_request_size"]
                                 - MESSAGE_OVERHEAD)
        return PartitionTask(partition=partition, executor=executor,
                             dirty=[set() for _ in st.operators])

    # ---- main loop ----------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Consume until :attr:`stop` is set (or idle for ``idle_exit_s``), then shut down.

        Shutdown checkpoints every partition, commits, and leaves the group (``close``).

        Losing the cluster (an error :func:`~shiftwatch.deploy.kafka.connect.lost_cluster`
        recognizes: connection errors, timeouts, a broker that forgot this producer, ...)
        stops the session at once without a checkpoint, as a crash would; the stage
        reconnects with backoff and, assigned again, resumes from its last committed
        checkpoint. If it is not back within
        :data:`~shiftwatch.deploy.kafka.connect.CLUSTER_LOST_WAIT_S` seconds of the first
        error, raises :class:`~shiftwatch.deploy.kafka.connect.ClusterLostError` (one line;
        nothing was committed).
        """
        self._down_since: float | None = None  # when the cluster stopped answering
        self._assigned_at = float("-inf")  # the last assignment (monotonic)
        self._outage: Outage | None = None
        while True:
            try:
                return self._session()
            except Exception as exc:
                reason = lost_cluster(exc)
                if reason is None:
                    raise
                if not self._wait_to_reconnect(reason, isinstance(exc, SessionLost)):
                    return self.stats  # stopped while the cluster was away

    def _wait_to_reconnect(self, reason: str, starting_over: bool = False) -> bool:
        """After losing the cluster (or being dropped by the group, ``starting_over``): wait
        out the backoff and reset what a session keeps; False if :attr:`stop` was set
        meanwhile. Raises ClusterLostError once the outage is older than CLUSTER_LOST_WAIT_S."""
        now = time.monotonic()
        out = self._outage
        if out is None:
            out = self._outage = Outage(self.stage.name, _bootstrap(self.client), reason, now)
            out.bootstrap_ms = self.client.get("bootstrap_timeout_ms")
            if starting_over:
                log.warning("stage %s: starting a new session (%s): the cluster may not be "
                            "the one it left; it resumes from its last committed checkpoint",
                            out.stage, reason)
            else:
                log.warning("stage %s: lost the Kafka cluster at %s (%s): stopped without a "
                            "checkpoint; reconnecting for up to %g s, then the stage resumes "
                            "from its last committed checkpoint", out.stage, out.where, reason,
                            out.wait_s)
        else:
            log.info("stage %s: the Kafka cluster at %s is not back (%s)", out.stage,
                     out.where, reason)
        if self._down_since is None and not starting_over:
            self._down_since = now
        try:
            end = now + out.failed(reason, now)
        except Exception:
            self._drop_clients()  # what a session that failed while starting left behind
            raise
        while not self.stop.is_set() and time.monotonic() < end:
            if self.metrics is not None:  # waiting, not stuck: liveness follows the outage
                self.metrics.connected(starting_over)
                self.metrics.turn()
            self.stop.wait(min(0.2, max(0.0, end - time.monotonic())))
        if self.stop.is_set():
            return False
        # A new session: nothing of the lost one carries over; its first connection to the
        # cluster waits at most what is left of the outage.
        self._fatal = None
        self._failed = False
        self.checkpointer.in_txn = False
        self._asked = set()
        self._upstream_ends = {}
        configured = out.bootstrap_ms if out.bootstrap_ms is not None else 30_000
        self.client["bootstrap_timeout_ms"] = max(
            1000, min(configured, int(1000 * out.left_s(time.monotonic()))))
        return True

    def on_lost(self, partitions) -> None:
        """Called inside ``poll`` instead of :meth:`on_revoke` when the group has dropped this
        member (its session expired, the broker does not know it: a long outage, a broker
        restarted empty), or when partitions are revoked after the stage lost the
        connection to the cluster since they were assigned (a broker restarted empty at
        once can answer with a plain rebalance).

        Forgets the partitions without a checkpoint (another member may own them now; their
        next owner resumes from their last committed checkpoint). The consumer rejoins at
        once; when the group assigns it again, the stage starts a new session instead of
        restoring (see :meth:`run`): the cluster may not be the one the member left (a broker
        restarted empty), so its topics are checked again and its clients are new."""
        if self.metrics is not None:
            self.metrics.set_ready(False)
        mine = [tp.partition for tp in partitions if tp.topic == self.stage.input]
        for p in mine:
            self._tasks.pop(p, None)
        self.stats.partitions = sorted(self._tasks)
        if not mine:
            return
        self._group_lost = sorted(set(self._group_lost or []) | set(mine))
        if self._fatal is None and not self._failed:  # not while closing
            log.warning("stage %s: partitions %s lost (the cluster or the group lost this "
                        "member since they were assigned): not checkpointed; a new session "
                        "starts once the group settles", self.stage.name, sorted(mine))

    def _back(self) -> None:
        """Assigned (after losing the cluster: the outage is over)."""
        self._assigned_at = time.monotonic()
        out, self._outage = self._outage, None
        if out is None:
            return
        if out.bootstrap_ms is None:
            self.client.pop("bootstrap_timeout_ms", None)
        else:
            self.client["bootstrap_timeout_ms"] = out.bootstrap_ms
        log.info("stage %s: back on the Kafka cluster %.1f s after losing it (attempt %d)",
                 self.stage.name, time.monotonic() - out.since, out.failures)

    def _session(self) -> RunSummary:
        """One session of :meth:`run`: check the topics, create the clients, consume."""
        from kafka import ConsumerRebalanceListener

        runner = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                if runner._lost_at > runner._assigned_at:  # what it holds may be of another
                    runner.on_lost(revoked)                # cluster: no checkpoint of it
                else:
                    runner.on_revoke(revoked)

            def on_partitions_lost(self, lost):  # kafka-python >= 3.0 (KIP-429)
                runner.on_lost(lost)

            def on_partitions_assigned(self, assigned):
                runner._joined = False  # this join's assignment is handled
                # Dropped by the group since the last assignment: leave it now that it is
                # settled (tansu's group does not settle when a member leaves mid-join) and
                # start over rather than restore in this session.
                if runner._group_lost is not None:
                    runner._fatal = runner._fatal or SessionLost(
                        f"partitions {runner._group_lost} lost with the cluster or the group, "
                        "not checkpointed")
                    return
                runner.on_assign(assigned)
                if runner._fatal is None:
                    runner._back()

        self.prepare()
        self._clients()
        listener = _Listener()
        self._consumer.subscribe([self.stage.input], listener=listener)
        max_poll_s = self.stage.consumer["max_poll_interval_ms"] / 1000
        metrics_every = self.config.metrics["interval_seconds"]
        last_metrics = last_input = time.monotonic()
        try:
            while not self.stop.is_set():
                batches = self._poll()
                if self._joined and self._fatal is None:
                    # a cooperative join that added no partition: the listener was not
                    # called; what it does for an assignment still holds (ready, back)
                    listener.on_partitions_assigned(set())
                if self._fatal is not None:
                    raise self._fatal
                t0 = time.monotonic()
                n = sum(len(m) for m in batches.values())
                if n:
                    last_input = t0
                    self.checkpointer.begin()
                    for tp, msgs in batches.items():
                        task = self._tasks.get(tp.partition)
                        if task is not None and tp.topic == self.stage.input:
                            self._process(tp, task, msgs)
                self.checkpointer.after_batch()
                now = time.monotonic()
                if n:
                    last_input = now  # idle counts from the end of the last batch of input
                self._observe(now - t0 if n else None)
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
        except BaseException as exc:
            # Stop without checkpointing: the batch at hand may be partly processed and
            # partly sent; the restart resumes from the last committed checkpoint.
            self._failed = True
            if isinstance(exc, Exception) and lost_cluster(exc) is not None:
                self._drop_clients()  # the cluster is gone: close them without waiting
            raise
        finally:
            if self._consumer is not None and self._lost_at > self._assigned_at:
                log.warning("stage %s: stopping after losing the Kafka cluster since the last "
                            "assignment: no final checkpoint (a restart resumes from the last "
                            "committed one)", self.stage.name)
                self._drop_clients()  # what it holds may be of another cluster, or unwritable
            self._shutdown()
        return self.stats

    def _poll(self) -> dict:
        """One ``poll``; under ``cooperative-sticky`` the partitions this member keeps go on
        while the group rebalances (KIP-429): kafka-python 3.0's ``poll`` returns nothing
        while a join is in flight (it waits on the join for the whole timeout), so then
        the records already fetched, and the next fetches, come from its fetcher (the
        partitions it still owns; those revoked when the join completes are dropped by
        the loop, which has no task for them)."""
        timeout = self.stage.batch["timeout_ms"]
        if not (self.cooperative and self._tasks and self._rebalancing()):
            return self._consumer.poll(timeout_ms=timeout)
        batches = self._consumer.poll(timeout_ms=min(timeout, 50))
        if batches or not self._tasks or not self._rebalancing():
            return batches
        fetcher = getattr(self._consumer, "_fetcher", None)
        if fetcher is None:
            return batches
        records, _ = fetcher.fetch_records(self.stage.batch["max_records"],
                                           update_offsets=True, timeout_ms=timeout)
        return records

    def _rebalancing(self) -> bool:
        """Whether the consumer is in a join (kafka-python 3.0's internals; False without
        them)."""
        in_progress = getattr(getattr(self._consumer, "_coordinator", None),
                              "rebalance_in_progress", None)
        try:
            return bool(in_progress()) if in_progress is not None else False
        except Exception:
            return False

    def _process(self, tp, task: PartitionTask, msgs) -> None:
        """One partition's messages of a poll: through the executor, then produced."""
        from kafka.errors import MessageSizeTooLargeError

        ex = task.executor
        self._asked = set()  # upstream end offsets asked in this batch
        origins: dict[int, dict] = {}
        by_offset: dict[int, Any] = {}
        records = []
        for m in msgs:
            if task.next_offset is not None and m.offset < task.next_offset:
                continue  # already in the state (a re-fetch after a seek)
            task.next_offset = m.offset + 1
            task.since_checkpoint += 1
            origin = {"topic": tp.topic, "partition": tp.partition, "offset": m.offset}
            item = ex.admit(m.value, m.key, origin, m.offset, m.timestamp)
            if item is None:
                continue  # a duplicate of an upstream output
            if isinstance(item, DeadLetter):
                self._send_dead(task, ex.dead_letter(item), m.key, m.offset)
                continue
            origins[m.offset] = origin
            by_offset[m.offset] = m
            records.append(item)
        self._log_duplicates(ex)
        if not records:
            return
        raws = {o: m.value for o, m in by_offset.items()}
        try:
            result = ex.process(records, origins=origins, raws=raws, dirty=task.dirty)
        except DeferredStateError as exc:  # a restored key's state, built on its first record
            raise self._unloadable(task, next((i for i, op in enumerate(ex.operators)
                                               if op is exc.keyed), -1),
                                   exc.key, exc.reason, task.restored_id) from None
        counts: dict[int, int] = {}
        for o in result.outputs:
            off = o.get("offset")
            n = counts.get(off, 0)
            counts[off] = n + 1
            o["input"] = {"topic": tp.topic, "partition": tp.partition, "offset": off, "n": n}
        encoded = ex.encode(result, origins=origins, raws=raws)  # unencodable: dead letters
        for d in result.dead_letters:
            off = d["origin"].get("offset")
            m = by_offset.get(off)
            self._send_dead(task, d, m.key if m is not None else None, off)
        send = self._producer.send
        track = self.checkpointer.track
        output = self.stage.output
        alarms_only = self.stage.emit == "alarms"
        for o, value in zip(result.outputs, encoded, strict=True):
            if alarms_only and not o.get("alarm"):
                # emit: alarms. Processed, in the state and committed like every input;
                # only not written (outputs counts what reaches the output topic)
                self.stats.outputs -= 1
                continue
            off = o["offset"]
            m = by_offset.get(off)
            key = m.key if m is not None and m.key is not None else _key_bytes(o.get("key"))
            try:
                fut = send(output, key=key, value=value)
            except MessageSizeTooLargeError as exc:  # the key made it too large
                self._send_dead(task, ex.dead_letter(DeadLetter(
                    raw=m.value if m is not None else b"", origin=origins.get(off, {}),
                    reason=f"an output is too large to send: {exc}")), key, off)
                continue
            track(task, fut, len(value), "output", off)

    def _log_duplicates(self, ex: StageExecutor, all_runs: bool = False) -> None:
        """One line per run of dropped duplicates (a sample: its first and last offsets)."""
        for topic, part, first, last, count, mark in ex.deduper.take_dropped_runs(all_runs):
            log.info("stage %s: dropped %d duplicate(s) from %s[%d]: offsets %d..%d, at or "
                     "below the high-water mark %d (what an upstream stage produces again "
                     "after a restart)", self.stage.name, count, topic, part, first[0],
                     last[0], mark[0])

    def _send_dead(self, task: PartitionTask, record: dict, key: bytes | None,
                   offset: int | None = None) -> None:
        from kafka.errors import MessageSizeTooLargeError

        value = encode_record(record)
        headers = [("reason", record["reason"].encode()[:1000])]
        try:
            fut = self._producer.send(self.dlq, key=key, value=value, headers=headers)
        except MessageSizeTooLargeError:  # a long key: the dead letter without it
            fut = self._producer.send(self.dlq, value=value, headers=headers)
        self.checkpointer.track(task, fut, len(value), "dead letter", offset)

    # ---- metrics and shutdown -----------------------------------------------------------

    def _lags(self) -> dict[int, int | None]:
        """Each owned partition's lag (high watermark - next offset), None if not known."""
        from kafka import TopicPartition

        out: dict[int, int | None] = {}
        for p, task in list(self._tasks.items()):
            hw = self._consumer.highwater(TopicPartition(self.stage.input, p))
            out[p] = (max(0, hw - task.next_offset)
                      if hw is not None and task.next_offset is not None else None)
        return out

    def _connected(self) -> bool:
        """Whether the stage reaches its cluster: the consumer knows its group coordinator
        (kafka-python 3.0's internals; a client without them counts as connected)."""
        own = getattr(self._consumer, "connected", None)  # the confluent client's
        if own is not None:
            return own()
        unknown = getattr(getattr(self._consumer, "_coordinator", None),
                          "coordinator_unknown", None)
        if unknown is None:
            return True
        try:
            return not unknown()
        except Exception:  # a client closing under us: not a verdict on the cluster
            return True

    def _observe(self, batch_seconds: float | None) -> None:
        """Once per loop turn: the connection to the cluster (one warning when it is lost,
        one when it is back) and, with :attr:`metrics`, liveness, connection, batch time,
        counters and lag."""
        connected = self._connected()
        dropped = False
        session_s = self.stage.consumer["session_timeout_ms"] / 1000
        if connected:
            self._seen_connected = True
            if self._down_since is not None:
                self._back_at = time.monotonic()
                away = self._back_at - self._down_since
                log.warning("stage %s: connected to the Kafka cluster at %s again after %.1f s",
                            self.stage.name, _bootstrap(self.client), away)
                # Away longer than the session timeout, the member is out of the group (the
                # client learns it at its next heartbeat): its old assignment is not
                # "assigned and restored" until the group assigns it again.
                dropped = away > session_s and self._assigned_at < self._down_since
                self._down_since = None
            elif self._lost_at > self._assigned_at and time.monotonic() - self._back_at > session_s:
                # Back for a session timeout and the group kept this member (heartbeats
                # would have told otherwise): the same cluster, what it holds is its own.
                self._lost_at = float("-inf")
        elif self._down_since is None and self._seen_connected:
            self._down_since = self._lost_at = time.monotonic()
            log.warning("stage %s: lost the connection to the Kafka cluster at %s (group "
                        "coordinator unknown); not ready until it is back", self.stage.name,
                        _bootstrap(self.client))
        m = self.metrics
        if m is None:
            return
        m.connected(connected)
        if dropped:
            m.set_ready(False)
        m.turn()
        if batch_seconds is not None:
            m.batch(batch_seconds)
        m.sync(self.stats)
        m.partitions(self._lags())

    def _metrics(self) -> None:
        now = time.monotonic()
        then, n = self._rate_window
        if now > then:
            self.stats.recent_rate = (self.stats.records_in - n) / (now - then)
        self._rate_window = (now, self.stats.records_in)
        self.stats.seconds = time.time() - self.stats.started_unix
        lags = [lag for lag in self._lags().values() if lag is not None]
        self.stats.lag = sum(lags) if lags else None
        log.info(self.stats.line())
        path = self.config.metrics.get("file")
        if path:
            path = Path(path.replace("{stage}", self.stage.name))
            tmp = path.with_suffix(path.suffix + ".tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(_metrics_file_fields(self.stats), default=str))
            os.replace(tmp, path)

    def _shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.set_ready(False)
        try:
            if self._consumer is not None and self._producer is not None:
                if self._failed:
                    self._finish_pending()
                else:
                    try:
                        self.checkpointer.checkpoint(list(self._tasks))
                    except Exception as exc:
                        log.warning("stage %s: final checkpoint failed: %s", self.stage.name,
                                    exc)
                        if self.eos and self.checkpointer.in_txn:
                            self.checkpointer.abort()
                self._metrics()
                if self.metrics is not None:
                    self.metrics.sync(self.stats)
            for task in self._tasks.values():
                self._log_duplicates(task.executor, all_runs=True)
            self._tasks.clear()  # on_revoke during close() has nothing left to do
        finally:
            for client in (self._consumer, self._producer, self._reader):
                if client is not None:
                    try:
                        client.close()
                    except Exception as exc:  # closing must not hide the reason we stop
                        log.warning("stage %s: close: %s", self.stage.name, exc)


    def _finish_pending(self) -> None:
        """After an error: no new checkpoint (the failed batch must not be committed), but
        the checkpoints already in flight cover only records before them, whose outputs
        were all sent: complete those that can be (fewer records to process again)."""
        log.warning("stage %s: stopping after an error without a checkpoint of the batch "
                    "at hand: a restart resumes from the last committed checkpoint",
                    self.stage.name)
        if self.eos:
            if self.checkpointer.in_txn:
                try:
                    self.checkpointer.abort()
                except Exception as exc:
                    log.warning("stage %s: abort: %s", self.stage.name, exc)
            return
        for task in list(self._tasks.values()):
            try:
                self.checkpointer.advance(task, until=0)
            except Exception as exc:
                log.warning("stage %s: pending checkpoint of partition %d not completed: %s",
                            self.stage.name, task.partition, exc)
                break


def operator_params(op: Any) -> dict:
    """``{"operator": name, "params": {...}}``: what a checkpoint records of an operator (its
    constructor parameters, defaults included, as JSON values)."""
    from shiftwatch.operators.codec import jsonable

    params = op._get_params() if hasattr(op, "_get_params") else {}
    return {"operator": getattr(op, "name", None) or type(op).__name__,
            "params": jsonable(params)}


def params_mismatch(saved: list, now: list) -> str | None:
    """What differs between a checkpoint's operator parameters and the stage's, in words
    (None if nothing)."""
    def text(v: Any) -> str:
        return json.dumps(v, sort_keys=True)

    if len(saved) != len(now):
        return f"{len(saved)} operators, the stage has {len(now)}"
    for i, (a, b) in enumerate(zip(saved, now, strict=True)):
        if not isinstance(a, dict) or a.get("operator") != b["operator"]:
            name = a.get("operator") if isinstance(a, dict) else a
            return f"operator {i + 1} {name!r}, the stage has {b['operator']!r}"
        pa, pb = a.get("params") or {}, b["params"]
        for k in sorted(set(pa) | set(pb)):
            if text(pa.get(k)) != text(pb.get(k)):
                return (f"{b['operator']} {k}={text(pa.get(k))}; the pipeline now says "
                        f"{k}={text(pb.get(k))}")
    return None


def _bootstrap(client: dict) -> str:
    """The bootstrap address of kafka-python settings, for messages."""
    servers = client.get("bootstrap_servers", "localhost:9092")
    return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)


def _key_bytes(key: Any) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        return key.encode()
    return json.dumps(key).encode()


# --------------------------------------------------------------------------------------


def run_pipeline(config: PipelineConfig, stages: list[str] | None = None,
                 idle_exit_s: float | None = None, install_signals: bool = True,
                 reset_state: Iterable[int] | str | None = None) -> int:
    """Run the named stages (default: all) of ``config``, one thread each, until SIGTERM/SIGINT.

    Returns 0 after a clean stop, 1 if a stage failed (the others are then stopped too);
    raises the :class:`~shiftwatch.deploy.errors.UserError` a stage stopped on (a pipeline
    problem, a changelog it cannot restore: one line for the command line).
    ``reset_state``: see :class:`StageRunner`.
    With ``metrics.port`` set, serves ``/metrics``, ``/healthz`` and ``/readyz`` on it
    (:mod:`shiftwatch.deploy.observability`) while the stages run.
    """
    chosen = [config.stage(s) for s in stages] if stages else list(config.stages)
    stop = threading.Event()
    previous = {}
    if install_signals and threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            log.info("signal %s: checkpointing and leaving the group", signum)
            stop.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    try:
        server = _metrics_server(config)
        try:
            return _run_stages(config, chosen, stop, idle_exit_s, server, reset_state)
        finally:
            if server is not None:
                server.close()
    finally:  # a caller that goes on (a test, the demo) gets its own handlers back
        for sig, old in previous.items():
            signal.signal(sig, old)


def _metrics_server(config: PipelineConfig):
    port = config.metrics.get("port")
    if port is None:
        return None
    from shiftwatch.deploy.observability import MetricsServer

    try:
        return MetricsServer(port=port, address=config.metrics.get("address", "0.0.0.0")).start()
    except OSError as exc:
        raise PipelineError(f"{config.source}: metrics.port {port}: cannot listen "
                            f"({exc.strerror or exc}); choose another port") from None


def _run_stages(config: PipelineConfig, chosen: list[StageConfig], stop: threading.Event,
                idle_exit_s: float | None, server, reset_state=None) -> int:
    runners = []
    for s in chosen:
        metrics = None
        if server is not None:
            max_poll_s = s.consumer["max_poll_interval_ms"] / 1000
            metrics = server.stage(
                config.name, s.name, liveness_seconds=max_poll_s + s.batch["timeout_ms"] / 1000,
                stalls_before_unhealthy=config.metrics.get("stalls_before_unhealthy", 3),
                slow_batch_seconds=0.5 * max_poll_s)
        runners.append(StageRunner(config, s, stop=stop, idle_exit_s=idle_exit_s,
                                   metrics=metrics, reset_state=reset_state))
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
    user = [e for e in errors if isinstance(e, UserError)]
    if user:
        raise user[0]
    return 1 if errors else 0


def _metrics_file_fields(stats) -> dict:
    """What the JSON metrics file holds: every counter of the summary, plus the names the
    file had before the runners shared one summary type (``records_out``; ``rate`` = the
    recent rate), which users tailing the file read."""
    d = stats.to_dict()
    d["records_out"] = stats.outputs
    if stats.recent_rate is not None:
        d["rate"] = stats.recent_rate
    return d
