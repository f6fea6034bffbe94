"""Locating a change after an alarm: two-segment split statistics and a bounded value window.

A detector says *when it noticed* a change; these functions say *where it began*. Given the
values seen since the previous alarm (at most a bounded window of them), the change is placed
at the split that best separates the values into two homogeneous segments:

* :func:`mean_change_split` -- Hinkley's (1970) statistic for one change in mean,
  ``tau = argmax_k k (n - k) / n * (mean(x[:k]) - mean(x[k:]))**2``, which is the
  Gaussian likelihood-ratio split for a mean shift with a common variance (and the statistic
  binary segmentation uses). O(n) with prefix sums. For a 2-D array (one column per
  coordinate) the per-column statistics are divided by each column's variance and summed:
  the likelihood ratio for independent coordinates.
* :func:`variance_change_split` -- the Gaussian log-likelihood ratio of a change in mean and
  variance, ``n log s2 - k log s2_left - (n - k) log s2_right`` with each segment's own mean
  and (floored) variance; it finds a variance change the mean statistic cannot see.
* :func:`locate_change` picks one of them by name.
* :class:`LevelGate` judges a located change of level: kept only if the values after it
  differ in mean from those before by at least a given effect size (``auto(level_gate=...)``).

The returned index ``k`` is the first index of the second segment: the estimated position of
the first changed value. :class:`ValueWindow` is the bounded ring buffer that keeps the recent
values (and their ``ts``) with the stream position of each, so that an operator can turn the
split index into a position in the key's stream; its state is plain JSON and NumPy values.

References
----------
Hinkley, D. V. (1970). Inference about the change-point in a sequence of random variables.
Biometrika 57(1), 1-17.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = [
    "GATE_STATS",
    "LOCATE_KINDS",
    "LevelGate",
    "ValueWindow",
    "locate_change",
    "mean_change_split",
    "variance_change_split",
]

#: The split statistics :func:`locate_change` knows.
LOCATE_KINDS = ("mean", "meanvar")


def _as_2d(x: np.ndarray) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        return arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"x must be a 1-D or 2-D array, got shape {arr.shape}")
    return arr


def mean_change_split(x: np.ndarray, min_size: int = 1) -> tuple[int, float]:
    """The split of ``x`` that best separates two means, and its statistic.

    Parameters
    ----------
    x
        Values in stream order: a 1-D array, or 2-D with one column per coordinate.
    min_size
        Each segment holds at least this many values.

    Returns
    -------
    (k, statistic)
        ``k`` in ``[min_size, n - min_size]`` maximises ``k (n - k) / n * (mean(x[:k]) -
        mean(x[k:]))**2`` (summed over columns, each divided by its variance); ties go to
        the earliest ``k``. ``(0, 0.0)`` when ``x`` is too short to split.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = np.r_[rng.normal(0, 1, 60), rng.normal(2, 1, 40)]
    >>> mean_change_split(x)[0]
    60
    """
    arr = _as_2d(x)
    n = arr.shape[0]
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size!r}")
    if n < 2 * min_size:
        return 0, 0.0
    # Centre first: prefix sums of raw values lose digits when the mean is far from zero.
    arr = arr - arr.mean(axis=0)
    csum = np.cumsum(arr, axis=0)
    k = np.arange(min_size, n - min_size + 1)
    left = csum[k - 1]
    total = csum[-1]
    kk = k[:, None].astype(np.float64)
    # k (n-k)/n (mean_l - mean_r)^2 == n / (k (n-k)) * (S_k - k S_n / n)^2
    diff = left - kk * total / n
    stat = n * diff * diff / (kk * (n - kk))
    if arr.shape[1] > 1:
        var = arr.var(axis=0)
        var = np.where(var > 0.0, var, np.inf)
        stat = stat / var
    score = stat.sum(axis=1)
    i = int(np.argmax(score))
    return int(k[i]), float(score[i])


def variance_change_split(x: np.ndarray, min_size: int = 2) -> tuple[int, float]:
    """The split of ``x`` with the largest Gaussian likelihood ratio (mean and variance change).

    Parameters
    ----------
    x
        Values in stream order: 1-D, or 2-D with one column per coordinate (coordinates
        taken as independent: the log-likelihood ratios add).
    min_size
        Each segment holds at least this many values (>= 2, so that it has a variance).

    Returns
    -------
    (k, statistic)
        ``k`` maximises ``n log s2 - k log s2[:k] - (n - k) log s2[k:]`` where each ``s2`` is
        the maximum-likelihood variance about its own segment's mean, floored at ``1e-12``
        times the whole window's variance so that a constant segment cannot win by itself.
        ``(0, 0.0)`` when ``x`` is too short.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(3)
    >>> x = np.r_[rng.normal(0, 1, 150), rng.normal(0, 4, 150)]
    >>> variance_change_split(x)[0]
    153
    """
    arr = _as_2d(x)
    n = arr.shape[0]
    if min_size < 2:
        raise ValueError(f"min_size must be >= 2, got {min_size!r}")
    if n < 2 * min_size:
        return 0, 0.0
    arr = arr - arr.mean(axis=0)
    c1 = np.cumsum(arr, axis=0)
    c2 = np.cumsum(arr * arr, axis=0)
    k = np.arange(min_size, n - min_size + 1)
    kk = k[:, None].astype(np.float64)
    s1l, s2l = c1[k - 1], c2[k - 1]
    s1r, s2r = c1[-1] - s1l, c2[-1] - s2l
    var_all = c2[-1] / n - (c1[-1] / n) ** 2
    floor = np.maximum(var_all, 1e-300) * 1e-12
    var_l = np.maximum(s2l / kk - (s1l / kk) ** 2, floor)
    var_r = np.maximum(s2r / (n - kk) - (s1r / (n - kk)) ** 2, floor)
    score = (n * np.log(np.maximum(var_all, floor)) - kk * np.log(var_l)
             - (n - kk) * np.log(var_r)).sum(axis=1)
    i = int(np.argmax(score))
    return int(k[i]), float(score[i])


def locate_change(x: np.ndarray, kind: str = "mean") -> int:
    """The index of the first changed value of ``x`` (0 when ``x`` is too short to split).

    ``kind`` is ``"mean"`` (:func:`mean_change_split`) or ``"meanvar"``
    (:func:`variance_change_split`).

    >>> locate_change([0.0, 0.1, -0.1, 0.0, 5.0, 5.1, 4.9])
    4
    """
    if kind == "mean":
        return mean_change_split(x)[0]
    if kind == "meanvar":
        return variance_change_split(x)[0]
    raise ValueError(f"kind must be one of {', '.join(LOCATE_KINDS)}, got {kind!r}")


def _ring_copy(src: np.ndarray, src_phys: int, dst: np.ndarray, dst_phys: int, start: int,
               size: int) -> None:
    """``dst[p % dst_phys] = src[p % src_phys]`` for positions ``start .. start + size - 1``
    (``size`` at most both lengths), in slices."""
    p, end = start, start + size
    while p < end:
        a, b = p % src_phys, p % dst_phys
        k = min(end - p, src_phys - a, dst_phys - b)
        dst[b:b + k] = src[a:a + k]
        p += k


class ValueWindow:
    """The last ``capacity`` values of a stream with their positions (and ``ts``), bounded.

    Position ``p`` is the ``p``-th value pushed since the window was created (0-based); the
    window holds positions ``start .. count - 1``. :meth:`drop_before` forgets the values
    before a position (after an alarm: keep only the post-change values), so a later
    location search starts at the previous change.

    Memory grows with what is held, not with ``capacity``: the buffers start small and double
    up to ``capacity`` (a fleet of keys that alarm now and then holds little per key), the
    ``ts`` buffer exists only once a ``ts`` was pushed, and ``keep_values=False`` keeps
    positions and ``ts`` alone (for a detector that locates by itself and only needs the
    located record's ``ts``).

    Parameters
    ----------
    capacity
        The most values held; older ones are overwritten.
    dim
        0 for scalar values, ``d`` for vectors of length ``d``.
    keep_values
        Hold the values (False: :meth:`values` is unavailable; positions and ``ts`` only).

    Examples
    --------
    >>> w = ValueWindow(capacity=4)
    >>> for i in range(6):
    ...     w.push(float(i), ts=10.0 + i)
    >>> w.values().tolist(), w.start, w.count
    ([2.0, 3.0, 4.0, 5.0], 2, 6)
    >>> w.drop_before(4); w.values().tolist(), w.ts_at(5)
    ([4.0, 5.0], 15.0)
    """

    __slots__ = ("capacity", "dim", "keep_values", "_buf", "_ts", "_phys", "_count", "_size")

    _MIN_PHYS = 16

    def __init__(self, capacity: int, dim: int = 0, keep_values: bool = True):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) \
                or capacity < 2:
            raise ValueError(f"capacity must be an integer >= 2, got {capacity!r}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise ValueError(f"dim must be an integer >= 0, got {dim!r}")
        self.capacity = int(capacity)
        self.dim = int(dim)
        self.keep_values = bool(keep_values)
        self._phys = 0     # allocated slots (<= capacity); position p lives at p % _phys
        self._buf: np.ndarray | None = None
        self._ts: np.ndarray | None = None  # allocated at the first ts pushed
        self._count = 0  # values pushed so far = the next value's position
        self._size = 0   # values held

    @property
    def count(self) -> int:
        """How many values were pushed (the position of the next one)."""
        return self._count

    @property
    def start(self) -> int:
        """The position of the oldest value held."""
        return self._count - self._size

    def __len__(self) -> int:
        return self._size

    def _reserve(self, held: int, with_ts: bool) -> None:
        """Make room for ``held`` values (<= capacity) in place, keeping what is held."""
        phys = self._phys
        if held > phys:
            phys = min(self.capacity, max(self._MIN_PHYS, 2 * self._phys, held))
        if phys == self._phys and (self._ts is not None or not with_ts):
            return
        size, start, old_phys = self._size, self._count - self._size, self._phys
        if self.keep_values:
            shape = (phys,) if self.dim == 0 else (phys, self.dim)
            buf = np.zeros(shape, dtype=np.float64)
            if self._buf is not None and size:
                _ring_copy(self._buf, old_phys, buf, phys, start, size)
            self._buf = buf
        if self._ts is not None or with_ts:
            ts = np.full(phys, np.nan)
            if self._ts is not None and size:
                _ring_copy(self._ts, old_phys, ts, phys, start, size)
            self._ts = ts
        self._phys = phys

    def push(self, value, ts: float | None = None) -> None:
        """Append one value (a float, or a length-``dim`` vector) and its ``ts`` if any."""
        # The per-record path of the River adapter: plain index arithmetic, no temporaries.
        held = self._size + 1 if self._size < self.capacity else self.capacity
        if held > self._phys or (ts is not None and self._ts is None and ts == ts):
            self._reserve(held, with_ts=ts is not None and ts == ts)
        i = self._count % self._phys
        if self.keep_values:
            self._buf[i] = value
        if self._ts is not None:
            self._ts[i] = np.nan if ts is None else ts
        self._count += 1
        self._size = held

    def push_many(self, values, ts=None) -> None:
        """:meth:`push` for each row of ``values`` (and each entry of ``ts``, None or NaN for none).

        >>> w = ValueWindow(capacity=3)
        >>> w.push_many([1.0, 2.0, 3.0, 4.0], ts=[None, 11.0, 12.0, 13.0])
        >>> w.values().tolist(), w.start, w.ts_at(1)
        ([2.0, 3.0, 4.0], 1, 11.0)
        """
        vals = np.asarray(values, dtype=np.float64)
        k = vals.shape[0] if vals.ndim else 0
        if k == 0:
            return
        t = None if ts is None else np.array([np.nan if v is None else v for v in ts],
                                             dtype=np.float64)
        if t is not None and t.shape != (k,):
            raise ValueError(f"ts must hold {k} entries, got {t.shape}")
        if t is not None and self._ts is None and np.all(np.isnan(t)):
            t = None  # no ts seen yet and none now: keep no ts buffer
        if k > self.capacity:  # only the last `capacity` values can be held
            skip = k - self.capacity
            vals, k = vals[skip:], self.capacity
            t = None if t is None else t[skip:]
            self._count += skip
            self._size = 0
        self._reserve(min(self._size + k, self.capacity), with_ts=t is not None)
        idx = (self._count + np.arange(k)) % self._phys
        if self.keep_values:
            self._buf[idx] = vals
        if self._ts is not None:
            self._ts[idx] = np.nan if t is None else t
        self._count += k
        self._size = min(self._size + k, self.capacity)

    def push_slice(self, values: np.ndarray, ts: np.ndarray | None, lo: int, hi: int) -> None:
        """``push_many(values[lo:hi], None if ts is None else ts[lo:hi])`` for float64
        arrays (``ts`` NaN for none), without the conversions: the columnar path's push.

        >>> w = ValueWindow(capacity=3)
        >>> w.push_slice(np.array([1.0, 2.0, 3.0, 4.0]), np.array([np.nan, 11, 12, 13.0]), 0, 4)
        >>> w.values().tolist(), w.start, w.ts_at(1)
        ([2.0, 3.0, 4.0], 1, 11.0)
        """
        k = hi - lo
        if k <= 0:
            return
        if ts is not None and self._ts is None and np.isnan(ts[lo:hi]).all():
            ts = None  # no ts seen yet and none now: keep no ts buffer
        cap = self.capacity
        if k > cap:  # only the last `capacity` values can be held
            skip = k - cap
            lo, k = lo + skip, cap
            self._count += skip
            self._size = 0
        held = self._size + k
        if held > cap:
            held = cap
        if held > self._phys or (ts is not None and self._ts is None):
            self._reserve(held, with_ts=ts is not None)
        phys = self._phys
        i0 = self._count % phys
        first = phys - i0
        if first > k:
            first = k
        if self.keep_values:
            buf = self._buf
            buf[i0:i0 + first] = values[lo:lo + first]
            if first < k:
                buf[:k - first] = values[lo + first:lo + k]
        tb = self._ts
        if tb is not None:
            if ts is None:
                tb[i0:i0 + first] = np.nan
                if first < k:
                    tb[:k - first] = np.nan
            else:
                tb[i0:i0 + first] = ts[lo:lo + first]
                if first < k:
                    tb[:k - first] = ts[lo + first:lo + k]
        self._count += k
        self._size = held

    def _order(self) -> np.ndarray:
        return (np.arange(self.start, self._count) % self._phys) if self._size else \
            np.empty(0, dtype=np.int64)

    def values(self) -> np.ndarray:
        """The values held, oldest first (a copy)."""
        if not self.keep_values:
            raise ValueError("this window keeps positions and ts only (keep_values=False)")
        if not self._size:
            return np.zeros((0,) if self.dim == 0 else (0, self.dim), dtype=np.float64)
        return self._buf[self._order()]

    def ts_at(self, position: int) -> float | None:
        """The ``ts`` of a held position, or None (not held, or pushed without ``ts``)."""
        if self._ts is None or not self.start <= position < self._count:
            return None
        t = float(self._ts[position % self._phys])
        return None if t != t else t

    def drop_before(self, position: int) -> None:
        """Forget the values before ``position`` (clamped to the held range)."""
        position = min(max(int(position), self.start), self._count)
        self._size = self._count - position

    def state_dict(self) -> dict:
        """The held values in order (None without ``keep_values``), their ``ts`` (or None),
        the number held and the position counter."""
        order = self._order()
        return {"capacity": self.capacity, "dim": self.dim, "count": self._count,
                "size": self._size,
                "values": self._buf[order].copy() if self.keep_values and self._size else (
                    np.zeros((0,) if self.dim == 0 else (0, self.dim)) if self.keep_values
                    else None),
                "ts": self._ts[order].copy() if self._ts is not None else None}

    def patch_token(self) -> tuple:
        """What :meth:`state_patch` needs to know about this version of the window later."""
        return (self._count, self._count - self._size, self._ts is not None)

    def state_patch(self, token: tuple, path: list) -> list | None:
        """Patch operations (:func:`~shiftwatch.operators.state_codec.apply_state_patch`)
        that turn :meth:`state_dict` as of ``token`` (:meth:`patch_token`) into the current
        one: the values (and ``ts``) pushed since, appended, and the new count and size.
        ``path`` is where the window's state_dict sits in the operator's state. None when
        the values pushed since are not all held any more (a patch would be no smaller).

        >>> from shiftwatch.operators.state_codec import apply_state_patch
        >>> w = ValueWindow(capacity=4)
        >>> w.push_many([1.0, 2.0, 3.0])
        >>> old, token = w.state_dict(), w.patch_token()
        >>> w.push_many([4.0, 5.0], ts=[14.0, 15.0])
        >>> new = apply_state_patch({"w": old}, w.state_patch(token, ["w"]))["w"]
        >>> new["values"].tolist(), new["ts"].tolist()[-2:], new["count"], new["size"]
        ([2.0, 3.0, 4.0, 5.0], [14.0, 15.0], 5, 4)
        """
        count0, start0, had_ts = token
        k = self._count - count0
        if k < 0 or self.start < start0 or k > self._size or (had_ts and self._ts is None):
            return None
        size = self._size
        ops: list = [["set", [*path, "count"], self._count], ["set", [*path, "size"], size]]
        idx = np.arange(self._count - k, self._count) % self._phys if k else \
            np.empty(0, dtype=np.int64)
        if self.keep_values:
            ops.append(["append", [*path, "values"], self._buf[idx].copy() if k else
                        np.zeros((0,) if self.dim == 0 else (0, self.dim)), size])
        if self._ts is not None:
            if had_ts:
                ops.append(["append", [*path, "ts"], self._ts[idx].copy() if k else
                            np.zeros(0), size])
            else:
                ops.append(["set", [*path, "ts"], self._ts[self._order()].copy()])
        return ops

    @classmethod
    def from_state_dict(cls, state: Mapping) -> ValueWindow:
        """Rebuild a window from :meth:`state_dict` (ValueError if inconsistent)."""
        try:
            raw = state["values"]
            w = cls(int(state["capacity"]), int(state["dim"]), keep_values=raw is not None)
            count = int(state["count"])
            ts = state.get("ts")
            values = None if raw is None else np.asarray(raw, dtype=np.float64)
            size = int(state["size"]) if "size" in state else (
                values.shape[0] if values is not None and values.ndim else 0)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad ValueWindow state: {exc}") from None
        if values is not None:
            want = (size,) if w.dim == 0 else (size, w.dim)
            if values.shape != want:
                raise ValueError(f"bad ValueWindow state: values of shape {values.shape}, "
                                 f"expected {want}")
        if size > w.capacity or not 0 <= size <= count:
            raise ValueError(f"bad ValueWindow state: {size} values, count {count}")
        ts_arr = None
        if ts is not None:
            ts_arr = np.asarray(ts, dtype=np.float64)
            if ts_arr.shape != (size,):
                raise ValueError("bad ValueWindow state: ts does not match values")
        w._count = count - size
        if size:
            w._reserve(size, with_ts=ts_arr is not None)
            idx = np.arange(count - size, count) % w._phys
            if values is not None:
                w._buf[idx] = values
            if ts_arr is not None:
                w._ts[idx] = ts_arr
        elif ts_arr is not None:
            w._reserve(0, with_ts=True)
        w._count = count
        w._size = size
        return w


# ---- the level gate of auto(level_gate=...) ----------------------------------------


#: How :class:`LevelGate`'s ``d`` is computed.
GATE_STATS = ("winsorised", "median", "mean")
#: ``"winsorised"`` clips each side to its median +- this many robust standard deviations
_CLIP = 5.0
#: The MAD of normal noise times this is its standard deviation.
_MAD_SD = 1.4826


class LevelGate:
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
    channels
        The values' channels (a multichannel key's vectors): ``d`` is computed on each
        channel and the largest is judged, so a change in any one channel passes.

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
                 stat: str = "median", channels: int = 1):
        if stat not in GATE_STATS:
            raise ValueError(f"stat must be one of {GATE_STATS}, got {stat!r}")
        self.stat = stat
        self.gate = float(gate)
        self.window = int(window)
        self.min_gap = int(min_gap)
        self.channels = int(channels)
        self._vals = np.zeros((0, self.channels))
        self._n = 0  # values pushed
        self._last = {"level": -1, "routed": -1}  # the last change each detector located

    @property
    def count(self) -> int:
        """How many values were pushed (the next record's position)."""
        return self._n

    def push(self, values) -> None:
        """Append the key's next values (a micro-batch; trimmed to the window by
        :meth:`trim`, which the owner calls once the batch's alarms are judged)."""
        v = np.asarray(values, dtype=np.float64).reshape(-1, self.channels)
        self._vals = np.concatenate([self._vals, v])
        self._n += len(v)

    def trim(self) -> None:
        if len(self._vals) > self.window:
            self._vals = self._vals[-self.window:].copy()

    def _segment(self, lo: int, hi: int) -> np.ndarray:
        """The values at positions ``[lo, hi)`` that are still held."""
        first = self._n - len(self._vals)
        lo, hi = max(lo, first), min(hi, self._n)
        return self._vals[lo - first:hi - first] if hi > lo else self._vals[:0]

    def effect(self, change_at: int, at: int) -> float:
        """The effect size of a change at ``change_at`` seen at record ``at`` (``nan`` if a
        side has fewer than two values); on several channels the largest channel's."""
        start = max(self._last.values()) + 1 if max(self._last.values()) >= 0 else 0
        a = self._segment(max(start, at + 1 - self.window), change_at)
        b = self._segment(change_at, at + 1)
        if len(a) < 2 or len(b) < 2:
            return float("nan")
        return max(_effect(a[:, j], b[:, j], self.stat) for j in range(self.channels))

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

    # ---- state ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        # one channel: a flat list, as before the gate had channels
        vals = self._vals.reshape(-1) if self.channels == 1 else self._vals
        return {"vals": vals.tolist(), "n": self._n, "last_level": self._last["level"],
                "last_routed": self._last["routed"]}

    def load_state_dict(self, state: Mapping) -> None:
        vals = np.asarray(state["vals"], dtype=np.float64)
        if vals.size and (vals.ndim != (1 if self.channels == 1 else 2)
                          or vals.size % self.channels):
            raise ValueError(f"level gate state's values are not of {self.channels} channels")
        vals = vals.reshape(-1, self.channels)
        n = int(state["n"])
        if len(vals) > self.window or n < len(vals):
            raise ValueError("level gate state holds more values than its window or count")
        self._vals, self._n = vals, n
        self._last = {"level": int(state["last_level"]), "routed": int(state["last_routed"])}


def _effect(a: np.ndarray, b: np.ndarray, stat: str) -> float:
    """:meth:`LevelGate.effect` of one channel: ``a`` before, ``b`` after the change."""
    pooled = (a.var() * a.size + b.var() * b.size) / (a.size + b.size)
    diff = abs(b.mean() - a.mean())
    if stat == "winsorised":
        a, b = _winsorised(a), _winsorised(b)
        pooled = (a.var() * a.size + b.var() * b.size) / (a.size + b.size)
        diff = abs(b.mean() - a.mean())
    elif stat == "median":
        ma, mb = np.median(a), np.median(b)
        mad2 = (np.median(np.abs(a - ma)) ** 2 * a.size
                + np.median(np.abs(b - mb)) ** 2 * b.size) / (a.size + b.size)
        diff = abs(mb - ma)
        if mad2 > 0:
            pooled = mad2 * _MAD_SD ** 2
    if pooled <= 0:
        return float("inf") if diff > 0 else 0.0
    return float(diff / np.sqrt(pooled))


def _winsorised(x: np.ndarray) -> np.ndarray:
    """``x`` clipped to its median +- ``_CLIP`` robust standard deviations."""
    med = np.median(x)
    scale = _MAD_SD * np.median(np.abs(x - med))
    if not scale > 0:
        scale = x.std()
    return np.clip(x, med - _CLIP * scale, med + _CLIP * scale)
