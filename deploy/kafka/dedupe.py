"""Dropping the duplicates at-least-once delivery can produce.

Every output of a Kafka stage carries where its input came from::

    {"key": "s1", ..., "input": {"topic": "raw", "partition": 2, "offset": 117, "n": 0}}

(``n`` numbers the outputs of one input record). After a crash a stage resumes from its last
checkpoint and produces the outputs of the records after it again, with the same
coordinates, so ``(topic, partition, offset, n)`` identifies an output exactly.

:func:`dedupe` filters a finished list (tests, batch jobs); :class:`Deduper` filters a live
stream in bounded memory, relying on replays being contiguous runs of offsets already seen
within each input partition (true for stage outputs: a stage replays a partition from its
checkpoint in offset order). A downstream shiftwatch stage applies :class:`Deduper` to its
input itself (``dedupe: true``, the default) and keeps its high-water marks in its checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["coordinates", "dedupe", "Deduper"]


def coordinates(record: Mapping) -> tuple[str, int, int, int] | None:
    """``(topic, partition, offset, n)`` of a stage output, or None if it has none.

    >>> coordinates({"input": {"topic": "t", "partition": 1, "offset": 5, "n": 0}})
    ('t', 1, 5, 0)
    """
    if type(record) is dict:  # the common case, without the ABC checks
        c = record.get("input")
        if c is None:
            return None
    else:
        c = record.get("input") if isinstance(record, Mapping) else None
    if type(c) is not dict and not isinstance(c, Mapping):
        return None
    try:
        return (str(c["topic"]), int(c["partition"]), int(c["offset"]), int(c.get("n", 0)))
    except (KeyError, TypeError, ValueError):
        return None


def dedupe(records: Iterable[Mapping]) -> Iterator[Mapping]:
    """Yield each output once (the first copy), dropping repeats with the same coordinates.

    Records without coordinates pass unchanged.

    >>> recs = [{"input": {"topic": "t", "partition": 0, "offset": o, "n": 0}, "v": o}
    ...         for o in (0, 1, 2, 1, 2, 3)]
    >>> [r["v"] for r in dedupe(recs)]
    [0, 1, 2, 3]
    """
    seen: set[tuple] = set()
    for r in records:
        c = coordinates(r)
        if c is None:
            yield r
        elif c not in seen:
            seen.add(c)
            yield r


class Deduper:
    """Drop records whose coordinates are at or below the high-water mark of their partition.

    >>> d = Deduper()
    >>> [d.admit({"input": {"topic": "t", "partition": 0, "offset": o, "n": 0}})
    ...  for o in (0, 1, 2, 1, 2, 3)]
    [True, True, True, False, False, True]
    """

    def __init__(self) -> None:
        self.high: dict[tuple[str, int], tuple[int, int]] = {}
        self.dropped = 0

    def admit(self, record: Mapping) -> bool:
        """True if the record is new (and remember it), False for a duplicate."""
        c = coordinates(record)
        if c is None:
            return True
        tp, pos = (c[0], c[1]), (c[2], c[3])
        hw = self.high.get(tp)
        if hw is not None and pos <= hw:
            self.dropped += 1
            return False
        self.high[tp] = pos
        return True

    def state(self) -> list[list[Any]]:
        return [[t, p, o, n] for (t, p), (o, n) in self.high.items()]

    def load(self, state: Iterable[list[Any]]) -> None:
        self.high = {(str(t), int(p)): (int(o), int(n)) for t, p, o, n in state}
