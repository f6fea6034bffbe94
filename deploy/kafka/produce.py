"""``shiftwatch produce``: write a replayable source into a Kafka topic as JSON records.

Any source ``shiftwatch replay`` reads from a file or a data set (CSV, JSON Lines,
``river:NAME``, ``synth:NAME``; see ``shiftwatch sources``) becomes messages of one topic:

* the message value is the record (``key``, ``ts``, ``value``, and ``y``, ``task`` or
  ``extra`` fields when the source has them) encoded by
  :func:`shiftwatch.codec.encode_record`, the encoding of every output. A file
  source's record also keeps the columns it was read from under their own names (read with
  ``key=sensor``, ``value=temp``, a record carries ``sensor`` and ``temp`` too), so a pipeline
  reads the topic with the file's field names (``deploy/examples/sensors.yaml``) or with the
  defaults;
* the message key is the record's key as text (none when the key is ``None``), so each key's
  records stay in order in one partition;
* a line the source cannot read is not produced: it is counted and reported by reason (and
  written to ``dead_letters`` when a path is given), as ``shiftwatch replay`` reports it.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shiftwatch.codec import encode_record
from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.kafka.topics import missing_topic
from shiftwatch.records import DeadLetter, get_field

__all__ = ["ProduceSummary", "produce_source", "with_source_columns", "message_key"]


@dataclass
class ProduceSummary:
    """What a :func:`produce_source` call did."""

    topic: str
    produced: int = 0
    dead_letters: int = 0
    reasons: Counter = field(default_factory=Counter)
    first_dead: dict | None = None
    seconds: float = 0.0
    created: bool = False
    interrupted: bool = False
    warnings: list = field(default_factory=list)

    def line(self) -> str:
        """One line: how many records went where, and how fast."""
        rate = self.produced / self.seconds if self.seconds > 0 else 0.0
        return (f"produced {self.produced} records to {self.topic} in {self.seconds:.1f} s "
                f"({rate:,.0f} rec/s), {self.dead_letters} dead letters"
                + (" (interrupted)" if self.interrupted else ""))


def with_source_columns(record: dict, source: Any) -> dict:
    """``record`` plus the file columns it was read from under their own names.

    >>> class Src: key, value, ts = "sensor", "temp", None
    >>> with_source_columns({"key": "s1", "ts": 0.0, "value": 20.5}, Src())
    {'key': 's1', 'ts': 0.0, 'value': 20.5, 'sensor': 's1', 'temp': 20.5}
    """
    out = dict(record)
    for name in ("key", "ts", "value", "y", "task"):
        column = getattr(source, name, None)
        if isinstance(column, str) and column and column != name and column not in out \
                and name in record:
            out[column] = record[name]
    return out


def message_key(record: dict, key_field: str = "key") -> bytes | None:
    """The message key: the text of ``record[key_field]`` (dotted paths allowed), or None.

    >>> message_key({"key": "s1"}), message_key({"meta": {"id": 7}}, "meta.id")
    (b's1', b'7')
    >>> message_key({"key": None}) is None
    True
    """
    k = get_field(record, key_field, None)
    if k is None:
        return None
    if isinstance(k, bytes):
        return k
    if isinstance(k, str):
        return k.encode()
    return encode_record(k)


def produce_source(source, topic: str, bootstrap: str, *, key_field: str = "key",
                   rate: float | None = None, partitions: int | None = None,
                   progress: bool = True, dead_letters=None, client: dict | None = None,
                   limit: int | None = None) -> ProduceSummary:
    """Write every record of ``source`` to ``topic`` at ``bootstrap``; return the summary.

    Parameters
    ----------
    source
        An iterable of records and :class:`~shiftwatch.records.DeadLetter` items
        (what :func:`shiftwatch.streams.open_source` returns).
    topic, bootstrap
        Where to write.
    key_field
        The record field whose text is the message key.
    rate
        Records per second (default: as fast as the broker takes them).
    partitions
        Create the topic with this many partitions first (an existing topic is left as it
        is); without it the topic must exist (no client of shiftwatch creates a topic by
        writing to it): a missing one is a :class:`~shiftwatch.deploy.errors.UserError`.
    progress
        Show a progress bar on stderr when it is a terminal.
    dead_letters
        A :class:`~shiftwatch.sinks.DeadLetterSink` that receives the source's dead letters.
    client
        Further kafka-python settings (security, ``bootstrap_timeout_ms``).
    limit
        Stop after this many records.
    """
    from kafka import KafkaAdminClient, KafkaProducer

    from shiftwatch.streams.kafka import no_auto_create

    if rate is not None and not rate > 0:
        raise ValueError(f"--rate must be records per second > 0, got {rate!r}")
    if partitions is not None and (isinstance(partitions, bool) or int(partitions) < 1):
        raise ValueError(f"--partitions must be >= 1, got {partitions!r}")
    client = dict(client or {})
    summary = ProduceSummary(topic=topic)
    # The producer creates no topic by writing to it (no_auto_create): a missing topic is
    # created here with --partitions, or refused in one line.
    admin = no_auto_create(KafkaAdminClient(bootstrap_servers=bootstrap, **client))
    try:
        existing = set(admin.list_topics())
        if topic not in existing and partitions is None:
            raise UserError(f"{missing_topic(topic, existing)} at {bootstrap}: --partitions N "
                            "creates it (shiftwatch creates no topic by writing to it)")
        if partitions is not None:
            if topic not in existing:
                admin.create_topics({topic: {"num_partitions": int(partitions),
                                             "replication_factor": 1}}, raise_errors=False)
                summary.created = True
            else:
                d = next(iter(admin.describe_topics([topic])), {})
                have = len(d.get("partitions") or [])
                if have and have != int(partitions):
                    summary.warnings.append(
                        f"topic {topic} exists with {have} partitions: --partitions "
                        f"{partitions} is not applied (partitions are set when a topic is "
                        "created; delete the topic, or grow it with kafka-topics.sh --alter)")
    finally:
        admin.close()
    producer = no_auto_create(KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=4 * 1024 * 1024,
        **{**client, "allow_auto_create_topics": False}))
    bar = _bar(source, progress, limit)
    t0 = time.monotonic()
    failed: list[BaseException] = []
    try:
        for item in source:
            if isinstance(item, DeadLetter):
                summary.dead_letters += 1
                summary.reasons[item.reason] += 1
                if summary.first_dead is None:
                    summary.first_dead = dict(item.origin)
                if dead_letters is not None:
                    dead_letters.write([item])
                continue
            if limit is not None and summary.produced >= limit:
                break
            record = with_source_columns(item, source)
            fut = producer.send(topic, key=message_key(record, key_field),
                                value=encode_record(record))
            fut.add_errback(failed.append)
            summary.produced += 1
            if bar is not None:
                bar.update(1)
            if rate is not None:
                ahead = summary.produced / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            if failed:
                break
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if bar is not None:
            bar.close()
        producer.flush()
        producer.close()
        close = getattr(source, "close", None)
        if close is not None:
            close()
    summary.seconds = time.monotonic() - t0
    if failed:
        raise RuntimeError(f"the broker refused a record for {topic}: {failed[0]}")
    return summary


def _bar(source, progress: bool, limit: int | None):
    if not progress or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    total = getattr(source, "length", None)
    if limit is not None:
        total = min(total, limit) if total is not None else limit
    return tqdm(total=total, unit="rec", desc=f"produce {getattr(source, 'name', '')}".strip(),
                file=sys.stderr)
