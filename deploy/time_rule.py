"""The rule for time and duplicates within a key (``time:`` of a stage, ``--allowed-lateness``
and ``--drop-duplicates`` of a replay), the same in a replay and on Kafka.

**Lateness.** Per key, a record whose ``ts`` is more than ``allowed_lateness_seconds``
before the key's latest ``ts`` (the largest among the key's accepted records) is a dead
letter whose reason starts with ``late:``; a record with ``ts`` equal to or after the latest,
or within the allowed lateness, is accepted. A record without a numeric ``ts`` is neither
checked nor moves the latest. ``null`` (the default) checks nothing.

Why a dead letter and not a reorder buffer: a buffer delays every output of every key by
its length (and on Kafka needs a timer to flush a quiet key), and still has to drop what
comes later than it holds; a dead letter delays nothing, loses nothing (the record is in the
dead-letter file or topic, with its reason) and is counted, so a source that sends time
backwards is seen at once.

**Exact duplicates.** With ``drop_duplicates: N`` (0, the default, is off) a record equal to
one of the key's last ``N`` accepted records (the same key, ``ts`` and every other field of
the record as decoded; the runtime's ``offset`` and ``meta`` are not compared) is dropped:
no output, no dead letter, counted in ``duplicates_dropped``. It is not an input of the key
either: a replay's positions (``change_at``, labels) count the key's records without it.
Duplicates are checked before lateness, so a re-sent record within the window is dropped,
not dead-lettered. Memory: about 100 bytes per remembered record and key (a 63-bit
fingerprint in a list and in a dict), and the same list in the key's checkpoint.

**Where.** The rule is an operator placed first in a stage's chain when either part is on
(:func:`rule_operator`), keyed like every operator, so its per-key state (the latest ``ts``
and the last ``N`` fingerprints) is checkpointed in the changelog and restored with the
others. The checkpoint records it as an operator named ``time`` with no parameters: changing
the lateness or the window keeps the state, turning the rule on or off changes the chain
(``--reset-state``, like adding an operator).

**change_ts.** Every output's ``change_ts`` is at most its ``ts``
(:func:`clamp_change_ts`, applied by the stage executor to the last operator's outputs): a
detector locating its change at a record with a later ``ts`` than the alarm (time that ran
backwards inside the key) reports the alarm's own ``ts`` instead.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from shiftwatch.codec import encode_record
from shiftwatch.operators.contract import Operator
from shiftwatch.records import BadInput

__all__ = ["TIME_DEFAULTS", "RULE_NAME", "TimeRule", "check_time", "rule_operator",
           "is_time_rule", "rule_params", "clamp_change_ts", "fingerprint"]

#: No lateness limit and no duplicate window unless asked for.
TIME_DEFAULTS: dict[str, Any] = {"allowed_lateness_seconds": None, "drop_duplicates": 0}

#: The rule's name as an operator of the chain (dead letters' ``operator``, checkpoints).
RULE_NAME = "time"

#: Fields of a record that are the runtime's coordinates, not its content.
_NOT_COMPARED = ("offset", "meta")
_MASK = (1 << 63) - 1


def check_time(d: Any) -> dict:
    """The ``time`` settings with defaults filled in; ``ValueError`` (one line) if bad.

    >>> check_time(None)
    {'allowed_lateness_seconds': None, 'drop_duplicates': 0}
    >>> check_time({"allowed_lateness_seconds": 5})["allowed_lateness_seconds"]
    5.0
    """
    if d is None:
        return dict(TIME_DEFAULTS)
    if not isinstance(d, Mapping):
        raise ValueError(f"expected a mapping with allowed_lateness_seconds and/or "
                         f"drop_duplicates, got {d!r}")
    out = dict(TIME_DEFAULTS)
    for k, v in d.items():
        if k not in TIME_DEFAULTS:
            raise ValueError(f"unknown key {k!r}; allowed: {', '.join(TIME_DEFAULTS)}")
        if k == "allowed_lateness_seconds":
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0 <= v < float("inf")):
                raise ValueError(f"allowed_lateness_seconds must be a number >= 0 or null, "
                                 f"got {v!r}")
            out[k] = None if v is None else float(v)
        else:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10_000:
                raise ValueError(f"drop_duplicates must be an integer from 0 to 10000 (the "
                                 f"records per key compared), got {v!r}")
            out[k] = v
    return out


def fingerprint(record: Mapping) -> int | None:
    """A 63-bit fingerprint of ``record`` without ``offset`` and ``meta`` (BLAKE2b of its
    JSON encoding: the same in every process, so it can be checkpointed); None for a record
    that cannot be encoded (nested too deep), which is then never a duplicate.

    >>> fingerprint({"key": "a", "ts": 1.0, "value": 2.0, "offset": 7}) == \\
    ...     fingerprint({"key": "a", "ts": 1.0, "value": 2.0, "offset": 9})
    True
    >>> fingerprint({"key": "a", "ts": 1.0, "value": 2.0}) == \\
    ...     fingerprint({"key": "a", "ts": 1.0, "value": 2.5})
    False
    """
    content = {k: v for k, v in record.items() if k not in _NOT_COMPARED}
    try:
        data = encode_record(content)
    except Exception:  # e.g. nested too deep to encode
        return None
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return int.from_bytes(digest, "big") & _MASK


def _num(x: float) -> str:
    return str(int(x)) if abs(x) < 1e15 and x == int(x) else repr(x)


def _ts_of(record: Mapping) -> float | None:
    ts = record.get("ts")
    if type(ts) is float or (isinstance(ts, (int, float)) and not isinstance(ts, bool)):
        try:
            ts = float(ts)
        except OverflowError:  # an integer beyond float range: no ts
            return None
        return ts if math.isfinite(ts) else None
    return None


class TimeRule(Operator):
    """One key's rule for time and duplicates (this module's docstring): returns the record
    unchanged, nothing for an exact duplicate, or raises :class:`BadInput` (``late: ...``).

    Not registered (``shiftwatch operators`` does not list it): a stage's ``time:`` section
    or the replay's flags place it (:func:`rule_operator`).

    >>> rule = TimeRule(allowed_lateness_seconds=10, drop_duplicates=2)
    >>> [len(rule.process({"key": "a", "ts": t, "value": 1.0})) for t in (100, 95, 95)]
    [1, 1, 0]
    >>> rule.process({"key": "a", "ts": 80, "value": 1.0})
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: late: ts more than the allowed lateness (10 s) before the \
key's latest ts, got ts 80, 20 s before 100
    """

    name = RULE_NAME
    input_kind = "any record (ts: seconds)"
    _state_exclude = ("_index",)

    def __init__(self, allowed_lateness_seconds: float | None = None, drop_duplicates: int = 0):
        self.allowed_lateness_seconds = allowed_lateness_seconds
        self.drop_duplicates = drop_duplicates
        self._reset()

    def _reset(self) -> None:
        #: the largest ts among the key's accepted records (None before one had a ts)
        self._latest: float | None = None
        #: the fingerprints of the key's last ``drop_duplicates`` accepted records (a ring)
        self._recent: list[int] = []
        #: where the next fingerprint goes in the ring once it is full
        self._next = 0
        #: fingerprint -> how many times it is in the ring (rebuilt from it on load)
        self._index: dict[int, int] = {}

    def process(self, record: Mapping) -> list[dict]:
        if not isinstance(record, Mapping):
            raise BadInput(f"a record is a JSON object, got a {type(record).__name__}")
        n = self.drop_duplicates
        fp = fingerprint(record) if n else None
        if fp is not None and fp in self._index:
            return []
        ts = _ts_of(record)
        latest = self._latest
        limit = self.allowed_lateness_seconds
        if ts is not None and latest is not None and limit is not None and latest - ts > limit:
            raise BadInput(f"late: ts more than the allowed lateness ({_num(limit)} s) before "
                           f"the key's latest ts, got ts {_num(ts)}, {_num(latest - ts)} s "
                           f"before {_num(latest)}")
        if ts is not None and (latest is None or ts > latest):
            self._latest = ts
        if fp is not None:
            self._remember(fp, n)
        return [record if type(record) is dict else dict(record)]

    def _remember(self, fp: int, n: int) -> None:
        ring, index = self._recent, self._index
        if len(ring) < n:
            ring.append(fp)
        else:
            old = ring[self._next]
            c = index[old] - 1
            if c:
                index[old] = c
            else:
                del index[old]
            ring[self._next] = fp
            self._next = (self._next + 1) % n
        index[fp] = index.get(fp, 0) + 1

    def load_state_dict(self, state: Mapping) -> None:
        super().load_state_dict(state)
        ring = [int(x) for x in self._recent]
        if ring:  # oldest first, so a smaller window keeps the newest
            ring = ring[self._next:] + ring[:self._next]
        n = self.drop_duplicates
        self._recent = ring[max(0, len(ring) - n):] if n else []
        self._next = 0
        if self._latest is not None:
            self._latest = float(self._latest)
        self._index = {}
        for fp in self._recent:
            self._index[fp] = self._index.get(fp, 0) + 1


def _on(time: Mapping | None) -> bool:
    return bool(time) and (time.get("allowed_lateness_seconds") is not None
                           or bool(time.get("drop_duplicates")))


def rule_operator(time: Mapping | None):
    """The keyed rule for a stage's ``time`` settings (:func:`check_time`), or None when
    neither part is on (then the chain is as before).

    >>> rule_operator(None) is None, rule_operator({"drop_duplicates": 0}) is None
    (True, True)
    >>> is_time_rule(rule_operator({"allowed_lateness_seconds": 0}))
    True
    """
    if not _on(time):
        return None
    from shiftwatch.operators.keyed import Keyed

    t = check_time(dict(time))
    return Keyed(TimeRule(**t))


def is_time_rule(op: Any) -> bool:
    """Whether ``op`` (an operator of a chain, keyed or not) is the rule."""
    return isinstance(op, TimeRule) or isinstance(getattr(op, "operator", None), TimeRule)


def rule_params(time: Mapping | None) -> list[dict]:
    """What a checkpoint records of the rule: ``[{"operator": "time", "params": {}}]`` when
    it is on (its settings may change without discarding its state), else ``[]``."""
    return [{"operator": RULE_NAME, "params": {}}] if _on(time) else []


def clamp_change_ts(records: list[dict]) -> None:
    """Make every ``change_ts`` at most its record's ``ts`` (in place).

    >>> outs = [{"ts": 731.0, "alarm": True, "change_ts": 750.0},
    ...         {"ts": 800.0, "alarm": True, "change_ts": 760.0}]
    >>> clamp_change_ts(outs)
    >>> [o["change_ts"] for o in outs]
    [731.0, 760.0]
    """
    for r in records:
        c = r.get("change_ts")
        if c is None:
            continue
        ts = r.get("ts")
        try:
            if ts is not None and c > ts:
                r["change_ts"] = ts
        except TypeError:  # not numbers: nothing to compare
            pass
