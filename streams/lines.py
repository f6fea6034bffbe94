"""A file's lines, read in bounded pieces: no line is ever held whole past a limit.

The record path reads a file line by line (:func:`_bounded_lines`), the column readers in
blocks of many lines (:func:`_text_blocks`); both treat a line of :data:`MAX_LINE_CHARS`
characters or more the same way: its first characters become a dead letter
(:func:`long_line_reason`) and the rest of it is read in pieces and dropped, whatever its
line break (``\\n``, ``\\r\\n`` or ``\\r``) and wherever the reads cut it.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_BLANK_LINES", "MAX_LINE_CHARS", "BlankRun", "long_line_reason"]

#: A line of this many characters or more (its line break not counted) is a dead letter: it is
#: read in pieces and dropped, never held whole (a file is data too: one endless line must not
#: fill the memory). Its dead letter keeps the first ``_LONG_HEAD`` characters.
MAX_LINE_CHARS = 1 << 24
_LONG_HEAD = 200


#: The default bound on consecutive blank lines (``max_blank_lines`` of the file sources): a
#: longer run ends the reading of the file, the rest of it one dead letter saying where. Chosen
#: by a principle, not by a score: far above any run a writer of logs leaves (a few separator
#: lines), and reached within a second or two on either read path, so that a file of nothing
#: but blank lines (a ``.gz`` of gigabytes of them decompresses from a few megabytes) ends
#: with a clear reason instead of being skipped for minutes.
MAX_BLANK_LINES = 1_000_000

_BREAK = re.compile(r"\r\n|\r|\n")
# Inside a block that starts and ends with a character that is not blank: a line break, then
# the run of blank lines after it (group 1; maximal, as the line after it is not blank).
_INNER_RUN = re.compile(r"(?:\r\n|\r|\n)((?:[^\S\r\n]*(?:\r\n|\r|\n))+)")


class BlankRun(Exception):
    """A file held more consecutive blank lines than its source's ``max_blank_lines``."""


def _breaks(text: str) -> int:
    """The line breaks in ``text`` (``\\r\\n`` counts once)."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _end_of_break(text: str, b: int, start: int = 0) -> int:
    """The index just after the ``b``-th line break of ``text`` from ``start`` on."""
    for i, m in enumerate(_BREAK.finditer(text, start), start=1):
        if i == b:
            return m.end()
    return len(text)


class _BlankBound:
    """A text file whose reads end, as at the end of the file, after more than ``limit``
    consecutive blank lines (lines of blank characters only, as ``str.strip`` sees them;
    ``limit`` None: no bound): the text handed out ends with the line break of the first blank
    line over the limit, and ``error`` (a :class:`BlankRun`) says where the run began.
    ``error`` is also the error of ``inner``, the guard of a damaged ``.gz`` file.

    It counts as both read paths see lines, whatever the size of the reads (a line at a time,
    or blocks of many lines cut anywhere, a ``\\r\\n`` split between two), so they end at the
    same line. Its cost is a few string scans per read.
    """

    def __init__(self, f: Any, limit: int | None, inner: Any = None) -> None:
        self._f = f
        self._limit = limit
        self._inner = inner
        self._own: BlankRun | None = None
        self._line = 1  # the number of the line being read
        self._blank = True  # it holds only blank characters so far
        self._run = 0  # the complete blank lines right before it
        self._start = 1  # the first of them
        self._cr = False  # the last read ended with \r

    @property
    def error(self) -> BaseException | None:
        if self._own is not None:
            return self._own
        return None if self._inner is None else self._inner.error

    def readline(self, size: int = -1) -> str:
        return self._see(self._f.readline(size)) if self._own is None else ""

    def read(self, size: int | None = -1) -> str:
        return self._see(self._f.read(size)) if self._own is None else ""

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> _BlankBound:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def _over(self, start: int) -> None:
        limit = self._limit
        self._own = BlankRun(f"more than {limit:,} consecutive blank lines from line {start:,} "
                             f"on (max_blank_lines={limit}): the rest of the file is not read")

    def _see(self, s: str) -> str:
        if not s or self._limit is None:
            return s
        skip = self._cr and s[0] == "\n"  # the \n of a \r\n split between two reads
        self._cr = s[-1] == "\r"
        i = len(s) - len(s.lstrip())
        if i == len(s):
            cut = self._blanks(s, skip)
            return s if cut is None else s[:cut]
        if i:
            cut = self._blanks(s[:i], skip)
            if cut is not None:
                return s[:cut]
        j = len(s.rstrip())
        body = s[i:j]
        nb = _breaks(body)
        if nb > self._limit:  # a run inside it may be over the limit
            for m in _INNER_RUN.finditer(body):
                if _breaks(m.group(1)) > self._limit:
                    self._over(self._line + _breaks(body[:m.start(1)]))
                    return s[:i + m.start(1) + _end_of_break(m.group(1), self._limit + 1)]
        self._line += nb
        self._blank, self._run = False, 0
        if j < len(s):
            cut = self._blanks(s[j:], False)
            if cut is not None:
                return s[:j + cut]
        return s

    def _blanks(self, ws: str, skip: bool) -> int | None:
        """Count ``ws`` (blank characters only, continuing the line being read); the index
        in it just after the first blank line over the limit, or None (none is)."""
        n = _breaks(ws) - skip
        if n <= 0:
            return None
        run = self._run if self._blank else 0  # a line not blank ends at the first break
        lines = n if self._blank else n - 1  # the complete blank lines in ws
        if run == 0 and lines:
            self._start = self._line if self._blank else self._line + 1
        if run + lines > self._limit:
            b = self._limit + 1 - run + (0 if self._blank else 1)
            self._over(self._start)
            return _end_of_break(ws, b, 1 if skip else 0)
        self._line += n
        self._blank, self._run = True, run + lines
        return None


def long_line_reason() -> str:
    """The dead letter's reason for a line of ``MAX_LINE_CHARS`` characters or more."""
    return (f"line of {MAX_LINE_CHARS:,} characters or more: not read (its first "
            f"{_LONG_HEAD} are kept)")


class _Long(str):
    """A line of ``MAX_LINE_CHARS`` characters or more: its first characters."""

    __slots__ = ()


def _bounded_lines(f: Any) -> Iterator[str]:
    """The lines of the text file ``f`` as iterating it gives them (each with its line break:
    ``\\n``, ``\\r`` or ``\\r\\n``), except a line of ``MAX_LINE_CHARS`` characters or
    more, which comes as a :class:`_Long` of its first characters, the rest of it read in
    pieces and dropped."""
    limit = MAX_LINE_CHARS
    size = limit + 2  # a line shorter than the limit and its \r\n fit: never split
    pending = ""
    while True:
        line = pending or f.readline(size)
        pending = ""
        if not line:
            return
        ends = 2 if line.endswith("\r\n") else 1 if line[-1] in "\r\n" else 0
        if len(line) - ends < limit:
            yield line
            continue
        head, last = line[:_LONG_HEAD], line
        while last and last[-1] not in "\r\n":  # the rest of the line, dropped
            last = f.readline(size)
        if last.endswith("\r") and len(last) == size:  # its \n may come next
            nxt = f.readline(size)
            pending = "" if nxt == "\n" else nxt
        yield _Long(head)


def _text_blocks(f: Any, chunk_chars: int) -> Iterator[tuple[str, str]]:
    """The text of ``f`` in file order as ``("lines", text)``, complete lines each with its
    line break; ``("long", head)``, a line of
    :data:`MAX_LINE_CHARS` characters or more (its first
    characters: the rest is read and dropped, as the record path's
    :func:`_bounded_lines` does); and last ``("rest", text)``, what
    follows the last line break that surely ends a line."""
    limit = MAX_LINE_CHARS
    head_chars = _LONG_HEAD
    rest = ""
    skipping = False  # in a long line: drop up to its line break
    cr = False  # a long line ended with \r at the end of a read: a \n first is its
    while True:
        data = f.read(chunk_chars)
        if not data:
            break
        if cr:
            cr = False
            if data[0] == "\n":
                data = data[1:]
        if skipping:
            n, r = data.find("\n"), data.find("\r")
            b = r if r >= 0 and (n < 0 or r < n) else n
            if b < 0:
                continue
            skipping = False
            if data[b] == "\r":
                if b == len(data) - 1:
                    cr = True
                elif data[b + 1] == "\n":
                    b += 1
            data = data[b + 1:]
        data = rest + data
        cut = _cut(data)
        block, rest = (data[:cut + 1], data[cut + 1:]) if cut >= 0 else ("", data)
        if block:
            if len(block) > limit:  # a line of it may be long: around it, the others
                yield from _split_long(block, limit, head_chars)
            else:
                yield "lines", block
        body = rest[:-1] if rest.endswith("\r") else rest
        if len(body) >= limit:
            yield "long", rest[:head_chars]
            skipping, cr, rest = not rest.endswith("\r"), rest.endswith("\r"), ""
    yield "rest", rest


def _split_long(block: str, limit: int, head_chars: int) -> Iterator[tuple[str, str]]:
    """:func:`_text_blocks`'s items for the complete lines ``block``, some maybe long."""
    run: list[str] = []
    for line in io.StringIO(block, newline="").readlines():
        ends = 2 if line.endswith("\r\n") else 1
        if len(line) - ends >= limit:
            if run:
                yield "lines", "".join(run)
                run = []
            yield "long", line[:head_chars]
        else:
            run.append(line)
    if run:
        yield "lines", "".join(run)


def _cut(data: str) -> int:
    """The index of the last line break in ``data`` that surely ends a line (-1: none): the
    last ``\\n``, or a later ``\\r`` that is not ``data``'s last character (a ``\\r\\n``
    may be split between two reads). A file whose lines end with ``\\r`` alone is thus read
    block by block too, not held whole."""
    n = data.rfind("\n")
    return max(n, data.rfind("\r", n + 1, len(data) - 1))


class _GuardedGzip(io.BufferedIOBase):
    """A ``.gz`` file that ends where it is damaged instead of raising; ``error`` says how.

    Everything decompressed before the damage is read as usual: the text stream above it sees
    an end of file, and the source turns the rest into one dead letter (:func:`_damage_reason`).
    """

    def __init__(self, gz: gzip.GzipFile):
        self._gz = gz
        self.error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._guard(self._gz.read, size)

    def read1(self, size: int = -1) -> bytes:
        return self._guard(self._gz.read1, size)

    def _guard(self, read, size) -> bytes:
        if self.error is not None:
            return b""
        try:
            return read(-1 if size is None else size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            self.error = exc
            return b""

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            super().close()


def _open_text(path: str, max_blank_lines: int | None = MAX_BLANK_LINES
               ) -> tuple[_BlankBound, _BlankBound]:
    """The file as text, and the guard whose ``error`` says why the reads ended early: a
    damaged ``.gz`` file, or more than ``max_blank_lines`` consecutive blank lines (None: no
    bound) — the text stream itself, :class:`~shiftwatch.streams.lines._BlankBound`.

    utf-8-sig drops a byte-order mark; bytes that are not UTF-8 are kept as lone surrogates
    ("surrogateescape") so that the line holding them becomes a dead letter with its exact
    bytes (see :func:`_undecodable`), never a record with U+FFFD in it.
    """
    if path.endswith(".gz"):
        gz = _GuardedGzip(gzip.open(path, "rb"))
        f = _BlankBound(io.TextIOWrapper(gz, encoding="utf-8-sig", errors="surrogateescape",
                                         newline=""), max_blank_lines, gz)
    else:
        f = _BlankBound(open(path, encoding="utf-8-sig", errors="surrogateescape", newline=""),
                        max_blank_lines)
    return f, f


def _check_max_blank_lines(n: Any) -> int | None:
    """``max_blank_lines`` checked: an int >= 1, or None (no bound)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_blank_lines must be an integer >= 1 or null (no bound), got "
                         f"{n!r}")
    return n


def _damage(exc: BaseException) -> str:
    """What is wrong with a damaged ``.gz`` file, in a few words."""
    return "compressed stream ended early" if isinstance(exc, EOFError) else str(exc)


def _damage_reason(exc: BaseException, after: int) -> str:
    """Why a file could not be read past line ``after``: the reason of its tail."""
    if isinstance(exc, BlankRun):
        return f"blank: {exc}"
    if isinstance(exc, EOFError):
        return f"file is truncated after line {after}: {_damage(exc)}"
    text = str(exc)
    if text.startswith("CRC check failed"):
        return (f"gzip CRC check failed after line {after} ({text[16:].strip()}): the lines "
                "before it may be damaged")
    return f"compressed data is corrupt after line {after}: {text}"
