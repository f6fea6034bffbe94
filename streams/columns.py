"""A CSV file read in column batches: the key, ts and value columns of many lines at once.

The replay's columnar path (:mod:`~shiftwatch.deploy.columnar`) reads a
:class:`~shiftwatch.streams.files.CsvSource` with :func:`csv_columns` instead of record by
record. Each :class:`ColumnChunk` holds, for the lines it covers, the accepted rows as
columns (``keys``, ``ts``, ``values``, ``lines``) and the lines that became dead letters.

The result is the record path's, item for item: a block of lines is checked with a few
vectorised tests (no quote, the right number of fields, numeric cells that are plain short
numbers, magnitudes within :data:`~shiftwatch.records.MAX_ABS`), and every line that fails
one of them goes through the record path's own rule
(:meth:`~shiftwatch.streams.files.CsvSource._line_item`), so blank lines, bytes that are not
UTF-8, broken quoting, wrong field counts, bad numbers and the tail of a damaged ``.gz``
file give the same records and dead letters, with the same reasons and line numbers.

Only what the columns can hold is read this way (:func:`columns_eligible`): a scalar
``value`` column, optional ``key`` and ``ts`` columns, no ``ts_format``, no ``y``, ``task``
or ``extra`` columns. Anything else stays on the record path. Vectors are read when asked
(``vectors=True``): a ``value`` that is a list of columns gives ``values`` of shape
``(rows, columns)``, each row the record's ``value`` list (the scan of several value cells a
line is :func:`~shiftwatch.streams.csv_kernel.scan_vector_lines`); callers that only take
scalars leave the flag off and see the same answers as before. A JSON Lines file under the
same conditions is read by :mod:`~shiftwatch.streams.jsonl_columns`;
:func:`~shiftwatch.deploy.columnar.source_columns` picks the reader.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from itertools import repeat
from typing import Any

import numpy as np

from shiftwatch.records import MAX_ABS, DeadLetter
from shiftwatch.streams import lines as _lines
from shiftwatch.streams.files import (
    _SHORT_NUMBER,
    _UNDECODABLE,
    CsvSource,
    JsonlSource,
    _damage_reason,
    _open_text,
    _raw,
    _undecodable,
)
from shiftwatch.streams.lines import _text_blocks

__all__ = ["ColumnChunk", "columns_eligible", "csv_columns"]

#: Characters of text read at a time.
CHUNK_CHARS = 1 << 16
#: Whether blocks of plain ASCII lines are scanned by the compiled
#: :func:`~shiftwatch.streams.csv_kernel.scan_lines` (False: by :func:`_block` only; the
#: tests compare the two).
SCAN = True
#: The characters of numbers, and of whole numbers (bytes a column's cells joined by
#: newlines may hold).
_NUMBER_BYTES = b"0123456789.eE+-\n"
_DIGIT_BYTES = b"0123456789\n"
#: What ``float`` reads but a short number of the record path's grammar is not
#: (``files._SHORT_NUMBER``), in a column's cells joined by newlines (with a newline before
#: the first and after the last): a leading zero before a digit or no digit before the point
#: (``_LEAD``), no digit after the point (``.`` before ``e``, ``E`` or a newline), an
#: exponent of 10 digits (``_LONG_EXP``). (Cells of 100 characters or more are checked one
#: by one.) A column of cells of ``_NUMBER_BYTES`` that ``float`` reads, with none of these,
#: is a column of short numbers.
_LEAD = re.compile(r"\n[+-]?(?:0[0-9]|\.)").search
_LONG_EXP = re.compile(r"[eE][+-]?[0-9]{10}").search


def _short_column(col: list[str]) -> tuple[str, bool] | None:
    """The cells of ``col`` joined by newlines if every cell that ``float`` reads is a short
    number (see above), else None; and whether all are whole numbers of 1 to 18 digits
    (exact in int64; as float64 the double nearest them, what ``float`` of the text gives)."""
    joined = "\n".join(col)
    if not joined.isascii():
        return None
    raw = joined.encode("ascii")
    if raw.translate(None, _NUMBER_BYTES):
        return None
    # the cells' lengths, from the newlines' positions
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    sizes = np.diff(ends, prepend=-1, append=len(raw)) - 1
    shortest, longest = int(sizes.min()), int(sizes.max())
    if longest >= 100:
        return None
    s = f"\n{joined}\n"
    if _LEAD(s) or ".\n" in s or ".e" in s or ".E" in s:
        return None
    if ("e" in s or "E" in s) and _LONG_EXP(s):
        return None
    return joined, shortest >= 1 and longest <= 18 and not raw.translate(None, _DIGIT_BYTES)


class ColumnChunk:
    """The items of some consecutive lines: accepted rows as columns, and dead letters.

    Attributes
    ----------
    keys
        The key of each accepted row (a list; ``None`` without a key column); a scanned
        block gives ``uniq`` (its distinct keys, in no particular order) and ``inv`` (each
        row's index into them) instead, and ``keys`` is made from them when asked for.
    ts
        float64 array of the rows' ``ts``, or None without a ts column.
    values
        float64 array of the rows' values: shape ``(rows,)``, or C-contiguous ``(rows, d)``
        for a vector value of ``d`` columns (a row the record's ``value``, in column order).
    lines
        int64 array of the rows' line numbers (1-based; the header is line 1).
    dead
        ``(rows_before, DeadLetter)`` pairs in line order: ``rows_before`` accepted rows of
        this chunk come before the dead letter.
    blanks
        The numbers of the blank lines (skipped).
    """

    __slots__ = ("_keys", "uniq", "inv", "ts", "values", "lines", "dead", "blanks")

    def __init__(self, keys: list | None, ts: np.ndarray | None, values: np.ndarray,
                 lines: np.ndarray, dead: list[tuple[int, DeadLetter]],
                 blanks: list[int] | None = None, uniq: list | None = None,
                 inv: np.ndarray | None = None):
        self._keys, self.uniq, self.inv = keys, uniq, inv
        self.ts, self.values, self.lines, self.dead = ts, values, lines, dead
        self.blanks = blanks or []

    @property
    def keys(self) -> list:
        if self._keys is None:
            self._keys = list(map(self.uniq.__getitem__, self.inv.tolist()))
        return self._keys

    def __len__(self) -> int:
        return self.lines.shape[0]


def columns_eligible(source: Any, vectors: bool = False) -> bool:
    """Whether ``source`` can be read in columns: by :func:`csv_columns` (a
    :class:`~shiftwatch.streams.files.CsvSource`) or by
    :func:`~shiftwatch.streams.jsonl_columns.jsonl_columns` (a
    :class:`~shiftwatch.streams.files.JsonlSource`). With ``vectors``, a CSV ``value``
    that is a list of columns is read too (``csv_columns(..., vectors=True)``)."""
    kind = type(source)
    return (kind in (CsvSource, JsonlSource)
            and (isinstance(source.value, str) or (vectors and kind is CsvSource))
            and not source.y and not source.task and not source._extra
            and source.ts_format is None)


def csv_columns(source: CsvSource, chunk_chars: int = CHUNK_CHARS,
                vectors: bool = False) -> Iterator[ColumnChunk]:
    """The items of ``source`` (see :func:`columns_eligible`; ``vectors``: a vector value
    too, its ``values`` of shape ``(rows, columns)``) as column chunks, in file order.

    Counts blank lines in ``source.blank_lines``; ``source.close()`` closes an iteration
    under way.
    """
    if type(source) is not CsvSource or not columns_eligible(source, vectors):
        raise ValueError(f"{source!r} cannot be read in columns (see columns_eligible)")
    it = _chunks(source, chunk_chars)
    source._open.append(it)
    return it


def _chunks(src: CsvSource, chunk_chars: int) -> Iterator[ColumnChunk]:
    src.blank_lines = 0
    src.unread = None
    header = src._header
    pos = {c: header.index(c) for c in src._wanted()}
    # a vector's value positions as a tuple, one per column (a column may come twice)
    vpos = tuple(pos[c] for c in src._columns) if src._vector else pos[src._columns[0]]
    layout = (len(header), pos.get(src.key) if src.key else None,
              pos.get(src.ts) if src.ts else None, vpos, pos)
    d = src.delimiter
    kt = {layout[1], layout[2]} - {None}
    scan = (SCAN and len(d) == 1 and d.isascii() and d not in '"\r\n\x00'
            and len(kt) == 2 - (layout[1] is None) - (layout[2] is None)
            and not kt & (set(vpos) if src._vector else {vpos}))

    table = _KeyTable()

    def block(text: str, first: int) -> tuple[ColumnChunk, int]:
        got = _scanned(src, text, first, layout, table) if scan else None
        if got is None:
            lines, _ = _split_lines(text)
            got = _block(src, lines, first, layout), len(lines)
        return got

    f, guard = _open_text(src.path, src.max_blank_lines)
    with f:
        if not f.readline():  # the header, line 1 (checked by the source)
            return
        yield from _file_chunks(src, f, guard, 1, chunk_chars, block,
                                lambda lines, first: _block(src, lines, first, layout))


def _file_chunks(src: Any, f: Any, guard: Any, lineno: int, chunk_chars: int, block: Any,
                 lines_block: Any) -> Iterator[ColumnChunk]:
    """The chunks of the text file ``f`` (of ``src``) after its line ``lineno``, read by
    :func:`~shiftwatch.streams.lines._text_blocks`: ``block(text, first line number)`` ->
    ``(chunk, how many lines)`` for each block of complete lines, ``lines_block(lines,
    first)`` -> chunk for the lines after the last line break, a dead letter for each line
    too long and for the damaged tail of a ``.gz`` file (the CSV and the JSON Lines
    readers')."""
    rest = ""
    for kind, text in _text_blocks(f, chunk_chars):
        if kind == "rest":
            rest = text
        elif kind == "long":
            lineno += 1
            yield _long_chunk(src, text, lineno)
        else:
            chunk, n = block(text, lineno + 1)
            yield chunk
            lineno += n
    tail = None
    if rest:
        lines, ended = _split_lines(rest)
        if guard is not None and guard.error is not None and not ended:
            tail = lines.pop()
        if lines:
            yield lines_block(lines, lineno + 1)
            lineno += len(lines)
    lineno += 1  # the line the damage cut short, or the one after the last
    if guard is not None and guard.error is not None:
        src.unread = _damage_reason(guard.error, lineno - 1)
        dead = src._dead(_raw(tail or ""), src.unread, lineno)
        yield ColumnChunk([], None if src.ts is None else np.empty(0), _no_values(src),
                          np.empty(0, dtype=np.int64), [(0, dead)])


def _scanned(src: CsvSource, text: str, first: int, layout: tuple, table: _KeyTable
             ) -> tuple[ColumnChunk, int] | None:
    """The complete lines ``text`` (the file's lines ``first, first + 1, ...``, each ending
    with ``\\n`` or ``\\r\\n``) as a chunk, scanned by
    :func:`~shiftwatch.streams.csv_kernel.scan_lines`, and how many lines they are; None
    when the text holds bytes that are not UTF-8 or a carriage return that ends a line alone
    (the caller then reads it by :func:`_block`). The lines the scan does not pass take the
    record path's rule, as in :func:`_block`. A vector value is scanned by
    :func:`_scanned_vector`."""
    crlf = "\r" in text
    if crlf and text.count("\r") != text.count("\r\n"):
        return None
    if text.isascii():
        raw = text.encode("ascii")
    elif _UNDECODABLE.search(text):
        return None
    else:
        raw = text.encode("utf-8")
    from shiftwatch.streams import csv_kernel as ck

    ncol, kpos, tpos, vpos, pos = layout
    d = src.delimiter
    buf = np.frombuffer(raw, dtype=np.uint8)
    if type(vpos) is tuple:
        return _scanned_vector(src, raw, buf, crlf, first, layout, table)
    starts, status, kst, ken, khash, ts, values = ck.scan_lines(
        buf, ord(d), ncol, -1 if kpos is None else kpos, -1 if tpos is None else tpos, vpos,
        MAX_ABS, ck._POW10, crlf)
    texts = _LineTexts(raw, starts, 2 if crlf else 1)
    for i in np.flatnonzero(status > ck.SLOW).tolist():  # numbers float() must read
        cells = texts[i].split(d)
        for bit, col, at in ((ck.PY_TS, ts, tpos), (ck.PY_VALUE, values, vpos)):
            if status[i] & bit:
                x = float(cells[at])
                col[i] = x
                if not abs(x) <= MAX_ABS:
                    status[i] = ck.SLOW
    return _scanned_rows(src, raw, buf, first, layout, table, texts, status, kst, ken, khash,
                         ts, values)


def _scanned_vector(src: CsvSource, raw: bytes, buf: np.ndarray, crlf: bool, first: int,
                    layout: tuple, table: _KeyTable) -> tuple[ColumnChunk, int] | None:
    """:func:`_scanned` for a vector value: its distinct value fields scanned by
    :func:`~shiftwatch.streams.csv_kernel.scan_vector_lines` into a slot each, then put in
    the order of the value's columns (a column named twice gives its slot twice)."""
    from shiftwatch.streams import csv_kernel as ck

    ncol, kpos, tpos, vpos, _ = layout
    d = src.delimiter
    fields = list(dict.fromkeys(vpos))  # slot -> field
    vslot = np.full(ncol, -1, dtype=np.int64)
    vslot[fields] = np.arange(len(fields))
    starts, status, kst, ken, khash, ts, values, fst, fen, fat = ck.scan_vector_lines(
        buf, ord(d), ncol, -1 if kpos is None else kpos, -1 if tpos is None else tpos, vslot,
        len(fields), MAX_ABS, ck._POW10, crlf)
    texts = _LineTexts(raw, starts, 2 if crlf else 1)
    for i in np.flatnonzero(status & ck.PY_TS).tolist():  # ts that float() must read
        ts[i] = x = float(texts[i].split(d)[tpos])
        if not abs(x) <= MAX_ABS:
            status[i] = ck.SLOW
    if fat.shape[0]:  # value cells that float() must read (short numbers: ASCII), at once
        cells = ck.gather_cells(buf, fst, fen).tobytes().decode("ascii").split("\n")
        got = np.fromiter(map(float, cells), dtype=np.float64, count=len(cells))
        values.reshape(-1)[fat] = got
        big = ~(np.abs(got) <= MAX_ABS)
        if big.any():
            status[fat[big] // len(fields)] = ck.SLOW
    if len(fields) != len(vpos):  # a column named twice
        values = np.ascontiguousarray(values[:, [fields.index(p) for p in vpos]])
    return _scanned_rows(src, raw, buf, first, layout, table, texts, status, kst, ken, khash,
                         ts, values)


def _scanned_rows(src: CsvSource, raw: bytes, buf: np.ndarray, first: int, layout: tuple,
                  table: _KeyTable, texts: _LineTexts, status: np.ndarray, kst: np.ndarray,
                  ken: np.ndarray, khash: np.ndarray, ts: np.ndarray, values: np.ndarray
                  ) -> tuple[ColumnChunk, int] | None:
    """The chunk of a scanned block (the scan's arrays, its numbers for ``float`` read):
    the keys' codes, and the lines the scan did not pass by the record path's rule."""
    from shiftwatch.streams import csv_kernel as ck

    ncol, kpos, tpos, _, pos = layout
    n = status.shape[0]
    slow = status == ck.SLOW
    rows = np.flatnonzero(~slow) if slow.any() else None
    if kpos is None:
        keys: list = [None] * (n if rows is None else rows.shape[0])
    else:
        sel = np.arange(n) if rows is None else rows
        codes = table.codes(buf, raw, kst, ken, khash, sel)
        if codes is None:
            return None  # (two new keys with one hash: read the block by _block)
        uniq = table.keys
        if rows is None:  # (keys as the table's and each row's code: no list of keys)
            return ColumnChunk(None, None if tpos is None else ts, values,
                               np.arange(first, first + n, dtype=np.int64), [], uniq=uniq,
                               inv=codes), n
        keys = list(map(uniq.__getitem__, codes.tolist()))
    ts_col = None if tpos is None else (ts if rows is None else ts[rows])
    val_col = values if rows is None else values[rows]
    if rows is None:
        return ColumnChunk(keys, ts_col, val_col, np.arange(first, first + n, dtype=np.int64),
                           []), n
    return _merge(src, texts, first, n, rows, keys, ts_col, val_col,
                  np.ones(rows.shape[0], dtype=bool), set(np.flatnonzero(slow).tolist()),
                  lambda text, lineno: _slow_line(src, text, lineno, pos, ncol)), n


class _KeyTable:
    """The keys met so far in one read of a file: each key's code (its index in ``keys``),
    found from a row's key bytes by :func:`~shiftwatch.streams.csv_kernel.key_lookup`
    (same hash and same bytes), so a key is decoded once per read, not once per block."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.tab = np.full(1024, -1, dtype=np.int64)
        self.thash = np.zeros(1024, dtype=np.uint64)
        self.hashes = np.zeros(512, dtype=np.uint64)  # code -> hash (for a rehash)
        self.kbuf = np.empty(1 << 16, dtype=np.uint8)
        self.koff = np.zeros(512, dtype=np.int64)
        self.klen = np.zeros(512, dtype=np.int64)
        self.used = 0

    def codes(self, buf: np.ndarray, raw: bytes, kst: np.ndarray, ken: np.ndarray,
              khash: np.ndarray, sel: np.ndarray) -> np.ndarray | None:
        """The code of the key of each row ``sel``, new keys added; None when two new keys
        of these rows share a hash (the caller reads the block another way)."""
        from shiftwatch.streams import csv_kernel as ck

        got = ck.key_lookup(buf, kst, ken, khash, sel, self.tab, self.thash, self.kbuf,
                            self.koff, self.klen)
        new = np.flatnonzero(got < 0)
        if new.shape[0]:
            rows = sel[new]
            _, head, inv = np.unique(khash[rows], return_index=True, return_inverse=True)
            if not ck.same_key_bytes(buf, kst, ken, rows, rows[head][inv]):
                return None
            reps = rows[head]
            k0, m = len(self.keys), reps.shape[0]
            self._reserve(k0 + m, int((ken[reps] - kst[reps]).sum()))
            self.keys.extend(raw[a:b].decode() for a, b in zip(kst[reps].tolist(),
                                                               ken[reps].tolist(), strict=True))
            codes = np.arange(k0, k0 + m, dtype=np.int64)
            self.hashes[k0:k0 + m] = khash[reps]
            self.used = ck.key_insert(buf, kst, ken, khash, reps, codes, self.tab, self.thash,
                                      self.kbuf, self.koff, self.klen, self.used)
            got[new] = codes[inv]
        return got

    def _reserve(self, n_keys: int, n_bytes: int) -> None:
        """Room for ``n_keys`` keys and ``n_bytes`` more bytes; the table at most half full."""
        from shiftwatch.streams import csv_kernel as ck

        if n_keys > self.koff.shape[0]:
            size = max(2 * self.koff.shape[0], n_keys)
            self.koff = np.resize(self.koff, size)
            self.klen = np.resize(self.klen, size)
            self.hashes = np.resize(self.hashes, size)
        if self.used + n_bytes > self.kbuf.shape[0]:
            self.kbuf = np.resize(self.kbuf, max(2 * self.kbuf.shape[0], self.used + n_bytes))
        if 2 * n_keys > self.tab.shape[0]:
            size = self.tab.shape[0]
            while 2 * n_keys > size:
                size *= 2
            self.tab = np.full(size, -1, dtype=np.int64)
            self.thash = np.zeros(size, dtype=np.uint64)
            ck.key_rehash(self.tab, self.thash, self.hashes, len(self.keys))


class _LineTexts:
    """``texts[i]``: line ``i`` of a scanned block (``raw``, UTF-8), without its line break
    (its last ``end`` bytes)."""

    __slots__ = ("raw", "starts", "end")

    def __init__(self, raw: bytes, starts: np.ndarray, end: int):
        self.raw, self.starts, self.end = raw, starts, end

    def __getitem__(self, i: int) -> str:
        return self.raw[int(self.starts[i]):int(self.starts[i + 1]) - self.end].decode()


def _long_chunk(src: Any, head: str, lineno: int) -> ColumnChunk:
    """The dead letter of a line of ``MAX_LINE_CHARS`` characters or more, as a chunk."""
    dead = src._dead(_raw(head), _lines.long_line_reason(), lineno)
    return ColumnChunk([], None if src.ts is None else np.empty(0), _no_values(src),
                       np.empty(0, dtype=np.int64), [(0, dead)])


def _no_values(src: Any) -> np.ndarray:
    """The ``values`` of a chunk without rows: shape ``(0,)``, or ``(0, d)`` for a CSV
    vector value of ``d`` columns."""
    if type(src) is CsvSource and src._vector:
        return np.empty((0, len(src._columns)))
    return np.empty(0)


def _split_lines(text: str) -> tuple[list[str], bool]:
    """``text`` as the file's lines without their line breaks (a line ends at ``\\n``,
    ``\\r`` or ``\\r\\n``, as the record path's text file reads it), and whether the last
    line had one."""
    if "\r" not in text:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
            return lines, True
        return lines, False
    raw = io.StringIO(text, newline="").readlines()
    return [line.rstrip("\r\n") for line in raw], raw[-1][-1:] in ("\n", "\r")


def _block(src: CsvSource, texts: list[str], first: int, layout: tuple) -> ColumnChunk:
    """The lines ``first, first + 1, ...`` of the file (``texts``, without their line
    breaks) as a chunk."""
    ncol, kpos, tpos, vpos, pos = layout
    n = len(texts)
    d = src.delimiter
    joined = "\n".join(texts)
    slow = set()
    if '"' in joined:
        slow.update(i for i, t in enumerate(texts) if '"' in t)
    if not joined.isascii() and _UNDECODABLE.search(joined):
        slow.update(i for i, t in enumerate(texts) if _undecodable(t))
    counts = list(map(str.count, texts, repeat(d, n)))
    if not slow and counts.count(ncol - 1) == n:
        # Every line has ncol fields: the cells of all lines in one list (no list per line:
        # the garbage collector would visit each), a column every ncol-th cell.
        flat = joined.replace("\n", d).split(d) if d != "\n" else joined.split(d)
        cols = [flat[c::ncol] for c in range(ncol)]
        cand = None  # every row
    else:
        slow.update(i for i, c in enumerate(counts) if c != ncol - 1)
        cand = [i for i in range(n) if i not in slow]
        rows = [texts[i].split(d) for i in cand]
        cols = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(ncol)]
    m = n if cand is None else len(cand)
    ok = np.ones(m, dtype=bool)
    if type(vpos) is tuple:  # a vector: a column of the values each, in the value's order
        values = np.empty((m, len(vpos)))
        done: dict[int, np.ndarray] = {}
        for j, p in enumerate(vpos):
            values[:, j] = done[p] if p in done else done.setdefault(p, _numbers(cols[p], ok))
    else:
        values = _numbers(cols[vpos], ok)
    ts = _numbers(cols[tpos], ok) if tpos is not None else None
    keys = cols[kpos] if kpos is not None else [None] * m
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        slow.update(bad if cand is None else [cand[i] for i in bad])
    if not slow:
        return ColumnChunk(keys, ts, values, np.arange(first, first + n, dtype=np.int64), [])
    return _merge(src, texts, first, n, cand, keys, ts, values, ok, slow,
                  lambda text, lineno: _slow_line(src, text, lineno, pos, ncol))


def _merge(src: Any, texts: Any, first: int, n: int, cand: Any, keys: list,
           ts: np.ndarray | None, values: np.ndarray, ok: np.ndarray, slow: set,
           line_item: Any) -> ColumnChunk:
    """The chunk of ``n`` lines whose lines ``slow`` take the record path's rule
    (``line_item(text, line number)``: None for a blank line, a record or a dead letter;
    ``texts[i]`` line ``i``'s text) and whose others, ``cand`` (None: all), gave ``keys``,
    ``ts`` and ``values`` (rows not ``ok`` are among ``slow``): merged back in line order.
    (The CSV and the JSON Lines readers'.)"""
    kind = np.zeros(n, dtype=np.int8)  # 0 a row, 1 a dead letter, 2 a blank line
    all_keys: list = [None] * n
    all_v = np.zeros((n,) + values.shape[1:])  # (a vector value: a row a line)
    all_t = np.zeros(n) if ts is not None else None
    idx = np.arange(n) if cand is None else np.asarray(cand, dtype=np.int64)
    okr = np.flatnonzero(ok)
    take = idx[okr]
    all_v[take] = values[okr]
    if all_t is not None:
        all_t[take] = ts[okr]
    for i, k in zip(take.tolist(), okr.tolist(), strict=True):
        all_keys[i] = keys[k]
    dead_at: dict[int, DeadLetter] = {}
    blanks = []
    for i in sorted(slow):
        item = line_item(texts[i], first + i)
        if item is None:
            kind[i] = 2
            src.blank_lines += 1
            blanks.append(first + i)
        elif type(item) is dict:
            all_keys[i] = item["key"]
            all_v[i] = item["value"]
            if all_t is not None:
                all_t[i] = item["ts"]
        else:
            kind[i] = 1
            dead_at[i] = item
    rows_ok = np.flatnonzero(kind == 0)
    before = np.cumsum(kind == 0)  # rows up to and including each line
    dead = [(int(before[i]), dead_at[i]) for i in sorted(dead_at)]
    return ColumnChunk([all_keys[i] for i in rows_ok.tolist()],
                       None if all_t is None else all_t[rows_ok], all_v[rows_ok],
                       rows_ok.astype(np.int64) + first, dead, blanks)


def _numbers(col: list, ok: np.ndarray) -> np.ndarray:
    """The cells of a numeric column as floats; ``ok`` loses the rows whose cell is not a
    plain short number within the magnitude limit (they take the record path's rule)."""
    m = len(col)
    if m == 0:
        return np.empty(0)
    out = None
    short = _short_column(col)
    if short is not None:
        joined, whole_numbers = short
        if whole_numbers:  # e.g. a ts column of counts: parsed in C
            whole = np.fromstring(joined, dtype=np.int64, sep="\n")
            if whole.shape[0] == m:
                out = whole.astype(np.float64)
        if out is None:
            try:
                out = np.fromiter(map(float, col), dtype=np.float64, count=m)
            except ValueError:
                out = None
    if out is None:  # some cell is not a plain short number: cell by cell
        out = np.zeros(m)
        for i, c in enumerate(col):
            if _SHORT_NUMBER(c) is None:
                ok[i] = False
            else:
                out[i] = float(c)
    big = ~(np.abs(out) <= MAX_ABS)
    if big.any():
        ok &= ~big
    return out


def _slow_line(src: CsvSource, text: str, lineno: int, pos: dict,
               ncol: int) -> dict | DeadLetter | None:
    """One line by the record path's rule: None for a blank line, else a record or a dead
    letter."""
    if not text.strip():
        return None
    if not text.isascii():
        bad = _undecodable(text)
        if bad is not None:
            return src._dead(_raw(text), bad, lineno)
    return src._line_item(text, lineno, pos, ncol)
