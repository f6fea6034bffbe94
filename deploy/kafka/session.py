"""The session of a Kafka stage with its cluster (part of
:class:`~shiftwatch.deploy.kafka.stage.StageRunner`).

:class:`ClusterSession` checks (or creates) the topics, makes the clients (consumer,
producer, changelog reader) for one session, and keeps the stage going when the cluster goes
away: a lost cluster ends the session without a checkpoint, as a crash would, and the stage
reconnects with backoff and resumes from its last committed checkpoint
(:meth:`ClusterSession.run`); once a turn it watches the connection and reports liveness,
readiness and lag (:meth:`ClusterSession._observe`).

The class is a mixin: it works on the :class:`~shiftwatch.deploy.kafka.stage.StageRunner` it
is part of, whose ``_session`` is the poll -> executor -> produce loop of one session.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from shiftwatch.deploy.kafka.changelog import ChangelogReader
from shiftwatch.deploy.kafka.clients import make_admin, make_consumer, make_producer
from shiftwatch.deploy.kafka.connect import Outage, SessionLost, lost_cluster
from shiftwatch.deploy.kafka.topics import missing_topic, not_created
from shiftwatch.deploy.pipeline import ASSIGNORS, PipelineError, client_settings

if TYPE_CHECKING:
    from shiftwatch.deploy.executor import RunSummary

__all__ = ["ClusterSession", "LEAVE_GROUP_MS"]

log = logging.getLogger("shiftwatch.kafka")

#: Milliseconds a stage that lost its cluster gives its consumer to leave the group.
LEAVE_GROUP_MS = 2000


class ClusterSession:
    """Topics, clients, reconnection and the connection's health (a mixin of
    ``StageRunner``)."""

    def prepare(self) -> None:
        """Check (or create) the topics, before anything is consumed.

        Called by :meth:`run` first. Raises :class:`~shiftwatch.deploy.pipeline.PipelineError` (one
        line) when the input or output topic is missing and ``topics.create`` is false, or the
        changelog has fewer partitions than the input; kafka-python errors when the cluster
        cannot be reached.
        """
        admin = make_admin(client_settings(self.client, "admin"))
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
        log.info("stage %s: Kafka client %s", self.stage.name, _client_version(self.kind))
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
        self._close_admin()
        self._coverage = None
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

    def check_kept(self, added) -> None:
        """Back on a cluster after losing it, a join that keeps partitions this member held
        (``cooperative-sticky`` keeps what a member says it owns, ``added`` are the others):
        a kept partition whose position is beyond its end offset on the cluster now is not
        the log the member read (a broker restarted empty: its log starts over, and a fetch
        beyond its end returns nothing, on tansu without an error). Such partitions are
        lost as in :meth:`on_lost` (not checkpointed; a new session starts, so the group
        assigns them afresh and the stage reads the new log from its beginning)."""
        from kafka import TopicPartition

        new = {tp.partition for tp in added if tp.topic == self.stage.input}
        kept = [TopicPartition(self.stage.input, p) for p in sorted(self._tasks)
                if p not in new]
        if not kept or self._consumer is None:
            return
        try:
            ends = self._consumer.end_offsets(kept)
            gone = [tp for tp in kept if ends.get(tp) is not None
                    and self._consumer.position(tp) > ends[tp]]
        except Exception as exc:  # (no answer: the next poll tells; nothing is decided here)
            log.info("stage %s: the kept partitions' end offsets are unknown (%s: %s)",
                     self.stage.name, type(exc).__name__, exc)
            return
        if gone:
            log.warning("stage %s: partitions %s are past their end on the cluster it is back "
                        "on (the log is not the one it read: a broker restarted empty)",
                        self.stage.name, [tp.partition for tp in gone])
            self.on_lost(gone)

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


def _bootstrap(client: dict) -> str:
    """The bootstrap address of kafka-python settings, for messages."""
    servers = client.get("bootstrap_servers", "localhost:9092")
    return ",".join(servers) if isinstance(servers, (list, tuple)) else str(servers)


def _client_version(kind: str) -> str:
    """``kafka-python 3.0.12`` or ``confluent-kafka 2.16.0 (librdkafka 2.16.0)``, for the log."""
    try:
        if kind == "confluent":
            import confluent_kafka

            return (f"confluent-kafka {confluent_kafka.__version__} "
                    f"(librdkafka {confluent_kafka.libversion()[0]})")
        import kafka

        return f"kafka-python {kafka.__version__}"
    except Exception:  # a name for a log line, never a failure
        return kind
