"""Sinks that write records to files, the console, memory, and the dead-letter file.

Every sink here turns NumPy scalars and arrays into plain JSON values (see :func:`jsonable`),
so operator outputs that carry ``np.float64`` or ``np.ndarray`` fields serialise as they are.

The file sinks write whole files or none (:class:`~shiftwatch.sinks.atomic_file.AtomicFile`):
records go to a temporary file beside the target, which :meth:`close` renames into place.
A write that fails (a full disk) removes the temporary, raises
:class:`~shiftwatch.sinks.atomic_file.WriteFailed` (an ``OSError`` naming the file) and
refuses further writes; the reason stays in the sink's ``error`` and ``summary()``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import IO, Any

import numpy as np

from shiftwatch.codec import dumps_record, jsonable
from shiftwatch.records import DeadLetter
from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed, reason_of
from shiftwatch.sinks.base import Sink, per_key_number
from shiftwatch.sinks.key_names import key_label

__all__ = [
    "jsonable",
    "JsonlSink",
    "CsvSink",
    "ConsoleAlarmSink",
    "MemorySink",
    "DeadLetterSink",
    "alarm_statistic",
]


_dumps = dumps_record  # one encoding for files and Kafka topics


def _make_parent(path: str | os.PathLike) -> None:
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)


class _FileSink(Sink):
    """A sink writing one text file, ``path``, through a temporary held in ``_file``.

    ``written`` becomes True when :meth:`close` has put the complete file in place; ``error``
    says why it could not be written (nothing of it is then left).
    """

    path: Any = None
    _file: IO[str] | None = None
    _target: AtomicFile | None = None
    error: str | None = None
    written: bool = False

    def _open_file(self, mode: str = "w", newline: str | None = None) -> None:
        self._refuse_after_failure()
        _make_parent(self.path)
        self._target = AtomicFile(self.path, mode, newline=newline)
        self._file = self._target.open()
        self.written = False

    def _refuse_after_failure(self) -> None:
        if self.error is not None:  # what was written before is gone: never write a part
            raise WriteFailed({self.path: self.error})

    def _failed(self, exc: OSError) -> WriteFailed:
        """Remove the temporary, keep the reason, and return the error to raise."""
        target, self._target, self._file = self._target, None, None
        if target is not None:
            target.discard()
        self.error = reason_of(exc)
        return WriteFailed({self.path: self.error}, errno=exc.errno)

    def flush(self) -> None:
        """Flush the file buffer to the temporary file (the file appears at :meth:`close`)."""
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                raise self._failed(exc) from exc

    def close(self) -> None:
        """Write the file out (flushed, synced to the disk, renamed into place); a second call
        does nothing. Never raises, so that the runner closes every sink: a failure is in
        ``error`` and :meth:`summary`."""
        target, self._target, self._file = self._target, None, None
        if target is None:
            return
        try:
            target.commit()
        except OSError as exc:
            self.error = reason_of(exc)
        else:
            self.written = True

    def _status(self, out: dict) -> dict:
        if self.error is not None:
            out["error"] = self.error
        return out


class JsonlSink(_FileSink):
    """Write each output record as one JSON object per line.

    Parameters
    ----------
    path
        The file to write; its parent directories are created. An existing file is
        replaced, unless ``append`` is true.
    append
        Append to an existing file instead of replacing it.
    alarms_only
        Write only the records with ``alarm: true`` (``shiftwatch replay --emit alarms``, as
        a Kafka stage's ``emit: alarms``); the others are counted as ``skipped``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "out" / "alarms.jsonl"
    >>> sink = JsonlSink(path)
    >>> sink.open()
    >>> sink.write([{"key": "a", "offset": 3, "statistic": np.float64(2.5), "alarm": True}])
    >>> sink.close()
    >>> print(path.read_text(), end="")
    {"key":"a","offset":3,"statistic":2.5,"alarm":true}
    """

    def __init__(self, path: str | os.PathLike, append: bool = False, alarms_only: bool = False):
        self.path = path
        self.append = append
        self.alarms_only = alarms_only
        self._file: IO[str] | None = None
        self._count = 0
        self._skipped = 0

    def open(self) -> None:
        """Create the parent directories and the temporary file. May raise ``OSError``."""
        if self._file is None:
            self._open_file("a" if self.append else "w")

    def write(self, records: Sequence[dict]) -> None:
        """Append ``records``, one JSON line each. Raises :class:`WriteFailed` when the file
        cannot be written (a full disk)."""
        self._refuse_after_failure()
        if self._file is None:
            self.open()
        assert self._file is not None
        if self.alarms_only:
            n = len(records)
            records = [r for r in records if r.get("alarm") is True]
            self._skipped += n - len(records)
        try:
            self._file.writelines(_dumps(r) + "\n" for r in records)
        except OSError as exc:
            raise self._failed(exc) from exc
        self._count += len(records)

    def write_columns(self, columns: Any) -> None:
        """Append the outputs of a column batch (the replay's columnar path,
        :class:`~shiftwatch.deploy.columnar.OutputColumns`): the same lines as :meth:`write`
        of its records, written without a record per line (each column encoded by orjson at
        once, its numbers in :func:`~shiftwatch.codec.encode_record`'s form)."""
        self._refuse_after_failure()
        if self._file is None:
            self.open()
        assert self._file is not None
        n = len(columns)
        special = columns.special
        if self.alarms_only:
            rows = np.flatnonzero(columns.alarm).tolist()
            text = "".join(_dumps(columns.record(i)) + "\n" for i in rows)
            self._skipped += n - len(rows)
            n = len(rows)
        elif n:
            tokens = [self._key_tokens(columns.keys, columns.inv, columns)]
            if columns.ts is not None:
                tokens.append(_tokens(columns.ts))
            tokens.append(_tokens(columns.offsets))
            tokens.append(_tokens(columns.alarm))
            tokens.extend(_tokens(col) for col in columns.fields.values())
            names = columns.names()
            # '{"key":' K ',"ts":' T ... '}\n': the text between the tokens, then every
            # line joined at C speed (no Python code per line)
            glue = ["{" + _dumps(names[0]) + ":", *(f",{_dumps(f)}:" for f in names[1:])]
            parts: list[str] = []
            start = 0
            for i in [*sorted(special), n]:
                if i > start:
                    cols = [x for g, t in zip(glue, tokens, strict=True)
                            for x in (repeat(g), t[start:i])]
                    parts.append("".join(chain.from_iterable(zip(*cols, repeat("}\n")))))
                if i < n:
                    parts.append(_dumps(special[i]) + "\n")
                start = i + 1
            text = "".join(parts)
        else:
            text = ""
        try:  # in pieces below the text buffer's size, as the lines of write() go (so a
            # disk that fills up stops the run where it stops the record path's)
            self._file.writelines(text[i:i + 4096] for i in range(0, len(text), 4096))
        except OSError as exc:
            raise self._failed(exc) from exc
        self._count += n

    def _key_tokens(self, keys: list, inv: np.ndarray, columns: Any = None) -> list[str]:
        """Each row's key as JSON (``keys`` the distinct keys, ``inv`` each row's index;
        ``columns.gids``, the keys' numbers in the run, when given: a key's JSON is kept by
        its number, no lookup per key and batch)."""
        if getattr(columns, "gids", None) is not None:
            encoded = per_key_number(self, "_key_json_table", columns, _dumps)
            return list(map(encoded.__getitem__, inv.tolist()))
        cache = self.__dict__.setdefault("_key_json", {})
        if len(cache) > 100_000:
            cache.clear()
        encoded = []
        for k in keys:
            try:
                t = cache.get(k)
            except TypeError:  # (not hashable: not a CSV key)
                t = None
            if t is None:
                t = _dumps(k)
                if isinstance(k, str):
                    cache[k] = t
            encoded.append(t)
        return list(map(encoded.__getitem__, inv.tolist()))

    def summary(self) -> dict:
        out = {"path": os.fspath(self.path), "records": self._count}
        if self.alarms_only:
            out["skipped"] = self._skipped  # outputs without an alarm (--emit alarms)
        return self._status(out)


def _tokens(column: np.ndarray) -> list[str]:
    """Each entry of a column of numbers or booleans as JSON, as
    :func:`~shiftwatch.codec.encode_record` writes it (NaN as ``null``)."""
    text = _dumps(column.tolist())
    return text[1:-1].split(",") if len(text) > 2 else []


class CsvSink(_FileSink):
    """Write output records as CSV rows.

    Parameters
    ----------
    path
        The file to write (replaced); parent directories are created.
    fields
        The columns. ``None`` takes the fields of the first record, in its order. Fields a
        record lacks are written empty; fields not among the columns are dropped (their
        names are listed in :meth:`summary`).

    Notes
    -----
    Lists, arrays and mappings are written as JSON text in their cell, booleans as
    ``true``/``false``, None and non-finite numbers as an empty cell.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "out.csv"
    >>> sink = CsvSink(path)
    >>> sink.open()
    >>> sink.write([{"key": "a", "offset": 0, "value": np.array([1.0, 2.0]), "alarm": False},
    ...             {"key": "a", "offset": 1, "value": [3.0, 4.5], "alarm": True, "x": 1}])
    >>> sink.close()
    >>> print(path.read_text(), end="")
    key,offset,value,alarm
    a,0,"[1.0,2.0]",false
    a,1,"[3.0,4.5]",true
    >>> sink.summary()["dropped_fields"]
    ['x']
    """

    def __init__(self, path: str | os.PathLike, fields: Sequence[str] | None = None):
        self.path = path
        self.fields = fields
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._columns: list[str] | None = list(fields) if fields is not None else None
        self._dropped: set[str] = set()
        self._count = 0

    def open(self) -> None:
        """Create the parent directories and the temporary file. May raise ``OSError``."""
        if self._file is None:
            self._open_file("w", newline="")
            self._writer = csv.writer(self._file, lineterminator="\n")
            if self._columns is not None:
                try:
                    self._writer.writerow(self._columns)
                except OSError as exc:
                    raise self._failed(exc) from exc

    def write(self, records: Sequence[dict]) -> None:
        """Append one row per record; the first record fixes the columns if none were given.
        Raises :class:`WriteFailed` when the file cannot be written."""
        self._refuse_after_failure()
        if self._file is None:
            self.open()
        try:
            self._write_rows(records)
        except OSError as exc:
            raise self._failed(exc) from exc

    def _write_rows(self, records: Sequence[dict]) -> None:
        for record in records:
            if not isinstance(record, Mapping):
                record = jsonable(record)
                if not isinstance(record, Mapping):
                    record = {"value": record}
            if self._columns is None:
                self._columns = [str(k) for k in record]
                self._writer.writerow(self._columns)
            extra = set(map(str, record)) - set(self._columns)
            if extra:
                self._dropped |= extra
            self._writer.writerow([_cell(record.get(c)) for c in self._columns])
            self._count += 1

    def summary(self) -> dict:
        return self._status({
            "path": os.fspath(self.path),
            "records": self._count,
            "dropped_fields": sorted(self._dropped),
        })


def _cell(value: Any) -> str:
    value = jsonable(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    return str(value)


class ConsoleAlarmSink(Sink):
    """Collect the alarms (records whose ``alarm`` is truthy) and print a table at close.

    Columns: ``key``, ``offset`` (the runner's position of the input that raised it), ``ts``
    (ISO-8601 UTC when every listed ``ts`` is epoch seconds of a plausible date, see
    :func:`~shiftwatch.sinks.time_axis.is_epoch_seconds`; as recorded otherwise),
    ``change_at`` (where the detector located the change, in the key's positions) and
    ``statistic``, which says what crossed:

    * the record's ``statistic`` (the maximum over coordinates for a vector detector), with
      its ``threshold`` when the record has one;
    * for confidence-sequence detectors (``lower``/``upper``, e.g. ``cs``): ``gap`` =
      ``lower - upper``, how far the confidence bounds crossed (the interval became empty);
      ``width`` = ``upper - lower`` for a record whose interval is not empty.

    Parameters
    ----------
    stream
        Where to print; ``None`` means ``sys.stdout`` as it is at close time.
    max_rows
        At most this many alarms are listed (the earliest, in offset order, whatever order
        the batches grouped them in); the count covers all.

    Examples
    --------
    >>> sink = ConsoleAlarmSink()
    >>> sink.write([{"key": "s1", "offset": 4, "ts": 4.0, "alarm": False, "statistic": 0.1},
    ...             {"key": "s1", "offset": 120, "ts": 120.0, "alarm": True, "statistic": 3.25,
    ...              "change_at": 117},
    ...             {"key": "s2", "offset": 9, "ts": 9.0, "alarm": True, "lower": 0.61,
    ...              "upper": 0.52, "change_at": 5},
    ...             {"key": "sensor-3", "offset": 7, "ts": None, "alarm": True}])
    >>> sink.close()
    key       offset  ts     change_at  statistic
    sensor-3       7  -              -  -
    s2             9  9.0            5  gap 0.09
    s1           120  120.0        117  3.25
    3 alarms
    >>> sink = ConsoleAlarmSink()
    >>> sink.write([{"key": "s1", "offset": 601, "ts": 1767226201.0, "alarm": True,
    ...              "statistic": [0.2, 0.75], "threshold": 0.5, "change_at": 598}])
    >>> print(sink.table())
    key  offset  ts                    change_at  statistic
    s1      601  2026-01-01T00:10:01Z        598  0.75 (max of 2) > threshold 0.5
    1 alarm
    """

    _HEADER = ("key", "offset", "ts", "change_at", "statistic")
    #: what it writes depends only on the outputs with an alarm (the replay's columnar
    #: path hands it those)
    reads_alarms_only = True

    def __init__(self, stream: IO[str] | None = None, max_rows: int = 50):
        if not isinstance(max_rows, int) or max_rows < 0:
            raise ValueError(f"max_rows must be an integer >= 0, got {max_rows!r}")
        self.stream = stream
        self.max_rows = max_rows
        # (order, (key, offset, ts as recorded, change_at, statistic)); ts is formatted at
        # print time, when all listed rows say whether they are dates.
        self._pending: list[tuple[tuple, tuple[str, str, Any, str, str]]] = []
        self._count = 0
        self._printed = False

    def write(self, records: Sequence[dict]) -> None:
        """Keep the alarm records (the earliest ``max_rows`` by offset) and count them all."""
        for record in records:
            if not isinstance(record, Mapping) or not record.get("alarm"):
                continue
            self._count += 1
            offset = record.get("offset")
            order = (0, offset) if isinstance(offset, (int, float)) else (1, self._count)
            self._pending.append(
                (
                    order,
                    (
                        _key(record.get("key")),
                        _text(offset),
                        jsonable(record.get("ts")),
                        _text(record.get("change_at")),
                        alarm_statistic(record),
                    ),
                )
            )
        if len(self._pending) > 2 * self.max_rows:
            self._trim()

    def _trim(self) -> None:
        # Batches arrive grouped by key; the table shows the earliest alarms in stream order.
        self._pending.sort(key=lambda item: item[0])
        del self._pending[self.max_rows:]

    @property
    def _rows(self) -> list[tuple[str, ...]]:
        from shiftwatch.sinks.time_axis import is_epoch_seconds, iso_utc

        self._trim()
        stamps = [row[2] for _, row in self._pending if row[2] is not None]
        dates = bool(stamps) and is_epoch_seconds(stamps)
        out = []
        for _, (key, offset, ts, change_at, stat) in self._pending:
            shown = "-" if ts is None else iso_utc(ts) if dates else _text(ts, True)
            out.append((key, offset, shown, change_at, stat))
        return out

    def run_failed(self) -> None:
        """The run stopped on an error (called before :meth:`close`): print nothing, so that
        the error is the run's last word, not a table of ``0 alarms``."""
        self._printed = True

    def close(self) -> None:
        """Print the table and the count (once)."""
        if self._printed:
            return
        self._printed = True
        out = self.stream if self.stream is not None else sys.stdout
        out.write(self.table() + "\n")
        out.flush()

    def table(self) -> str:
        """The text printed at close."""
        lines = []
        rows = self._rows
        if rows:
            header = self._HEADER
            widths = [max(len(header[c]), *(len(r[c]) for r in rows)) for c in range(5)]
            right = (False, True, False, True, False)  # positions line up as numbers

            def fmt(row: Sequence[str]) -> str:
                cells = [
                    s.rjust(w) if r else s.ljust(w)
                    for s, w, r in zip(row, widths, right, strict=True)
                ]
                return "  ".join(cells).rstrip()

            lines.append(fmt(header))
            lines.extend(fmt(r) for r in rows)
            if self._count > len(rows):
                lines.append(f"... {self._count - len(rows)} more")
        lines.append(f"{self._count} alarm{'' if self._count == 1 else 's'}")
        return "\n".join(lines)

    def summary(self) -> dict:
        return {"alarms": self._count}


def _key(key: Any) -> str:
    return "-" if key is None else key_label(jsonable(key))


def _text(value: Any, exact: bool = False) -> str:
    value = jsonable(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        # Raw ts values are shown exactly; statistics to six significant digits.
        return repr(value) if exact else f"{value:.6g}"
    return str(value) if not isinstance(value, (list, dict)) else json.dumps(value)


def _finite(values: Any) -> list[float]:
    """The finite numbers in a number or a (nested) list of numbers."""
    flat = np.ravel(np.asarray(jsonable(values), dtype=object)) if values is not None else []
    out = []
    for v in flat:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _pairs(lower: Any, upper: Any) -> list[tuple[float, float]]:
    """Finite (lower, upper) pairs, per coordinate for vectors."""
    lo, up = jsonable(lower), jsonable(upper)
    if not isinstance(lo, list):
        lo, up = [lo], [up]
    if not isinstance(up, list) or len(lo) != len(up):
        return []
    return [(float(a), float(b)) for a, b in zip(lo, up, strict=True)
            if _finite(a) and _finite(b) and not isinstance(a, list)
            and not isinstance(b, list)]


def alarm_statistic(record: Mapping) -> str:
    """What crossed at this alarm, as the console table shows it (see ConsoleAlarmSink).

    >>> alarm_statistic({"statistic": 51.41})
    '51.41'
    >>> alarm_statistic({"lower": 0.3669, "upper": 0.2804})       # cs at an alarm
    'gap 0.0865'
    >>> alarm_statistic({"lower": [0.1, 2.0], "upper": [0.5, 1.5]})   # a vector cs
    'gap 0.5 (max of 2)'
    >>> alarm_statistic({"lower": -0.2, "upper": 0.3}), alarm_statistic({"lower": None})
    ('width 0.5', '-')
    """
    threshold = _finite(record.get("threshold"))
    stat = record.get("statistic")
    values = _finite(stat)
    if values:
        text = f"{max(values):.6g}"
        if isinstance(jsonable(stat), list) and len(values) > 1:
            text += f" (max of {len(values)})"
        if len(threshold) == 1:
            text += f" > threshold {threshold[0]:.6g}"
        return text
    pairs = _pairs(record.get("lower"), record.get("upper"))
    if not pairs:
        return "-"
    gaps = [lo - up for lo, up in pairs]
    crossed = max(gaps) >= 0
    # At an alarm the intersection is empty (lower >= upper): how far the bounds crossed;
    # otherwise the narrowest interval, how close it came.
    value = max(gaps) if crossed else min(up - lo for lo, up in pairs)
    text = f"{'gap' if crossed else 'width'} {value:.6g}"
    return text + (f" (max of {len(pairs)})" if crossed and len(pairs) > 1 else
                   f" (min of {len(pairs)})" if len(pairs) > 1 else "")


class MemorySink(Sink):
    """Keep the output records in the list ``records`` (for tests and notebooks).

    Parameters
    ----------
    keep_inputs
        Also receive the input records (``wants_inputs``), into the list ``inputs``.

    Examples
    --------
    >>> sink = MemorySink()
    >>> sink.open(); sink.write([{"key": "a", "alarm": False}]); sink.close()
    >>> sink.records, sink.closed
    ([{'key': 'a', 'alarm': False}], True)
    """

    def __init__(self, keep_inputs: bool = False):
        self.keep_inputs = keep_inputs
        self.wants_inputs = bool(keep_inputs)
        self.records: list[dict] = []
        self.inputs: list[dict] = []
        self.opened = False
        self.closed = False
        self.flushes = 0

    def open(self) -> None:
        self.opened = True

    def write(self, records: Sequence[dict]) -> None:
        self.records.extend(records)

    def write_inputs(self, records: Sequence[dict]) -> None:
        self.inputs.extend(records)

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closed = True

    def summary(self) -> dict:
        return {"records": len(self.records)}


class DeadLetterSink(_FileSink):
    """Receive dead letters: write them as JSON lines to ``path``, or keep them in memory.

    ``write`` accepts :class:`~shiftwatch.records.DeadLetter` objects and dead letters
    already turned into records (``DeadLetter.to_record()`` dicts).

    Parameters
    ----------
    path
        The JSONL file (replaced; parent directories created). ``None`` keeps the dead-letter
        records in the list ``records``.

    Attributes
    ----------
    count
        The number of dead letters received.
    by_reason
        A :class:`collections.Counter` of the ``reason`` strings.

    Examples
    --------
    >>> sink = DeadLetterSink()
    >>> sink.write([DeadLetter(raw="1,abc", reason="value is not a number",
    ...                        origin={"file": "x.csv", "line": 3}),
    ...             {"dead_letter": True, "reason": "value is not a number", "raw": "2,?"},
    ...             DeadLetter(raw=b"{", reason="invalid JSON")])
    >>> sink.count, sink.by_reason.most_common(1), sink.records[2]["raw"]
    (3, [('value is not a number', 2)], '{')
    >>> sink.summary()
    {'dead_letters': 3, 'by_reason': {'value is not a number': 2, 'invalid JSON': 1}}
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = path
        self.records: list[dict] = []
        self.count = 0
        self.by_reason: Counter[str] = Counter()
        self._file: IO[str] | None = None

    def open(self) -> None:
        """Create the temporary file if a path was given. May raise ``OSError``."""
        if self.path is not None and self._file is None:
            self._open_file("w")

    def write(self, records: Sequence[DeadLetter | dict]) -> None:
        """Record each dead letter and count it by reason. Raises :class:`WriteFailed` when
        the file cannot be written."""
        if self.path is not None:
            self._refuse_after_failure()
            if self._file is None:
                self.open()
        for item in records:
            if isinstance(item, DeadLetter):
                record = item.to_record()
            elif isinstance(item, Mapping):
                record = dict(item)
                record.setdefault("dead_letter", True)
                record.setdefault("reason", "unknown")
            else:
                record = DeadLetter(raw=item, reason="unknown").to_record()
            record = jsonable(record)
            self.count += 1
            self.by_reason[str(record.get("reason"))] += 1
            if self._file is not None:
                try:
                    self._file.write(_dumps(record) + "\n")
                except OSError as exc:
                    raise self._failed(exc) from exc
            else:
                self.records.append(record)

    def summary(self, top: int = 10) -> dict:
        """The count, the ``top`` most common reasons, and the path if any."""
        out: dict[str, Any] = {
            "dead_letters": self.count,
            "by_reason": dict(self.by_reason.most_common(top)),
        }
        if self.path is not None:
            out["path"] = os.fspath(self.path)
        return self._status(out)
