"""Sources reading log files: CSV (with a header row) and JSON Lines, plain or gzipped.

Both sources map named columns (fields) to the record fields ``key``, ``ts``, ``value``, ``y``
and ``task``. A line that cannot be turned into a record becomes a
:class:`~shiftwatch.records.DeadLetter` whose origin is
``{"file": path, "line": n}`` (``n`` the physical, 1-based line number, the header being line 1
of a CSV file), and reading goes on.

Conventions shared by both sources:

* ``key`` is ``None`` unless a key column is named (the file name is in ``source.name``).
* ``ts`` is the named column as float seconds, or with ``ts_format`` a date
  (``"iso"`` for ISO 8601, otherwise a :func:`time.strptime` format) turned into epoch
  seconds, naive dates being read as UTC. Without a ts column, ``ts`` is the 0-based index
  of the record among the records yielded so far (dead letters are not counted).
* ``value`` is one column (a scalar) or a list of columns (a vector, in the order given).
* ``y`` and ``task`` are copied when named: JSON values as they are; CSV text as an ``int``
  or ``float`` when it reads as one, else as the string; an empty CSV cell gives ``None``.
* Records carry no ``offset``: the runner numbers them (0, 1, ... over the items yielded,
  dead letters included). ``source.origins.get(offset)`` gives ``{"file", "line", "offset"}``
  for an item of the iteration under way, so that a record an operator rejects is also traced
  back to its line.
* Blank lines are skipped and counted in ``source.blank_lines``. More than
  ``max_blank_lines`` of them in a row (default :data:`~shiftwatch.streams.lines.MAX_BLANK_LINES`,
  a million; ``None``: no bound) end the reading of the file: the rest of it is one dead letter
  ``blank: more than N consecutive blank lines from line L on ...``, so that a file of
  nothing but blank lines (a small ``.gz`` of gigabytes of them) ends at once with a reason.
* A line that is not valid UTF-8 is a dead letter whose ``raw_base64`` holds its exact bytes
  (never a record with U+FFFD in it, which would merge different keys into one).
* A damaged ``.gz`` file (truncated, a bad CRC, corrupt data) is read up to the damage; the
  rest becomes one dead letter saying where and why (``file is truncated after line N:
  compressed stream ended early``), whose raw is the line the damage cut short.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from shiftwatch.codec import MAX_DIGITS, parse_object
from shiftwatch.records import BadInput, DeadLetter, as_array, as_scalar, get_field
from shiftwatch.streams.base import Source
from shiftwatch.streams.lines import (
    MAX_BLANK_LINES,
    MAX_LINE_CHARS,
    _bounded_lines,
    _check_max_blank_lines,
    _damage,
    _damage_reason,
    _Long,
    _open_text,
    long_line_reason,
)

__all__ = ["CsvSource", "JsonlSource"]


# --------------------------------------------------------------------------------------
# Helpers shared by both sources
# --------------------------------------------------------------------------------------


def _check_path(path: str | os.PathLike) -> str:
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"source file not found: {p!r}")
    if os.path.isdir(p):
        raise ValueError(f"source path is a directory, not a file: {p!r}")
    return p


#: A numeric cell with more digits than this is refused: the JSON decoder's limit
#: (:data:`shiftwatch.codec.MAX_DIGITS`, 100), so a CSV and a JSONL log of the same
#: data give the same dead letters.
MAX_NUMBER_DIGITS = MAX_DIGITS

# The JSON number grammar (RFC 8259), plus a leading "+"; and the non-finite spellings float()
# reads, which pass the grammar only for the value check to reject them as not finite.
_NUMBER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
#: A number by that grammar with too few digits to reach MAX_NUMBER_DIGITS.
_SHORT_NUMBER = re.compile(
    r"[+-]?(?:0|[1-9][0-9]{0,99})(?:\.[0-9]{1,99})?(?:[eE][+-]?[0-9]{1,9})?").fullmatch
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# Bytes that are not UTF-8, as the "surrogateescape" error handler decodes them.
_UNDECODABLE = re.compile("[\udc80-\udcff]")
# A quoted CSV field, a quote inside it doubled (unrolled: linear time, even when unclosed).
_QUOTED = re.compile(r'"[^"]*(?:""[^"]*)*"')


def _undecodable(text: str) -> str | None:
    """Where ``text`` (decoded with surrogateescape) holds a byte that is not UTF-8, or None."""
    if text.isascii():
        return None
    m = _UNDECODABLE.search(text)
    if m is None:
        return None
    return (f"line is not valid UTF-8, got byte 0x{ord(m.group()) - 0xDC00:02x} at column "
            f"{m.start() + 1}")


def _raw(text: str) -> str | bytes:
    """A line as a dead letter keeps it: the text, or its exact bytes when some are not UTF-8."""
    return text.encode("utf-8", "surrogateescape") if _undecodable(text) else text


def _quoting_error(text: str, delimiter: str) -> str | None:
    """What breaks RFC 4180 quoting in one CSV line, or None.

    A field is either quoted (``"..."``, a quote inside written ``""``) and then followed by
    the delimiter or the end of the line, or unquoted and then holds no quote.

    >>> print(_quoting_error('1,"a, ""b"" c",3', ","))
    None
    >>> _quoting_error('1,"a', ",")
    'broken quoting: field 2 opens a quote that is not closed'
    >>> _quoting_error('"a"b,3', ",")
    'broken quoting: field 1 has text after its closing quote'
    >>> _quoting_error('12" pipe,3', ",")
    'broken quoting: field 1 has a quote but is not quoted'
    """
    if '"' not in text:
        return None
    pos, field, end = 0, 1, len(text)
    while True:
        if text.startswith('"', pos):
            m = _QUOTED.match(text, pos)
            if m is None:
                return f"broken quoting: field {field} opens a quote that is not closed"
            pos = m.end()
            if pos < end and text[pos] != delimiter:
                return f"broken quoting: field {field} has text after its closing quote"
        else:
            stop = text.find(delimiter, pos)
            stop = end if stop < 0 else stop
            if '"' in text[pos:stop]:
                return f"broken quoting: field {field} has a quote but is not quoted"
            pos = stop
        if pos >= end:
            return None
        pos += 1
        field += 1


def _check_digits(cell: str, name: str) -> None:
    """Refuse a number (``cell`` matches the grammar) of more than MAX_NUMBER_DIGITS digits."""
    if sum(c.isdigit() for c in cell) > MAX_NUMBER_DIGITS:
        raise BadInput(f"{name}: number has more than {MAX_NUMBER_DIGITS} digits")


def read_number(text: str, name: str = "value", hint: str = "") -> float:
    """A numeric cell as a finite float, or raise :class:`BadInput`.

    The cell must be a JSON number (``-12``, ``0.5``, ``1e-3``), optionally with a leading
    ``+`` and surrounding blanks, of at most :data:`MAX_NUMBER_DIGITS` digits; ``nan`` and
    ``inf`` are read only to be refused as not finite. ``hint`` ends the message of a cell
    that is not a number.

    >>> read_number(" +2.5e1 ")
    25.0
    >>> read_number("1_000")
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: value '1_000' is not a number
    >>> read_number("-inf", "temp")
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: temp is not finite: -inf
    """
    cell = text.strip()
    if _NUMBER.fullmatch(cell) is None:
        if _NON_FINITE.fullmatch(cell) is None:
            raise BadInput(f"{name} {cell[:40]!r} is not a number{hint}")
    elif len(cell) > MAX_NUMBER_DIGITS:
        _check_digits(cell, name)
    return as_scalar(cell, name, loose=True)  # (the grammar above is the check)


def _stem(path: str) -> str:
    base = os.path.basename(path)
    for suffix in (".gz",):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return os.path.splitext(base)[0]


def _normalise_value_spec(value: str | Sequence[str], what: str = "value") -> list[str]:
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{what} must name a column, got ''")
        return [value]
    cols = list(value)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(f"{what} must be a column name or a non-empty list of column names, "
                         f"got {value!r}")
    return cols


def _normalise_annotations(annotations: Any) -> dict[str, list[int]] | None:
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        items = {str(k): v for k, v in annotations.items()}
    else:
        items = {"truth": annotations}
    out: dict[str, list[int]] = {}
    for k, idx in items.items():
        try:
            pts = [int(i) for i in idx]
        except (TypeError, ValueError):
            raise ValueError("annotations must be a list of indices or {annotator: [indices]}, "
                             f"got {annotations!r}") from None
        if any(i < 0 for i in pts):
            raise ValueError(f"annotations must be 0-based indices >= 0, got {pts}")
        out[k] = sorted(pts)
    return out


def parse_ts(raw: Any, ts_format: str | None) -> float:
    """Turn a ts field into epoch seconds (float). Raises :class:`BadInput`.

    >>> parse_ts("2024-01-01T00:00:10", "iso")
    1704067210.0
    >>> parse_ts("12.5", None)
    12.5
    """
    if ts_format is None:
        if raw is None or raw == "":
            raise BadInput("ts is empty")
        if isinstance(raw, str):
            return read_number(raw, "ts", hint=" (give ts_format to parse dates)")
        try:
            return as_scalar(raw, "ts")
        except BadInput as exc:
            raise BadInput(f"{exc} (give ts_format to parse dates)") from None
    if not isinstance(raw, str) or not raw.strip():
        raise BadInput(f"ts {raw!r} is not a date string")
    text = raw.strip()
    try:
        if ts_format == "iso":
            dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z")
                                        else text)
        else:
            dt = datetime.strptime(text, ts_format)
    except ValueError:
        raise BadInput(f"ts {raw!r} does not match format {ts_format!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _label(text: str, name: str) -> Any:
    """CSV text of a label: int or float when it is a (finite) number by the grammar of
    :func:`read_number`, else the string; None when empty."""
    text = text.strip()
    if text == "":
        return None
    integer = _INTEGER.fullmatch(text) is not None
    if not integer and _NUMBER.fullmatch(text) is None:
        return text
    if len(text) > MAX_NUMBER_DIGITS:
        _check_digits(text, name)
    if integer:
        return int(text)
    x = float(text)
    return x if math.isfinite(x) else text


class LineIndex:
    """Where each yielded item came from: item number (the runner's offset) -> file line.

    Stores only the places where ``line - item`` changes (skipped header and blank lines,
    multi-line nothing), so it costs memory per skipped line, not per record.

    >>> idx = LineIndex("x.csv")
    >>> for item, line in [(0, 2), (1, 3), (2, 5), (3, 6)]:
    ...     idx.add(item, line)
    >>> idx.get(2), idx.get(9)
    ({'file': 'x.csv', 'line': 5, 'offset': 2}, None)
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._starts: list[int] = []
        self._shift: list[int] = []
        self._n = 0

    def add(self, item: int, line: int) -> None:
        """Record that item ``item`` (0, 1, ... in order) came from line ``line``."""
        if not self._shift or line - item != self._shift[-1]:
            self._starts.append(item)
            self._shift.append(line - item)
        self._n = item + 1

    def get(self, offset: Any, default: Any = None) -> dict | None:
        """``{"file", "line", "offset"}`` of item ``offset``, or ``default``."""
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < self._n:
            return default
        i = bisect.bisect_right(self._starts, offset) - 1
        return {"file": self.path, "line": offset + self._shift[i], "offset": offset}


class _FileSource(Source):
    """What CsvSource and JsonlSource share: path checks, annotations, close()."""

    def _init_common(self, annotations: Any) -> None:
        self.name = _stem(self.path)
        self.annotations = _normalise_annotations(annotations)
        self.length = None
        self._columns = _normalise_value_spec(self.value)
        self._vector = not isinstance(self.value, str)
        self._open: list[Iterator] = []
        self.blank_lines = 0
        #: Why the last iteration ended before the file's end (a damaged ``.gz``, a run of
        #: blank lines over ``max_blank_lines``), or None: it read the whole file.
        self.unread: str | None = None
        self.max_blank_lines = _check_max_blank_lines(self.max_blank_lines)
        self.origins = LineIndex(self.path)
        if self.ts_format is not None and not isinstance(self.ts_format, str):
            raise ValueError(f"ts_format must be 'iso', a strptime format or None, "
                             f"got {self.ts_format!r}")
        extra = [self.extra] if isinstance(self.extra, str) else self.extra
        if not isinstance(extra, (list, tuple)) or not all(
                isinstance(c, str) and c for c in extra):
            raise ValueError(f"extra must be a list of field names, got {self.extra!r}")
        taken = {"key", "ts", "value", "y", "task", "offset"} & set(extra)
        if taken:
            raise ValueError(f"extra may not name the record fields {sorted(taken)}; map them "
                             "with key=, ts=, value=, y=, task=")
        self._extra = list(extra)

    @property
    def columns(self) -> list[str]:
        """The value columns, in the order of the vector."""
        return list(self._columns)

    def _dead(self, raw: str | bytes, reason: str, line: int) -> DeadLetter:
        return DeadLetter(raw=raw, reason=reason, origin={"file": self.path, "line": line})

    def _lines(self, skip: int = 0) -> Iterator[tuple[int, str | DeadLetter]]:
        """The file's lines after the first ``skip``: (number, text without its line break).

        Blank lines are skipped and counted. A line that is not UTF-8 comes as (number,
        DeadLetter) with its exact bytes; so does the tail of a damaged ``.gz`` file, after
        every line read before the damage (the line the damage cut short is its raw text).
        """
        f, guard = _open_text(self.path, self.max_blank_lines)
        lineno, tail = 0, ""
        with f:
            for lineno, line in enumerate(_bounded_lines(f), start=1):
                if lineno <= skip:
                    continue
                if type(line) is _Long:
                    yield lineno, self._dead(_raw(line), long_line_reason(), lineno)
                    continue
                if guard is not None and guard.error is not None and \
                        line[-1:] not in ("\n", "\r"):
                    tail = line
                    break
                text = line.rstrip("\r\n")
                if not text.strip():
                    self.blank_lines += 1
                    continue
                if not text.isascii():
                    bad = _undecodable(text)
                    if bad is not None:
                        yield lineno, self._dead(_raw(text), bad, lineno)
                        continue
                yield lineno, text
            else:
                lineno += 1
        if guard is not None and guard.error is not None:
            self.unread = _damage_reason(guard.error, lineno - 1)
            yield lineno, self._dead(_raw(tail), self.unread, lineno)

    def _readable(self, whole_line: bool = True) -> str:
        """The first line (or only its first character), checked to be readable: raises
        ``ValueError`` saying why not, e.g. for a ``.gz`` file damaged within that much."""
        try:
            f, guard = _open_text(self.path)
            with f:
                first = f.readline(MAX_LINE_CHARS + 2) if whole_line else f.read(1)
        except OSError as exc:
            raise ValueError(f"cannot read {self.path}: {exc}") from None
        if whole_line and len(first.rstrip("\r\n")) >= MAX_LINE_CHARS:
            raise ValueError(f"cannot read {self.path}: its first line is {MAX_LINE_CHARS:,} "
                             "characters or more")
        if guard is not None and guard.error is not None and (
                first[-1:] not in ("\n", "\r") if whole_line else not first):
            raise ValueError(f"cannot read {self.path}: {_damage(guard.error)} in line 1")
        return first

    def __iter__(self) -> Iterator[dict | DeadLetter]:
        it = self._traced(self._iter())
        self._open.append(it)
        return it

    def _traced(self, items: Iterator[tuple[int, dict | DeadLetter]]
                ) -> Iterator[dict | DeadLetter]:
        """Yield the items of ``_iter`` (``(line, item)`` pairs), noting each one's line."""
        self.blank_lines = 0
        self.unread = None
        self.origins = origins = LineIndex(self.path)
        with contextlib.closing(items):
            for n, (lineno, item) in enumerate(items):
                origins.add(n, lineno)
                yield item

    def _iter(self) -> Iterator[tuple[int, dict | DeadLetter]]:
        raise NotImplementedError

    def close(self) -> None:
        """Close the files of iterations still open. Called by the runner in ``finally``."""
        while self._open:
            self._open.pop().close()  # a generator's close() runs its ``with`` exit

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, value={self.value!r})"


# --------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------


class CsvSource(_FileSource):
    """Records from a CSV file with a header row (``.gz`` read transparently).

    Parameters
    ----------
    path
        The file; a name ending in ``.gz`` is decompressed on the fly.
    value
        The column holding the value, or a list of columns giving a vector value.
    key
        The column holding the record key; without it every key is ``None``.
    ts
        The column holding event time; without it ``ts`` is the record's 0-based index.
    y, task
        Columns copied to the record's label and task id.
    delimiter
        The field separator (``"\\t"`` for TSV).
    ts_format
        ``None`` (ts is a number of seconds), ``"iso"``, or a ``strptime`` format.
    annotations
        True change points: a list of 0-based record indices, or ``{annotator: [indices]}``.
    extra
        More columns copied into the record under their own names (numbers parsed,
        ``true``/``false`` as booleans), e.g. ``["train"]`` for evaluation-only rows.
    max_blank_lines
        More consecutive blank lines than this end the reading (the rest of the file is one
        dead letter, reason ``blank: ...``); default a million, ``None`` no bound.

    Notes
    -----
    Each physical line is one row: quoted fields may contain the delimiter but not a line
    break. Quoting follows RFC 4180 (a quoted field is closed and followed by the delimiter or
    the line's end, a quote inside it doubled; an unquoted field holds no quote); a line that
    breaks it is a dead letter. Numeric cells (the value, a ts without ``ts_format``) are JSON
    numbers (``-1.5e3``; no ``1_000``, ``.5`` or ``007``), optionally with a leading ``+`` and
    surrounding blanks, of at most :data:`MAX_NUMBER_DIGITS` digits (see
    :func:`read_number`); label and extra cells by the same grammar are read as numbers.
    Blank lines are skipped (counted in ``blank_lines``). A row with the wrong number
    of fields, an empty or non-numeric or non-finite value, or a bad ts becomes a dead letter;
    the header is line 1.
    A missing file, a missing header, or a header without the named columns raises at
    construction.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "s.csv")
    >>> with open(path, "w") as f:
    ...     _ = f.write("t,temp\\n0,20.5\\n1,oops\\n2,21.0\\n")
    >>> for item in CsvSource(path, value="temp", ts="t"):
    ...     print(item if isinstance(item, dict) else (item.origin["line"], item.reason))
    {'key': None, 'ts': 0.0, 'value': 20.5}
    (3, "temp 'oops' is not a number")
    {'key': None, 'ts': 2.0, 'value': 21.0}
    """

    def __init__(self, path: str | os.PathLike, value: str | Sequence[str] = "value",
                 key: str | None = None, ts: str | None = None, y: str | None = None,
                 task: str | None = None, delimiter: str = ",", ts_format: str | None = None,
                 annotations: Any = None, extra: Sequence[str] = (),
                 max_blank_lines: int | None = MAX_BLANK_LINES):
        self.path = _check_path(path)
        self.max_blank_lines = max_blank_lines
        self.value = value
        self.key = key
        self.ts = ts
        self.y = y
        self.task = task
        self.delimiter = delimiter
        self.extra = extra
        self.ts_format = ts_format
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ValueError(f"delimiter must be one character, got {delimiter!r}")
        self._init_common(annotations)
        self._header = self._read_header()
        missing = [c for c in self._wanted() if c not in self._header]
        if missing:
            hint = ""
            if len(self._header) == 1:  # one column: most likely another delimiter
                found = [d for d in (";", "\t", "|") if d != delimiter and d in self._header[0]]
                if found:
                    shown = "\\t" if found[0] == "\t" else found[0]
                    hint = (f" (the header has one column with {shown!r} in it: try "
                            f"--source-opt delimiter={shown})")
            raise ValueError(f"{self.path}: no column {', '.join(map(repr, missing))} in the "
                             f"header; columns: {', '.join(self._header)}{hint}")

    def _wanted(self) -> list[str]:
        return (self._columns + [c for c in (self.key, self.ts, self.y, self.task) if c]
                + list(self._extra))

    def _read_header(self) -> list[str]:
        first = self._readable().rstrip("\r\n")
        if not first.strip():
            raise ValueError(f"{self.path}: empty file or empty first line; a header row is "
                             "required")
        bad = _undecodable(first) or _quoting_error(first, self.delimiter)
        if bad is not None:
            raise ValueError(f"{self.path}: the header (line 1): {bad}")
        try:
            cells = next(csv.reader([first], delimiter=self.delimiter))
        except csv.Error as exc:
            raise ValueError(f"{self.path}: the header (line 1) is unparseable CSV: {exc}") \
                from None
        return [h.strip() for h in cells]

    def _iter(self) -> Iterator[tuple[int, dict | DeadLetter]]:
        header = self._header
        ncol = len(header)
        pos = {c: header.index(c) for c in self._wanted()}
        index = 0
        for lineno, text in self._lines(skip=1):
            if isinstance(text, DeadLetter):
                yield lineno, text
                continue
            item = self._line_item(text, lineno, pos, ncol, index)
            if type(item) is dict:
                index += 1
            yield lineno, item

    def _line_item(self, text: str, lineno: int, pos: dict[str, int], ncol: int,
                   index: int = 0) -> dict | DeadLetter:
        """One non-blank line (decoded, without its line break) as a record or a dead letter:
        the rule of the record path, which the column reader (:mod:`~shiftwatch.streams.
        columns`) applies to every line its vectorised checks do not pass."""
        if '"' in text:
            bad = _quoting_error(text, self.delimiter)
            if bad is not None:
                return self._dead(text, bad, lineno)
        try:
            fields = next(csv.reader([text], delimiter=self.delimiter))
        except csv.Error as exc:
            return self._dead(text, f"unparseable CSV: {exc}", lineno)
        if len(fields) != ncol:
            return self._dead(text, f"expected {ncol} fields, got {len(fields)}", lineno)
        try:
            return self._record(fields, pos, index)
        except BadInput as exc:
            return self._dead(text, str(exc), lineno)

    def _record(self, fields: list[str], pos: dict[str, int], index: int) -> dict:
        vals = []
        for c in self._columns:
            raw = fields[pos[c]].strip()
            if raw == "":
                raise BadInput(f"{c} is empty")
            # A short plain number (most cells) skips read_number's other checks.
            vals.append(as_scalar(raw, c, loose=True) if _SHORT_NUMBER(raw)
                        else read_number(raw, c))
        record: dict[str, Any] = {"key": fields[pos[self.key]] if self.key else None}
        if self.ts:  # without a ts column the record has no time (none is invented)
            cell = fields[pos[self.ts]]
            record["ts"] = as_scalar(cell, "ts", loose=True) if self.ts_format is None and \
                _SHORT_NUMBER(cell) else parse_ts(cell, self.ts_format)
        record["value"] = vals if self._vector else vals[0]
        if self.y:
            record["y"] = _label(fields[pos[self.y]], self.y)
        if self.task:
            record["task"] = _label(fields[pos[self.task]], self.task)
        for c in self._extra:
            cell = fields[pos[c]].strip()
            flag = {"true": True, "false": False}.get(cell.lower())
            record[c] = flag if flag is not None else _label(cell, c)
        return record


# --------------------------------------------------------------------------------------
# JSON Lines
# --------------------------------------------------------------------------------------


class JsonlSource(_FileSource):
    """Records from a JSON Lines file, one JSON object per line (``.gz`` read transparently).

    Parameters
    ----------
    path
        The file; a name ending in ``.gz`` is decompressed on the fly.
    value
        The field holding the value, or a list of fields giving a vector value. Fields may be
        dotted paths into nested objects (``"meta.temp"``). A single field may itself hold a
        number, a list (vector) or a nested list (matrix) of finite numbers.
    key, ts, y, task
        Fields (dotted paths allowed) for the key, event time, label and task id.
    ts_format
        ``None`` (ts is a number of seconds), ``"iso"``, or a ``strptime`` format.
    annotations
        True change points: a list of 0-based record indices, or ``{annotator: [indices]}``.
    extra
        More fields copied into the record as they are (absent ones are left out), e.g.
        ``["train", "meta"]``.
    loose
        ``False`` (default): a value must be a JSON number (or a list of them); a string
        such as ``"1e5"`` or a boolean is a dead letter. ``True``: numeric strings and
        booleans are read as numbers (``true`` is 1.0), as a CSV cell is.
    max_blank_lines
        More consecutive blank lines than this end the reading (the rest of the file is one
        dead letter, reason ``blank: ...``); default a million, ``None`` no bound.

    Notes
    -----
    Blank lines are skipped (counted in ``blank_lines``). Invalid JSON, a line that is not an
    object, a missing field, a non-numeric or non-finite value (by default a string or a
    boolean too), or a bad ts becomes a dead letter with the line number.
    A named ``key``/``y``/``task`` field that is absent gives ``None`` rather than a dead
    letter; ``value`` and ``ts`` must be present.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "s.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"id": "a", "m": {"x": 1, "y": 2}}\\n{oops\\n')
    ...     _ = f.write('{"id": "b", "m": {"x": 3}}\\n')
    >>> for item in JsonlSource(path, value=["m.x", "m.y"], key="id"):
    ...     print(item if isinstance(item, dict) else (item.origin["line"], item.reason))
    {'key': 'a', 'value': [1.0, 2.0]}
    (2, 'invalid JSON: Expecting property name enclosed in double quotes at column 2')
    (3, "record has no field 'm.y'")
    """

    def __init__(self, path: str | os.PathLike, value: str | Sequence[str] = "value",
                 key: str | None = None, ts: str | None = None, y: str | None = None,
                 task: str | None = None, ts_format: str | None = None,
                 annotations: Any = None, extra: Sequence[str] = (), loose: bool = False,
                 max_blank_lines: int | None = MAX_BLANK_LINES):
        self.path = _check_path(path)
        self.max_blank_lines = max_blank_lines
        self.value = value
        self.key = key
        self.ts = ts
        self.y = y
        self.task = task
        self.ts_format = ts_format
        self.extra = extra
        if not isinstance(loose, bool):
            raise ValueError(f"loose must be true or false, got {loose!r}")
        self.loose = loose
        self._init_common(annotations)
        self._readable(whole_line=False)

    def _iter(self) -> Iterator[tuple[int, dict | DeadLetter]]:
        index = 0
        for lineno, text in self._lines():
            if isinstance(text, DeadLetter):
                yield lineno, text
                continue
            try:  # parsed as a Kafka stage parses a message
                obj = parse_object(text)
                record = self._record(obj, index)
            except BadInput as exc:
                yield lineno, self._dead(text, str(exc), lineno)
                continue
            index += 1
            yield lineno, record

    def _record(self, obj: dict, index: int) -> dict:
        loose = self.loose
        if self._vector:
            value: Any = [as_scalar(get_field(obj, c), c, loose=loose) for c in self._columns]
        else:
            raw = get_field(obj, self._columns[0])
            if isinstance(raw, list):
                value = as_array(raw, name=self._columns[0], loose=loose).tolist()
            else:
                value = as_scalar(raw, self._columns[0], loose=loose)
        record: dict[str, Any] = {
            "key": _json_key(get_field(obj, self.key, None)) if self.key else None}
        if self.ts:  # without a ts field the record has no time (none is invented)
            record["ts"] = parse_ts(get_field(obj, self.ts), self.ts_format)
        record["value"] = value
        if self.y:
            record["y"] = get_field(obj, self.y, None)
        if self.task:
            record["task"] = get_field(obj, self.task, None)
        for c in self._extra:
            v = get_field(obj, c, _ABSENT)
            if v is not _ABSENT:
                record[c] = v
        return record


_ABSENT = object()


def _json_key(key: Any) -> Any:
    if isinstance(key, (dict,)):
        raise BadInput("key is an object; keys must be strings, numbers or lists")
    return key
