"""The outputs as a Parquet file (``shiftwatch replay --outputs-format parquet``).

:class:`ParquetSink` takes what :class:`~shiftwatch.sinks.files.JsonlSink` takes (records,
or the column batches of the replay's columnar path) and writes one Parquet file, whole or
not at all, holding at most a row group of outputs in memory however long the run is.

``pyarrow`` is optional (``pip install 'shiftwatch[parquet]'``): it is imported when a sink
opens, never by importing this module; :func:`require_pyarrow` says whether it is there.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.codec import dumps_record, jsonable, key_text
from shiftwatch.sinks import atomic_file
from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed, reason_of
from shiftwatch.sinks.base import Sink

__all__ = ["ParquetSink", "require_pyarrow", "PYARROW_MISSING"]

#: The one line a run without pyarrow says.
PYARROW_MISSING = ("the Parquet output needs pyarrow, which is not installed: "
                   "pip install 'shiftwatch[parquet]'")

#: Rows of a row group: what the sink holds in memory at most.
ROW_GROUP_SIZE = 65_536

_EXACT = 2 ** 53  # the integers a float64 holds exactly: |i| <= 2**53
_INT64 = 2 ** 63


def require_pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``; ``ImportError`` saying :data:`PYARROW_MISSING`
    without them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise ImportError(PYARROW_MISSING) from exc
    return pyarrow, pyarrow.parquet


# ---- the type of a column ------------------------------------------------------------------
#
# A column of a row group has a kind: "null" (no value), "bool", "int" (int64), "float"
# (float64), "str", "list" (list<double>), or "json" (JSON text). The kinds of a column's
# pieces, and later of its row groups, combine by one rule (_combine): nulls take any kind,
# ints with floats make floats when every int is exact as a float, anything else mixed is
# JSON text.


def _combine(kinds: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """One kind for the ``(kind, largest |int|)`` pairs of a column's pieces."""
    found = {k for k, _ in kinds if k != "null"}
    big = max((m for _, m in kinds), default=0)
    if not found:
        return "null", 0
    if len(found) == 1:
        return found.pop(), big
    if found == {"int", "float"} and big <= _EXACT:
        return "float", big
    return "json", 0


def _value_kind(v: Any) -> tuple[str, int]:
    """The kind of one plain JSON value (after :func:`_plain`) and its size if an int."""
    t = type(v)
    if t is float:
        return "float", 0
    if t is bool:
        return "bool", 0
    if t is int:
        return ("int", abs(v)) if -_INT64 <= v < _INT64 else ("json", 0)
    if t is str:
        return "str", 0
    if v is None:
        return "null", 0
    if t is list and all(x is None or (type(x) is float) or (type(x) is int and abs(x) <= _EXACT)
                         for x in v):
        return "list", 0
    return "json", 0


_ONE_KIND = {float: "float", bool: "bool", str: "str"}


def _list_kind(data: list) -> tuple[str, int]:
    """The kind of a list of plain values: :func:`_combine` of their kinds (at C speed for a
    list of one type and None)."""
    types = set(map(type, data))
    types.discard(type(None))
    if not types:
        return "null", 0
    if len(types) == 1:
        t = types.pop()
        if t in _ONE_KIND:
            return _ONE_KIND[t], 0
        if t is int:
            ints = [v for v in data if v is not None]
            lo, hi = min(ints), max(ints)
            if -_INT64 <= lo and hi < _INT64:
                return "int", max(hi, -lo)
    return _combine([_value_kind(v) for v in data])


def _plain(v: Any) -> Any:
    """``v`` as the JSON value ``outputs.jsonl`` holds (NaN and infinities None)."""
    t = type(v)
    if t is str or t is bool or t is int or v is None:
        return v
    if t is float:
        return v if math.isfinite(v) else None
    return jsonable(v)


def _key(k: Any) -> str | None:
    """A key as text: a string as it is, any other key its JSON text (None stays None)."""
    if k is None or type(k) is str:
        return k
    return dumps_record(k)


class _Piece:
    """Some rows of one column: ``("null", n)``, ``("np", array)``, ``("pa", string array)``
    or ``("py", list of plain values)``."""

    __slots__ = ("how", "data", "n")

    def __init__(self, how: str, data: Any, n: int):
        self.how, self.data, self.n = how, data, n

    def slice(self, lo: int, hi: int) -> _Piece:
        if self.how == "null":
            return _Piece("null", None, hi - lo)
        if self.how == "pa":
            return _Piece("pa", self.data.slice(lo, hi - lo), hi - lo)
        return _Piece(self.how, self.data[lo:hi], hi - lo)

    def kind(self) -> tuple[str, int]:
        how, data = self.how, self.data
        if how == "null" or self.n == 0:
            return "null", 0
        if how == "pa":
            return ("str" if data.null_count < len(data) else "null"), 0
        if how == "np":
            if data.dtype == np.bool_:
                return "bool", 0
            if data.dtype.kind in "iu":
                return "int", max(abs(int(data.min())), abs(int(data.max())))
            if data.dtype.kind == "f":
                return ("float" if np.isfinite(data).any() else "null"), 0
            data = self._as_list()
        return _list_kind(data)

    def _as_list(self) -> list:
        if self.how == "np":
            return [_plain(v) for v in self.data.tolist()]
        if self.how == "pa":
            return self.data.to_pylist()
        return self.data

    def array(self, pa: Any, kind: str) -> Any:
        """These rows as an arrow array of ``kind``."""
        how, data = self.how, self.data
        if how == "null" or kind == "null":
            return pa.nulls(self.n, _TYPES[kind](pa))
        if how == "pa" and kind == "str":
            return data
        if how == "np" and kind in ("bool", "int", "float"):
            if data.dtype.kind == "f" and kind != "float":  # all NaN: no value
                return pa.nulls(self.n, _TYPES[kind](pa))
            if kind == "float":
                data = data.astype(np.float64, copy=False)
                return _numbers(pa, kind, data, np.isfinite(data))
            return _numbers(pa, kind, data, None)
        return _from_list(pa, kind, self._as_list())


# The arrays are built from their buffers: pyarrow.array() would import pandas where it is
# installed (pyarrow looks for pandas objects), some 50 MB and half a second for nothing.


def _validity(pa: Any, valid: np.ndarray | None) -> tuple[Any, int]:
    """A validity bitmap (None: every row valid) and the number of nulls."""
    if valid is None:
        return None, 0
    nulls = len(valid) - int(np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _numbers(pa: Any, kind: str, data: np.ndarray, valid: np.ndarray | None) -> Any:
    """A bool, int64 or float64 array of ``data`` (``valid``: False where null)."""
    if kind == "bool":
        values = pa.py_buffer(np.packbits(data.astype(bool, copy=False), bitorder="little"))
    else:
        values = pa.py_buffer(np.ascontiguousarray(
            data, dtype=np.float64 if kind == "float" else np.int64))
    validity, nulls = _validity(pa, valid)
    return pa.Array.from_buffers(_TYPES[kind](pa), len(data), [validity, values],
                                 null_count=nulls)


def _offsets(pa: Any, lengths: np.ndarray) -> Any:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2 ** 31:
        raise ValueError("a row group's text or lists exceed 2 GiB: give a smaller "
                         "row_group_size")
    return pa.py_buffer(offsets.astype(np.int32))


def _utf8(pa: Any, encoded: list, valid: np.ndarray) -> Any:
    """A string array of UTF-8 ``encoded`` bytes (``b""`` where ``valid`` is False)."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    validity, nulls = _validity(pa, valid)
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [validity, _offsets(pa, lengths), pa.py_buffer(b"".join(encoded))],
                                 null_count=nulls)


def _encode(text: str | None) -> bytes:
    # (a lone surrogate, which UTF-8 cannot hold, becomes "?")
    return b"" if text is None else text.encode("utf-8", "replace")


def _from_list(pa: Any, kind: str, values: list) -> Any:
    """An array of ``kind`` of plain values (None: null)."""
    n = len(values)
    if kind == "json":
        values = [None if v is None else dumps_record(v) for v in values]
        kind = "str"
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    if kind == "str":
        return _utf8(pa, list(map(_encode, values)), valid)
    if kind == "float":
        return _numbers(pa, kind, np.array(values, dtype=np.float64), valid)  # None: NaN
    if kind in ("int", "bool"):
        zero = False if kind == "bool" else 0
        data = np.array([zero if v is None else v for v in values],
                        dtype=bool if kind == "bool" else np.int64)
        return _numbers(pa, kind, data, valid)
    # "list": lists of numbers (and None) -> list<double>
    lengths = np.fromiter((0 if v is None else len(v) for v in values), dtype=np.int64,
                          count=n)
    flat = [x for v in values if v is not None for x in v]
    child = _numbers(pa, "float", np.array(flat, dtype=np.float64),
                     np.fromiter((x is not None for x in flat), dtype=bool, count=len(flat)))
    validity, nulls = _validity(pa, valid)
    return pa.Array.from_buffers(_TYPES["list"](pa), n, [validity, _offsets(pa, lengths)],
                                 null_count=nulls, children=[child])


_TYPES = {
    "null": lambda pa: pa.null(),
    "bool": lambda pa: pa.bool_(),
    "int": lambda pa: pa.int64(),
    "float": lambda pa: pa.float64(),
    "str": lambda pa: pa.string(),
    "json": lambda pa: pa.string(),
    "list": lambda pa: pa.list_(pa.float64()),
}


class ParquetSink(Sink):
    """Write the output records to a Parquet file, one row per output.

    Parameters
    ----------
    path
        The file to write (replaced; parent directories are created).
    alarms_only
        Write only the records with ``alarm: true`` (``shiftwatch replay --emit alarms``);
        the others are counted as ``skipped``.
    row_group_size
        Rows per row group: the most outputs the sink holds in memory (rows, not bytes:
        outputs carrying long vectors call for fewer).

    Notes
    -----
    The columns are every field of the outputs, in order of first appearance; a record
    without a field has null there. Types, column by column over the whole run:

    * numbers are ``double`` (NaN, infinities and None null), except a column whose numbers
      are all integers (``offset``, ``change_at``), which is ``int64``; a column of integers
      and floats is ``double`` only where that is lossless (every integer at most 2**53 in
      magnitude), JSON text otherwise;
    * booleans are ``bool``; text is ``string``; a list of numbers is ``list<double>``;
    * ``key`` is ``string``: a key that is not text (a number, a list) is its JSON text
      (the key ``7`` reads back as ``"7"``, like the key ``"7"``);
    * anything else (a mapping, a nested list) is its JSON text, as ``outputs.jsonl``
      writes it (:func:`~shiftwatch.codec.dumps_record`);
    * a column whose values are of different kinds, e.g. integers in some outputs and text
      in others, is JSON text in every row (``3`` and ``"\\"a\\""``; a row group that held
      the column as numbers or lists of numbers gives the text of their ``double`` values
      then, ``1.0`` for ``1`` where it mixed integers with floats, ``[1.0]`` for ``[1]``).

    Text columns are dictionary-encoded (keys repeat), the others are not.

    Memory stays bounded: each row group is written, as it fills, to a part file in a
    temporary folder beside ``path``; :meth:`close` settles the types of the columns over
    all the parts and streams them, one at a time, into a temporary file that is renamed to
    ``path`` when complete (:class:`~shiftwatch.sinks.atomic_file.AtomicFile`). A write that
    fails (a full disk) removes both, raises
    :class:`~shiftwatch.sinks.atomic_file.WriteFailed` and refuses further writes. ``pyarrow``
    is imported by :meth:`open`; without it, ``ImportError`` says how to install it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import pyarrow.parquet as pq
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "out" / "outputs.parquet"
    >>> sink = ParquetSink(path)
    >>> sink.open()
    >>> sink.write([{"key": "a", "offset": 3, "statistic": np.float64(2.5), "alarm": False},
    ...             {"key": "a", "offset": 4, "statistic": None, "alarm": True,
    ...              "change_at": 2, "meta": {"x": 1}}])
    >>> sink.close()
    >>> table = pq.read_table(path)
    >>> [f"{f.name}: {f.type}" for f in table.schema]
    ['key: string', 'offset: int64', 'statistic: double', 'alarm: bool', 'change_at: int64', \
'meta: string']
    >>> table.to_pylist()[1]
    {'key': 'a', 'offset': 4, 'statistic': None, 'alarm': True, 'change_at': 2, 'meta': '{"x":1}'}
    """

    def __init__(self, path: str | os.PathLike, alarms_only: bool = False,
                 row_group_size: int = ROW_GROUP_SIZE):
        if int(row_group_size) < 1:
            raise ValueError(f"row_group_size must be at least 1, got {row_group_size!r}")
        self.path = path
        self.alarms_only = alarms_only
        self.row_group_size = int(row_group_size)
        self.error: str | None = None
        self.written = False
        self._pa: Any = None
        self._pq: Any = None
        self._parts_dir: str | None = None
        self._parts: list[tuple[str, int, dict[str, tuple[str, int]]]] = []
        self._order: dict[str, None] = {}  # every column, in order of first appearance
        self._buffer: dict[str, list[_Piece]] = {}
        self._rows = 0  # rows in the buffer
        self._count = 0
        self._skipped = 0
        self._row_groups = 0

    # ---- the lifecycle ---------------------------------------------------------------------

    def open(self) -> None:
        """Import pyarrow, create the parent directories and the folder of parts. May raise
        ``ImportError`` or ``OSError``."""
        self._refuse_after_failure()
        if self._parts_dir is not None:
            return
        self._pa, self._pq = require_pyarrow()
        folder, name = os.path.split(os.fspath(self.path))
        if folder:
            os.makedirs(folder, exist_ok=True)
        parts = os.path.join(folder, f"{name}.{secrets.token_hex(4)}.parts")
        os.mkdir(parts)
        self._parts_dir = parts
        self.written = False

    def write(self, records: Sequence[dict]) -> None:
        """Add ``records``. Raises :class:`WriteFailed` when a row group cannot be written
        (a full disk)."""
        self._ready()
        if self.alarms_only:
            n = len(records)
            records = [r for r in records if r.get("alarm") is True]
            self._skipped += n - len(records)
        if records:
            self._add(self._record_block(records), len(records))
        self._count += len(records)

    def write_columns(self, columns: Any) -> None:
        """Add the outputs of a column batch (the replay's columnar path,
        :class:`~shiftwatch.deploy.columnar.OutputColumns`): the rows :meth:`write` of its
        records gives, the columns taken as arrays."""
        self._ready()
        n = len(columns)
        if self.alarms_only:
            rows = np.flatnonzero(columns.alarm).tolist()
            self._skipped += n - len(rows)
            if rows:
                self._add(self._record_block([columns.record(i) for i in rows]), len(rows))
            self._count += len(rows)
            return
        if not n:
            return
        pa = self._pa
        keys = [_key(k) for k in columns.keys]
        encoded = np.empty(len(keys), dtype=object)
        encoded[:] = [_encode(k) for k in keys]
        inv = np.asarray(columns.inv, dtype=np.int64)
        key_col = _utf8(pa, encoded[inv].tolist(),
                        np.array([k is not None for k in keys], dtype=bool)[inv])
        special = columns.special
        start = 0
        cuts = sorted(special)
        i = 0
        while start < n:
            stop = cuts[i] if i < len(cuts) else n
            if stop > start:  # rows start:stop are the columns
                block = {"key": _Piece("pa", key_col.slice(start, stop - start), stop - start)}
                if columns.ts is not None:
                    block["ts"] = _Piece("np", columns.ts[start:stop], stop - start)
                block["offset"] = _Piece("np", columns.offsets[start:stop], stop - start)
                block["alarm"] = _Piece("np", columns.alarm[start:stop], stop - start)
                for name, col in columns.fields.items():
                    block[name] = _Piece("np", col[start:stop], stop - start)
                self._add(block, stop - start)
            if stop < n:  # a run of special rows, written as they are
                j = i
                while j + 1 < len(cuts) and cuts[j + 1] == cuts[j] + 1:
                    j += 1
                rows = [special[r] for r in cuts[i:j + 1]]
                self._add(self._record_block(rows), len(rows))
                start, i = cuts[j] + 1, j + 1
            else:
                start = n
        self._count += n

    def flush(self) -> None:
        """Nothing: rows reach the disk a row group at a time (the file at :meth:`close`)."""

    def close(self) -> None:
        """Write the last row group and the file (the parts' columns unified, streamed into a
        temporary file, synced and renamed to ``path``); a second call does nothing. Never
        raises: a failure is in ``error`` and :meth:`summary`."""
        if self._parts_dir is None:
            return
        try:
            if self._rows:
                self._write_group()
            self._finish()
        except WriteFailed:
            pass  # a row group could not be written: the reason is in error already
        except OSError as exc:
            self.error = reason_of(exc)
        else:
            self.written = True
        finally:
            self._remove_parts()
            self._buffer, self._rows = {}, 0

    def summary(self) -> dict:
        out = {"path": os.fspath(self.path), "records": self._count,
               "row_groups": self._row_groups}
        if self.alarms_only:
            out["skipped"] = self._skipped  # outputs without an alarm (--emit alarms)
        if self.error is not None:
            out["error"] = self.error
        return out

    # ---- buffering -------------------------------------------------------------------------

    def _refuse_after_failure(self) -> None:
        if self.error is not None:  # what was written before is gone: never write a part
            raise WriteFailed({self.path: self.error})

    def _ready(self) -> None:
        self._refuse_after_failure()
        if self._parts_dir is None:
            self.open()

    @staticmethod
    def _record_block(records: Sequence[Any]) -> dict[str, _Piece]:
        """Records as columns of plain values, fields in order of first appearance."""
        n = len(records)
        cols: dict[str, list] = {}
        for i, record in enumerate(records):
            if not isinstance(record, Mapping):
                record = jsonable(record)
                if not isinstance(record, Mapping):
                    record = {"value": record}
            for name, v in record.items():
                if type(name) is not str:
                    name = key_text(name)
                col = cols.get(name)
                if col is None:
                    col = cols[name] = [None] * n
                t = type(v)  # _plain(v), inline for the common types
                col[i] = (v if t is str or t is int or t is bool or v is None
                          or (t is float and v - v == 0) else _plain(v))
        if "key" in cols:
            cols["key"] = [_key(k) for k in cols["key"]]
        return {name: _Piece("py", col, n) for name, col in cols.items()}

    def _add(self, block: dict[str, _Piece], n: int) -> None:
        """Append ``n`` rows, writing a row group each time the buffer fills."""
        for name in block:
            if name not in self._order:
                self._order[name] = None
        lo = 0
        while lo < n:
            hi = min(n, lo + self.row_group_size - self._rows)
            whole = lo == 0 and hi == n
            for name, piece in block.items():
                pieces = self._buffer.get(name)
                if pieces is None:
                    pieces = self._buffer[name] = ([_Piece("null", None, self._rows)]
                                                   if self._rows else [])
                pieces.append(piece if whole else piece.slice(lo, hi))
            for name, pieces in self._buffer.items():
                if name not in block:
                    pieces.append(_Piece("null", None, hi - lo))
            self._rows += hi - lo
            lo = hi
            if self._rows >= self.row_group_size:
                self._write_group()

    def _write_group(self) -> None:
        """Write the buffer as one part file (one row group) and empty it."""
        pa, pq = self._pa, self._pq
        names, arrays, kinds = [], [], {}
        for name, pieces in self._buffer.items():
            kind = _combine([p.kind() for p in pieces])
            chunks = [p.array(pa, kind[0]) for p in pieces if p.n]
            arrays.append(chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks))
            names.append(name)
            kinds[name] = kind
        table = pa.Table.from_arrays(arrays, names=names)
        self._buffer, rows, self._rows = {}, self._rows, 0
        part = os.path.join(self._parts_dir, f"{len(self._parts):06d}.parquet")
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with io.BufferedWriter(atomic_file._disk_file(fd)) as f:
                pq.write_table(table, f, row_group_size=max(rows, 1), compression="snappy",
                               use_dictionary=_text(kinds))
        except OSError as exc:
            raise self._failed(exc) from exc
        self._parts.append((part, rows, kinds))
        self._row_groups += 1

    # ---- the file ----------------------------------------------------------------------------

    def _finish(self) -> None:
        """Stream the parts, one at a time, into the file, their columns of one type each."""
        pa, pq = self._pa, self._pq
        final = {name: _combine([kinds[name] for _, _, kinds in self._parts if name in kinds])[0]
                 for name in self._order}
        schema = pa.schema([(name, _TYPES[kind](pa)) for name, kind in final.items()])
        target = AtomicFile(self.path, "wb")
        f = target.open()
        try:
            writer = pq.ParquetWriter(f, schema, compression="snappy",
                                      use_dictionary=_text(final))
            try:
                for part, rows, kinds in self._parts:  # one part in memory at a time
                    table = pq.ParquetFile(part).read(use_threads=False)
                    columns = [_settle(pa, table, name, kinds.get(name, ("null", 0))[0],
                                       kind, rows) for name, kind in final.items()]
                    writer.write_table(pa.Table.from_arrays(columns, schema=schema),
                                       row_group_size=max(rows, 1))
                    del table, columns
            except BaseException:
                with contextlib.suppress(Exception):
                    writer.close()
                raise
            writer.close()
            target.commit()
        except BaseException:
            target.discard()
            raise

    def _failed(self, exc: OSError) -> WriteFailed:
        """Remove the parts, keep the reason, and return the error to raise."""
        self._remove_parts()
        self._buffer, self._rows = {}, 0
        self.error = reason_of(exc)
        return WriteFailed({self.path: self.error}, errno=exc.errno)

    def _remove_parts(self) -> None:
        parts, self._parts_dir, self._parts = self._parts_dir, None, []
        if parts is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(parts)


def _text(kinds: Mapping[str, Any]) -> list[str]:
    """The text columns: the ones dictionary-encoded (keys repeat; measurements do not, and
    encoding them so costs time, memory and bytes)."""
    return [name for name, kind in kinds.items()
            if (kind if isinstance(kind, str) else kind[0]) in ("str", "json")]


def _settle(pa: Any, table: Any, name: str, have: str, want: str, rows: int) -> Any:
    """Column ``name`` of a part (of kind ``have``) as the file's kind ``want``."""
    if have == "null":
        return pa.nulls(rows, _TYPES[want](pa))
    col = table.column(name).combine_chunks()
    if have == want:
        return col
    if want == "float" and col.offset == 0:  # ints, exact as floats (_combine checked)
        ints = np.frombuffer(col.buffers()[1], dtype=np.int64, count=len(col))
        return pa.Array.from_buffers(pa.float64(), len(col), [
            col.buffers()[0], pa.py_buffer(ints.astype(np.float64))], null_count=col.null_count)
    if want == "json" and have == "json":
        return col
    # the values as outputs.jsonl writes them
    return _from_list(pa, want, col.to_pylist())
