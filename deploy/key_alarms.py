"""Alarms per record key as Prometheus series, with a bound on the number of series.

A stream may hold millions of keys and a Prometheus label must take a bounded number of
values, so :class:`KeyAlarmSeries` gives a series (``shiftwatch_key_alarms_total{stage,
operator, key}``) to at most ``max_key_series`` keys of a stage: the first keys to alarm
keep theirs for the life of the process; the alarms of every later key are counted under
``key="_other"``, and ``shiftwatch_key_alarms_folded_keys`` says how many distinct keys were
folded there (exact up to :data:`EXACT_FOLDED_KEYS` keys, then a HyperLogLog estimate in
16 KiB: a relative standard error of 0.8%; within 2.5% in checks of 10,000 to 200,000 keys).

A key is user input, so its label is :func:`key_label`: control, format and separator
characters (newlines, escapes, ...) and backslashes are written as ``\\n``/``\\xNN``/
``\\uNNNN`` escapes, and a label longer than :data:`MAX_KEY_LABEL_CHARS` characters is cut
and ends with ``~`` and 8 hex digits of a hash of the whole key (two long keys with the same
beginning keep distinct labels). The labels ``_other`` and ``_none`` (a record without a key)
are reserved: a key that begins with ``_`` gets one more ``_`` in front.

The executor counts the alarms of a micro-batch per key in a dict and makes one call per
operator and batch; :meth:`KeyAlarmSeries.add` then costs one dictionary look-up and one
counter increment per distinct alarming key.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["KeyAlarmSeries", "key_label", "parse_max_key_series", "MAX_KEY_LABEL_CHARS",
           "DEFAULT_MAX_KEY_SERIES", "OTHER", "NO_KEY"]

#: Keys of a stage that get their own series by default (``metrics.max_key_series``,
#: ``shiftwatch replay --max-key-series``).
DEFAULT_MAX_KEY_SERIES = 100
#: The longest key label, in characters (longer ones are cut and end with a hash).
MAX_KEY_LABEL_CHARS = 64
#: The label of the alarms of keys beyond ``max_key_series``.
OTHER = "_other"
#: The label of records without a key.
NO_KEY = "_none"
#: Folded keys counted exactly (a set of hashes); beyond, a HyperLogLog estimate.
EXACT_FOLDED_KEYS = 10_000

_HASH_CHARS = 8
_HLL_BITS = 14  # 16384 registers: relative standard error 1.04 / 128 = 0.8%


def _escape(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    cat = unicodedata.category(ch)
    if cat[0] == "C" or cat in ("Zl", "Zp"):
        o = ord(ch)
        return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"
    return ch


def _text(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, str):
        return key
    try:
        return json.dumps(key, default=str, ensure_ascii=False)
    except (TypeError, ValueError):  # e.g. a circular structure: its repr
        return repr(key)


def key_label(key: Any) -> str:
    """The label value of a record key: printable, at most :data:`MAX_KEY_LABEL_CHARS` long.

    >>> key_label("pump-a"), key_label(7), key_label(None), key_label("_other")
    ('pump-a', '7', '_none', '__other')
    >>> key_label('a"b\\nc\\\\d')
    'a"b\\\\nc\\\\\\\\d'
    >>> lab = key_label("x" * 10_000); len(lab), lab[:3], lab[-9:-8]
    (64, 'xxx', '~')
    >>> key_label("x" * 10_000) != key_label("x" * 9_999)
    True
    """
    text = _text(key)
    if text is None:
        return NO_KEY
    head = "".join(_escape(c) for c in text[:MAX_KEY_LABEL_CHARS + 1])
    if text.startswith("_"):
        head = "_" + head
    if len(head) <= MAX_KEY_LABEL_CHARS and len(text) <= MAX_KEY_LABEL_CHARS:
        return head
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                             digest_size=_HASH_CHARS // 2).hexdigest()
    return head[:MAX_KEY_LABEL_CHARS - _HASH_CHARS - 1] + "~" + digest


class _FoldedKeys:
    """How many distinct keys were seen: exact up to :data:`EXACT_FOLDED_KEYS`, then a
    HyperLogLog estimate (Flajolet et al. 2007, with linear counting for small counts)."""

    def __init__(self):
        self._exact: set[int] | None = set()
        self._registers: bytearray | None = None

    def add(self, key: Any) -> None:
        h = int.from_bytes(hashlib.blake2b(
            (_text(key) or "\0none").encode("utf-8", "surrogatepass"), digest_size=8).digest(),
            "big")
        if self._exact is not None:
            self._exact.add(h)
            if len(self._exact) <= EXACT_FOLDED_KEYS:
                return
            self._registers = bytearray(1 << _HLL_BITS)
            for old in self._exact:
                self._register(old)
            self._exact = None
        self._register(h)

    def _register(self, h: int) -> None:
        idx = h >> (64 - _HLL_BITS)
        rest = h & ((1 << (64 - _HLL_BITS)) - 1)
        rank = (64 - _HLL_BITS) - rest.bit_length() + 1
        if rank > self._registers[idx]:
            self._registers[idx] = rank

    @property
    def count(self) -> float:
        if self._exact is not None:
            return float(len(self._exact))
        regs = self._registers
        m = len(regs)
        estimate = 0.7213 / (1 + 1.079 / m) * m * m / sum(2.0 ** -r for r in regs)
        zeros = regs.count(0)
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return float(round(estimate))


class KeyAlarmSeries:
    """The per-key alarm series of one stage (see the module docstring).

    Parameters
    ----------
    counter
        The ``shiftwatch_key_alarms`` counter family (labels pipeline, stage, operator, key).
    pipeline, stage
        The label values.
    max_key_series
        Keys that get their own series (0: every key's alarms count under ``_other``).

    Examples
    --------
    >>> from prometheus_client import CollectorRegistry, Counter
    >>> c = Counter("key_alarms", "", ["pipeline", "stage", "operator", "key"],
    ...             registry=CollectorRegistry())
    >>> s = KeyAlarmSeries(c, "p", "s", max_key_series=2)
    >>> s.add("op", {"a": 2, "b": 1}); s.add("op", {"c": 5, "a": 1, "d": 1})
    >>> s.keys, s.folded_keys
    (['a', 'b'], 2.0)
    >>> c.labels("p", "s", "op", "a")._value.get(), c.labels("p", "s", "op", "_other")._value.get()
    (3.0, 6.0)
    """

    def __init__(self, counter: Any, pipeline: str, stage: str,
                 max_key_series: int = DEFAULT_MAX_KEY_SERIES):
        if isinstance(max_key_series, bool) or not isinstance(max_key_series, int) \
                or max_key_series < 0:
            raise ValueError(f"max_key_series must be an integer >= 0, got {max_key_series!r}")
        self.counter = counter
        self.pipeline = pipeline
        self.stage = stage
        self.max_key_series = max_key_series
        self._labels: dict[Any, str] = {}  # admitted key -> its label
        self._children: dict[tuple[str, str], Any] = {}  # (operator, label) -> counter child
        self._folded = _FoldedKeys()

    @property
    def keys(self) -> list[str]:
        """The labels of the keys that have a series, in order of admission."""
        return list(dict.fromkeys(self._labels.values()))

    @property
    def folded_keys(self) -> float:
        """Distinct keys whose alarms were counted under ``_other``."""
        return self._folded.count

    def add(self, operator: str, counts: Mapping[Any, int]) -> None:
        """``operator`` emitted ``counts[key]`` alarms for each key (one micro-batch)."""
        other = 0
        for key, n in counts.items():
            if not n:
                continue
            try:
                label = self._labels.get(key)
            except TypeError:  # an unhashable key: by its text
                key = _text(key)
                label = self._labels.get(key)
            if label is None:
                if len(self._labels) >= self.max_key_series:
                    other += n
                    self._folded.add(key)
                    continue
                label = self._labels[key] = key_label(key)
            self._child(operator, label).inc(n)
        if other:
            self._child(operator, OTHER).inc(other)

    def _child(self, operator: str, label: str) -> Any:
        child = self._children.get((operator, label))
        if child is None:
            child = self._children[(operator, label)] = self.counter.labels(
                self.pipeline, self.stage, operator, label)
        return child


def parse_max_key_series(text: str) -> int:
    """argparse type of ``shiftwatch replay --max-key-series``: an integer >= 0.

    >>> parse_max_key_series("20")
    20
    """
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value
