"""``shape`` on columns: each key's values of a replay's batch through its detector at once.

The replay's columnar path (:mod:`shiftwatch.deploy.columnar`) hands a keyed ``shape`` the
batch as arrays. :func:`shape_columns` runs each key's values (in input order) through the
key's :class:`~shiftwatch.operators.shape.operator.ShapeOperator` in one
:meth:`~shiftwatch.operators.shape.detector.ShapeDetector.update_many` call, and gives
what ``Keyed.process_batch`` gives for the same records, in columns: the same ``alarm``,
``statistic`` and ``threshold``, the same ``change_at`` / ``change_ts`` / ``changes_at`` at
alarms. It does what :meth:`ShapeOperator._emit` does for a run of records (the ring of
recent ``ts``, the count of accepted records), without a record per value.

A key seen for the first time (its first record creates its operator) and a value the
operator refuses (none of a CSV's accepted rows are: they are finite and within
:data:`~shiftwatch.records.MAX_ABS`) take the record path (``Keyed``'s own store, record by
record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shiftwatch.operators.keyed import columns_by_key
from shiftwatch.operators.shape.operator import ShapeOperator
from shiftwatch.records import MAX_ABS, DeadLetter

__all__ = ["shape_columns", "columns_ready"]


def columns_ready(keyed: Any) -> bool:
    """Whether ``keyed`` (a :class:`~shiftwatch.operators.keyed.Keyed`) holds a
    :class:`ShapeOperator` :func:`shape_columns` can run: reading ``value``, one clone per
    key."""
    op = getattr(keyed, "operator", None)
    store = getattr(keyed, "_store", None)
    return (type(op) is ShapeOperator and op.field == "value"
            and type(store).__name__ == "_Clones" and not keyed._deferred
            and keyed.expiry is None)


def shape_columns(keyed: Any, keys: list, inv: np.ndarray, values: np.ndarray,
                  ts: np.ndarray | None, record: Callable[[int], dict]) -> tuple:
    """Run one batch through the shape detectors of ``keyed``, key by key.

    Parameters and result as :func:`shiftwatch.operators.confseq.columns.fleet_columns`;
    ``fields`` is ``{"statistic": floats, "threshold": floats (NaN for None)}``; the dead
    letters come key by key (keys in order of first appearance), as ``Keyed`` gives them.
    """
    n = values.shape[0]
    accepted = np.ones(n, dtype=bool)
    alarm = np.zeros(n, dtype=bool)
    stat = np.full(n, np.nan)
    thr = np.full(n, np.nan)
    special: dict[int, dict] = {}
    dead: list[DeadLetter] = []

    def segment(op: ShapeOperator, rows: np.ndarray, xs: np.ndarray) -> None:
        _run_segment(op, rows, xs, ts, record, alarm, stat, thr, special)

    columns_by_key(keyed, keys, inv, values, record, MAX_ABS,  # (NaN too: the record rule)
                   lambda op: op._detector._c in (None, 1), segment, accepted, alarm,
                   special, dead)
    return accepted, alarm, {"statistic": stat, "threshold": thr}, special, dead


def _run_segment(op: ShapeOperator, rows: np.ndarray, xs: np.ndarray, ts: np.ndarray | None,
                 record: Callable[[int], dict], alarm: np.ndarray, stat: np.ndarray,
                 thr: np.ndarray, special: dict[int, dict]) -> None:
    """Values ``xs`` of rows ``rows`` (one key, in order) through its operator
    (:meth:`ShapeOperator._step`, what ``_emit`` of their records runs)."""
    t = np.full(xs.shape[0], np.nan) if ts is None else ts[rows]
    a, change, st, th, extra, change_ts = op._step(xs[:, None], t)
    stat[rows] = st
    th = op._reported(th)
    thr[rows] = th  # (NaN: None)
    for h in np.flatnonzero(a).tolist():
        i = int(rows[h])
        alarm[i] = True
        h_thr = None if th[h] != th[h] else float(th[h])
        o = op._output(record(i), alarm=True, statistic=float(st[h]), threshold=h_thr)
        o["change_at"] = int(change[h])
        if np.isfinite(change_ts[h]):
            o["change_ts"] = float(change_ts[h])
        if extra[h]:
            o["changes_at"] = list(extra[h])
        special[i] = o
