"""The local runner: source -> operators -> sinks, in one process, no broker.

This is the embedded default: ``shiftwatch replay`` and ``shiftwatch demo`` use it, and so
can Python code::

    from shiftwatch.deploy import Pipeline
    summary = Pipeline(source, [create("river:ADWIN")], [JsonlSink("out.jsonl")]).run()
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shiftwatch.operators.base import DeadLetter, Keyed, Operator

__all__ = ["Pipeline", "RunSummary"]


@dataclass
class RunSummary:
    """What a run did. ``interrupted`` is True when it was stopped by Ctrl-C."""

    records_in: int = 0
    outputs: int = 0
    dead_letters: int = 0
    alarms: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Input records per second of wall time."""
        return self.records_in / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rate"] = self.rate
        return d

    def line(self) -> str:
        """One human-readable summary line."""
        s = (f"{self.records_in} records in {self.seconds:.2f} s ({self.rate:,.0f}/s), "
             f"{self.outputs} outputs, {self.alarms} alarms, {self.dead_letters} dead letters")
        return s + (" (interrupted: partial results written)" if self.interrupted else "")


class Pipeline:
    """Run records from a source through a chain of operators into sinks.

    Parameters
    ----------
    source
        An iterable of records and :class:`~shiftwatch.operators.base.DeadLetter` items (a
        :class:`streams.Source`). Its ``length`` (if any) gives the progress bar an ETA.
    operators
        Applied in order; each one's outputs are the next one's inputs. Unless ``keyed`` is
        False, each operator is wrapped in :class:`~shiftwatch.operators.base.Keyed`, so every
        record key gets its own state.
    sinks
        Receive the last operator's outputs in micro-batches (and the input records, if a
        sink sets ``wants_inputs``).
    dead_letters
        Receives every :class:`DeadLetter`: from the source (malformed input) and from any
        operator (records it rejected). If None they are only counted.
    batch_size
        Records per micro-batch handed to ``process_batch``.
    speed
        None: as fast as possible. A factor f > 0: real time times f, read from ``ts``
        (f = 10 replays an hour of data in six minutes).
    progress
        Show a progress bar (records, rate, ETA) on stderr when it is a terminal.

    Notes
    -----
    The runner numbers the source's items with ``offset`` (0-based, dead letters included,
    so an offset is stable whatever fails). On Ctrl-C the current batch is finished, every
    sink is flushed and closed (the evaluating sink writes its report of what was done), and
    the summary says ``interrupted``.

    Examples
    --------
    >>> from shiftwatch.operators.base import Operator
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
                 progress: bool = True, keyed: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if speed is not None and speed < 0:
            raise ValueError(f"speed must be None (as fast as possible) or > 0, got {speed}")
        self.source = source
        self.operators = [op if (isinstance(op, Keyed) or not keyed) else Keyed(op)
                          for op in operators]
        self.sinks = list(sinks)
        self.dead_letters = dead_letters
        self.batch_size = batch_size
        self.speed = speed
        self.progress = progress

    # ------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Run to the end of the source (or Ctrl-C) and return the summary."""
        summary = RunSummary()
        opened: list = []
        bar = None
        start = time.perf_counter()
        try:
            for sink in self._all_sinks():
                sink.open()
                opened.append(sink)
            bar = self._progress_bar()
            batch: list[dict] = []
            last_flush = time.perf_counter()
            try:
                for item in self._items():
                    if isinstance(item, DeadLetter):
                        self._dead_letter(item, summary)
                        summary.records_in += 1
                        continue
                    batch.append(item)
                    summary.records_in += 1
                    now = time.perf_counter()
                    if len(batch) >= self.batch_size or (self.speed and now - last_flush > 0.2):
                        self._process(batch, summary)
                        if bar is not None:
                            bar.update(len(batch))
                        batch = []
                        last_flush = now
            except KeyboardInterrupt:
                summary.interrupted = True
            # The batch read so far is processed, also after Ctrl-C: it was consumed.
            if batch:
                self._process(batch, summary)
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
            summary.seconds = time.perf_counter() - start
            close = getattr(self.source, "close", None)
            if close is not None:
                close()
            for sink in opened:
                sink.close()
            for sink in opened:
                name = type(sink).__name__
                summary.sinks[name] = sink.summary()
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
        for item in items:
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

    def _process(self, batch: list[dict], summary: RunSummary) -> None:
        inputs = batch
        records: list = batch
        for stage, op in enumerate(self.operators):
            outs = op.process_batch(records)
            records = []
            for o in outs:
                if isinstance(o, DeadLetter):
                    o.origin.setdefault("stage", stage)
                    self._dead_letter(o, summary)
                else:
                    records.append(o)
        summary.outputs += len(records)
        summary.alarms += sum(1 for r in records if r.get("alarm"))
        for sink in self.sinks:
            if getattr(sink, "wants_inputs", False):
                sink.write_inputs(inputs)
            sink.write(records)

    def _dead_letter(self, item: DeadLetter, summary: RunSummary) -> None:
        summary.dead_letters += 1
        reason = item.reason.split(":")[0][:60]
        summary.dead_letter_reasons[reason] = summary.dead_letter_reasons.get(reason, 0) + 1
        if self.dead_letters is not None:
            self.dead_letters.write([item])

    def _progress_bar(self):
        if not self.progress or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        total = getattr(self.source, "length", None)
        return tqdm(total=total, unit="rec",
                    desc=getattr(self.source, "name", "replay"), file=sys.stderr)
