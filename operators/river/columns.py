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
from operator import indexOf
from typing import Any

import numpy as np

from shiftwatch.operators.keyed import columns_by_key
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

    def segment(op: RiverDetector, rows: np.ndarray, xs: np.ndarray) -> None:
        _run_segment(op, template, rows, xs, ts, record, alarm, stat, warn, special)

    columns_by_key(keyed, keys, inv, values, record, template.max_abs,
                   lambda op: op._detector is not None and op._shape == (), segment, accepted,
                   alarm, special, dead)
    fields: dict[str, Any] = {"statistic": stat}
    if warning:
        fields["warning"] = warn
    return accepted, alarm, fields, special, dead


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
