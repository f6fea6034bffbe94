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

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["coordinates", "dedupe", "Deduper", "DUPLICATE"]


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
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def dedupe(records: Iterable[Mapping]) -> Iterator[Mapping]:
    """Yield each output once (the first copy), dropping repeats with the same coordinates.

    Records without coordinates pass unchanged.

    Examples
    --------
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


#: What :meth:`Deduper.check` returns for a record already seen.
DUPLICATE = "duplicate"

#: Kafka's bounds: partitions are int32, offsets int64 (and ``n`` counts one input's outputs).
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1
_MAX_N = 2**31 - 1


class Deduper:
    """Drop records whose coordinates are at or below the high-water mark of their partition.

    A record's ``input`` field is taken as coordinates when it is an object with ``topic``
    and ``offset``; they are checked before they count (:meth:`check`): ``topic`` must be a
    string (and the ``upstream`` topic when one is given), ``partition``, ``offset`` and
    ``n`` integers within Kafka's bounds, and the offset not far beyond the upstream
    partition's end offset (:func:`end_slack`) when ``end_offset`` can tell it (a stage asks
    the broker). A record that fails is not a duplicate: it goes to the dead letters, so one
    forged or corrupt coordinate cannot make the next records look like duplicates.

    Parameters
    ----------
    upstream
        The topic the coordinates must name (the upstream stage's input), or None for any.
    end_offset
        ``(topic, partition) -> end offset or None`` (None: unknown, not checked); asked
        only when an offset passes the end last seen for its partition.

    Examples
    --------
    >>> d = Deduper()
    >>> [d.admit({"input": {"topic": "t", "partition": 0, "offset": o, "n": 0}})
    ...  for o in (0, 1, 2, 1, 2, 3)]
    [True, True, True, False, False, True]
    >>> d = Deduper(upstream="raw", end_offset=lambda topic, p: 100)
    >>> d.check({"input": {"topic": "raw", "partition": 0, "offset": 5, "n": 0}}) is None
    True
    >>> d.check({"input": {"topic": "raw", "partition": 0, "offset": 10**9, "n": 0}})
    'input coordinate offset 1000000000 is beyond the end of raw[0] (end offset 100)'
    >>> d.check({"input": {"topic": "other", "partition": 0, "offset": 5}})
    "input coordinate names topic 'other', not the upstream topic 'raw'"
    >>> d.check({"input": {"topic": "raw", "partition": 0, "offset": float("inf")}})
    'input coordinates are not valid: offset is not an integer'
    """

    def __init__(self, upstream: str | None = None,
                 end_offset: Callable[[str, int], int | None] | None = None) -> None:
        self.high: dict[tuple[str, int], tuple[int, int]] = {}
        self.dropped = 0
        self.upstream = upstream
        self.end_offset = end_offset
        self._ends: dict[tuple[str, int], int] = {}
        #: per upstream partition: [first dropped (offset, n), last dropped, count] of the
        #: current run of duplicates (logged when it ends, see :meth:`take_dropped_runs`)
        self._runs: dict[tuple[str, int], list] = {}
        self._ended: list[tuple] = []

    def admit(self, record: Mapping) -> bool:
        """True if the record is new (and remember it), False for a duplicate. Coordinates
        that fail :meth:`check` count as new here (the caller decides)."""
        return self.check(record) is not DUPLICATE

    def check(self, record: Mapping) -> str | None:
        """None for a new record (remembered), :data:`DUPLICATE` for one already seen, or
        the reason its coordinates are not plausible (not remembered)."""
        if type(record) is dict:
            c = record.get("input")
            if c is None:
                return None
        else:
            c = record.get("input") if isinstance(record, Mapping) else None
            if c is None:
                return None
        if not isinstance(c, Mapping) or "topic" not in c or "offset" not in c:
            return None  # a field of the user's that happens to be called "input"
        reason = _invalid(c, self.upstream)
        if reason is not None:
            return reason
        tp = (c["topic"], c["partition"])
        pos = (c["offset"], c.get("n", 0))
        hw = self.high.get(tp)
        if hw is not None and pos <= hw:
            self.dropped += 1
            run = self._runs.get(tp)
            if run is None:
                self._runs[tp] = [pos, pos, 1, hw]
            else:
                run[1] = pos
                run[2] += 1
            return DUPLICATE
        if self.end_offset is not None and pos[0] >= self._ends.get(tp, 0):
            end = self.end_offset(*tp)
            if end is not None:
                self._ends[tp] = end
                if pos[0] >= end + end_slack(end):
                    return (f"input coordinate offset {pos[0]} is beyond the end of "
                            f"{tp[0]}[{tp[1]}] (end offset {end})")
        self.high[tp] = pos
        run = self._runs.pop(tp, None)
        if run is not None:
            self._ended.append((*tp, *run))
        return None

    def take_dropped_runs(self, all_runs: bool = False
                          ) -> list[tuple[str, int, tuple, tuple, int, tuple]]:
        """The runs of duplicates that ended (a new record came after them) since the last
        call, and with ``all_runs`` those still going: per run ``(topic, partition, first
        (offset, n), last, count, high-water mark)``."""
        runs, self._ended = self._ended, []
        if all_runs:
            runs += [(t, p, *run) for (t, p), run in self._runs.items()]
            self._runs = {}
        return runs

    def state(self) -> list[list[Any]]:
        return [[t, p, o, n] for (t, p), (o, n) in self.high.items()]

    def load(self, state: Iterable[list[Any]]) -> None:
        self.high = {(str(t), int(p)): (int(o), int(n)) for t, p, o, n in state}


def end_slack(end: int) -> int:
    """How far past a partition's reported end offset a coordinate may be: some
    Kafka-protocol brokers report an end offset below the true one (tansu), so only a jump
    well beyond it (10,000 records plus a tenth) counts as impossible."""
    return 10_000 + end // 10


def _invalid(c: Any, upstream: str | None) -> str | None:
    """Why input coordinates ``c`` are not plausible, or None."""
    topic = c.get("topic")
    if not isinstance(topic, str) or not topic:
        return "input coordinates are not valid: topic is not a name"
    for name, top in (("partition", _MAX_PARTITION), ("offset", _MAX_OFFSET), ("n", _MAX_N)):
        v = c.get(name, 0) if name == "n" else c.get(name)
        if type(v) is not int:  # bool, float (even 5.0), str: not what a stage writes
            return f"input coordinates are not valid: {name} is not an integer"
        if not 0 <= v <= top:
            return f"input coordinates are not valid: {name} {v} is out of range"
    if upstream is not None and topic != upstream:
        return f"input coordinate names topic {topic!r}, not the upstream topic {upstream!r}"
    return None
