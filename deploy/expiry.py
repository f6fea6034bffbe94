"""Keys that expire: an idle-key TTL and a maximum number of keys, per stage.

A stream in which keys come and go (short-lived devices, request ids used as keys by mistake)
would otherwise grow a stage's state, its changelog and its restart time without end. A
stage's ``state`` section (a replay's ``--key-ttl``, ``--key-clock`` and ``--max-keys``)
sets the rule, the same in a replay, in :class:`~shiftwatch.deploy.executor.StageExecutor`
and in a Kafka stage:

* ``ttl_seconds``: a key not seen for this long is forgotten. ``clock: event`` (the default)
  measures "not seen" in event time: a key expires once the stage's event clock (the
  largest ``ts`` it has seen, over all keys) is more than ``ttl_seconds`` past the key's
  latest ``ts``; records without a ``ts`` move neither clock. ``clock: wall`` measures it in
  seconds of the stage's own clock (a replay then forgets by how fast it reads, so ``event``
  is the one that gives a replay and a Kafka stage the same outputs).
* ``max_keys``: when a batch leaves more keys than this, the least recently seen are
  forgotten first.

On Kafka each input partition has its own executor, state and rule: ``max_keys`` and the
event clock are per partition (a stage owning P partitions keeps up to P x ``max_keys``).

Keys are checked after each batch, from the least recently seen on (so a key is forgotten at
the latest at the first batch after it became due; with event time out of order across
keys, a key behind a more recently seen one waits for it). A forgotten key is removed from
every operator of the stage: its next record starts it afresh, as a new key. Each is counted
(``keys_evicted`` in the run summary and report, ``shiftwatch_keys_evicted_total`` on
/metrics), and a Kafka stage writes its removal into the changelog (its next checkpoint: a
deletion entry, after which the old state's entries are deleted and compacted away; see
:mod:`shiftwatch.deploy.kafka.changelog`).

After a restart, keys restored from the changelog count as seen at the restored
checkpoint's event clock (``clock: event``) or at the restart (``clock: wall``): a key that
was due before the crash is forgotten at the first batch after it, one never seen again at
most one TTL after the restart.

>>> e = Expiry(ttl_seconds=10)
>>> e.touch([{"key": "a", "ts": 0.0}, {"key": "b", "ts": 5.0}])
>>> e.due()
[]
>>> e.touch([{"key": "b", "ts": 12.0}])   # the clock is 12: "a" was last seen at 0
>>> e.due(), len(e)
(['a'], 1)
>>> m = Expiry(max_keys=2)
>>> m.touch([{"key": k} for k in "xyzx"])
>>> m.due()   # y is the least recently seen
['y']
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["CLOCKS", "Expiry", "STATE_DEFAULTS", "check_state"]

#: No expiry unless asked for.
STATE_DEFAULTS: dict[str, Any] = {"ttl_seconds": None, "clock": "event", "max_keys": None}
CLOCKS = ("event", "wall")
#: The largest ``max_keys`` accepted (a bound against a typo, not a promise of memory).
MAX_KEYS_LIMIT = 1_000_000_000


def check_state(d: Any) -> dict:
    """The ``state`` settings with defaults filled in; ``ValueError`` (one line) if bad.

    >>> check_state({"ttl_seconds": 3600, "max_keys": 1000})
    {'ttl_seconds': 3600.0, 'clock': 'event', 'max_keys': 1000}
    >>> check_state({"ttl": 5})
    Traceback (most recent call last):
    ...
    ValueError: unknown key 'ttl'; allowed: ttl_seconds, clock, max_keys
    """
    if d is None:
        return dict(STATE_DEFAULTS)
    if not isinstance(d, Mapping):
        raise ValueError(f"expected a mapping with ttl_seconds, clock and/or max_keys, got {d!r}")
    out = dict(STATE_DEFAULTS)
    for k, v in d.items():
        if k not in STATE_DEFAULTS:
            raise ValueError(f"unknown key {k!r}; allowed: {', '.join(STATE_DEFAULTS)}")
        if k == "ttl_seconds":
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0 < v < math.inf):
                raise ValueError(f"ttl_seconds must be a number > 0 or null, got {v!r}")
            out[k] = None if v is None else float(v)
        elif k == "clock":
            if v not in CLOCKS:
                raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {v!r}")
            out[k] = v
        else:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not 1 <= v <= MAX_KEYS_LIMIT):
                raise ValueError(f"max_keys must be an integer from 1 to {MAX_KEYS_LIMIT:,} "
                                 f"or null, got {v!r}")
            out[k] = v
    return out


class Expiry:
    """Which keys a stage forgets (see the module notes).

    Parameters
    ----------
    ttl_seconds
        Forget a key idle this long (None: never for idleness).
    clock
        ``"event"`` (record ``ts``) or ``"wall"`` (``now()``).
    max_keys
        Keep at most this many keys, the least recently seen forgotten first (None: no
        limit).
    now
        The wall clock (for tests).
    """

    def __init__(self, ttl_seconds: float | None = None, clock: str = "event",
                 max_keys: int | None = None, now: Callable[[], float] = time.time):
        check_state({"ttl_seconds": ttl_seconds, "clock": clock, "max_keys": max_keys})
        self.ttl = ttl_seconds
        self.wall = clock == "wall"
        self.clock = clock
        self.max_keys = max_keys
        self._now = now
        #: key -> its latest time; insertion order is recency (least recently seen first)
        self._last: dict[Any, float] = {}
        #: the event clock: the largest ts seen (-inf before any)
        self.event_clock = -math.inf
        #: keys forgotten for idleness, and for the maximum
        self.evicted_ttl = 0
        self.evicted_max = 0

    @classmethod
    def from_settings(cls, settings: Mapping | None) -> Expiry | None:
        """An :class:`Expiry` for a stage's ``state`` settings, or None if nothing expires."""
        s = check_state(settings)
        if s["ttl_seconds"] is None and s["max_keys"] is None:
            return None
        return cls(s["ttl_seconds"], s["clock"], s["max_keys"])

    def __len__(self) -> int:
        return len(self._last)

    @property
    def evicted(self) -> int:
        return self.evicted_ttl + self.evicted_max

    def touch(self, records: Iterable[Mapping]) -> None:
        """Mark the keys of ``records`` (as the operators got them) as seen now."""
        last = self._last
        if self.wall:
            t = self._now()
            for r in records:
                key = _key(r)
                if key is not _BAD:
                    last.pop(key, None)
                    last[key] = t
            return
        clock = self.event_clock
        for r in records:
            key = _key(r)
            if key is _BAD:
                continue
            ts = _time(r.get("ts") if isinstance(r, Mapping) else None)
            prev = last.pop(key, None)
            if ts is not None:
                t = ts if prev is None or ts > prev else prev
                clock = t if t > clock else clock
            else:  # no time: seen now by order, at the clock its time would not move
                t = prev if prev is not None else clock
            last[key] = t
        self.event_clock = clock

    def due(self) -> list:
        """The keys to forget now (removed from the bookkeeping), least recently seen
        first."""
        last = self._last
        out: list = []
        if self.ttl is not None and last:
            now = self._now() if self.wall else self.event_clock
            horizon = now - self.ttl
            while last:
                key = next(iter(last))
                if not last[key] < horizon:
                    break
                del last[key]
                out.append(key)
            self.evicted_ttl += len(out)
        if self.max_keys is not None and len(last) > self.max_keys:
            n = len(last) - self.max_keys
            it = iter(last)
            over = [next(it) for _ in range(n)]
            for key in over:
                del last[key]
            out.extend(over)
            self.evicted_max += n
        return out

    def forget(self, key: Any) -> None:
        """Drop ``key`` from the bookkeeping (it left the state some other way)."""
        self._last.pop(key, None)

    def restored(self, keys: Iterable, clock: float | None = None) -> None:
        """Keys restored from a checkpoint, counted as seen at ``clock`` (the checkpoint's
        event clock; with ``clock: wall``, now) and before every key seen since."""
        if self.wall or clock is None or not math.isfinite(clock):
            t = self._now() if self.wall else self.event_clock
        else:
            t = float(clock)
            self.event_clock = max(self.event_clock, t)
        old = self._last
        self._last = {k: t for k in keys if k not in old}
        self._last.update(old)

    def state(self) -> dict:
        """What a checkpoint's marker keeps: the event clock (null before any ts)."""
        c = self.event_clock
        return {"clock": c if math.isfinite(c) else None}


_BAD = object()


def _time(ts: Any) -> float | None:
    """``ts`` as a finite float, or None (not a number, a bool, NaN, infinite, 10**400)."""
    if type(ts) is float:
        return ts if math.isfinite(ts) else None
    if type(ts) is int:
        try:
            return float(ts)
        except OverflowError:
            return None
    return None


def _key(record: Any) -> Any:
    key = record.get("key") if isinstance(record, Mapping) else None
    if type(key) is list:
        from shiftwatch.operators.keyed import Keyed

        key = Keyed.normalize_key(key)
    try:
        hash(key)
    except TypeError:
        return _BAD
    return key
