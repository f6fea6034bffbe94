"""The level gate of ``auto(level_gate=...)``: keep a level alarm only if the level moved.

A level detector (ADWIN) alarms when the running mean of a key's values moves by more than
its bound, and that bound shrinks with the window. On a key whose changes are changes of
shape (a new waveform, a new period), the mean barely moves but ADWIN's windows grow long
enough to see it, and it raises false alarms there. :class:`LevelGate` keeps an alarm only
when the values after its located change differ in mean from the values before it (since the
last located change, by either detector) by at least ``gate`` pooled standard deviations:

    d = |mean(after) - mean(before)| / sqrt(pooled variance)

``before`` is the segment from the last located change (at most ``window`` values back) to
the alarm's ``change_at``; ``after`` runs from ``change_at`` to the record that alarmed. A
segment with fewer than two values cannot be judged, and the alarm is kept. ``d`` is the
effect size of a two-sample comparison; it does not depend on the key's scale.

The gate also keeps the two detectors of a key from reporting one change twice. An alarm
whose change is within ``min_gap`` records of a change the *other* detector located is
dropped as a duplicate.

Memory is bounded: the last ``window`` values of the key (plus one micro-batch while it is
judged), two positions and a count.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["LevelGate", "STATS"]

#: How ``d`` is computed (see :class:`LevelGate`).
STATS = ("winsorised", "median", "mean")
#: ``"winsorised"`` clips each side to its median +- this many robust standard deviations
_CLIP = 5.0
#: The MAD of normal noise times this is its standard deviation.
_MAD_SD = 1.4826


class LevelGate:
    """The effect size gate over one univariate key's values (see the module docstring).

    Parameters
    ----------
    gate
        The least effect size ``d`` a level alarm needs to be kept.
    window
        How many values back ``before`` may reach (River's locator's window, 1,000).
    min_gap
        A change within this many records of a change the other detector located is the
        same change (ADWIN's check interval on ``auto``'s level route, 32 records).
    stat
        ``"winsorised"``: ``d`` from the means and the pooled standard deviation of each
        side's values clipped to its median +- 5 robust standard deviations (1.4826 MAD; the
        standard deviation where the MAD is 0), so one far-out value cannot silence the gate;
        ``"median"``: ``d`` from the medians and the pooled median absolute deviation (times
        1.4826, so that it estimates the standard deviation of normal noise; the pooled
        standard deviation where the pooled MAD is 0), so one far-out value cannot silence
        the gate; ``"mean"``: from the means and the pooled standard deviation, as declared
        first (``benchmarks/results/auto.md``).

    Examples
    --------
    >>> g = LevelGate(3.0)
    >>> rng = np.random.default_rng(0)
    >>> g.push(np.r_[rng.normal(0, 1, 300), rng.normal(0.3, 1, 40)])
    >>> g.effect(300, at=339) < 1  # the mean moved by 0.3 sd
    True
    >>> g.judge(300, at=339, kind="level")
    False
    >>> g.push(rng.normal(5, 1, 40))
    >>> g.judge(340, at=379, kind="level")  # by 5 sd
    True
    """

    def __init__(self, gate: float, window: int = 1000, min_gap: int = 32,
                 stat: str = "median"):
        if stat not in STATS:
            raise ValueError(f"stat must be one of {STATS}, got {stat!r}")
        self.stat = stat
        self.gate = float(gate)
        self.window = int(window)
        self.min_gap = int(min_gap)
        self._vals = np.zeros(0)
        self._n = 0  # values pushed
        self._last = {"level": -1, "routed": -1}  # the last change each detector located

    @property
    def count(self) -> int:
        """How many values were pushed (the next record's position)."""
        return self._n

    def push(self, values) -> None:
        """Append the key's next values (a micro-batch; trimmed to the window by
        :meth:`trim`, which the owner calls once the batch's alarms are judged)."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        self._vals = np.concatenate([self._vals, v])
        self._n += v.size

    def trim(self) -> None:
        if self._vals.size > self.window:
            self._vals = self._vals[-self.window:].copy()

    def _segment(self, lo: int, hi: int) -> np.ndarray:
        """The values at positions ``[lo, hi)`` that are still held."""
        first = self._n - self._vals.size
        lo, hi = max(lo, first), min(hi, self._n)
        return self._vals[lo - first:hi - first] if hi > lo else self._vals[:0]

    def effect(self, change_at: int, at: int) -> float:
        """The effect size of a change at ``change_at`` seen at record ``at`` (``nan`` if a
        side has fewer than two values)."""
        start = max(self._last.values()) + 1 if max(self._last.values()) >= 0 else 0
        a = self._segment(max(start, at + 1 - self.window), change_at)
        b = self._segment(change_at, at + 1)
        if a.size < 2 or b.size < 2:
            return float("nan")
        pooled = (a.var() * a.size + b.var() * b.size) / (a.size + b.size)
        diff = abs(b.mean() - a.mean())
        if self.stat == "winsorised":
            a, b = _winsorised(a), _winsorised(b)
            pooled = (a.var() * a.size + b.var() * b.size) / (a.size + b.size)
            diff = abs(b.mean() - a.mean())
        elif self.stat == "median":
            ma, mb = np.median(a), np.median(b)
            mad2 = (np.median(np.abs(a - ma)) ** 2 * a.size
                    + np.median(np.abs(b - mb)) ** 2 * b.size) / (a.size + b.size)
            diff = abs(mb - ma)
            if mad2 > 0:
                pooled = mad2 * _MAD_SD ** 2
        if pooled <= 0:
            return float("inf") if diff > 0 else 0.0
        return float(diff / np.sqrt(pooled))

    def duplicate(self, change_at: int, kind: str) -> bool:
        """The other detector located a change within ``min_gap`` of ``change_at``."""
        other = self._last["routed" if kind == "level" else "level"]
        return other >= 0 and abs(change_at - other) < self.min_gap

    def judge(self, change_at: int, at: int, kind: str) -> bool:
        """Keep an alarm of ``kind`` (``"level"`` or ``"routed"``) raised at record ``at``
        with change ``change_at``? A kept alarm becomes the last located change."""
        if self.duplicate(change_at, kind):
            return False
        if kind == "level":
            d = self.effect(change_at, at)
            if d == d and d < self.gate:  # nan (too few values to judge) keeps the alarm
                return False
        self._last[kind] = int(change_at)
        return True

    def located(self, change_at: int, kind: str) -> None:
        """Record a change located by ``kind`` without judging it."""
        self._last[kind] = max(self._last[kind], int(change_at))

    # ---- state ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"vals": self._vals.tolist(), "n": self._n, "last_level": self._last["level"],
                "last_routed": self._last["routed"]}

    def load_state_dict(self, state: Mapping) -> None:
        vals = np.asarray(state["vals"], dtype=np.float64).reshape(-1)
        n = int(state["n"])
        if vals.size > self.window or n < vals.size:
            raise ValueError("level gate state holds more values than its window or count")
        self._vals, self._n = vals, n
        self._last = {"level": int(state["last_level"]), "routed": int(state["last_routed"])}


def _winsorised(x: np.ndarray) -> np.ndarray:
    """``x`` clipped to its median +- ``_CLIP`` robust standard deviations."""
    med = np.median(x)
    scale = _MAD_SD * np.median(np.abs(x - med))
    if not scale > 0:
        scale = x.std()
    return np.clip(x, med - _CLIP * scale, med + _CLIP * scale)
