"""The stage's Kafka clients: kafka-python (the default) or confluent-kafka (librdkafka).

``kafka: {client: confluent}`` in a pipeline file, or ``SHIFTWATCH_KAFKA_CLIENT=confluent``
in the environment (the file wins), makes the stage's consumer, producer and changelog
reader confluent-kafka clients behind the narrow kafka-python interface the stage, the
checkpointer and the changelog reader use (:class:`ConfluentConsumer`,
:class:`ConfluentProducer`). The admin client (topic checks in ``prepare``) and the
``consume`` / ``produce`` commands stay on kafka-python.

Settings: the stage's own (group id, offsets, timeouts, isolation, producer batching,
transactional id) are mapped to librdkafka's names; of the ``kafka:`` section, the
kafka-python settings in :data:`RDKAFKA_NAMES` are mapped, the others are ignored with a
warning, and ``kafka: {librdkafka: {name: value}}`` passes librdkafka settings through
verbatim to every confluent client.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from shiftwatch.deploy.pipeline import CLIENT_CHOICES
from shiftwatch.streams.kafka import no_auto_create

log = logging.getLogger("shiftwatch.kafka")

__all__ = ["CLIENT_CHOICES", "client_kind", "check_client", "make_consumer", "make_producer",
           "make_admin", "no_auto_create",
           "ConfluentConsumer", "ConfluentProducer", "RDKAFKA_NAMES"]

ENV = "SHIFTWATCH_KAFKA_CLIENT"

#: kafka-python setting -> librdkafka setting (what ``kafka:`` settings mean for confluent).
RDKAFKA_NAMES = {
    "bootstrap_servers": "bootstrap.servers", "client_id": "client.id",
    "security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
    "ssl_check_hostname": None, "request_timeout_ms": "socket.timeout.ms",
    "metadata_max_age_ms": "metadata.max.age.ms", "reconnect_backoff_ms": "reconnect.backoff.ms",
    "reconnect_backoff_max_ms": "reconnect.backoff.max.ms", "retry_backoff_ms": "retry.backoff.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    # the stage's own
    "group_id": "group.id", "auto_offset_reset": "auto.offset.reset",
    "enable_auto_commit": "enable.auto.commit", "isolation_level": "isolation.level",
    "session_timeout_ms": "session.timeout.ms", "max_poll_interval_ms": "max.poll.interval.ms",
    "heartbeat_interval_ms": "heartbeat.interval.ms", "fetch_max_bytes": "fetch.max.bytes",
    "max_partition_fetch_bytes": "max.partition.fetch.bytes", "acks": "acks",
    "linger_ms": "linger.ms", "batch_size": "batch.size", "compression_type": "compression.type",
    "max_request_size": "message.max.bytes", "transactional_id": "transactional.id",
}
#: kafka-python-only settings that have no librdkafka meaning here (dropped silently).
_KAFKA_PYTHON_ONLY = {"bootstrap_timeout_ms", "api_version", "api_version_auto_timeout_ms",
                      "max_poll_records", "client", "librdkafka", "ssl_check_hostname"}


def client_kind(kafka: dict | None = None) -> str:
    """Which client a pipeline's ``kafka:`` section (then the environment) asks for."""
    kind = (kafka or {}).get("client") or os.environ.get(ENV) or "kafka-python"
    return str(kind)


def check_client(kind: str) -> str | None:
    """None if ``kind`` can be used, else a one-line reason."""
    if kind not in CLIENT_CHOICES:
        return (f"kafka: client must be one of {', '.join(CLIENT_CHOICES)}, got {kind!r}"
                f" (from the pipeline's kafka.client or {ENV})")
    if kind == "confluent":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            return ("kafka: client: confluent needs confluent-kafka, which is not installed "
                    "(pip install 'shiftwatch[confluent]')")
    return None


def rdkafka_conf(settings: dict) -> dict:
    """kafka-python-named ``settings`` as a librdkafka configuration."""
    conf: dict[str, Any] = {}
    for k, v in settings.items():
        if k == "librdkafka":
            continue
        name = RDKAFKA_NAMES.get(k)
        if name is None:
            if k not in _KAFKA_PYTHON_ONLY:
                log.warning("kafka: %s has no librdkafka equivalent here (client: confluent): "
                            "ignored; give librdkafka settings under kafka.librdkafka", k)
            continue
        if v is None:
            continue
        if k == "bootstrap_servers" and isinstance(v, (list, tuple)):
            v = ",".join(v)
        if k == "acks" and v == "all":
            v = "all"
        conf[name] = v
    conf.update(settings.get("librdkafka") or {})
    # no client of the project creates a topic by naming it (librdkafka's producer default
    # is true): the stage creates its topics with the declared partition counts
    conf["allow.auto.create.topics"] = False
    # librdkafka's log through Python logging, under "kafka" (quiet unless --debug, as
    # kafka-python's), not on stderr
    logger = logging.getLogger("kafka.rdkafka")
    conf.setdefault("logger", logger)
    if os.environ.get("SHIFTWATCH_RDKAFKA_DEBUG"):
        # librdkafka's debug contexts (e.g. "consumer,fetch,cgrp"), shown even without --debug
        conf["debug"] = os.environ["SHIFTWATCH_RDKAFKA_DEBUG"]
        logger.setLevel(logging.DEBUG)
    return conf


def make_consumer(kind: str, settings: dict, max_poll_records: int = 500):
    if kind == "confluent":
        return ConfluentConsumer(settings, max_poll_records)
    from kafka import KafkaConsumer

    return no_auto_create(KafkaConsumer(**{**settings, "allow_auto_create_topics": False},
                                        max_poll_records=max_poll_records))


def make_producer(kind: str, settings: dict):
    if kind == "confluent":
        return ConfluentProducer(settings)
    from kafka import KafkaProducer

    return no_auto_create(KafkaProducer(**{**settings, "allow_auto_create_topics": False}))


def make_admin(settings: dict):
    """A kafka-python admin client that creates no topic by asking for it."""
    from kafka import KafkaAdminClient

    return no_auto_create(KafkaAdminClient(**settings))


# ---- confluent-kafka ----------------------------------------------------------------------

class Record:
    """A consumed message with kafka-python's ``ConsumerRecord`` attributes."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "timestamp")

    def __init__(self, m):
        self.topic = m.topic()
        self.partition = m.partition()
        self.offset = m.offset()
        self.key = m.key()
        self.value = m.value()
        self.headers = m.headers() or []
        self.timestamp = m.timestamp()[1]


def _ctp(tp, offset: int | None = None):
    from confluent_kafka import TopicPartition

    if offset is None:
        return TopicPartition(tp.topic, tp.partition)
    return TopicPartition(tp.topic, tp.partition, offset)


def _ktp(ctp):
    from kafka import TopicPartition

    return TopicPartition(ctp.topic, ctp.partition)


def _raise(exc):
    """A confluent exception as the kafka-python error the stage handles by type, when it is
    one of those (a message too large); else as it is."""
    from confluent_kafka import KafkaError
    from kafka.errors import MessageSizeTooLargeError

    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.code() in (KafkaError.MSG_SIZE_TOO_LARGE,
                                                       KafkaError.RECORD_LIST_TOO_LARGE):
        return MessageSizeTooLargeError(err.str())
    return exc


class ConfluentConsumer:
    """The subset of ``kafka.KafkaConsumer`` the stage uses, over ``confluent_kafka.Consumer``.

    Rebalance callbacks run inside :meth:`poll` on the calling thread (as kafka-python's);
    ``seek``/``seek_to_beginning`` called in ``on_partitions_assigned`` become the offsets of
    the assignment."""

    def __init__(self, settings: dict, max_poll_records: int = 500):
        from confluent_kafka import Consumer

        conf = rdkafka_conf(settings)
        conf.setdefault("group.id", f"shiftwatch-reader-{os.getpid()}-{id(self)}")
        conf["enable.auto.offset.store"] = False
        conf.setdefault("enable.auto.commit", False)
        fetch = max(int(conf.get("fetch.max.bytes", 52428800)),
                    int(conf.get("max.partition.fetch.bytes", 1048576)))
        conf.setdefault("receive.message.max.bytes", fetch + 1024 * 1024)
        conf["on_commit"] = self._on_commit
        conf["error_cb"] = self._on_error
        #: the group runs the incremental (cooperative) protocol
        self.cooperative = "cooperative" in str(conf.get("partition.assignment.strategy", ""))
        self._c = Consumer(conf)
        self._max = max_poll_records
        self._listener = None
        self._in_assign: dict | None = None  # partition -> offset, during on_assign
        self._assigned: dict = {}  # ktp -> offset (manual assignment)
        self._pending = False  # the manual assignment is not yet given to librdkafka
        self._pos: dict = {}  # ktp -> next offset to consume
        self._paused: set = set()
        self._commit_cb = None
        self.connected_ok = True

    # -- callbacks
    def _on_commit(self, err, partitions):
        cb = self._commit_cb
        if cb is not None:
            cb({_ktp(p): p.offset for p in partitions or []},
               None if err is None else _exc(err))

    def _on_error(self, err):
        from confluent_kafka import KafkaError

        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.connected_ok = False
        log.debug("confluent consumer: %s", err)

    def connected(self) -> bool:
        return self.connected_ok

    def subscribe(self, topics, listener=None):
        """Join the group on ``topics``; ``listener`` as kafka-python's
        ``ConsumerRebalanceListener``. Under librdkafka's ``cooperative-sticky`` strategy
        (KIP-429) the callbacks get only the partitions added or taken away (possibly none)
        and the partitions kept go on being fetched and delivered during the rebalance."""
        self._listener = listener
        coop = self.cooperative

        def on_assign(consumer, partitions):
            ktps = [_ktp(p) for p in partitions]
            self._in_assign = {}
            try:
                if listener is not None:
                    listener.on_partitions_assigned(ktps)
            finally:
                seeks, self._in_assign = self._in_assign, None
                from confluent_kafka import OFFSET_STORED
                tps = [_ctp(tp, seeks.get(tp, OFFSET_STORED)) for tp in ktps]
                if coop:
                    self._c.incremental_assign(tps)
                else:
                    self._c.assign(tps)
                for tp in ktps:
                    if tp in seeks and seeks[tp] >= 0:
                        self._pos[tp] = seeks[tp]

        def _unassign(partitions):
            if coop:
                if partitions:
                    self._c.incremental_unassign(partitions)
                for p in partitions:
                    self._pos.pop(_ktp(p), None)
            else:
                self._c.unassign()

        def on_revoke(consumer, partitions):
            try:
                if listener is not None:
                    listener.on_partitions_revoked([_ktp(p) for p in partitions])
            finally:
                _unassign(partitions)

        def on_lost(consumer, partitions):
            try:
                if listener is not None:
                    lost = getattr(listener, "on_partitions_lost", None)
                    ktps = [_ktp(p) for p in partitions]
                    (lost or listener.on_partitions_revoked)(ktps)
            finally:
                _unassign(partitions)

        self._c.subscribe(list(topics), on_assign=on_assign, on_revoke=on_revoke,
                          on_lost=on_lost)

    def assign(self, tps):
        """A manual assignment; it (and every later seek of it) reaches librdkafka at the
        next :meth:`poll` (or :meth:`pause`), so the seeks made in between are part of it:
        one ``assign`` with the offsets to start at. (Assigning at the stored offset and
        then again at the beginning races in librdkafka: an outdated reply to the first
        assignment's offset query can start the partition at its end.)"""
        from confluent_kafka import OFFSET_STORED

        self._assigned = {tp: OFFSET_STORED for tp in tps}
        self._paused = set()
        self._pending = bool(tps)
        if not tps:
            self._c.unassign()

    def _flush_assign(self):
        if self._pending:
            self._pending = False
            self._c.assign([_ctp(t, o) for t, o in self._assigned.items()])

    def _reassign(self, tp, offset):
        if self._in_assign is not None:
            self._in_assign[tp] = offset
            return
        if tp in self._assigned:
            self._assigned[tp] = offset
            self._pending = True  # given to librdkafka by _flush_assign
        else:
            self._c.seek(_ctp(tp, offset))

    def seek(self, tp, offset):
        self._reassign(tp, offset)
        self._pos[tp] = offset

    def seek_to_beginning(self, *tps):
        from confluent_kafka import OFFSET_BEGINNING

        for tp in tps:
            self._reassign(tp, OFFSET_BEGINNING)
            try:
                low, _ = self._c.get_watermark_offsets(_ctp(tp), timeout=10)
                self._pos[tp] = low
            except Exception:
                self._pos[tp] = 0

    def seek_to_end(self, *tps):
        from confluent_kafka import OFFSET_END

        for tp in tps:
            self._reassign(tp, OFFSET_END)
            self._pos[tp] = self.end_offsets([tp]).get(tp, 0)

    def position(self, tp):
        return self._pos.get(tp, 0)

    def highwater(self, tp):
        try:
            low, high = self._c.get_watermark_offsets(_ctp(tp), cached=True)
        except Exception:
            return None
        return high if high is not None and high >= 0 else None

    def end_offsets(self, tps, timeout_ms: int = 10000):
        out = {}
        for tp in tps:
            try:
                _, high = self._c.get_watermark_offsets(_ctp(tp), timeout=timeout_ms / 1000)
            except Exception as exc:
                raise _raise(exc) from None
            out[tp] = high
        return out

    def poll(self, timeout_ms: int = 0, max_records: int | None = None):
        from confluent_kafka import KafkaError, KafkaException

        self._flush_assign()
        msgs = self._c.consume(max_records or self._max, timeout_ms / 1000)
        out: dict = {}
        if not msgs:
            return out
        self.connected_ok = True
        last = None
        lst: list = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    # as kafka-python: the member left the group; the next poll rejoins
                    # (the partitions come back through the rebalance callbacks)
                    log.warning("confluent consumer: %s; rejoining the group", err.str())
                    continue
                raise KafkaException(err)
            r = Record(m)
            key = (r.topic, r.partition)
            if key != last:
                tp = _ktp_cached(r.topic, r.partition)
                lst = out.setdefault(tp, [])
                last = key
            lst.append(r)
        for tp, records in out.items():
            self._pos[tp] = records[-1].offset + 1
        return out

    def commit(self, offsets=None):
        try:
            self._c.commit(offsets=[_ctp(tp, om.offset) for tp, om in offsets.items()],
                           asynchronous=False)
        except Exception as exc:
            raise _raise(exc) from None

    def commit_async(self, offsets=None, callback=None):
        self._commit_cb = callback
        self._c.commit(offsets=[_ctp(tp, om.offset) for tp, om in offsets.items()],
                       asynchronous=True)

    def group_metadata(self):
        return self._c.consumer_group_metadata()

    def pause(self, *tps):
        self._flush_assign()
        self._paused |= set(tps)
        self._c.pause([_ctp(tp) for tp in tps])

    def partitions_for_topic(self, topic):
        md = self._c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return None
        return set(md.partitions)

    def topics(self):
        return set(self._c.list_topics(timeout=10).topics)

    def close(self, autocommit: bool = False, timeout_ms: int | None = None):
        self._c.close()


_TPS: dict = {}


def _ktp_cached(topic, partition):
    tp = _TPS.get((topic, partition))
    if tp is None:
        from kafka import TopicPartition

        tp = _TPS[(topic, partition)] = TopicPartition(topic, partition)
    return tp


def _exc(err):
    from confluent_kafka import KafkaException

    return _raise(KafkaException(err))


class Future:
    """What ``ConfluentProducer.send`` returns: kafka-python's ``FutureRecordMetadata`` as the
    stage uses it, resolved by the delivery callback (which the producer's ``poll`` fires)."""

    __slots__ = ("_p", "_done", "exception", "value", "_callbacks", "_errbacks")

    def __init__(self, producer):
        self._p = producer
        self._done = False
        self.exception = None
        self.value = None
        self._callbacks = None
        self._errbacks = None

    def _deliver(self, err, msg):
        if err is not None:
            self.exception = _exc(err)
        else:
            self.value = msg
        self._done = True
        for cb in (self._errbacks if err is not None else self._callbacks) or ():
            try:
                cb(self.exception if err is not None else msg)
            except Exception as exc:  # as kafka-python: a callback's error is logged
                log.warning("delivery callback failed: %s", exc)

    @property
    def is_done(self) -> bool:
        if not self._done:
            self._p.poll(0)
        return self._done

    def succeeded(self) -> bool:
        return self._done and self.exception is None

    def failed(self) -> bool:
        return self._done and self.exception is not None

    def add_callback(self, fn, *args, **kwargs):
        f = (lambda v: fn(*args, v, **kwargs)) if args or kwargs else fn
        if self._done:
            if self.exception is None:
                f(self.value)
        else:
            self._callbacks = [*(self._callbacks or ()), f]
        return self

    def add_errback(self, fn, *args, **kwargs):
        f = (lambda v: fn(*args, v, **kwargs)) if args or kwargs else fn
        if self._done:
            if self.exception is not None:
                f(self.exception)
        else:
            self._errbacks = [*(self._errbacks or ()), f]
        return self

    def get(self, timeout: float | None = None):
        from kafka.errors import KafkaTimeoutError

        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done:
            if deadline is not None and time.monotonic() > deadline:
                raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
            self._p.poll(0.05)
        if self.exception is not None:
            raise self.exception
        return self.value


class ConfluentProducer:
    """The subset of ``kafka.KafkaProducer`` the stage uses, over ``confluent_kafka.Producer``."""

    def __init__(self, settings: dict):
        from confluent_kafka import Producer

        conf = rdkafka_conf(settings)
        # keys go to the partitions kafka-python (and Java) choose: a pipeline may switch
        # clients without moving keys between partitions
        conf.setdefault("partitioner", "murmur2_random")
        if "transactional.id" in conf:
            conf.setdefault("enable.idempotence", True)
        self._conf = conf
        self._p = Producer(conf)
        self._n = 0

    def poll(self, timeout: float = 0):
        return self._p.poll(timeout)

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        from confluent_kafka import KafkaException

        fut = Future(self._p)
        kw: dict[str, Any] = {"on_delivery": fut._deliver}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        if timestamp_ms is not None:
            kw["timestamp"] = timestamp_ms
        produce = self._p.produce
        while True:
            try:
                produce(topic, value, key, **kw)
                break
            except BufferError:
                self._p.poll(0.05)
            except KafkaException as exc:
                raise _raise(exc) from None
        self._n += 1
        if self._n % 512 == 0:
            self._p.poll(0)
        return fut

    def flush(self, timeout: float | None = None):
        from kafka.errors import KafkaTimeoutError

        left = self._p.flush(-1 if timeout is None else timeout)
        if left and timeout:
            raise KafkaTimeoutError(f"{left} message(s) not delivered in {timeout} s")

    def close(self, timeout: float | None = None):
        if timeout == 0:
            self._p.purge()
            self._p.flush(0)
        else:
            self._p.flush(30 if timeout is None else timeout)

    def _txn(self, name, *args):
        try:
            return getattr(self._p, name)(*args)
        except Exception as exc:
            raise _raise(exc) from None

    def init_transactions(self):
        self._txn("init_transactions", 60)

    def begin_transaction(self):
        self._txn("begin_transaction")

    def send_offsets_to_transaction(self, offsets, group_metadata):
        self._txn("send_offsets_to_transaction",
                  [_ctp(tp, om.offset) for tp, om in offsets.items()], group_metadata, 60)

    def commit_transaction(self):
        self._txn("commit_transaction", 60)

    def abort_transaction(self):
        self._txn("abort_transaction", 60)
