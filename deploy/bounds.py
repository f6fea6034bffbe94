"""Plausibility bounds of one stream: how large a value and how far ahead a ``ts`` may be.

A stage's ``bounds:`` section (a replay's ``--max-abs-value`` and ``--max-future-seconds``)
sets them, the same in a replay and on Kafka (one stream: a replay's source; on Kafka each
input partition). A record beyond a bound is a dead letter with its reason, before any
operator, key expiry or time rule sees it, so it moves no clock and no state:

* ``max_abs_value`` (default null: only the hard limit
  :data:`~shiftwatch.records.MAX_ABS`, 1e150, every operator's ``max_abs``): a record whose
  value (any entry of a vector or matrix) has a larger magnitude is a dead letter whose
  reason starts with ``implausible:``. Off by default because the scale of a reading is the
  stream's own (a pressure in pascals, a price, a count): no one number fits every stream,
  and a default too low would dead-letter a healthy stream. One wild value (1e149) passes
  the hard limit and leaves a detector's statistic useless for the rest of the key; the
  stream's owner knows its scale and sets this bound.
* ``max_future_seconds`` (default 86400, a day; null turns it off): a record whose ``ts`` is
  more than this far ahead of the stream's clock is a dead letter whose reason starts with
  ``future:``, and the clock does not move. The clock is the later of the largest ``ts`` of
  the stream's accepted records and the wall clock: a live stream is never far ahead of the
  wall clock, a replayed history is behind it (so a gap in either passes), and a stream
  whose times are in the future (a simulation) may run ahead one bound at a time. One
  record with ``ts`` 1e149 would otherwise move the event clock that key expiry
  (``state.ttl_seconds``) measures idleness by, and every key would expire at once; on Kafka
  the jumped clock would be checkpointed. A ``ts`` in milliseconds (``ts`` is seconds) is
  about 54,000 years ahead and is refused with that said.

The stream's clock is not checkpointed: after a restart it is the wall clock until the
first accepted record (the same as a live stream's).

>>> b = StreamBounds(max_abs_value=1000, max_future_seconds=60, now=lambda: 0.0)
>>> b.reason({"key": "a", "ts": 10.0, "value": 5.0}) is None
True
>>> b.reason({"key": "a", "ts": 10.0, "value": [1.0, -2e6]})
"implausible: value beyond the stream's bound (max_abs_value=1000), got -2e+06"
>>> print(b.reason({"key": "a", "ts": 1e149, "value": 5.0}))  # doctest: +NORMALIZE_WHITESPACE
future: ts more than max_future_seconds=60 ahead of the stream's clock, got ts 1e+149,
1e+149 s ahead of 10
>>> b.clock
10.0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BOUNDS_DEFAULTS", "StreamBounds", "check_bounds"]

#: What a stream is held to unless told otherwise (the module docstring says why).
BOUNDS_DEFAULTS: dict[str, Any] = {"max_abs_value": None, "max_future_seconds": 86400.0}


def check_bounds(d: Any) -> dict:
    """The ``bounds`` settings with defaults filled in; ``ValueError`` (one line) if bad.

    >>> check_bounds(None)
    {'max_abs_value': None, 'max_future_seconds': 86400.0}
    >>> check_bounds({"max_abs_value": 1e6, "max_future_seconds": None})
    {'max_abs_value': 1000000.0, 'max_future_seconds': None}
    """
    out = dict(BOUNDS_DEFAULTS)
    if d is None:
        return out
    if not isinstance(d, Mapping):
        raise ValueError(f"expected a mapping with max_abs_value and/or max_future_seconds, "
                         f"got {d!r}")
    for k, v in d.items():
        if k not in BOUNDS_DEFAULTS:
            raise ValueError(f"unknown key {k!r}; allowed: {', '.join(BOUNDS_DEFAULTS)}")
        if v is None:
            out[k] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                0 < v < math.inf if k == "max_abs_value" else 0 <= v < math.inf):
            what = "> 0" if k == "max_abs_value" else ">= 0"
            raise ValueError(f"{k} must be a finite number {what} or null, got {v!r}")
        out[k] = float(v)
    return out


def _num(x: float) -> str:
    return str(int(x)) if abs(x) < 1e15 and x == int(x) else f"{x:.6g}"


def _largest(value: Any) -> float | None:
    """The entry of largest magnitude of a number or a nested list of numbers (None: none)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        best = None
        for v in value:
            x = _largest(v)
            if x is not None and (best is None or abs(x) > abs(best)):
                best = x
        return best
    shape = getattr(value, "shape", None)  # a NumPy array
    if shape is not None and getattr(value, "size", 0):
        import numpy as np

        flat = np.asarray(value, dtype=float).reshape(-1)
        return float(flat[int(np.argmax(np.abs(flat)))])
    return None


class StreamBounds:
    """One stream's bounds and clock (the module docstring): :meth:`reason` says why a
    record is beyond them (and then changes nothing), else notes its ``ts`` and returns None.

    Parameters
    ----------
    max_abs_value, max_future_seconds
        See the module docstring (:data:`BOUNDS_DEFAULTS`).
    value
        The record field holding the value.
    now
        The wall clock (seconds since the epoch; for tests).
    """

    def __init__(self, max_abs_value: float | None = None,
                 max_future_seconds: float | None = 86400.0, value: str = "value",
                 now: Callable[[], float] = time.time):
        check_bounds({"max_abs_value": max_abs_value, "max_future_seconds": max_future_seconds})
        self.max_abs_value = max_abs_value
        self.max_future_seconds = max_future_seconds
        self.value = value
        self.now = now
        #: the largest ts of the stream's accepted records (-inf before any)
        self.clock = -math.inf

    @classmethod
    def from_settings(cls, settings: Mapping | None, value: str = "value"
                      ) -> StreamBounds | None:
        """The bounds of ``bounds`` settings, or None when both are off."""
        s = check_bounds(dict(settings) if settings is not None else None)
        if s["max_abs_value"] is None and s["max_future_seconds"] is None:
            return None
        return cls(s["max_abs_value"], s["max_future_seconds"], value=value)

    def reason(self, record: Any) -> str | None:
        """Why ``record`` is beyond the bounds (a dead letter's reason), or None."""
        if not isinstance(record, Mapping):
            return None  # (not a record: the executor says so)
        limit = self.max_abs_value
        if limit is not None:
            x = _largest(record.get(self.value))
            if x is not None and not abs(x) <= limit:
                return (f"implausible: {self.value} beyond the stream's bound "
                        f"(max_abs_value={_num(limit)}), got {x:.6g}")
        ts = record.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            return None
        try:
            ts = float(ts)
        except OverflowError:
            return None
        if not math.isfinite(ts):
            return None
        ahead = self.max_future_seconds
        if ahead is not None and ts > self.clock + ahead:
            ref = max(self.clock, self.now())
            if ts > ref + ahead:
                hint = " (ts is in seconds)" if ts > 1e11 and ts / 1000 <= ref + ahead else ""
                return (f"future: ts more than max_future_seconds={_num(ahead)} ahead of the "
                        f"stream's clock, got ts {_num(ts)}, {_num(ts - ref)} s ahead of "
                        f"{_num(ref)}{hint}")
        if ts > self.clock:
            self.clock = ts
        return None
