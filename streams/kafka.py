"""Replaying Kafka history: a source reading a topic between two offsets or timestamps.

It assigns the partitions itself (no consumer group, nothing committed), so replaying
production history never disturbs the stages that consume the same topic. ``shiftwatch
replay`` opens it from a spec string::

    shiftwatch replay 'kafka:sensors.raw?bootstrap=kafka:9092&start_time=2026-11-01T00:00:00' \\
        --source-opt value=temp --source-opt key=sensor --operator river:ADWIN --out runs/nov
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from shiftwatch.operators.base import DeadLetter, get_field
from shiftwatch.streams.base import Source

__all__ = ["KafkaSource", "parse_time"]


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
        up to ``end`` exclusive (default: the end of each partition when the source opens).
    start_time, end_time
        Message timestamps (epoch seconds or ISO-8601): only messages with
        ``start_time <= timestamp < end_time``.
    partitions
        Partition numbers to read (default: all).
    value, key, ts
        Fields holding the value, the key and the event time (as in the file sources);
        by default ``value``, the record's ``key`` or else the message key, and the record's
        ``ts`` or else the message timestamp.
    read_committed
        Skip records of aborted transactions (on brokers that implement it).
    timeout_s
        Give up (``TimeoutError``) when the broker sends nothing for this long before the end.
    client
        Further kafka-python settings (security: ``security_protocol``, ``sasl_*``, ``ssl_*``).

    Partitions are read one after another, each in offset order, so every key's records come
    in the order they were written. Each record gets ``meta.kafka`` = its topic, partition,
    offset and timestamp. Messages that are not a JSON object become dead letters.
    """

    def __init__(self, topic: str, bootstrap: str = "localhost:9092", start: int | None = None,
                 end: int | None = None, start_time: Any = None, end_time: Any = None,
                 partitions: Sequence[int] | None = None, value: str = "value",
                 key: str | None = None, ts: str | None = None, read_committed: bool = False,
                 timeout_s: float = 30.0, client: dict | None = None):
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
            self._consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                isolation_level="read_committed" if self.read_committed else
                "read_uncommitted", **self.client)
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
        for p in chosen:
            tp = TopicPartition(self.topic, p)
            c.assign([tp])
            begin = c.beginning_offsets([tp])[tp]
            start = max(begin, self.start or 0)
            if self.start_time is not None:
                found = c.offsets_for_times({tp: int(self.start_time * 1000)}).get(tp)
                # Some brokers answer "no such message" with timestamp -1 instead of None.
                if found is None or found.timestamp < 0:
                    continue
                start = max(start, found.offset)
            end = self.end
            c.seek(tp, start)
            yield from self._read(c, tp, end)

    def _read(self, c, tp, end: int | None) -> Iterator[dict | DeadLetter]:
        # The end of a partition is "nothing more arrives" after the offset the broker
        # reported when we reached it: some Kafka-protocol brokers report a low end offset.
        reported_end = c.end_offsets([tp])[tp]
        last_data = time.monotonic()
        while True:
            batch = c.poll(timeout_ms=200).get(tp, [])
            for m in batch:
                if end is not None and m.offset >= end:
                    return
                if self.end_time is not None and m.timestamp >= self.end_time * 1000:
                    return
                if self.start_time is not None and m.timestamp < self.start_time * 1000:
                    continue
                yield self._record(m)
            now = time.monotonic()
            if batch:
                last_data = now
                continue
            if c.position(tp) >= reported_end and now - last_data > 0.5:
                return
            if now - last_data > self.timeout_s:
                raise TimeoutError(f"kafka {self.topic}[{tp.partition}]: nothing for "
                                   f"{self.timeout_s} s before offset {reported_end}")

    def _record(self, m) -> dict | DeadLetter:
        where = {"topic": m.topic, "partition": m.partition, "offset": m.offset}
        try:
            record = json.loads(m.value)
        except (TypeError, ValueError):
            return DeadLetter(raw=m.value, reason="invalid JSON", origin=where)
        if not isinstance(record, dict):
            return DeadLetter(raw=m.value, reason="message is not a JSON object", origin=where)
        try:
            if self.value != "value":
                record["value"] = get_field(record, self.value)
            if self.key is not None:
                record["key"] = get_field(record, self.key)
            elif "key" not in record and m.key is not None:
                record["key"] = m.key.decode("utf-8", errors="replace")
            if self.ts is not None:
                record["ts"] = get_field(record, self.ts)
            elif "ts" not in record and m.timestamp is not None and m.timestamp >= 0:
                record["ts"] = m.timestamp / 1000
        except ValueError as exc:
            return DeadLetter(raw=m.value, reason=str(exc), origin=where)
        if isinstance(record.get("ts"), float) and not math.isfinite(record["ts"]):
            return DeadLetter(raw=m.value, reason="ts is not finite", origin=where)
        meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
        record["meta"] = {**meta, "kafka": {**where, "timestamp": m.timestamp}}
        return record

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
