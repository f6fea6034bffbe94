"""``river:NAME`` on columns: each key's values of a micro-batch through its River detector.

The replay's columnar path (:mod:`shiftwatch.deploy.columnar`) hands a keyed River
detector the batch as arrays. :func:`river_columns` runs each key's values (in input order)
through the key's detector without building a record per value, and gives what
``Keyed.process_batch`` gives for the same records, in columns: the same ``alarm``,
``statistic`` and ``warning``, the same located changes (the values pushed into the key's
locate window up to each alarm, then :meth:`RiverDetector._locate`), the same dead letters.

A key seen for the first time, a key whose detector is not yet running as a scalar one, and
a key with a value beyond the operator's ``max_abs`` take the record path for its rows
of the batch (``Keyed``'s own store, record by record). River's ``ADWIN`` is stepped
through its compiled window directly (what ``ADWIN.update`` and ``ADWIN.estimation`` do, in
the same order); the other detectors through ``update``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import indexOf, length_hint
from typing import Any

import numpy as np

from shiftwatch._jit import njit
from shiftwatch.operators.keyed import key_segments, sort_by_key
from shiftwatch.operators.locate import locate_change
from shiftwatch.operators.river.adapter import RiverDetector, _statistic_adwin
from shiftwatch.records import DeadLetter

__all__ = ["river_columns", "columns_ready"]


def columns_ready(keyed: Any) -> bool:
    """Whether ``keyed`` (a :class:`~shiftwatch.operators.keyed.Keyed`) holds a River
    detector :func:`river_columns` can run: a non-binary one reading ``value``, one clone
    per key."""
    op = getattr(keyed, "operator", None)
    store = getattr(keyed, "_store", None)
    return (isinstance(op, RiverDetector) and not op.binary and op.field == "value"
            and type(store).__name__ == "_Clones" and not keyed._deferred
            and keyed.expiry is None)


def _adwin_class() -> type | None:
    try:
        from river.drift.adwin import ADWIN  # (not river.drift: lazy_import)
    except ImportError:  # pragma: no cover - river is a dependency
        return None
    return ADWIN


def river_columns(keyed: Any, keys: list, inv: np.ndarray, values: np.ndarray,
                  ts: np.ndarray | None, record: Callable[[int], dict]) -> tuple:
    """Run one micro-batch through the River detectors of ``keyed``, key by key.

    Parameters and result as :func:`shiftwatch.operators.confseq.columns.fleet_columns`;
    ``fields`` is ``{"statistic": floats (NaN for None)}`` (and ``"warning"``, booleans, for
    detectors with a warning zone); the dead letters come key by key (keys in order of
    first appearance), as ``Keyed`` gives them.

    The keys' values are taken key by key (:func:`~shiftwatch.operators.keyed.key_segments`);
    an ADWIN's statistics between its drifts are written for all keys at once at the end
    (:func:`_fill_runs`), the locate windows are pushed slices of the batch's arrays.
    """
    n = values.shape[0]
    template: RiverDetector = keyed.operator
    warning = template.has_warning
    accepted = np.ones(n, dtype=bool)
    alarm = np.zeros(n, dtype=bool)
    stat = np.full(n, np.nan)
    warn = np.zeros(n, dtype=bool) if warning else None
    special: dict[int, dict] = {}
    dead: list[DeadLetter] = []
    by_key = sort_by_key(inv, values, len(keys), template.max_abs,
                         _order_by_key(np.asarray(inv), len(keys)))
    order, xs = by_key[0], by_key[1]
    tsk = None if ts is None else np.asarray(ts, dtype=np.float64)[order]
    adwin = _adwin_class()
    fast = adwin is not None and template._statistic is _statistic_adwin and not warning
    kind = "mean" if template.locate is True else template.locate
    runs: list = []  # (lo, hi, width, total) of each run of ADWIN updates without a drift
    ctx = (order, xs, tsk, kind, template, record, alarm, stat, special, runs)
    for op, lo, hi in key_segments(keyed, keys, by_key, record, _ready, accepted, alarm,
                                   special, dead):
        det = op._detector
        if fast and type(det) is adwin and type(op)._statistic is _statistic_adwin:
            _adwin_segment(op, det, lo, hi, ctx)
        else:
            _run_segment(op, template, order[lo:hi], xs[lo:hi], ts, record, alarm, stat,
                         warn, special)
    if runs:
        r = np.array(runs, dtype=np.float64).reshape(-1, 4)
        _fill_runs(xs, order, r[:, 0].astype(np.int64), r[:, 1].astype(np.int64),
                   r[:, 2].copy(), r[:, 3].copy(), stat)
    fields: dict[str, Any] = {"statistic": stat}
    if warning:
        fields["warning"] = warn
    return accepted, alarm, fields, special, dead


def _ready(op: RiverDetector) -> bool:
    return op._detector is not None and op._shape == ()


def _adwin_segment(op: RiverDetector, det: Any, lo: int, hi: int, ctx: tuple) -> None:
    """Positions ``lo .. hi - 1`` of the batch (one key, in order) through the key's River
    ADWIN (:func:`_run_adwin`'s steps; the statistics between drifts left to
    :func:`_fill_runs`), its alarms' outputs and its locate window."""
    order, xs, tsk, kind, template, record, alarm, stat, special, runs = ctx
    it = iter(xs[lo:hi].tolist())  # (list by list: faster than one list of all)
    drift = det._drift_detected
    hits: list[int] = []
    i = lo
    while i < hi:
        if drift:  # ADWIN.update starts afresh after a drift
            det._reset()
        helper = det._helper
        width, total = helper.get_width(), helper.get_total()
        # up to the next drift (any stops after the update that returned True), or all
        drift = any(map(helper.update, it))
        j = hi - length_hint(it) - 1 if drift else hi
        if j > i:  # rows i .. j - 1 only added to the window
            runs.append((i, j, width, total))
        if drift:
            w = helper.get_width()
            stat[order[j]] = helper.get_total() / w if w else 0.0
            hits.append(j)
            j += 1
        i = j
    det._drift_detected = drift
    window = op._window
    done = lo
    for h in hits:
        r = int(order[h])
        alarm[r] = True
        if window is not None:
            window.push_slice(xs, tsk, done, h + 1)
            done = h + 1
        o = template._output(record(r), alarm=True, statistic=float(stat[r]))
        if window is not None:
            _locate(window, o, kind)
        special[r] = o
    if window is not None and done < hi:
        window.push_slice(xs, tsk, done, hi)


def _locate(window: Any, out: dict, kind: Any) -> None:
    """``RiverDetector._locate(out, None)`` (a scalar detector's window)."""
    n = len(window)
    if kind == "mean" and window.dim == 0 and window.keep_values and _mean_ok():
        k = _mean_split(window._buf, window._phys, window.start, n) if n >= 2 else 0
    else:
        k = locate_change(window.values(), kind)
    at = window.start + k
    out["change_at"] = at
    ts = window.ts_at(at)
    if ts is not None:
        out["change_ts"] = ts
    window.drop_before(at)


_MEAN_OK: list = []


def _mean_ok() -> bool:
    """Whether :func:`_mean` gives NumPy's ``x[:, None].mean(axis=0)`` bit for bit here
    (checked once, on a few hundred arrays; if not, the locate search runs in NumPy)."""
    if not _MEAN_OK:
        rng = np.random.default_rng(7)
        ok = True
        for n in [*range(1, 40), *rng.integers(40, 3000, 200).tolist()]:
            x = rng.normal(rng.normal(0.0, 50.0), rng.uniform(0.01, 5.0), n)
            ok = ok and _mean(x, 0, n) == x[:, None].mean(axis=0)[0]
        _MEAN_OK.append(ok)
    return _MEAN_OK[0]


@njit(cache=True)
def _order_by_key(inv, n_keys):  # pragma: no cover - compiled
    """``np.argsort(inv, kind="stable")`` of key numbers ``0 .. n_keys - 1``, by counting."""
    n = inv.shape[0]
    at = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(n):
        at[inv[i] + 1] += 1
    for u in range(n_keys):
        at[u + 1] += at[u]
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        u = inv[i]
        order[at[u]] = i
        at[u] += 1
    return order


@njit(cache=True)
def _fill_runs(xs, order, lo, hi, width, total, stat):  # pragma: no cover - compiled
    """``stat[order[i]]`` of each run ``r`` of ADWIN updates without a drift, positions
    ``lo[r] .. hi[r] - 1`` of ``xs``: ``ADWIN.estimation`` after each, the window's total
    (from ``total[r]``, adding the values in order) over its width (from ``width[r]``)."""
    for r in range(lo.shape[0]):
        t = total[r]
        w = width[r]
        for i in range(lo[r], hi[r]):
            t = t + xs[i]
            w = w + 1.0
            stat[order[i]] = t / w


@njit(cache=True)
def _pairwise_leaf(a, lo, n):  # pragma: no cover - compiled
    """NumPy's ``pairwise_sum`` of ``a[lo:lo + n]`` for ``n <= 128`` (no split)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def _pairwise(a, lo, n):  # pragma: no cover - compiled
    """NumPy's pairwise sum of ``a[lo:lo + n]`` (``pairwise_sum`` of its float64 add: above
    128 values the sum of the two halves' sums, the first half a multiple of 8 long), its
    recursion on a stack (a cached recursive kernel can crash when loaded)."""
    kind = np.empty(192, dtype=np.int64)  # 0: sum a block, 1: add the last two sums
    at = np.empty(192, dtype=np.int64)
    size = np.empty(192, dtype=np.int64)
    sums = np.empty(96)
    sp, vp = 1, 0
    kind[0], at[0], size[0] = 0, lo, n
    while sp > 0:
        sp -= 1
        if kind[sp] == 1:
            vp -= 1
            sums[vp - 1] = sums[vp - 1] + sums[vp]
            continue
        l, m = at[sp], size[sp]
        if m <= 128:
            sums[vp] = _pairwise_leaf(a, l, m)
            vp += 1
            continue
        n2 = m // 2
        n2 -= n2 % 8
        kind[sp], kind[sp + 1], kind[sp + 2] = 1, 0, 0  # first half first, then the second
        at[sp + 1], size[sp + 1] = l + n2, m - n2
        at[sp + 2], size[sp + 2] = l, n2
        sp += 3
    return sums[0]


@njit(cache=True)
def _mean(a, lo, n):  # pragma: no cover - compiled
    """NumPy's ``a[lo:lo + n, None].mean(axis=0)[0]``: its sum from 0.0, over the count."""
    return (0.0 + _pairwise(a, lo, n)) / n


@njit(cache=True)
def _mean_split(buf, phys, start, n):  # pragma: no cover - compiled
    """:func:`~shiftwatch.operators.locate.mean_change_split` of the ``n >= 2`` values of a
    scalar :class:`~shiftwatch.operators.locate.ValueWindow` (positions ``start ..``, at
    ``p % phys`` of ``buf``), its index: the same operations in the same order."""
    x = np.empty(n)
    for i in range(n):
        x[i] = buf[(start + i) % phys]
    mu = _mean(x, 0, n)
    c = np.empty(n)
    c[0] = x[0] - mu
    for i in range(1, n):
        c[i] = c[i - 1] + (x[i] - mu)
    total = c[n - 1]
    best = 0.0
    at = 0
    for k in range(1, n):
        kk = float(k)
        diff = c[k - 1] - kk * total / n
        s = n * diff * diff / (kk * (n - kk))
        if s != s:  # np.argmax: the first NaN
            return k
        if at == 0 or s > best:
            best = s
            at = k
    return at


def _run_segment(op: RiverDetector, template: RiverDetector, rows: np.ndarray,
                 xs: np.ndarray, ts: np.ndarray | None, record: Callable[[int], dict],
                 alarm: np.ndarray, stat: np.ndarray, warn: np.ndarray | None,
                 special: dict[int, dict]) -> None:
    """Values ``xs`` of rows ``rows`` (one key, in order) through the key's running scalar
    detector: statistics, alarms, the locate window and the alarms' outputs."""
    det = op._detector
    m = xs.shape[0]
    warning = warn is not None
    adwin = _adwin_class()
    if adwin is not None and type(det) is adwin and type(op)._statistic is _statistic_adwin:
        st, hits = _run_adwin(det, xs)
        stat[rows] = st
        adwin_run = True
    else:
        st, hits, wl = _run_generic(op, det, xs.tolist(), warning)
        adwin_run = False
        if warning:
            warn[rows] = wl
        stat[rows] = np.array(st, dtype=np.float64)
    window = op._window
    done = 0
    for h in hits:
        i = int(rows[h])
        alarm[i] = True
        if window is not None:
            window.push_many(xs[done:h + 1],
                             None if ts is None else ts[rows[done:h + 1]].tolist())
            done = h + 1
        o = template._output(record(i), alarm=True,
                              statistic=float(st[h]) if adwin_run else st[h])
        if warning:
            o["warning"] = bool(warn[i])
        if window is not None:
            op._locate(o, None)
        special[i] = o
    if window is not None and done < m:
        window.push_many(xs[done:], None if ts is None else ts[rows[done:]].tolist())


def _run_adwin(det: Any, xs: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """River's ``ADWIN.update`` and ``float(ADWIN.estimation)`` for each of ``xs``, through
    its compiled window (what those two do, step for step).

    ``update`` runs in C (``operator.indexOf`` over ``map``) up to each drift. Between two
    drifts ADWIN only adds to its window (it drops old values only when it reports a drift),
    so its total is the running sum of the values added (``np.cumsum``: the same additions
    in the same order) and its width counts them; the estimation after a drift is read from
    the window itself.
    """
    n = xs.shape[0]
    stats = np.empty(n)
    hits: list[int] = []
    it = iter(xs.tolist())
    drift = det._drift_detected
    i = 0
    while i < n:
        if drift:  # ADWIN.update starts afresh after a drift
            det._reset()
        helper = det._helper
        width, total = helper.get_width(), helper.get_total()
        try:
            j = i + indexOf(map(helper.update, it), True)  # the next drift
            drift = True
        except ValueError:  # no drift in the rest: all of it went through update
            j, drift = n, False
        if j > i:  # rows i .. j - 1 only added to the window
            run = np.cumsum(np.concatenate(([total], xs[i:j])))[1:]
            stats[i:j] = run / (width + np.arange(1, j - i + 1, dtype=np.float64))
        if drift:
            w = helper.get_width()
            stats[j] = helper.get_total() / w if w else 0.0
            hits.append(j)
            j += 1
        i = j
    det._drift_detected = drift
    return stats, hits


def _run_generic(op: RiverDetector, det: Any, xs: list[float], warning: bool
                 ) -> tuple[list, list[int], list]:
    update, statistic = det.update, op._statistic
    stats: list = [None] * len(xs)
    warn: list = [False] * len(xs) if warning else []
    hits = []
    for i, x in enumerate(xs):
        update(x)
        stats[i] = statistic(det)
        if warning:
            warn[i] = det.warning_detected
        if det.drift_detected:
            hits.append(i)
    return stats, hits, warn
