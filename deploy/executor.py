"""The stage executor: a stage's work on one micro-batch, the same for replay and Kafka.

Where a record is ...

* **decoded**: a file source (:mod:`shiftwatch.streams.files`) or, for Kafka messages,
  :meth:`StageExecutor.admit` with :func:`shiftwatch.codec.decode_record`
  (the Kafka history source :mod:`shiftwatch.streams.kafka` uses the same function);
* **validated and de-duplicated**: :meth:`StageExecutor.admit` (value check, then
  :class:`~shiftwatch.deploy.deduper.Deduper` on the input coordinates);
* **processed**: :meth:`StageExecutor.process`, the keyed operator chain;
* **dead-lettered**: :meth:`StageExecutor.dead_letter`, one schema
  (:meth:`~shiftwatch.records.DeadLetter.to_record`);
* **written**: by the runner, each output encoded by
  :func:`~shiftwatch.codec.encode_record` (Kafka) or the same rule in the file sinks.

The local runner (:class:`~shiftwatch.deploy.local.Pipeline`) and the Kafka stage
(:class:`~shiftwatch.deploy.kafka.stage.StageRunner`) are loops around it that differ only in
where records come from and where outputs, dead letters and checkpoints go. Outputs come in
input order (the order of the records they came from), whatever grouping by key the operators
do inside, and one :class:`RunSummary` counts what happened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shiftwatch.codec import decode_record, encode_record
from shiftwatch.deploy.bounds import StreamBounds
from shiftwatch.deploy.deduper import DUPLICATE, Deduper
from shiftwatch.deploy.expiry import Expiry
from shiftwatch.deploy.time_rule import clamp_change_ts, is_time_rule
from shiftwatch.operators.keyed import Keyed
from shiftwatch.records import BadInput, DeadLetter, reason_kind

__all__ = ["RunSummary", "StageExecutor", "Batch", "fit_dead_letter"]


@dataclass
class RunSummary:
    """What a run or a stage did: the counters both runners keep and print.

    ``records_in`` counts every input item (dead letters and duplicates included);
    ``interrupted`` is True when a replay was stopped by Ctrl-C. The Kafka fields (``stage``,
    ``checkpoints``, ``lag``, ``partitions``, ...) stay empty in a replay.
    """

    records_in: int = 0
    outputs: int = 0
    dead_letters: int = 0
    duplicates_dropped: int = 0
    alarms: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    #: why a run ended before its source did (an error: a full disk, out of memory), or None
    stopped: str | None = None
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    #: keys forgotten by the stage's ``state`` rule (deploy/expiry.py): idle, over the maximum
    keys_evicted: int = 0
    #: alarms raised by each operator of the chain whose outputs carry ``alarm`` (a detector),
    #: by ``"<position>:<name>"``: a detector inside a chain (its alarms feed the next
    #: operator: a learner's resets) is reported too, not only the last operator's
    alarms_by_operator: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    stage: str | None = None
    checkpoints: int = 0
    last_checkpoint_unix: float | None = None
    last_checkpoint_offsets: dict = field(default_factory=dict)
    lag: int | None = None
    recent_rate: float | None = None
    partitions: list = field(default_factory=list)
    started_unix: float = field(default_factory=time.time)

    @property
    def _last_is_detector(self) -> bool:
        return bool(self.alarms_by_operator) and \
            list(self.alarms_by_operator)[-1].startswith(f"{self.n_operators - 1}:")

    n_operators: int = 0

    @property
    def rate(self) -> float:
        """Input records per second of wall time."""
        return self.records_in / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        """Every counter as plain values (what a stage's metrics file holds)."""
        d = asdict(self)
        d["rate"] = self.rate
        return d

    def line(self) -> str:
        """One human-readable summary line.

        >>> RunSummary(records_in=10, outputs=9, dead_letters=1, seconds=2.0).line()
        '10 records in 2.00 s (5/s), 9 outputs, 0 alarms, 1 dead letters'
        """
        rate = self.rate if self.recent_rate is None else self.recent_rate
        s = (f"{self.records_in} records in {self.seconds:.2f} s ({rate:,.0f}/s), "
             f"{self.outputs} outputs, {self.alarms} alarms, {self.dead_letters} dead letters")
        if self.duplicates_dropped:
            s += f", {self.duplicates_dropped} duplicates dropped"
        if self.keys_evicted:
            s += f", {self.keys_evicted} keys expired"
        if len(self.alarms_by_operator) > 1 or (self.alarms_by_operator and not
                                                 self._last_is_detector):
            s += " (alarms by operator: " + ", ".join(
                f"{k.split(':', 1)[1]} {v}" for k, v in self.alarms_by_operator.items()) + ")"
        if self.stage is not None:
            ago = ("never" if self.last_checkpoint_unix is None
                   else f"{time.time() - self.last_checkpoint_unix:.1f} s ago")
            s = (f"stage {self.stage}: {s}, lag {self.lag if self.lag is not None else '?'}, "
                 f"partitions {self.partitions}, last checkpoint {ago}")
        return s + (" (interrupted: partial results written)" if self.interrupted else "")


@dataclass
class Batch:
    """What :meth:`StageExecutor.process` made of a micro-batch.

    ``inputs`` are the records that reached the operators (those the rule for time and
    duplicates kept, when the chain starts with it: :mod:`~shiftwatch.deploy.time_rule`),
    ``outputs`` the last operator's outputs in input order, ``dead_letters`` the dead-letter
    records (schema of :meth:`~shiftwatch.records.DeadLetter.to_record`) of the operators'
    rejections.
    """

    inputs: list[dict]
    outputs: list[dict]
    dead_letters: list[dict]
    #: keys the stage's expiry rule removed after this batch (:meth:`StageExecutor.expire`)
    evicted: list = field(default_factory=list)


class StageExecutor:
    """One stage's work on micro-batches: admit (decode, validate, de-duplicate), the keyed
    operator chain, dead letters, input-ordered outputs, counters.

    Parameters
    ----------
    operators
        The chain; each is wrapped in :class:`~shiftwatch.operators.keyed.Keyed` unless it
        is one already (or ``keyed`` is False).
    names
        The operators' names for dead letters (default: each operator's ``name``).
    value, key, ts
        Fields of a message's JSON object holding the value, key and event time
        (:func:`~shiftwatch.codec.decode_record`); only :meth:`admit` uses them.
    dedupe
        Drop inputs whose ``input`` coordinates were seen (outputs a crashed upstream stage
        produced again), keeping high-water marks in :attr:`deduper`.
    summary
        The counters to update (default: a new :class:`RunSummary`).
    observer
        Optional; told of each dead letter (``observer.dead_letter(reason)``) and of each
        operator's alarm outputs and their keys (``observer.alarms(operator_name, n,
        keys={key: n_of_key})``), e.g. a :class:`~shiftwatch.deploy.observability.StageMetrics`.
    max_message_bytes
        The largest encoded output or dead letter (a Kafka stage: its message limit); None
        for no limit. Larger outputs make their input a dead letter; larger dead letters are
        cut to fit.
    deduper
        The :class:`~shiftwatch.deploy.deduper.Deduper` to use (a Kafka stage passes one
        that knows the upstream topic and its end offsets).
    expiry
        Optional :class:`~shiftwatch.deploy.expiry.Expiry`: the keys it finds due after a
        batch are removed from every operator (:meth:`expire`).

    Examples
    --------
    >>> from shiftwatch.operators import create
    >>> ex = StageExecutor([create("standardize", burn_in=2)])
    >>> items = [ex.admit(m, None, {"offset": i}, i) for i, m in
    ...          enumerate([b'{"key": "a", "value": 1}', b'{"key": "b", "value": 5}', b"{x",
    ...                     b'{"key": "a", "value": 3}', b'{"key": "a", "value": 2}'])]
    >>> [ex.dead_letter(i)["reason"] for i in items if isinstance(i, DeadLetter)]
    ['invalid JSON: Expecting property name enclosed in double quotes at column 2']
    >>> batch = ex.process([i for i in items if isinstance(i, dict)])
    >>> [(o["key"], o["offset"], round(o["value"], 3)) for o in batch.outputs]
    [('a', 0, 0.0), ('b', 1, 0.0), ('a', 3, 0.707), ('a', 4, 0.0)]
    >>> ex.summary.records_in, ex.summary.outputs, ex.summary.dead_letters
    (5, 4, 1)
    """

    def __init__(self, operators: Sequence, names: Sequence[str] | None = None,
                 value: str = "value", key: str | None = None, ts: str | None = None,
                 dedupe: bool = False, summary: RunSummary | None = None, keyed: bool = True,
                 observer: Any = None, max_message_bytes: int | None = None,
                 deduper: Deduper | None = None, loose: bool = False,
                 expiry: Expiry | None = None, bounds: StreamBounds | None = None):
        self.loose = loose
        self.expiry = expiry
        #: the stream's plausibility bounds (deploy/bounds.py), checked on admission
        self.bounds = bounds
        self.operators = [op if (isinstance(op, Keyed) or not keyed) else Keyed(op)
                          for op in operators]
        self.names = list(names) if names is not None else [
            _name(op) for op in self.operators]
        #: 1 when the chain starts with the rule for time and duplicates (deploy/time_rule.py):
        #: what it keeps are the stage's inputs; it is not counted as an operator
        self._skip = 1 if self.operators and is_time_rule(self.operators[0]) else 0
        self.value = value
        self.key = key
        self.ts = ts
        self.dedupe = dedupe
        self.summary = summary if summary is not None else RunSummary()
        self.deduper = deduper if deduper is not None else Deduper()
        self.observer = observer
        self.max_message_bytes = max_message_bytes

    # ---- admit: decode, validate, de-duplicate ------------------------------------------

    def admit(self, data: bytes | None, message_key: bytes | None, origin: dict, offset: int,
              timestamp_ms: int | None = None) -> dict | DeadLetter | None:
        """Decode and check one message: the record (with ``offset``), a
        :class:`DeadLetter` (route it with :meth:`dead_letter`), or None for a duplicate.

        ``origin`` says where the message is (``{"topic", "partition", "offset"}``); it goes
        into dead letters and, as ``meta.kafka``, into the record. Counts the input.
        """
        self.summary.records_in += 1
        meta = None
        if "topic" in origin:
            meta = {"kafka": {**origin, "timestamp": timestamp_ms}}
        raw = data if data is not None else b""
        try:
            record = decode_record(data, message_key, value=self.value, key=self.key,
                                   ts=self.ts, timestamp_ms=timestamp_ms, meta=meta,
                                   loose=self.loose)
        except BadInput as exc:
            return DeadLetter(raw=raw, reason=str(exc), origin=dict(origin))
        except Exception as exc:  # a decoder bug must not stop the stage: this message only
            return DeadLetter(raw=raw, reason=f"message could not be decoded: "
                              f"{type(exc).__name__}: {_short(exc)}", origin=dict(origin))
        if self.dedupe:
            verdict = self.deduper.check(record)
            if verdict is not None:
                if verdict is DUPLICATE:
                    self.summary.duplicates_dropped += 1
                    return None
                return DeadLetter(raw=raw, reason=verdict, origin=dict(origin))
        if self.bounds is not None:
            why = self.bounds.reason(record)
            if why is not None:
                return DeadLetter(raw=raw, reason=why, origin={
                    **origin, "operator": "bounds", "key": record.get("key")})
        record["offset"] = offset
        return record

    def bounded(self, item: Any, origins: Mapping[int, dict] | None = None) -> Any:
        """A record of a local source as it is, or a :class:`DeadLetter` when it is beyond the
        stream's bounds (the raw record without its ``offset``; the origin is the source's
        ``origins[offset]`` (file and line) with ``operator: bounds`` and the record's key)."""
        if self.bounds is None or not isinstance(item, dict):
            return item
        why = self.bounds.reason(item)
        if why is None:
            return item
        off = item.get("offset")
        origin = dict((origins.get(off) if origins is not None else None) or {"offset": off})
        raw = {k: v for k, v in item.items() if k != "offset"}
        return DeadLetter(raw=raw, reason=why,
                          origin={**origin, "operator": "bounds", "key": item.get("key")})

    def count_inputs(self, n: int) -> None:
        """Count ``n`` input items that came in already decoded (the local runner)."""
        self.summary.records_in += n

    # ---- the operator chain -------------------------------------------------------------

    def process(self, records: list[dict], origins: Mapping[int, dict] | None = None,
                raws: Mapping[int, Any] | None = None, dirty: list[set] | None = None
                ) -> Batch:
        """Run ``records`` (each with a distinct ``offset``) through the operator chain.

        Rejections become dead-letter records whose ``origin`` is ``origins[offset]`` (default
        ``{"offset": offset}``) and whose ``raw`` is ``raws[offset]`` (default: the record
        the operator got). Outputs come in the order of the records they came from. Counts
        outputs, alarms and dead letters. With ``dirty``, ``dirty[i]`` gains the keys of the
        records operator ``i`` got (what the next checkpoint must write). A chain may start
        with the rule for time and duplicates (:mod:`~shiftwatch.deploy.time_rule`): its late
        records are dead letters, its dropped duplicates are counted in
        ``duplicates_dropped``, it is not numbered among the operators in
        ``alarms_by_operator``. Every output's ``change_ts`` is at most its ``ts``.

        An exception other than :class:`~shiftwatch.records.BadInput` from an
        operator propagates; the operators' state may then hold part of the batch.
        """
        inputs = records
        if self.expiry is not None:
            self.expiry.touch(records)
        position = {r.get("offset"): i for i, r in enumerate(records)}
        dead: list[dict] = []
        for i, op in enumerate(self.operators):
            if dirty is not None:
                dirty[i] |= self.dirty_keys(records)
            n_in, n_dead = len(records), len(dead)
            outs = op.process_batch(records)
            records = []
            for o in outs:
                if isinstance(o, DeadLetter):
                    dead.append(self._operator_dead_letter(o, self.names[i], origins, raws))
                else:
                    records.append(o)
            if i < self._skip:  # the time rule: it drops exact duplicates, rejects late ones
                self.summary.duplicates_dropped += n_in - len(records) - (len(dead) - n_dead)
                inputs = records = _in_order(records, position)
                continue
            self._count_alarms(i, records)
        if len(self.operators) and _grouped(records):
            # Keyed groups by key: back to input order (per key the order is unchanged), so
            # each upstream partition's offsets increase along every output partition.
            end = len(position)
            records.sort(key=lambda o: position.get(o.get("offset"), end))
        clamp_change_ts(records)
        s = self.summary
        s.outputs += len(records)
        s.alarms += sum(1 for r in records if r.get("alarm"))
        gone = self.expire(dirty) if self.expiry is not None else []
        return Batch(inputs=inputs, outputs=records, dead_letters=dead, evicted=gone)

    def expire(self, dirty: list[set] | None = None) -> list:
        """Remove the keys :attr:`expiry` finds due from every operator (the next record of
        such a key starts it afresh); with ``dirty``, each removed key is marked changed in
        the operators that held it (the next checkpoint writes its removal). Returns the
        keys removed from at least one operator; counts them in the summary and tells the
        observer (``observer.keys_evicted(n)``)."""
        if self.expiry is None:
            return []
        due = self.expiry.due()
        if not due:
            return []
        held: set = set()
        for i, op in enumerate(self.operators):
            evict_many = getattr(op, "evict_many", None)  # (not keyed: nothing per key)
            if evict_many is None:
                continue
            removed = evict_many(due)
            held.update(removed)
            if dirty is not None:
                dirty[i].update(removed)
        gone = [k for k in due if k in held]
        if gone:
            self.summary.keys_evicted += len(gone)
            tell = getattr(self.observer, "keys_evicted", None)
            if tell is not None:
                tell(len(gone))
        return gone

    def _count_alarms(self, i: int, records: list[dict], observe: bool = True) -> None:
        """Operator ``i``'s alarms in this batch: per operator in the summary (a detector
        is an operator whose outputs carry ``alarm``), and to the metrics observer."""
        n = 0
        detector = False
        for r in records:
            a = r.get("alarm")
            if a is not None:
                detector = True
                n += 1 if a else 0
        key = f"{i - self._skip}:{self.names[i]}"
        counts = self.summary.alarms_by_operator
        if detector or key in counts:
            counts[key] = counts.get(key, 0) + n
            self.summary.n_operators = len(self.operators) - self._skip
        if observe and self.observer is not None:
            per_key: dict = {}  # one observer call per operator and batch, not per record
            if n:
                for r in records:
                    if r.get("alarm"):
                        k = r.get("key")
                        try:
                            per_key[k] = per_key.get(k, 0) + 1
                        except TypeError:  # a list key: by its text
                            per_key[repr(k)] = per_key.get(repr(k), 0) + 1
            self.observer.alarms(self.names[i], n, keys=per_key)

    def flush(self) -> Batch:
        """The end of a replay's stream: what the operators held back
        (:meth:`~shiftwatch.operators.contract.Operator.flush`), each operator's through the
        rest of the chain, in input order; counted like :meth:`process`'s."""
        records: list[dict] = []
        dead: list[dict] = []
        for i, op in enumerate(self.operators):
            outs = op.process_batch(records) if records else []
            outs = [*outs, *op.flush()]
            records = []
            for o in outs:
                if isinstance(o, DeadLetter):
                    dead.append(self._operator_dead_letter(o, self.names[i], None, None))
                else:
                    records.append(o)
            if i >= self._skip:
                self._count_alarms(i, records, observe=False)
        end = 1 << 62
        records.sort(key=lambda o: o.get("offset") if isinstance(o.get("offset"), int) else end)
        clamp_change_ts(records)
        s = self.summary
        s.outputs += len(records)
        s.alarms += sum(1 for r in records if r.get("alarm"))
        return Batch(inputs=[], outputs=records, dead_letters=dead)

    def _operator_dead_letter(self, item: DeadLetter, name: str, origins, raws) -> dict:
        off = item.origin.get("offset")
        origin = origins.get(off) if origins is not None else None
        raw = raws.get(off, item.raw) if raws is not None else item.raw
        if isinstance(raw, Mapping):  # the record as the operator got it, without the
            raw = {k: v for k, v in raw.items() if k != "offset"}  # runtime's coordinate
        key = item.origin.get("key")
        return self.dead_letter(DeadLetter(raw=raw, reason=item.reason, origin={
            **(origin if origin is not None else {"offset": off}),
            "operator": item.origin.get("operator") or name, "key": key}))

    # ---- dead letters -------------------------------------------------------------------

    def dead_letter(self, item: DeadLetter) -> dict:
        """The dead-letter record of ``item`` (one schema for files and topics); counted.

        Its encoding fits in :attr:`max_message_bytes`: a larger one has ``raw`` and
        ``raw_base64`` cut (:func:`fit_dead_letter`, ``truncated: true``)."""
        s = self.summary
        s.dead_letters += 1
        short = reason_kind(item.reason)
        s.dead_letter_reasons[short] = s.dead_letter_reasons.get(short, 0) + 1
        if self.observer is not None:
            self.observer.dead_letter(item.reason)
        try:
            record = item.to_record()
        except Exception:  # e.g. a raw record nested too deep to serialise: keep its text
            record = DeadLetter(raw=_short(repr(item.raw), 10_000), reason=item.reason,
                                origin=dict(item.origin)).to_record()
        return fit_dead_letter(record, self.max_message_bytes)

    # ---- encoding outputs ---------------------------------------------------------------

    def encode(self, batch: Batch, origins: Mapping[int, dict] | None = None,
               raws: Mapping[int, Any] | None = None) -> list[bytes]:
        """The encoded outputs of ``batch`` (:func:`~shiftwatch.codec.encode_record`),
        in order. An input any of whose outputs cannot be encoded, or encodes to more than
        :attr:`max_message_bytes`, has all its outputs removed from ``batch.outputs`` and
        becomes a dead letter (appended to ``batch.dead_letters``), so every input still has
        its outputs or a dead letter."""
        encoded: list[bytes] = []
        failed: dict[Any, str] = {}
        limit = self.max_message_bytes
        for o in batch.outputs:
            try:
                b = encode_record(o)
            except Exception as exc:  # RecursionError (deep nesting), a value repr raising
                failed.setdefault(o.get("offset"), f"an output could not be encoded: "
                                  f"{type(exc).__name__}: {_short(exc)}")
                b = b""
            else:
                if limit is not None and len(b) > limit:
                    failed.setdefault(o.get("offset"), f"an output is {len(b):,} bytes "
                                      f"encoded, over the {limit:,}-byte message limit")
            encoded.append(b)
        if not failed:
            return encoded
        kept_out, kept_enc = [], []
        for o, b in zip(batch.outputs, encoded, strict=True):
            if o.get("offset") not in failed:
                kept_out.append(o)
                kept_enc.append(b)
        s = self.summary
        s.outputs -= len(batch.outputs) - len(kept_out)
        s.alarms -= sum(1 for o in batch.outputs if o.get("offset") in failed and o.get("alarm"))
        batch.outputs[:] = kept_out
        by_offset = {r.get("offset"): r for r in batch.inputs}
        for off, reason in failed.items():
            origin = origins.get(off) if origins is not None else None
            raw = raws.get(off) if raws is not None else None
            if raw is None:
                rec = by_offset.get(off)
                raw = {k: v for k, v in rec.items() if k != "offset"} if rec else None
            batch.dead_letters.append(self.dead_letter(DeadLetter(
                raw=raw if raw is not None else b"", reason=reason,
                origin=origin if origin is not None else {"offset": off})))
        return kept_enc

    # ---- checkpoint support --------------------------------------------------------------

    def dirty_keys(self, records: Iterable[Mapping]) -> set:
        """The keys (as :class:`Keyed` stores them) of ``records``; unhashable ones skipped."""
        try:  # all keys hashable: none is a JSON list, so each is stored as it is
            return {r.get("key") for r in records}
        except TypeError:
            pass
        out: set = set()
        for r in records:
            try:
                out.add(Keyed.normalize_key(r.get("key")))
            except TypeError:
                pass
        return out


def _name(op: Any) -> str:
    inner = getattr(op, "operator", None) if isinstance(op, Keyed) else None
    for cand in (inner, op):
        name = getattr(cand, "name", None)
        if isinstance(name, str) and name:
            return name
    return type(op).__name__


def _in_order(records: list[dict], position: Mapping) -> list[dict]:
    """``records`` in input order (``position``: offset -> index), if Keyed grouped them."""
    if not _grouped(records):
        return records
    end = len(position)
    return sorted(records, key=lambda o: position.get(o.get("offset"), end))


def _grouped(records: list[dict]) -> bool:
    prev = -1
    for r in records:
        off = r.get("offset")
        if not isinstance(off, int) or off < prev:
            return True
        prev = off
    return False


def _short(x: Any, width: int = 300) -> str:
    text = str(x)
    return text if len(text) <= width else text[:width] + "..."


def fit_dead_letter(record: dict, max_bytes: int | None) -> dict:
    """``record`` (a dead-letter record) if its encoding fits in ``max_bytes``, else a copy
    whose ``raw`` and ``raw_base64`` keep only the start of the input, with
    ``truncated: true`` and ``raw_bytes``, the size of the whole input in bytes.

    >>> rec = {"dead_letter": True, "reason": "not JSON", "raw": "x" * 5000,
    ...        "raw_base64": "eHh4" * 1666}
    >>> cut = fit_dead_letter(rec, 1000)
    >>> len(encode_record(cut)) <= 1000, cut["truncated"], cut["raw_bytes"], cut["raw"][:3]
    (True, True, 4998, 'xxx')
    """
    if max_bytes is None or len(encode_record(record)) <= max_bytes:
        return record
    import base64

    raw, b64 = record.get("raw"), record.get("raw_base64")
    if isinstance(b64, str):
        exact = base64.b64decode(b64)
    else:
        exact = (raw if isinstance(raw, str) else encode_record(raw).decode()).encode(
            "utf-8", "surrogatepass")
    out = {**record, "truncated": True, "raw_bytes": len(exact), "raw": ""}
    if isinstance(b64, str):
        out["raw_base64"] = ""

    def keep(n: int) -> int:
        head = exact[:n]
        out["raw"] = head.decode("utf-8", "ignore")
        if isinstance(b64, str):
            out["raw_base64"] = base64.b64encode(head).decode("ascii")
        return len(encode_record(out))

    n = max(0, max_bytes - keep(0))
    n = n * 3 // 7 if isinstance(b64, str) else n  # the text and 4/3 of it in base64
    while n > 0 and keep(n) > max_bytes:
        n = n * 7 // 8
    if n == 0:
        keep(0)
    return out
