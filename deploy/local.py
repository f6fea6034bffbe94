"""The local runner: source -> operators -> sinks, in one process, no broker.

This is the embedded default: ``shiftwatch replay`` and ``shiftwatch demo`` use it, and so
can Python code::

    from shiftwatch.deploy import Pipeline
    summary = Pipeline(source, [create("river:ADWIN")], [JsonlSink("out.jsonl")]).run()
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence

from shiftwatch.deploy.bounds import StreamBounds, check_bounds
from shiftwatch.deploy.columnar import columnar_run
from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.executor import RunSummary, StageExecutor
from shiftwatch.deploy.expiry import Expiry
from shiftwatch.deploy.positions import ChangePositions
from shiftwatch.deploy.time_rule import rule_operator
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.keyed import Keyed
from shiftwatch.records import DeadLetter, reason_kind

__all__ = ["Pipeline", "RunSummary", "AllDeadLetters", "stop_if_all_dead", "ALL_DEAD_FIRST"]

#: A replay (or a calibration's history) whose first this many items -- or all of them, when
#: there are fewer -- are dead letters for one reason stops (:func:`stop_if_all_dead`).
ALL_DEAD_FIRST = 100


class AllDeadLetters(UserError):
    """The first items of a source were all dead letters for one reason (a wrong
    ``ts_format``, column or delimiter): nothing would be processed, so the run stops."""


def stop_if_all_dead(items: Iterable, what: str, first: int | None = ALL_DEAD_FIRST):
    """Yield ``items``; raise :class:`AllDeadLetters` when the first ``first`` of them (or all,
    when the source ends sooner) are dead letters whose reasons are of one kind
    (:func:`~shiftwatch.records.reason_kind`).

    The one place where ``shiftwatch replay`` (through :class:`Pipeline`) and
    ``shiftwatch calibrate`` count this. The message names the reason as the first dead
    letter gave it (with its value, e.g. the format a ``ts`` did not match) and where it was.

    >>> bad = [DeadLetter("01/02", "ts '01/02' does not match format '%Y'", {"line": i + 2})
    ...        for i in range(3)]
    >>> list(stop_if_all_dead(bad, "t.csv"))
    Traceback (most recent call last):
    ...
    shiftwatch.deploy.local.AllDeadLetters: all 3 records of t.csv are dead letters: ts '01/02' \
does not match format '%Y' (line 2); nothing was processed: check the --source-opt options \
(value, key, ts, ts_format, delimiter) against the data
    """
    if not first:
        yield from items
        return
    n = 0
    head: DeadLetter | None = None
    kind = None
    for item in items:
        if n is not None:
            if isinstance(item, DeadLetter) and (
                    kind is None or reason_kind(item.reason) == kind):
                if head is None:
                    head, kind = item, reason_kind(item.reason)
                n += 1
                if n >= first:
                    raise AllDeadLetters(_all_dead_message(f"the first {n}", what, head))
            else:
                n = None  # a record (or another reason): the check is over
        yield item
    if n:
        raise AllDeadLetters(_all_dead_message(f"all {n}" if n > 1 else "the one", what, head))


def _all_dead_message(how_many: str, what: str, head: DeadLetter) -> str:
    origin = head.origin or {}
    where = (f" (line {origin['line']})" if "line" in origin else
             f" (partition {origin['partition']} offset {origin['offset']})"
             if "partition" in origin else "")
    reason = str(head.reason).split("\n")[0]
    noun = "records" if how_many != "the one" else "record"
    verb = "are" if noun == "records" else "is a"
    return (f"{how_many} {noun} of {what} {verb} dead letter{'s' if noun == 'records' else ''}: "
            f"{reason}{where}; nothing was processed: check the --source-opt options (value, "
            "key, ts, ts_format, delimiter) against the data")


class _RejectionCheck:
    """The same rule as :func:`stop_if_all_dead`, for the operators: a run whose first
    ``first`` records (or all, when there are fewer) each ended as a dead letter of an
    operator, for one kind of reason, stops with :class:`AllDeadLetters` (parameters that do
    not fit the data: ``in_dim`` against the vectors' length, a matrix operator on scalars)."""

    def __init__(self, first: int | None, what: str):
        self.first = first
        self.what = what
        self.n = 0
        self.head: dict | None = None
        self.kind: str | None = None
        self.done = not first

    def batch(self, records: Sequence[dict], dead_letters: Sequence[dict]) -> None:
        if self.done:
            return
        dead = {}
        for d in dead_letters:
            off = (d.get("origin") or {}).get("offset")
            if d.get("operator") is not None and off is not None:
                dead.setdefault(off, d)
        for r in records:
            d = dead.get(r.get("offset"))
            if d is None or (self.kind is not None and reason_kind(d["reason"]) != self.kind):
                self.done = True
                return
            if self.head is None:
                self.head, self.kind = d, reason_kind(d["reason"])
            self.n += 1
            if self.n >= self.first:
                self.done = True
                raise AllDeadLetters(self._message(f"the first {self.n}"))

    def end(self) -> None:
        """The stream ended with every record rejected so far."""
        if not self.done and self.n:
            self.done = True
            raise AllDeadLetters(self._message(f"all {self.n}" if self.n > 1 else "the one"))

    def _message(self, how_many: str) -> str:
        d = self.head or {}
        origin = d.get("origin") or {}
        where = f" (line {origin['line']})" if "line" in origin else ""
        reason = str(d.get("reason")).split("\n")[0]
        noun = "records" if how_many != "the one" else "record"
        return (f"{how_many} {noun} of {self.what} {'were' if noun == 'records' else 'was'} "
                f"rejected by operator {d.get('operator')}: {reason}{where}; nothing was "
                "processed: check the operator's parameters against the data (`shiftwatch "
                f"operators` lists what each takes); every rejection is in dead_letters.jsonl")


class Pipeline:
    """Run records from a source through a chain of operators into sinks.

    Parameters
    ----------
    source
        An iterable of records and :class:`~shiftwatch.records.DeadLetter` items (a
        :class:`streams.Source`). Its ``length`` (if any) gives the progress bar an ETA.
    operators
        Applied in order; each one's outputs are the next one's inputs. Unless ``keyed`` is
        False, each operator is wrapped in :class:`~shiftwatch.operators.keyed.Keyed`, so every
        record key gets its own state.
    sinks
        Receive the last operator's outputs in micro-batches (and the input records, if a
        sink sets ``wants_inputs``; the dead-letter records too, if it sets
        ``wants_dead_letters``).
    dead_letters
        Receives every dead letter, from the source (malformed input) and from any operator
        (records it rejected), as a record of the one dead-letter schema
        (:meth:`DeadLetter.to_record`). If None they are only counted.
    batch_size
        Records per micro-batch handed to ``process_batch``.
    speed
        None: as fast as possible. A factor f > 0: real time times f, read from ``ts``
        (f = 10 replays an hour of data in six minutes).
    progress
        Show a progress bar (records, rate, ETA) on stderr when it is a terminal.
    metrics
        Optional :class:`~shiftwatch.deploy.observability.StageMetrics` to report to
        (``shiftwatch replay --metrics-port``): counters, batch times, liveness, and ready
        while the replay runs.
    expiry
        Optional :class:`~shiftwatch.deploy.expiry.Expiry`: keys idle too long or over a
        maximum are forgotten after each batch (``--key-ttl``, ``--max-keys``).
    time
        The rule for time and duplicates (``{"allowed_lateness_seconds": ..., "drop_duplicates":
        ...}``, :mod:`~shiftwatch.deploy.time_rule`; ``--allowed-lateness``,
        ``--drop-duplicates``): when on, it runs first, keyed; None: off.
    stop_if_all_dead
        Stop with :class:`AllDeadLetters` when the first this many items of the source (or
        all of them, when there are fewer) are dead letters for one reason
        (:func:`stop_if_all_dead`), or when the first this many records that reach the
        operators are each rejected by an operator for one reason; None never stops.
    columnar
        None (default): take the columnar path (:mod:`~shiftwatch.deploy.columnar`: a CSV
        file in column batches through ``cs`` or a River detector, the same outputs, dead
        letters and report, faster) when the run allows it, unless the environment sets
        ``SHIFTWATCH_RECORD_PATH=1``; False: always the record path.
    bounds
        The stream's plausibility bounds (``{"max_abs_value": ..., "max_future_seconds":
        ...}``, :mod:`~shiftwatch.deploy.bounds`; ``--max-abs-value``,
        ``--max-future-seconds``); None: the defaults (a ``ts`` at most a day ahead).

    Notes
    -----
    The runner numbers the source's items with ``offset`` (0-based, dead letters included,
    so an offset is stable whatever fails) and hands each micro-batch to a
    :class:`~shiftwatch.deploy.executor.StageExecutor`, the same one a Kafka stage uses, so
    outputs come in input order and dead letters have one schema. On Ctrl-C the batch at
    hand is finished exactly once (a SIGINT during processing waits for the batch to be
    written), every sink is flushed and closed (the evaluating sink writes its report of
    what was done), and the summary says ``interrupted``.

    Examples
    --------
    >>> from shiftwatch.operators.contract import Operator
    >>> class Above(Operator):
    ...     def __init__(self, level=1.0):
    ...         self.level = level
    ...         self._reset()
    ...     def process(self, record):
    ...         return [self._output(record, alarm=record["value"] > self.level)]
    >>> class Collect:
    ...     wants_inputs = False
    ...     def __init__(self): self.records = []
    ...     def open(self): pass
    ...     def write(self, records): self.records.extend(records)
    ...     def flush(self): pass
    ...     def close(self): pass
    ...     def summary(self): return {}
    >>> sink = Collect()
    >>> src = [{"value": 0.5}, DeadLetter("x", "not a number"), {"value": 2.0}]
    >>> summary = Pipeline(src, [Above()], [sink], progress=False).run()
    >>> [(r["offset"], r["alarm"]) for r in sink.records], summary.dead_letters
    ([(0, False), (2, True)], 1)
    """

    def __init__(self, source: Iterable, operators: Sequence[Operator], sinks: Sequence = (),
                 dead_letters=None, batch_size: int = 1000, speed: float | None = None,
                 progress: bool = True, keyed: bool = True, metrics=None,
                 stop_if_all_dead: int | None = ALL_DEAD_FIRST, change_positions: bool = True,
                 expiry: Expiry | None = None, time: dict | None = None,
                 columnar: bool | None = None, bounds: dict | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if speed is not None and speed < 0:
            raise ValueError(f"speed must be None (as fast as possible) or > 0, got {speed}")
        self.source = source
        self.operators = [op if (isinstance(op, Keyed) or not keyed) else Keyed(op)
                          for op in operators]
        rule = rule_operator(time)
        if rule is not None:
            self.operators.insert(0, rule)
        self.sinks = list(sinks)
        self.dead_letters = dead_letters
        self.batch_size = batch_size
        self.speed = speed
        self.progress = progress
        self.metrics = metrics
        self.stop_if_all_dead = stop_if_all_dead
        self.change_positions = change_positions
        self.expiry = expiry
        self.columnar = columnar
        #: the stream's plausibility bounds (``bounds``; :mod:`~shiftwatch.deploy.bounds`)
        self.bounds = check_bounds(bounds)

    # ------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Run to the end of the source (or Ctrl-C) and return the summary.

        An exception that stops the run (a sink that cannot write: a full disk) carries the
        summary of what was done as its ``summary`` attribute; every sink is closed first."""
        try:
            return self._run()
        except Exception as exc:
            exc.summary = getattr(self, "_summary", None)
            raise

    def _run(self) -> RunSummary:
        ex = StageExecutor(self.operators, keyed=False,  # wrapped (or not) already
                           observer=self.metrics, expiry=self.expiry,
                           bounds=StreamBounds.from_settings(self.bounds))
        summary = self._summary = ex.summary
        what = str(getattr(self.source, "path", None) or getattr(self.source, "name", None)
                   or "the source")
        self._rejections = _RejectionCheck(self.stop_if_all_dead, what)
        opened: list = []
        self._positions = ChangePositions() if self.change_positions else None
        for sink in self.sinks:
            if hasattr(sink, "change_at_positions"):
                sink.change_at_positions = self.change_positions
        bar = None
        start = time.perf_counter()
        guard = _InterruptGuard()
        try:
            for sink in self._all_sinks():
                sink.open()
                opened.append(sink)
            bar = self._progress_bar()
            if self.metrics is not None:
                self.metrics.set_ready(True)
            batch: list[dict] = []
            last_flush = time.perf_counter()
            columnar = columnar_run(self)
            with guard:
                try:
                    for item in (() if columnar is not None else self._items()):
                        ex.count_inputs(1)
                        item = ex.bounded(item, getattr(self.source, "origins", None))
                        if isinstance(item, DeadLetter):
                            self._write_dead([ex.dead_letter(item)])
                            continue
                        batch.append(item)
                        now = time.perf_counter()
                        if len(batch) >= self.batch_size or (self.speed
                                                              and now - last_flush > 0.2):
                            # Cleared first: a batch that reached the operators is never
                            # processed again, whatever interrupts it.
                            todo, batch = batch, []
                            self._process(ex, todo, guard, bar)
                            last_flush = now
                    if columnar is not None:  # the same, in column batches
                        columnar.run(ex, guard, bar, lambda how, head: AllDeadLetters(
                            _all_dead_message(how, what, head)))
                except KeyboardInterrupt:
                    summary.interrupted = True
                # The batch read so far is processed, also after Ctrl-C while reading: it
                # was consumed and none of it reached the operators yet.
                if batch:
                    todo, batch = batch, []
                    try:
                        self._process(ex, todo, guard, bar)
                    except KeyboardInterrupt:
                        summary.interrupted = True
                if not summary.interrupted:  # the stream ended: what operators held back
                    self._rejections.end()
                    with guard.deferred():
                        self._write(ex.flush())
        finally:
            if self.metrics is not None:
                self.metrics.sync(summary)
                self.metrics.set_ready(False)
            if bar is not None:
                bar.close()
            summary.seconds = time.perf_counter() - start
            close = getattr(self.source, "close", None)
            if close is not None:
                close()
            failed: BaseException | None = None
            error = sys.exc_info()[1]
            if error is not None and not isinstance(error, KeyboardInterrupt):
                summary.stopped = f"{type(error).__name__}: {error}".split("\n")[0][:300]
            if sys.exc_info()[1] is not None:  # the run stops on an error: nothing to show
                for sink in opened:             # as if it had ended (the console's table)
                    if hasattr(sink, "run_failed"):
                        sink.run_failed()
            for sink in opened:  # what the runner counted that a report should say too
                if hasattr(sink, "note_run"):
                    sink.note_run(summary)
            for sink in opened:  # every sink is closed, whichever fails
                try:
                    sink.close()
                except Exception as exc:
                    failed = failed or exc
            for sink in opened:
                name = type(sink).__name__
                summary.sinks[name] = sink.summary()
            if failed is not None and sys.exc_info()[1] is None:
                raise failed
        return summary

    # ------------------------------------------------------------------------------

    def _all_sinks(self) -> list:
        return self.sinks + ([self.dead_letters] if self.dead_letters is not None else [])

    def _items(self):
        items: Iterable = self.source
        if self.speed:
            from shiftwatch.streams.replay import paced

            items = paced(items, self.speed)
        offset = 0
        what = str(getattr(self.source, "path", None) or getattr(self.source, "name", None)
                   or "the source")
        for item in stop_if_all_dead(items, what, self.stop_if_all_dead):
            if isinstance(item, DeadLetter):
                item.origin.setdefault("offset", offset)
            elif isinstance(item, dict):
                if "offset" not in item:
                    item = {**item, "offset": offset}
            else:
                item = DeadLetter(raw=item, reason=f"source item is a {type(item).__name__}, "
                                  "not a record mapping", origin={"offset": offset})
            offset += 1
            yield item

    def _process(self, ex: StageExecutor, batch: list[dict], guard: _InterruptGuard,
                 bar) -> None:
        """Run one batch through the executor and write its results.

        A Ctrl-C (SIGINT) arriving meanwhile is held until the batch is written, so the
        operators' state and the outputs always cover whole batches; it then raises
        ``KeyboardInterrupt`` here."""
        with guard.deferred():
            t0 = time.perf_counter()
            # A file source says which line each offset came from (for operators' dead letters).
            result = ex.process(batch, origins=getattr(self.source, "origins", None))
            self._write(result)
            self._rejections.batch(batch, result.dead_letters)
            if bar is not None:
                bar.update(len(batch))
            if self.metrics is not None:
                self.metrics.batch(time.perf_counter() - t0)
                self.metrics.sync(ex.summary)

    def _write(self, result) -> None:
        self._write_dead(result.dead_letters)
        if self._positions is not None:
            self._positions.inputs(result.inputs)
            self._positions.outputs(result.outputs)
            for key in result.evicted:  # its detector counts from 0 again
                self._positions.forget(key)
        for sink in self.sinks:
            if getattr(sink, "wants_inputs", False):
                sink.write_inputs(result.inputs)
            sink.write(result.outputs)

    def _write_dead(self, records: list[dict]) -> None:
        if not records:
            return
        if self.dead_letters is not None:
            self.dead_letters.write(records)
        for sink in self.sinks:  # e.g. the evaluating sink, to list them in its report
            if getattr(sink, "wants_dead_letters", False):
                sink.write_dead_letters(records)

    def _progress_bar(self):
        if not self.progress or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        total = getattr(self.source, "length", None)
        return tqdm(total=total, unit="rec",
                    desc=getattr(self.source, "name", "replay"), file=sys.stderr)


class _InterruptGuard:
    """Holds SIGINT (and SIGTERM) while a batch is processed and written, then raises it.

    Active only in the main thread with Python's default SIGINT handler (elsewhere a
    ``KeyboardInterrupt`` goes where it lands, and the runner still never processes a batch
    twice)."""

    def __init__(self) -> None:
        self._held = False
        self._pending = False
        self._previous = None
        self._previous_term = None

    def __enter__(self) -> _InterruptGuard:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handler)
            # SIGTERM (kill, docker stop, a scheduler's timeout) stops a replay as Ctrl-C
            # does: the batch at hand is written, every file is finished (no *.tmp left)
            # and the report says it is partial; without this it ended the process at once
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                self._previous_term = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self._previous_term is not None:
            signal.signal(signal.SIGTERM, self._previous_term)
            self._previous_term = None

    def _handler(self, signum, frame) -> None:
        if self._held:
            self._pending = True
        else:
            raise KeyboardInterrupt

    def deferred(self) -> _Deferred:
        return _Deferred(self)


class _Deferred:
    def __init__(self, guard: _InterruptGuard):
        self.guard = guard

    def __enter__(self) -> None:
        self.guard._held = True

    def __exit__(self, exc_type, exc, tb) -> None:
        g = self.guard
        g._held = False
        if g._pending:
            g._pending = False
            if exc_type is None:
                raise KeyboardInterrupt
