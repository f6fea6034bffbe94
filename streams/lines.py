"""A file's lines, read in bounded pieces: no line is ever held whole past a limit.

The record path reads a file line by line (:func:`_bounded_lines`), the column readers in
blocks of many lines (:func:`_text_blocks`); both treat a line of :data:`MAX_LINE_CHARS`
characters or more the same way: its first characters become a dead letter
(:func:`long_line_reason`) and the rest of it is read in pieces and dropped, whatever its
line break (``\\n``, ``\\r\\n`` or ``\\r``) and wherever the reads cut it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_LINE_CHARS", "long_line_reason"]

#: A line of this many characters or more (its line break not counted) is a dead letter: it is
#: read in pieces and dropped, never held whole (a file is data too: one endless line must not
#: fill the memory). Its dead letter keeps the first ``_LONG_HEAD`` characters.
MAX_LINE_CHARS = 1 << 24
_LONG_HEAD = 200


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
