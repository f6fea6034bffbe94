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
  coordinates so duplicates can be dropped (:mod:`shiftwatch.deploy.deduper`, which a
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
plus the ``input`` coordinates. This module is the consumer loop (poll, execute, produce,
metrics, shutdown); :mod:`shiftwatch.deploy.kafka.assignment` assigns and restores
partitions, :mod:`shiftwatch.deploy.kafka.session` holds the clients and reconnects,
:mod:`shiftwatch.deploy.kafka.checkpoint` writes checkpoints and
:mod:`shiftwatch.deploy.kafka.run` runs a pipeline's stages.

Bad input (not JSON, not an object, a missing field, a value an operator rejects) goes to
``<pipeline>.<stage>.dlq`` in the one dead-letter schema (``reason``, ``operator``, ``key``,
``origin`` = ``{topic, partition, offset}``, ``raw``, ``raw_base64``), keyed like its input.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shiftwatch.codec import encode_record
from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.kafka.assignment import (
    MESSAGE_OVERHEAD,
    PartitionAssignment,
    operator_params,
)
from shiftwatch.deploy.kafka.changelog import ChangelogReader
from shiftwatch.deploy.kafka.checkpoint import Checkpointer, OffsetsNotCommitted, PartitionTask
from shiftwatch.deploy.kafka.clients import check_client, client_kind
from shiftwatch.deploy.kafka.connect import SessionLost, lost_cluster
from shiftwatch.deploy.kafka.coverage import CoverageCheck
from shiftwatch.deploy.kafka.session import ClusterSession
from shiftwatch.deploy.pipeline import PipelineConfig, PipelineError, StageConfig
from shiftwatch.deploy.time_rule import rule_params
from shiftwatch.operators.keyed import DeferredStateError
from shiftwatch.records import DeadLetter

__all__ = ["StageRunner", "MESSAGE_OVERHEAD"]

log = logging.getLogger("shiftwatch.kafka")


class StageRunner(ClusterSession, PartitionAssignment, CoverageCheck):
    """Run one stage of a pipeline as a consumer-group member until stopped.

    Its work is split by concern: :class:`~shiftwatch.deploy.kafka.session.ClusterSession`
    (topics, clients, reconnecting after losing the cluster, :meth:`run`),
    :class:`~shiftwatch.deploy.kafka.assignment.PartitionAssignment` (assignment, restore,
    revocation) and this class, the loop of one session: poll -> executor -> produce, then
    metrics and shutdown.

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
        #: when a stage upstream of this one in the same process was last running (monotonic
        #: seconds; set by run_pipeline): idle time counts from it too, so a downstream stage
        #: does not exit while its input is still being made
        self.upstream_active: Callable[[], float] = lambda: float("-inf")
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
        self.checkpointer.params = rule_params(stage.time) + [  # the time rule first, if on
            operator_params(spec.build()) for spec in stage.operators]
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
        #: why the stage stopped with its input not done (``--exit-when-idle`` stopping with
        #: partitions behind, a final checkpoint that failed); None after a complete run.
        #: :func:`~shiftwatch.deploy.kafka.run.run_pipeline` then returns 1.
        self.incomplete: str | None = None
        self._incomplete_since: float | None = None
        self._rate_window = (time.monotonic(), 0)
        self.alerts = None
        if stage.alerts is not None:  # alarms POSTed by a thread: never blocks the loop
            from shiftwatch.sinks.alerts import WebhookAlertSink

            settings = {"undelivered": os.path.join(
                tempfile.gettempdir(), "shiftwatch-alerts-undelivered-{stage}.jsonl"),
                **stage.alerts}
            self.alerts = WebhookAlertSink(**settings, pipeline=config.name,
                                           stage=stage.name, metrics=metrics)

    # ---- what the checkpointer and the de-duplication ask of the stage --------------

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

    # ---- main loop ----------------------------------------------------------------------

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
                if runner._lost_at > runner._assigned_at:  # (back after losing the cluster)
                    runner.check_kept(assigned)
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
                if not n:
                    self._expire_idle()
                self.checkpointer.after_batch()
                now = time.monotonic()
                if n:
                    last_input = now  # idle counts from the end of the last batch of input
                    self._incomplete_since = None
                self._observe(now - t0 if n else None)
                if self._tasks and self._down_since is None and self._seen_connected:
                    self._check_coverage(now)  # (every few seconds; an input topic gone ends
                    #                             the session: the stage waits for it)
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
                elif (self.idle_exit_s is not None
                      and now - max(last_input, self.upstream_active()) > self.idle_exit_s
                      and self._idle_exit(now)):
                    break  # every partition of the input done, or waited for that in vain
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

    def _expire_idle(self) -> None:
        """With ``state.clock: wall``, keys also expire while no input comes; the deletions go
        into the next timed checkpoint (with event time nothing moves without records)."""
        for task in self._tasks.values():
            ex = task.executor
            if ex.expiry is not None and ex.expiry.wall and ex.expire(task.dirty):
                task.since_checkpoint += 1

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
        if self.alerts is not None:  # queued for the webhook's thread; returns at once
            self.alerts.write(result.outputs)

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
                        self.checkpointer.checkpoint(list(self._tasks), final=True)
                    except OffsetsNotCommitted as exc:  # written; only the group's view lags
                        log.warning("stage %s: the final checkpoint is written but the group "
                                    "refused its offset commit (%s): the partitions' next "
                                    "owner resumes from the checkpoint; the group's committed "
                                    "offsets (lag) catch up when it commits",
                                    self.stage.name, exc)
                    except Exception as exc:
                        self.incomplete = self.incomplete or (
                            f"stage {self.stage.name}: final checkpoint failed "
                            f"({type(exc).__name__}: {exc}): the records since the last "
                            "committed checkpoint are processed again by the partitions' next "
                            "owner")
                        log.error(self.incomplete)
                        if self.eos and self.checkpointer.in_txn:
                            self.checkpointer.abort()
                self._metrics()
                if self.metrics is not None:
                    self.metrics.sync(self.stats)
            for task in self._tasks.values():
                self._log_duplicates(task.executor, all_runs=True)
            self._tasks.clear()  # on_revoke during close() has nothing left to do
        finally:
            self._close_admin()
            if self.alerts is not None:  # delivery goes on for drain_s, then what is left
                self.alerts.close()          # is counted and kept in the undelivered file
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


def _key_bytes(key: Any) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        return key.encode()
    return json.dumps(key).encode()


def _metrics_file_fields(stats) -> dict:
    """What the JSON metrics file holds: every counter of the summary, plus the names the
    file had before the runners shared one summary type (``records_out``; ``rate`` = the
    recent rate), which users tailing the file read."""
    d = stats.to_dict()
    d["records_out"] = stats.outputs
    if stats.recent_rate is not None:
        d["rate"] = stats.recent_rate
    return d
