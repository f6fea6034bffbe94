"""A JSON Lines file read in column batches: the key, ts and value fields of many lines at once.

The replay's columnar path (:mod:`~shiftwatch.deploy.columnar`) reads a
:class:`~shiftwatch.streams.files.JsonlSource` with :func:`jsonl_columns` instead of record by
record (:func:`~shiftwatch.deploy.columnar.source_columns` picks the reader). Each
:class:`~shiftwatch.streams.columns.ColumnChunk` holds, for the lines it covers, the accepted
records as columns (``keys``, ``ts``, ``values``, ``lines``) and the lines that became dead
letters.

The result is the record path's, item for item. A block of lines is parsed by orjson in one
call (``[line,line,...]``) when every line is *simple*: it begins with ``{``, ends with ``}``
and holds no other brace, so that the n objects of the array are the n lines, one each (no
brace is in a string, no object nests). Other lines are parsed one by one by orjson. A line
goes through the record path's own rule instead (:func:`_slow_line`: ``parse_object`` and
:meth:`~shiftwatch.streams.files.JsonlSource._record`, which read it with the standard
library) when orjson might not read it as that rule does or when the rule must say why it
is refused: a blank line, bytes that are not UTF-8, a run of 19 digits (orjson reads some
such integers as floats), a line that may exceed the size or nesting limits of
:mod:`~shiftwatch.codec`, a line orjson refuses (invalid JSON, NaN, a byte-order mark, a lone
surrogate, a number beyond float range) or that is not an object, and an object whose value
or ts is not a plain number (a float or an integer within
:data:`~shiftwatch.records.MAX_ABS`: a missing field, a string, a boolean, null, an object,
a list) or whose key is an object. So blank lines, undecodable bytes, CRLF, the tail of a
damaged ``.gz`` file and every bad line give the same records and dead letters, with the
same reasons, raws and line numbers.

Keys are the record's keys (a string, a number, a boolean, None), with one exception: a list
key comes as the tuple the keyed operators use for it
(:meth:`~shiftwatch.operators.keyed.Keyed.normalize_key`), since the columnar path groups
rows by key in dicts; it is written as the same JSON list. What columns cannot hold
raises :class:`ColumnsUnfit`, and :func:`unfit` says so before a replay starts, which then
takes the record path for the file: a value that is a list (a vector, unless ``vectors``:
the record path hands it to the operator, which refuses it), a key that cannot be hashed
even as a tuple (a list holding an object) or that is NaN, and keys that are equal but
written differently (``1``, ``1.0`` and ``true``; ``0.0`` and ``-0.0``), which the operators
take as one key while the record path writes each record's own spelling.

Vectors are read when asked (``vectors=True``): then every accepted record's value must be a
flat list of ``d >= 1`` numbers, ``d`` the length of the first one, and ``values`` is a
C-contiguous float64 array ``(rows, d)``, each row the record's list (``(0, d)`` for a chunk
without rows; ``(0, 0)`` throughout when the file has no accepted record, so no ``d``). A
block's value lists are checked at once (all lists of one length, all their items floats or
integers within :data:`~shiftwatch.records.MAX_ABS`) and filled in one call; a row that fails
goes through the record rule as above (a list holding a string, a boolean, null, NaN, an
object, a list, a number out of range or of 19 digits...: a dead letter with the record path's
reason, or a record). Unfit then, instead of any list value, are an accepted value that is a
number, a list of another length, an empty list or a nested list (a matrix, which the record
rule accepts), besides the keys above; the reason names the first such line of the file
(on one line, the value before the key), whatever the chunk size, as the lines a block sends
to the record rule are read before its rows are merged (:meth:`_Reader._merge_vectors`). When
a chunk without rows comes before the first record, ``d`` is read ahead by another reader
(:func:`_width`, up to the first record). Without the flag everything is as described above.

Only what the columns can hold is read this way
(:func:`~shiftwatch.streams.columns.columns_eligible`): one ``value`` field, optional ``key``
and ``ts`` fields (dotted paths allowed), no ``ts_format``, no ``y``, ``task`` or ``extra``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain, repeat
from typing import Any

import numpy as np

from shiftwatch.codec import MAX_DEPTH, MAX_MESSAGE_BYTES, key_text, parse_object
from shiftwatch.records import MAX_ABS, BadInput, DeadLetter
from shiftwatch.streams.columns import (
    CHUNK_CHARS,
    ColumnChunk,
    _file_chunks,
    _merge,
    _split_lines,
    columns_eligible,
)
from shiftwatch.streams.files import (
    _UNDECODABLE,
    JsonlSource,
    _open_text,
    _raw,
    _undecodable,
)

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency (the record rule's parser)
    from json import loads as _loads

__all__ = ["ColumnsUnfit", "jsonl_columns", "unfit"]

#: A run of this many digits sends a line to the record rule (orjson reads integers beyond
#: 64 bits as floats where the standard library keeps them exact; ``codec._LONG_DIGITS``).
_LONG_DIGITS = re.compile("[0-9]{19}").search
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_ZEROS = b"0" * 19
#: Lines longer than this (in characters) take the record rule: up to 4 bytes a character,
#: they may exceed ``MAX_MESSAGE_BYTES``.
_LONG_LINE = MAX_MESSAGE_BYTES // 4
_DICT = frozenset((dict,))
_LIST = frozenset((list,))
_NUMBERS = frozenset((float, int))
_PLAIN_KEYS = frozenset((str, type(None)))


class ColumnsUnfit(ValueError):
    """A line's record cannot be held in columns (see the module docstring): the replay takes
    the record path for that file (:func:`unfit`)."""


def jsonl_columns(source: JsonlSource, chunk_chars: int = CHUNK_CHARS,
                  vectors: bool = False) -> Iterator[ColumnChunk]:
    """The items of ``source`` (see :func:`~shiftwatch.streams.columns.columns_eligible`) as
    column chunks, in file order; ``vectors``: values that are lists of one length ``d``,
    ``values`` of shape ``(rows, d)`` (see the module docstring).

    Counts blank lines in ``source.blank_lines``; ``source.close()`` closes an iteration
    under way. Raises :class:`ColumnsUnfit` on a record the columns cannot hold.
    """
    if type(source) is not JsonlSource or not columns_eligible(source):
        raise ValueError(f"{source!r} cannot be read in columns (see columns_eligible)")
    it = _chunks(source, chunk_chars, _Reader(source, bool(vectors)))
    source._open.append(it)
    return it


class _Reader:
    """What one iteration keeps: the source, its field getters, the keys seen that are not
    strings (to refuse keys equal but written differently) and, reading vectors, the length
    ``d`` of the first record's value and its line."""

    def __init__(self, src: JsonlSource, vectors: bool = False):
        self.src = src
        self.value = _getter(src._columns[0])
        self.ts = _getter(src.ts) if src.ts else None
        self.key = _getter(src.key) if src.key else None
        self.seen: dict = {}
        self.vectors = vectors
        self.d: int | None = None  # (vectors) the length of the first record's value
        self.d_line = 0  # and its line

    def block(self, texts: list[str], first: int) -> ColumnChunk:
        """The lines ``first, first + 1, ...`` of the file (``texts``, without their line
        breaks) as a chunk."""
        n = len(texts)
        objs = _parse(texts)
        slow: set[int] = set()
        if objs is None:  # not all simple and valid: line by line
            objs, slow = _parse_lines(texts)
        cand = None if not slow else [i for i in range(n) if i not in slow]
        sub = objs if cand is None else [objs[i] for i in cand]
        m = len(sub)
        ok = np.ones(m, dtype=bool)
        if self.vectors:
            values = _vectors(self.value(sub), ok, self.d)
        else:
            values = _numbers(self.value(sub), ok)
        ts = _numbers(self.ts(sub), ok) if self.ts is not None else None
        keys = self.key(sub) if self.key is not None else [None] * m
        if not _PLAIN_KEYS.issuperset(map(type, keys)):
            for i, k in enumerate(keys):
                if type(k) is dict:
                    ok[i] = False  # a dead letter, by the record rule
                elif type(k) is list:
                    keys[i] = _key_of(k)
        if not ok.all():
            bad = np.flatnonzero(~ok).tolist()
            slow.update(bad if cand is None else [cand[i] for i in bad])
        if not slow:
            if self.d is None and m and self.vectors:
                self.d, self.d_line = values.shape[1], first
            chunk = ColumnChunk(keys, ts, values, np.arange(first, first + n, dtype=np.int64),
                                [])
        elif self.vectors:
            chunk = self._merge_vectors(texts, first, slow, cand, ok, keys, ts, values)
        else:
            chunk = self._merge(texts, first, slow, cand, ok, keys, ts, values)
        if chunk.keys and not _PLAIN_KEYS.issuperset(map(type, chunk.keys)):
            self._check_keys(chunk)
        return chunk

    def _merge(self, texts: list[str], first: int, slow: set[int], cand: list[int] | None,
               ok: np.ndarray, keys: list, ts: np.ndarray | None,
               values: np.ndarray) -> ColumnChunk:
        """The chunk, the lines in ``slow`` read by the record rule merged back in order."""
        src = self.src

        def line_item(text: str, lineno: int) -> dict | DeadLetter | None:
            item = _slow_line(src, text, lineno)
            if type(item) is dict:
                if type(item["value"]) is not float:
                    raise ColumnsUnfit(f"{src.path}, line {lineno}: a value that is a list (a "
                                       "vector) cannot be read in columns")
                k = item["key"]
                if type(k) is list:
                    item = dict(item, key=_key_of(k))
            return item

        return _merge(src, texts, first, len(texts), cand, keys, ts, values, ok, slow,
                      line_item)

    def _merge_vectors(self, texts: list[str], first: int, slow: set[int],
                       cand: list[int] | None, ok: np.ndarray, keys: list,
                       ts: np.ndarray | None, values: np.ndarray) -> ColumnChunk:
        """:meth:`_merge` for vectors: the lines in ``slow`` read by the record rule first,
        so that the first record's length ``d`` and the first value of another shape are
        found in line order, whatever the blocks."""
        src = self.src
        items = {}
        for i in sorted(slow):
            item = _slow_line(src, texts[i], first + i)
            if type(item) is dict and type(item["key"]) is list:
                item = dict(item, key=_key_of(item["key"]))
            items[i] = item
        okr = np.flatnonzero(ok)
        fast = (okr if cand is None else np.asarray(cand, dtype=np.int64)[okr]).tolist()
        taken = sorted(i for i, item in items.items() if type(item) is dict)
        if self.d is None and (fast or taken):
            i = min(fast[:1] + taken[:1])
            shape = values.shape[1] if fast and fast[0] == i else _shape(items[i]["value"])
            if type(shape) is int:
                self.d, self.d_line = shape, first + i
            else:
                self._vector_unfit(first, i, shape, keys, fast, okr, items)
        d = self.d
        bad = [i for i in taken if _shape(items[i]["value"]) != d]
        if fast and values.shape[1] != d:
            bad.append(fast[0])
        if bad:
            i = min(bad)
            shape = values.shape[1] if i in fast else _shape(items[i]["value"])
            self._vector_unfit(first, i, shape, keys, fast, okr, items)
        if values.shape[1] != (d or 0):  # (no row kept: of another width or none)
            values = np.zeros((values.shape[0], d or 0))
        return _merge(src, texts, first, len(texts), cand, keys, ts, values, ok, slow,
                      lambda text, lineno: items[lineno - first])

    def _vector_unfit(self, first: int, i: int, shape: Any, keys: list, fast: list[int],
                      okr: np.ndarray, items: dict) -> None:
        """Raise :class:`ColumnsUnfit` for line ``first + i``, whose record's value has
        ``shape`` (:func:`_shape`), once the keys of the records before it are checked (a
        key unfit before it is the one to name)."""
        lines = {j: keys[k] for j, k in zip(fast, okr.tolist(), strict=True) if j < i}
        lines.update((j, it["key"]) for j, it in items.items() if j < i and type(it) is dict)
        order = sorted(lines)
        if order:
            self._check_keys(ColumnChunk([lines[j] for j in order], None, np.empty(0),
                                         np.asarray(order, dtype=np.int64) + first, []))
        d = self.d
        if shape == "number":
            what = ("a value that is a number, not a vector," if d is None else
                    f"a value that is a number among vectors of length {d} (line "
                    f"{self.d_line})")
        elif shape == "empty":
            what = "a value that is an empty list"
        elif shape == "nested":
            what = "a value that is a nested list (a matrix)"
        else:
            what = f"a vector of length {shape} among vectors of length {d} (line {self.d_line})"
        raise ColumnsUnfit(f"{self.src.path}, line {first + i}: {what} cannot be read in "
                           "columns")

    def _check_keys(self, chunk: ColumnChunk) -> None:
        """Refuse keys the columnar path would merge or split unlike the record path."""
        seen = self.seen
        for i, k in enumerate(chunk.keys):
            t = type(k)
            if t is str or k is None:
                continue
            try:
                was = seen.setdefault(k, k)
            except TypeError:
                self._unfit(chunk, i, "a key that cannot be hashed (a list holding an object)")
            if t is float and k != k or t is tuple and "NaN" in key_text(k):
                self._unfit(chunk, i, "a NaN key")
            if was is k:
                continue
            if type(was) is not t or (t is float and k == 0.0 and str(was) != str(k)) or (
                    t is tuple and key_text(was) != key_text(k)):
                self._unfit(chunk, i, f"the key {key_text(k)}, equal to the key "
                                      f"{key_text(was)} but written differently,")

    def _unfit(self, chunk: ColumnChunk, i: int, what: str) -> None:
        raise ColumnsUnfit(f"{self.src.path}, line {int(chunk.lines[i])}: {what} cannot be "
                           "read in columns")


def unfit(source: JsonlSource, vectors: bool = False) -> str | None:
    """Why ``source`` (:func:`~shiftwatch.streams.columns.columns_eligible`) cannot be read
    in columns (:class:`ColumnsUnfit`'s message), or None: the file read once by
    :func:`jsonl_columns` (about 0.6 s a million lines; ``vectors`` as there, 1.2 s a
    million vectors of 3), before a replay chooses its path. Blank lines counted meanwhile
    are reset by the next read."""
    try:
        for _ in jsonl_columns(source, vectors=vectors):
            pass
    except ColumnsUnfit as exc:
        return str(exc)
    finally:
        source.close()
    return None


def _chunks(src: JsonlSource, chunk_chars: int, reader: _Reader,
            ahead: bool = True) -> Iterator[ColumnChunk]:
    """The chunks; with vectors, a chunk without rows gets ``values`` of shape ``(0, d)``
    (``d`` read ahead by :func:`_width` unless ``ahead`` is false: then ``(0, 0)``)."""
    src.blank_lines = 0
    src.unread = None

    def block(text: str, first: int) -> tuple[ColumnChunk, int]:
        lines, _ = _split_lines(text)
        return reader.block(lines, first), len(lines)

    f, guard = _open_text(src.path, src.max_blank_lines)
    with f:
        chunks = _file_chunks(src, f, guard, 0, chunk_chars, block, reader.block)
        if not reader.vectors:
            yield from chunks
            return
        width = None
        for chunk in chunks:
            if not len(chunk):
                if reader.d is None and width is None:
                    width = _width(src, chunk_chars) if ahead else 0
                chunk.values = np.empty((0, width if reader.d is None else reader.d))
            yield chunk


def _width(src: JsonlSource, chunk_chars: int) -> int:
    """The length of the first record's value (0 if there is none or it is not a vector),
    read ahead by another reader; ``src.blank_lines`` is kept."""
    blanks, unread = src.blank_lines, src.unread
    reader = _Reader(src, True)
    it = _chunks(src, chunk_chars, reader, ahead=False)
    try:
        for _ in it:
            if reader.d is not None:
                break
    except ColumnsUnfit:
        pass  # (the reader may know d already: a key before any other record was unfit)
    finally:
        it.close()
        src.blank_lines, src.unread = blanks, unread
    return reader.d or 0


def _parse(texts: list[str]) -> list[dict] | None:
    """The lines' objects parsed in one call when every line is simple (see the module
    docstring) and within the limits, else None."""
    n = len(texts)
    joined = "\n".join(texts)
    if not (joined[:1] == "{" and joined[-1:] == "}" and joined.count("}\n{") == n - 1
            and joined.count("{") == n and joined.count("}") == n):
        return None  # (each line begins with "{", ends with "}", holds no other brace)
    if (not joined.isascii() and _UNDECODABLE.search(joined)) or _long_digits(joined):
        return None
    if len(joined) > _LONG_LINE and max(map(len, texts)) > _LONG_LINE:
        return None
    if joined.count("[") >= MAX_DEPTH and max(map(str.count, texts, repeat("["))) >= MAX_DEPTH:
        return None  # (a line of more brackets may be nested beyond the limit)
    try:
        objs = _loads("[" + ",".join(texts) + "]")
    except ValueError:
        return None
    # n objects from n lines of one "{" and one "}" each: object i is line i.
    if len(objs) != n or not _DICT.issuperset(map(type, objs)):
        return None
    return objs


def _long_digits(text: str) -> bool:
    """Whether ``text`` holds a run of 19 digits (as ``_LONG_DIGITS``, ten times faster)."""
    return _ZEROS in text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)


def _simple(t: str) -> bool:
    return (t[:1] == "{" and t[-1:] == "}" and t.count("{") == 1 and t.count("}") == 1
            and t.count("[") < MAX_DEPTH)


def _parse_lines(texts: list[str]) -> tuple[list[dict | None], set[int]]:
    """The lines' objects (None for a line the record rule reads: in the set returned)."""
    n = len(texts)
    objs: list[dict | None] = [None] * n
    slow: set[int] = set()
    joined = "\n".join(texts)
    if not joined.isascii() and _UNDECODABLE.search(joined):
        slow.update(i for i, t in enumerate(texts) if _undecodable(t))
    if _long_digits(joined):
        slow.update(i for i, t in enumerate(texts) if _LONG_DIGITS(t))
    simple = []
    for i, t in enumerate(texts):
        if i in slow:
            continue
        if len(t) > _LONG_LINE or not t.strip():
            slow.add(i)
        elif _simple(t):
            simple.append(i)
        elif t.count("{") + t.count("[") > MAX_DEPTH:
            slow.add(i)
        else:
            objs[i] = _one(t)
            if objs[i] is None:
                slow.add(i)
    if simple:
        got = _parse([texts[i] for i in simple])
        if got is None:
            got = [_one(texts[i]) for i in simple]
        for i, o in zip(simple, got, strict=True):
            if o is None:
                slow.add(i)
            else:
                objs[i] = o
    return objs, slow


def _one(text: str) -> dict | None:
    """One line's object by orjson, or None (the record rule reads it)."""
    try:
        obj = _loads(text)
    except ValueError:
        return None
    return obj if type(obj) is dict else None


def _getter(path: str):
    """A function: a list of objects -> the field ``path`` of each (None where absent, as
    ``get_field(obj, path, None)``)."""
    if "." not in path:
        return lambda objs: list(map(dict.get, objs, repeat(path)))
    parts = path.split(".")

    def dig(obj: Any) -> Any:
        for part in parts:
            if type(obj) is dict and part in obj:
                obj = obj[part]
            else:
                return None
        return obj

    return lambda objs: list(map(dig, objs))


def _numbers(col: list, ok: np.ndarray) -> np.ndarray:
    """A field as floats; ``ok`` loses the rows whose field is not a float or an integer of
    magnitude within ``MAX_ABS`` (they take the record rule)."""
    m = len(col)
    if m == 0:
        return np.empty(0)
    if _NUMBERS.issuperset(map(type, col)):
        out = np.array(col, dtype=np.float64)
    else:
        out = np.zeros(m)
        for i, v in enumerate(col):
            t = type(v)
            if t is float or t is int:
                out[i] = v
            else:
                ok[i] = False
    big = ~(np.abs(out) <= MAX_ABS)
    if big.any():
        ok &= ~big
    return out


def _vectors(col: list, ok: np.ndarray, d: int | None) -> np.ndarray:
    """A field of vectors as a float64 array ``(rows, w)``, ``w`` the length ``d`` (None:
    that of the rows' first flat list of numbers); ``ok`` loses the rows whose field is not a
    list of ``w >= 1`` floats or integers all of magnitude within ``MAX_ABS`` (they take the
    record rule)."""
    m = len(col)
    if m and _LIST.issuperset(map(type, col)):
        lens = set(map(len, col))
        w = lens.pop()
        if not lens and w and (d is None or w == d):
            flat = list(chain.from_iterable(col))
            if _NUMBERS.issuperset(map(type, flat)):
                out = np.array(flat, dtype=np.float64).reshape(m, w)
                big = ~(np.abs(out) <= MAX_ABS).all(axis=1)
                if big.any():
                    ok &= ~big
                return out
    w = d
    if w is None:
        w = next((len(v) for v in col if type(v) is list and v
                  and _NUMBERS.issuperset(map(type, v))), 0)
    out = np.zeros((m, w))
    for i, v in enumerate(col):
        if type(v) is list and w and len(v) == w and _NUMBERS.issuperset(map(type, v)):
            out[i] = v
        else:
            ok[i] = False
    if m:
        big = ~(np.abs(out) <= MAX_ABS).all(axis=1)
        if big.any():
            ok &= ~big
    return out


def _shape(value: Any) -> int | str:
    """A record's value (the record rule's: a float or ``as_array(...).tolist()``): its
    length if it is a flat list of numbers, else ``"number"``, ``"empty"`` or ``"nested"``."""
    if type(value) is not list:
        return "number"
    if not value:
        return "empty"
    return "nested" if type(value[0]) is list else len(value)


def _key_of(key: Any) -> Any:
    # A list key as the keyed operators hold it (operators.keyed._key_of).
    return tuple(_key_of(k) for k in key) if isinstance(key, list) else key


def _slow_line(src: JsonlSource, text: str, lineno: int) -> dict | DeadLetter | None:
    """One line by the record path's rule (``_FileSource._lines`` and ``JsonlSource._iter``):
    None for a blank line, else a record or a dead letter."""
    if not text.strip():
        return None
    if not text.isascii():
        bad = _undecodable(text)
        if bad is not None:
            return src._dead(_raw(text), bad, lineno)
    try:
        return src._record(parse_object(text), 0)
    except BadInput as exc:
        return src._dead(text, str(exc), lineno)
