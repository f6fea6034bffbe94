"""``cs`` on columns: a replay's micro-batch of scalar values through the fleet in one call.

The replay's columnar path (:mod:`shiftwatch.deploy.columnar`) hands a keyed ``cs`` whose
keys live in a :class:`~shiftwatch.operators.confseq.fleet.ConfSeqFleet` the batch as arrays
(each row's key, value and ts) instead of records. :func:`fleet_columns` gives what
:meth:`ConfSeqFleet.process_batch` gives for the same records, in columns: the same kernel
call over the same values in the same order, the same new slots in the same order, the same
dead letters (a value the fleet's short path does not take goes through
:meth:`ConfSeqFleet._special`, the record rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from shiftwatch.operators.confseq.fleet import ConfSeqFleet
from shiftwatch.operators.confseq.fleet_kernel import F_ALARM, F_AT, F_LOWER, F_TS, F_UPPER
from shiftwatch.records import DeadLetter

__all__ = ["fleet_columns", "columns_ready"]


def columns_ready(keyed: Any) -> bool:
    """Whether ``keyed`` (a :class:`~shiftwatch.operators.keyed.Keyed`) keeps its keys in a
    fleet that :func:`fleet_columns` can run: records' ``value`` field, no vector keys."""
    store = getattr(keyed, "_store", None)
    return (type(store) is ConfSeqFleet and store._field == "value" and not store._objs
            and not keyed._deferred and keyed.expiry is None)


def fleet_columns(keyed: Any, keys: list, inv: np.ndarray, values: np.ndarray,
                  ts: np.ndarray | None, record: Callable[[int], dict]) -> tuple:
    """Run one micro-batch of scalar values through the fleet of ``keyed``.

    Parameters
    ----------
    keyed
        The :class:`~shiftwatch.operators.keyed.Keyed` (:func:`columns_ready`).
    keys, inv
        The batch's distinct keys (in order of first appearance) and each row's index
        into them.
    values, ts
        Each row's value, and ts (None: the records have no ts).
    record
        ``record(i)``: row ``i`` as the record the record path hands the operator.

    Returns
    -------
    tuple
        ``(accepted, alarm, fields, special, dead)``: boolean arrays of the rows that have an
        output and of those that alarmed; ``{"lower": ..., "upper": ...}`` float arrays (NaN
        for ``None``); ``{row: output}`` for the rows whose output is not only those columns
        (alarms, with ``change_at``); the dead letters, in input order.
    """
    fleet: ConfSeqFleet = keyed._store
    n = values.shape[0]
    ok = (values >= fleet._lo) & (values <= fleet._hi)
    slot_of = fleet._slot
    slots_u = np.array([slot_of.get(k, -1) for k in keys], dtype=np.int64)
    dead: list[DeadLetter] = []
    extra: dict[int, int] = {}  # a row the record rule accepted although ok said no: its slot
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            got = fleet._special(record(i), keyed)
            if type(got) is tuple:  # (not expected: the limits are the same) a value to run
                extra[i] = got[0]
                slots_u[inv[i]] = got[0]
            else:
                dead.append(got)
    if (slots_u < 0).any():  # new keys: a slot at their first accepted row, in row order
        first: dict[int, int] = {}
        for u in np.flatnonzero(slots_u < 0).tolist():
            rows = np.flatnonzero(ok & (inv == u))
            if rows.shape[0]:
                first[u] = int(rows[0])
        for u in sorted(first, key=first.__getitem__):
            slots_u[u] = fleet._new_slot(keys[u])
    if extra:
        ok = ok.copy()
        ok[list(extra)] = True
    rows = np.flatnonzero(ok) if not ok.all() else None
    sl = slots_u[inv] if rows is None else slots_u[inv[rows]]
    xs = values if rows is None else values[rows]
    if ts is None:
        tt = np.full(xs.shape[0], math.nan)
    else:
        tt = ts if rows is None else ts[rows]
    out = fleet._run(np.ascontiguousarray(sl), np.ascontiguousarray(xs, dtype=np.float64),
                     np.ascontiguousarray(tt, dtype=np.float64))
    alarm = np.zeros(n, dtype=bool)
    lower = np.full(n, math.nan)
    upper = np.full(n, math.nan)
    a = out[F_ALARM] != 0.0
    lo, up = out[F_LOWER], out[F_UPPER]
    lo = np.where(np.isfinite(lo), lo, math.nan)
    up = np.where(np.isfinite(up), up, math.nan)
    if rows is None:
        alarm[:], lower[:], upper[:] = a, lo, up
    else:
        alarm[rows], lower[rows], upper[rows] = a, lo, up
    special: dict[int, dict] = {}
    output = fleet.template._output
    for j in np.flatnonzero(a).tolist():
        i = j if rows is None else int(rows[j])
        lw, hi = float(out[F_LOWER, j]), float(out[F_UPPER, j])
        o = output(record(i), alarm=True, lower=lw if math.isfinite(lw) else None,
                   upper=hi if math.isfinite(hi) else None)
        if fleet._locate:
            o["change_at"] = int(out[F_AT, j])
            t = float(out[F_TS, j])
            if t == t:
                o["change_ts"] = t
        special[i] = o
    return ok, alarm, {"lower": lower, "upper": upper}, special, dead
