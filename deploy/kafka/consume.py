"""``shiftwatch consume``: read what a stage wrote, an output or a dead-letter topic.

It assigns every partition of the topic itself (no consumer group, nothing committed, so
reading never disturbs a stage), from the beginning (``from_beginning``) or from the end the
topic has when it starts, and either stops at that end or, with ``follow``, tails the topic
until interrupted. Each message is one JSON record (what a stage writes: its outputs carry the
input coordinates ``input = {topic, partition, offset, n}``, its dead letters ``origin``).

Duplicates: at-least-once delivery can repeat outputs after a restart, with the same input
coordinates. They are recognised by :class:`~shiftwatch.deploy.deduper.Deduper`, one per
partition of the topic read: within one output partition a stage writes each input
partition's outputs in offset order and a restart writes a contiguous run of them again, so
an output at or below its input partition's high-water mark is a repeat (memory: one mark per
output and input partition, whatever the topic's length; the topic's partition count must not
change between the copies). Dead letters, which a stage may write out of offset order (a
record the broker refused is dead-lettered when the refusal arrives), are recognised by their
origin and reason, kept in a set. Repeats are counted always and dropped with ``dedupe``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

from shiftwatch.deploy.deduper import DUPLICATE, Deduper
from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.kafka.topics import missing_topic
from shiftwatch.streams.kafka import learn_ends, no_auto_create

__all__ = ["ConsumeSummary", "consume_topic", "read_messages", "output_row", "format_ts",
           "OUTPUT_COLUMNS", "ALARM_COLUMNS", "DEAD_LETTER_COLUMNS"]

#: Table columns of outputs, of alarms (``alarms_only``; those of ``shiftwatch demo --kafka``)
#: and of dead letters.
OUTPUT_COLUMNS = ("key", "ts (UTC)", "alarm", "change located at", "statistic", "input")
ALARM_COLUMNS = ("key", "alarm at (UTC)", "change located at", "statistic", "input")
DEAD_LETTER_COLUMNS = ("origin", "key", "reason", "raw")

#: Seconds without a message before reading up to the end gives up (the end is not reached).
IDLE_TIMEOUT_S = 30.0
#: Rows a table holds back to fit its columns before printing its header.
TABLE_FIT_ROWS = 200


@dataclass
class ConsumeSummary:
    """What :func:`consume_topic` read."""

    topic: str
    partitions: list[int] = field(default_factory=list)
    messages: int = 0
    shown: int = 0
    alarms: int = 0
    dead_letters: int = 0
    duplicates: int = 0
    dropped: bool = False  # duplicates were dropped (dedupe)
    not_json: int = 0
    first_not_json: tuple[int, int] | None = None  # (partition, offset)
    seconds: float = 0.0
    interrupted: bool = False

    def line(self) -> str:
        """One line: what was read, the repeats, what was shown."""
        parts = ", ".join(map(str, self.partitions))
        text = (f"consume {self.topic}: {self.messages} messages from partition"
                f"{'s' if len(self.partitions) != 1 else ''} {parts or '-'} in "
                f"{self.seconds:.1f} s, {self.alarms} alarms, {self.dead_letters} dead letters")
        if self.duplicates:
            text += (f", {self.duplicates} duplicates dropped (same input coordinates)"
                     if self.dropped else
                     f", {self.duplicates} repeat earlier input coordinates (--dedupe drops "
                     "them)")
        if self.not_json:
            p, o = self.first_not_json or (None, None)
            text += (f", {self.not_json} not JSON objects (skipped; first at partition {p} "
                     f"offset {o})")
        text += f"; shown {self.shown}"
        return text + (" (interrupted)" if self.interrupted else "")


def format_ts(ts: Any) -> str:
    """``ts`` for a table: UTC date and time when it holds epoch seconds of a plausible date
    (:func:`~shiftwatch.sinks.time_axis.is_epoch_seconds`: 1900 to 2100, not an index near
    0), as recorded otherwise.

    >>> format_ts(1767225600), format_ts(1767225630.5), format_ts(17.0), format_ts(None)
    ('2026-01-01 00:00', '2026-01-01 00:00:30.500', '17', '-')
    """
    from shiftwatch.sinks.time_axis import is_epoch_seconds

    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return "-" if ts is None else str(ts)
    if is_epoch_seconds([ts]):
        d = datetime.fromtimestamp(ts, tz=timezone.utc)
        if d.microsecond:
            return d.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        return d.strftime("%Y-%m-%d %H:%M" if d.second == 0 else "%Y-%m-%d %H:%M:%S")
    return f"{ts:g}"


def _where(c: Any) -> str:
    if not isinstance(c, dict):
        return "-"
    n = c.get("n")
    return (f"{c.get('topic')}[{c.get('partition')}]@{c.get('offset')}"
            + (f"#{n}" if isinstance(n, int) and n > 0 else ""))


def output_row(record: dict, alarms_only: bool = False) -> tuple[str, ...]:
    """A stage output as a table row (:data:`ALARM_COLUMNS` with ``alarms_only``, else
    :data:`OUTPUT_COLUMNS`).

    >>> output_row({"key": "s1", "ts": 1767241200, "alarm": True, "statistic": 0.34142,
    ...             "change_at": 250, "change_ts": 1767240600,
    ...             "input": {"topic": "in", "partition": 1, "offset": 765, "n": 0}}, True)
    ('s1', '2026-01-01 04:20', '#250 (2026-01-01 04:10)', '0.3414', 'in[1]@765')
    """
    at = record.get("change_at")
    located = "-" if at is None else f"#{at} ({format_ts(record.get('change_ts'))})"
    stat = record.get("statistic")
    stat = f"{stat:.4g}" if isinstance(stat, (int, float)) and not isinstance(stat, bool) \
        else "-"
    row = (str(record.get("key")), format_ts(record.get("ts")),
           "yes" if record.get("alarm") else "", located, stat, _where(record.get("input")))
    return row[:2] + row[3:] if alarms_only else row


def dead_letter_row(record: dict) -> tuple[str, ...]:
    """A dead letter as a table row (:data:`DEAD_LETTER_COLUMNS`)."""
    raw = record.get("raw")
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    text = " ".join(text.split())
    return (_where(record.get("origin")), str(record.get("key")),
            str(record.get("reason")), text if len(text) <= 80 else text[:77] + "...")


class _Table:
    """A table printed as it fills: the first rows (up to :data:`TABLE_FIT_ROWS`, or until
    :meth:`flush`) set the column widths, later rows widen a column only when they must."""

    def __init__(self, columns: tuple[str, ...], out: IO[str]):
        self.columns = columns
        self.out = out
        self.widths: list[int] | None = None
        self.held: list[tuple[str, ...]] = []

    def add(self, row: tuple[str, ...]) -> None:
        if self.widths is None:
            self.held.append(row)
            if len(self.held) >= TABLE_FIT_ROWS:
                self.flush()
        else:
            self._print(row)

    def flush(self) -> None:
        if self.widths is None and self.held:
            rows = [self.columns, *self.held]
            self.widths = [max(len(r[c]) for r in rows) for c in range(len(self.columns))]
            self._print(self.columns)
            for r in self.held:
                self._print(r)
            self.held = []
        self.out.flush()

    def _print(self, row: tuple[str, ...]) -> None:
        w = self.widths
        for i, cell in enumerate(row):
            w[i] = max(w[i], len(cell))
        self.out.write(("  ".join(c.ljust(x) for c, x in zip(row, w, strict=True))).rstrip()
                       + "\n")


def read_messages(consumer: Any, topic: str, from_beginning: bool, follow: bool,
                  summary: ConsumeSummary, idle_timeout_s: float = IDLE_TIMEOUT_S,
                  on_idle: Any = None) -> Iterator[Any]:
    """The messages of every partition of ``topic``, in each partition's offset order.

    From the beginning or from the end each partition has now; up to that end (each
    partition's end when reading began) or, with ``follow``, on until interrupted. The end
    is the larger of the listed end offset and the high-water mark of a first fetch (some
    Kafka-protocol brokers, tansu among them, list an end offset below the true one).
    ``on_idle()`` is called when a poll brings nothing (a table then prints what it holds).
    """
    from kafka import TopicPartition

    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise UserError(f"{missing_topic(topic, consumer.topics())}; give the topic a stage "
                        "writes (its output, or <pipeline>.<stage>.dlq)")
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    summary.partitions = sorted(parts)
    listed = consumer.end_offsets(tps)
    consumer.assign(tps)
    if from_beginning:
        consumer.seek_to_beginning(*tps)
    else:
        consumer.seek_to_end(*tps)
    # The end of each partition now: learnt from the first fetches (messages they bring
    # are held meanwhile).
    ends, by_tp = learn_ends(consumer, tps, listed)
    held = [m for tp in tps for m in by_tp.get(tp, [])]
    by_part = {tp.partition: ends[tp] for tp in tps}

    def wanted(m) -> bool:
        end = by_part[m.partition]
        return (from_beginning or m.offset >= end) and (follow or m.offset < end)

    for m in held:
        if wanted(m):
            yield m
    done: set = set()  # partitions read up to their end (not with follow)
    if not follow:
        done = {tp for tp in tps if consumer.position(tp) >= ends[tp]}
        if done:
            consumer.pause(*done)
    last_data = time.monotonic()
    while follow or len(done) < len(tps):
        got = consumer.poll(timeout_ms=200)
        now = time.monotonic()
        if not got:
            if on_idle is not None:
                on_idle()
            if not follow and now - last_data > idle_timeout_s:
                left = {tp.partition: ends[tp] for tp in tps if tp not in done}
                raise UserError(f"{topic}: nothing arrived for {idle_timeout_s:g} s before the "
                                f"end offsets {left} (the broker holds back the rest); "
                                "what was read is above")
            continue
        last_data = now
        for tp, msgs in got.items():
            for m in msgs:
                if wanted(m):
                    yield m
            if not follow and tp not in done and consumer.position(tp) >= ends[tp]:
                done.add(tp)
                consumer.pause(tp)


def consume_topic(topic: str, bootstrap: str, from_beginning: bool = False,
                  follow: bool = False, alarms_only: bool = False, dedupe: bool = False,
                  fmt: str = "table", client: dict | None = None, out: IO[str] | None = None,
                  idle_timeout_s: float = IDLE_TIMEOUT_S) -> ConsumeSummary:
    """Print the records of ``topic`` to ``out`` as a table or as JSON lines; see the module
    docstring. Returns what was read (:meth:`ConsumeSummary.line`). Ctrl-C stops it (the
    summary then says so)."""
    from kafka import KafkaConsumer

    out = out or sys.stdout
    summary = ConsumeSummary(topic=topic, dropped=dedupe)
    consumer = no_auto_create(KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        **{**(client or {}), "allow_auto_create_topics": False}))
    outputs = _Table(ALARM_COLUMNS if alarms_only else OUTPUT_COLUMNS, out)
    dead = _Table(DEAD_LETTER_COLUMNS, out)
    tables = (outputs, dead)

    def idle() -> None:
        for t in tables:
            t.flush()

    dedupers: dict[int, Deduper] = {}
    seen_dead: set = set()
    t0 = time.monotonic()
    try:
        for m in read_messages(consumer, topic, from_beginning, follow, summary,
                               idle_timeout_s, on_idle=idle if fmt == "table" else None):
            summary.messages += 1
            try:
                record = json.loads(m.value) if m.value is not None else None
            except ValueError:
                record = None
            if not isinstance(record, dict):
                summary.not_json += 1
                if summary.first_not_json is None:
                    summary.first_not_json = (m.partition, m.offset)
                continue
            dead_letter = bool(record.get("dead_letter"))
            if dead_letter:
                origin = record.get("origin")
                mark = (json.dumps(origin, sort_keys=True, default=str), record.get("reason"))
                repeat = mark in seen_dead
                seen_dead.add(mark)
            else:
                d = dedupers.get(m.partition)
                if d is None:
                    d = dedupers[m.partition] = Deduper()
                repeat = d.check(record) is DUPLICATE
            if repeat:
                summary.duplicates += 1
                if dedupe:
                    continue
            alarm = bool(record.get("alarm"))
            summary.alarms += alarm
            summary.dead_letters += dead_letter
            if alarms_only and not alarm:
                continue
            summary.shown += 1
            if fmt == "jsonl":
                out.write(m.value.decode("utf-8", "replace").rstrip("\n") + "\n")
            elif dead_letter:
                dead.add(dead_letter_row(record))
            else:
                outputs.add(output_row(record, alarms_only))
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        summary.seconds = time.monotonic() - t0
        try:
            idle()
            out.flush()
        finally:
            consumer.close()
    return summary
