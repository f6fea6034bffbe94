"""Replaying Kafka history: a source reading a topic between two offsets or timestamps.

It assigns the partitions itself (no consumer group, nothing committed), so replaying
production history never disturbs the stages that consume the same topic. ``shiftwatch
replay`` opens it from a spec string::

    shiftwatch replay 'kafka:sensors.raw?bootstrap=kafka:9092&start_time=2026-11-01T00:00:00' \\
        --source-opt value=temp --source-opt key=sensor --operator river:ADWIN --out runs/nov
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from shiftwatch.codec import decode_record
from shiftwatch.records import BadInput, DeadLetter
from shiftwatch.streams.base import Source

__all__ = ["KafkaSource", "parse_time", "learn_ends", "no_auto_create"]


def no_auto_create(client: Any) -> Any:
    """``client`` (a kafka-python consumer, producer or admin client) made unable to create
    a topic by asking for it; returns it.

    A Kafka broker with ``auto.create.topics.enable`` (Apache Kafka's default, and tansu's)
    creates any topic a client's metadata request names, with the broker's default partition
    count: a typo'd topic, or a pipeline's topics on a cluster that restarted empty, would
    appear with partitions nobody declared. Every kafka-python client shiftwatch makes is
    built with ``allow_auto_create_topics=False`` and passed through here, because
    kafka-python 3.0.12 does not hand that setting to the metadata its requests are made
    from (its ``ClusterMetadata`` keeps the default, True), so the setting alone changes
    nothing. (The confluent client is told ``allow.auto.create.topics=false``, which
    librdkafka honours.)
    """
    for name in ("_cluster", "_metadata"):  # a consumer's, a producer's
        cluster = getattr(client, name, None)
        config = getattr(cluster, "config", None)
        if isinstance(config, dict):
            config["allow_auto_create_topics"] = False
    manager = getattr(getattr(client, "_client", None), "_manager", None)
    config = getattr(getattr(manager, "cluster", None), "config", None)
    if isinstance(config, dict):  # the admin client's (and the others' own) metadata
        config["allow_auto_create_topics"] = False
    return client


def parse_time(t: Any) -> float | None:
    """Seconds since the epoch from a number or an ISO-8601 string (UTC unless it says).

    >>> parse_time("2026-01-01T00:00:00"), parse_time(5), parse_time(None)
    (1767225600.0, 5.0, None)
    """
    if t is None or t == "":
        return None
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return float(t)
    if isinstance(t, datetime):
        d = t
    else:
        try:
            return float(t)
        except (TypeError, ValueError):
            pass
        try:
            d = datetime.fromisoformat(str(t))
        except ValueError:
            raise ValueError(f"time {t!r} is neither epoch seconds nor ISO-8601") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


class KafkaSource(Source):
    """Records of a Kafka topic from ``start`` up to ``end`` (offsets or times), once.

    Parameters
    ----------
    topic
        The topic to read.
    bootstrap
        Bootstrap servers, ``host:port[,host:port]``.
    start, end
        Offsets, the same for every partition: from ``start`` (default: the beginning)
        up to ``end`` exclusive (default: the end each partition has when iteration starts;
        records written later are not read, so a replay of a live topic ends).
    start_time, end_time
        Message timestamps (epoch seconds or ISO-8601): only messages with
        ``start_time <= timestamp < end_time``.
    partitions
        Partition numbers to read (default: all).
    value, key, ts
        Fields holding the value, the key and the event time (as in the file sources);
        by default ``value``, the record's ``key`` or else the message key, and the record's
        ``ts`` or else the message timestamp.
    follow
        Keep reading after the end (tail the topic) until :meth:`close`, records of all
        partitions in arrival order (each partition's in offset order).
    read_committed
        Skip records of aborted transactions (on brokers that implement it).
    timeout_s
        Give up (``TimeoutError``) when the broker sends nothing for this long before the end.
    client
        Further kafka-python settings (security: ``security_protocol``, ``sasl_*``, ``ssl_*``).

    Notes
    -----
    Partitions are read one after another, each in offset order, so every key's records come
    in the order they were written. Each record gets ``meta.kafka`` = its topic, partition,
    offset and timestamp. Messages are decoded by
    :func:`shiftwatch.codec.decode_record`, as a Kafka stage decodes its input; those
    it rejects become dead letters.
    """

    def __init__(self, topic: str, bootstrap: str = "localhost:9092", start: int | None = None,
                 end: int | None = None, start_time: Any = None, end_time: Any = None,
                 partitions: Sequence[int] | None = None, value: str = "value",
                 key: str | None = None, ts: str | None = None, read_committed: bool = False,
                 timeout_s: float = 30.0, client: dict | None = None, follow: bool = False):
        self.topic = topic
        self.bootstrap = bootstrap
        self.start = None if start is None else int(start)
        self.end = None if end is None else int(end)
        self.start_time = parse_time(start_time)
        self.end_time = parse_time(end_time)
        if isinstance(partitions, str):
            partitions = [int(p) for p in partitions.split(",") if p.strip()]
        elif isinstance(partitions, int):
            partitions = [partitions]
        self.partitions = partitions
        self.value = value
        self.key = key
        self.ts = ts
        if isinstance(read_committed, str):
            read_committed = read_committed.lower() in ("1", "true", "yes")
        self.read_committed = read_committed
        self.timeout_s = float(timeout_s)
        if isinstance(follow, str):
            follow = follow.lower() in ("1", "true", "yes")
        self.follow = bool(follow)
        self.client = dict(client or {})
        self.name = topic
        if self.start is not None and self.start < 0:
            raise ValueError(f"start must be an offset >= 0, got {start!r}")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"end ({end}) is before start ({start})")
        self._consumer = None

    def _open(self):
        from kafka import KafkaConsumer

        if self._consumer is None:
            self._consumer = no_auto_create(KafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                isolation_level="read_committed" if self.read_committed else
                "read_uncommitted", **{**self.client, "allow_auto_create_topics": False}))
        return self._consumer

    def __iter__(self) -> Iterator[dict | DeadLetter]:
        from kafka import TopicPartition

        c = self._open()
        parts = c.partitions_for_topic(self.topic)
        if not parts:
            raise ValueError(f"kafka topic {self.topic!r} does not exist at {self.bootstrap}")
        chosen = sorted(parts) if self.partitions is None else [int(p) for p in self.partitions]
        missing = sorted(set(chosen) - set(parts))
        if missing:
            raise ValueError(f"kafka topic {self.topic!r} has no partition {missing}")
        tps = [TopicPartition(self.topic, p) for p in chosen]
        starts = self._starts(c, tps)
        tps = [tp for tp in tps if tp in starts]
        if not tps:
            return
        if self.follow:
            yield from self._tail(c, tps, starts)
            return
        ends, buffered = self._ends(c, tps, starts)
        for tp in tps:
            end = ends[tp] if self.end is None else min(ends[tp], self.end)
            yield from self._read(c, tp, buffered[tp], end)

    def _starts(self, c, tps) -> dict:
        begins = c.beginning_offsets(tps)
        starts = {}
        for tp in tps:
            start = max(begins[tp], self.start or 0)
            if self.start_time is not None:
                found = c.offsets_for_times({tp: int(self.start_time * 1000)}).get(tp)
                # Some brokers answer "no such message" with timestamp -1 instead of None.
                if found is None or found.timestamp < 0:
                    continue
                start = max(start, found.offset)
            starts[tp] = start
        return starts

    def _ends(self, c, tps, starts) -> tuple[dict, dict]:
        """Each partition's end offset now, and the messages fetched to learn it."""
        listed = c.end_offsets(tps)
        c.assign(tps)
        for tp in tps:
            c.seek(tp, starts[tp])
        return learn_ends(c, tps, listed)

    def _read(self, c, tp, buffered: list, end: int) -> Iterator[dict | DeadLetter]:
        for m in buffered:
            if m.offset >= end:
                return
            if self._past_end_time(m):
                return
            if self._wanted(m):
                yield self._record(m)
        nxt = buffered[-1].offset + 1 if buffered else None
        c.assign([tp])
        if nxt is not None:
            c.seek(tp, nxt)
            if nxt >= end:
                return
        elif c.position(tp) >= end:
            return
        last_data = time.monotonic()
        while True:
            batch = c.poll(timeout_ms=200).get(tp, [])
            for m in batch:
                if m.offset >= end or self._past_end_time(m):
                    return
                if self._wanted(m):
                    yield self._record(m)
            now = time.monotonic()
            if batch:
                last_data = now
                if batch[-1].offset + 1 >= end:
                    return
                continue
            if c.position(tp) >= end:
                return
            if now - last_data > self.timeout_s:
                raise TimeoutError(f"kafka {self.topic}[{tp.partition}]: nothing for "
                                   f"{self.timeout_s} s before offset {end}")

    def _tail(self, c, tps, starts) -> Iterator[dict | DeadLetter]:
        c.assign(tps)
        for tp in tps:
            c.seek(tp, starts[tp])
        done: set = set()
        while len(done) < len(tps):
            for tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    if tp in done:
                        break
                    if (self.end is not None and m.offset >= self.end) or \
                            self._past_end_time(m):
                        done.add(tp)
                        c.pause(tp)
                        break
                    if self._wanted(m):
                        yield self._record(m)

    def _past_end_time(self, m) -> bool:
        return self.end_time is not None and m.timestamp >= self.end_time * 1000

    def _wanted(self, m) -> bool:
        return self.start_time is None or m.timestamp >= self.start_time * 1000

    def _record(self, m) -> dict | DeadLetter:
        where = {"topic": m.topic, "partition": m.partition, "offset": m.offset}
        try:
            return decode_record(m.value, m.key, value=self.value, key=self.key, ts=self.ts,
                                 timestamp_ms=m.timestamp,
                                 meta={"kafka": {**where, "timestamp": m.timestamp}})
        except BadInput as exc:
            return DeadLetter(raw=m.value if m.value is not None else b"", reason=str(exc),
                              origin=where)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def learn_ends(consumer: Any, tps: list, listed: dict, idle_s: float = 1.0
               ) -> tuple[dict, dict]:
    """Each partition's end offset now, and the messages fetched while learning it (by
    partition), for a consumer already assigned to ``tps`` and positioned.

    The end is the larger of the listed end offset (``listed``, asked before the first fetch)
    and the high-water mark of a first fetch: some Kafka-protocol brokers (tansu) list an end
    offset below the real one, but every fetch response carries the true high-water mark.
    A partition that brings nothing for ``idle_s`` seconds keeps its listed end. Every
    reader of a topic's history (the Kafka source, ``shiftwatch consume``, the demo) learns
    its ends here.
    """
    held: dict = {tp: [] for tp in tps}
    ends: dict = {}
    last_data = time.monotonic()
    while len(ends) < len(tps):
        got = consumer.poll(timeout_ms=200)
        now = time.monotonic()
        for tp, msgs in got.items():
            held.setdefault(tp, []).extend(msgs)
        if got:
            last_data = now
        for tp in tps:
            hw = consumer.highwater(tp)
            if hw is not None and tp not in ends:
                ends[tp] = max(hw, listed[tp])
        if not got and now - last_data > idle_s:  # nothing to fetch: the listed end
            for tp in tps:
                ends.setdefault(tp, listed[tp])
    return ends, held
