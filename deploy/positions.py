"""``change_at`` in the numbering the labels use, after any chain of operators.

A locating detector counts the records *it* accepted for a key: its ``change_at = j`` is its
``j``-th accepted record. After a stage that drops or delays records (``window_covariance
window=50`` emits nothing for a key's first 49 records), that count is not the position of
the change in the key's own series, which is how labels and annotations number changes. In
``window_covariance window=50 -> karcher`` a change at record 2,000 is found by ``karcher``
at its 1,951st record.

A local replay sees both numberings, so it maps one to the other before any sink sees the
outputs: :class:`ChangePositions` keeps, per key, the offsets of the key's inputs and the
positions of the key's detector outputs (one per record the detector accepted, the
:class:`~shiftwatch.sinks.evaluation.EvaluationSink`'s rule), and rewrites each alarm's
``change_at`` to the position, among the key's inputs, of the record the detector located.
The table on the console, ``outputs.jsonl`` and ``keys.jsonl`` then say the same number.

A ``change_at`` that cannot be mapped (beyond the detector outputs seen) becomes ``None``,
with the detector's own count kept as ``change_at_operator``. On Kafka a stage sees only its
input topic, so there ``change_at`` keeps the detector's count (the operators' docstrings).

Memory: 16 bytes per input record of a replay (the evaluating sink keeps more per record).
"""

from __future__ import annotations

import numbers
from array import array
from bisect import bisect_left
from collections.abc import Hashable, Sequence
from typing import Any

from shiftwatch.codec import key_text

__all__ = ["ChangePositions"]


def _slot(key: Any) -> Hashable:
    try:
        hash(key)
        return key
    except TypeError:  # a JSON list or object as a key
        return ("\x00unhashable", key_text(key))


class ChangePositions:
    """Map detectors' ``change_at`` (their own count) to positions in each key's inputs.

    Examples
    --------
    A first stage drops each key's first two records; the detector after it locates a change
    at its record 3, which is the key's input 5:

    >>> cp = ChangePositions()
    >>> cp.inputs([{"key": "a", "offset": i} for i in range(8)])
    >>> outs = [{"key": "a", "offset": i, "alarm": i == 7} for i in range(2, 8)]
    >>> outs[-1]["change_at"] = 3
    >>> cp.outputs(outs)
    >>> outs[-1]["change_at"]
    5
    """

    __slots__ = ("_in", "_det")

    def __init__(self) -> None:
        self._in: dict[Hashable, array] = {}   # key -> offsets of its inputs, in order
        self._det: dict[Hashable, array] = {}  # key -> positions of its detector outputs

    def inputs(self, records: Sequence[dict]) -> None:
        """Note a batch of input records (each with ``key`` and ``offset``)."""
        book = self._in
        for r in records:
            off = r.get("offset")
            if type(off) is not int:
                continue
            k = _slot(r.get("key"))
            offs = book.get(k)
            if offs is None:
                offs = book[k] = array("q")
            offs.append(off)

    def _position(self, k: Hashable, off: Any) -> int:
        offs = self._in.get(k)
        if offs is None or type(off) is not int:
            return -1
        n = len(offs)
        if n and offs[n - 1] == off:  # the common case: the latest input of the key
            return n - 1
        i = bisect_left(offs, off)
        return i if i < n and offs[i] == off else -1

    def forget(self, key: Any) -> None:
        """``key`` left the operators' state (it expired): its detector counts from 0 again,
        its inputs keep their positions."""
        self._det.pop(_slot(key), None)

    def outputs(self, records: Sequence[dict]) -> None:
        """Rewrite the alarms' ``change_at`` in place (outputs in input order, per key)."""
        det = self._det
        for r in records:
            if "alarm" not in r:
                continue
            k = _slot(r.get("key"))
            pos = det.get(k)
            if pos is None:
                pos = det[k] = array("q")
            pos.append(self._position(k, r.get("offset")))
            j = r.get("change_at")
            if j is None or isinstance(j, bool) or not isinstance(j, numbers.Integral):
                continue
            j = int(j)
            p = pos[j] if 0 <= j < len(pos) else -1
            if p >= 0:
                r["change_at"] = p
            else:
                r["change_at"] = None
                r["change_at_operator"] = j
