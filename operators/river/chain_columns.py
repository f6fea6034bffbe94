"""``standardize -> river:NAME`` on columns: the replay's most common chain, key by key.

The replay's columnar path (:mod:`shiftwatch.deploy.columnar`) hands the chain the batch as
arrays. :func:`standardize_river_columns` standardises each key's values as the keyed
:class:`~shiftwatch.operators.transforms.Standardize` does, then runs the standardised
values through :func:`~shiftwatch.operators.river.columns.river_columns`, and gives what the
two ``Keyed.process_batch`` calls give for the same records, in columns.

A key's burn-in (its first ``burn_in`` values, which move its running mean and variance),
its first record, and a value the standardiser refuses go through the key's own operator
record by record (``Keyed``'s store: the same state, outputs and dead letters, by
construction). Once a key's scale is frozen its state no longer changes, and the rest of its
values are standardised at once: ``(x - mean) / max(sqrt(m2 / max(n - 1, 1)), min_std)``
with the divisor computed by the operator's own expression from its state, and the
subtraction and the division done element by element in float64 (the same IEEE operations
as the operator's, so the same bits; ``tests/deploy/test_columnar_chain.py`` compares the
files of both paths). The outputs of the burn-in carry ``burn_in: true`` into the River
detector, which keeps only the passthrough fields: its dead letters (whose ``raw`` is the
record it got) hold it, its outputs do not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shiftwatch.operators.river.columns import river_columns
from shiftwatch.operators.transforms import Standardize
from shiftwatch.records import DeadLetter

__all__ = ["standardize_ready", "standardize_river_columns"]


def standardize_ready(keyed: Any) -> bool:
    """Whether ``keyed`` (a :class:`~shiftwatch.operators.keyed.Keyed`) holds a
    :class:`Standardize` :func:`standardize_river_columns` can run: reading ``value``,
    emitting its burn-in, one clone per key."""
    op = getattr(keyed, "operator", None)
    store = getattr(keyed, "_store", None)
    return (type(op) is Standardize and op.field == "value" and op.emit_burn_in is True
            and type(store).__name__ == "_Clones" and not keyed._deferred
            and keyed.expiry is None)


def standardize_river_columns(std: Any, river: Any, keys: list, inv: np.ndarray,
                              values: np.ndarray, ts: np.ndarray | None,
                              record: Callable[[int], dict]) -> tuple:
    """Run one batch through the keyed ``std`` (Standardize), then the keyed ``river``.

    Parameters and result as :func:`~shiftwatch.operators.river.columns.river_columns`,
    except the dead letters: ``(stage, DeadLetter)`` pairs, stage 0 the standardiser's, 1
    the detector's (each stage's key by key, as ``Keyed`` gives them).
    """
    n = values.shape[0]
    z = np.empty(n)
    burn = np.zeros(n, dtype=bool)
    ok = np.ones(n, dtype=bool)
    dead: list[tuple[int, DeadLetter]] = []
    store = std._store
    ops = store._ops
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=len(keys))
    ends = np.cumsum(counts)
    def one(r: int) -> None:  # the record path for row r: Keyed's store, record by record
        o = store.process_batch([record(r)], std)[0]
        if isinstance(o, DeadLetter):
            ok[r] = False
            dead.append((0, o))
        else:
            z[r] = o["value"]
            burn[r] = o.get("burn_in") is True

    for u, key in enumerate(keys):
        rows = order[ends[u] - counts[u]:ends[u]]
        m = rows.shape[0]
        i = 0
        while i < m:
            op = ops.get(key)
            if (op is None or op._n < op.burn_in or op._shape != []
                    or type(op._mean) is not np.float64):
                one(int(rows[i]))  # a key's first record, its burn-in
                i += 1
                continue
            bad = np.flatnonzero(~(np.abs(values[rows[i:]]) <= op.max_abs))
            j = i + int(bad[0]) if bad.shape[0] else m
            if j == i:  # a value the operator refuses
                one(int(rows[i]))
                i += 1
                continue
            # frozen: the operator's own divisor, then the same float64 operations
            var = op._m2 / max(op._n - 1, 1)
            den = np.maximum(np.sqrt(var), op.min_std)
            seg = rows[i:j]
            z[seg] = (values[seg] - op._mean) / den
            i = j
    if ok.all():
        sub = None
        accepted, alarm, fields, special, dead1 = river_columns(
            river, keys, inv, z, ts, lambda r: _standardized(record, z, burn, r))
    else:
        sub = np.flatnonzero(ok)
        accepted, alarm = ok.copy(), np.zeros(n, dtype=bool)
        acc1, al1, f1, sp1, dead1 = river_columns(
            river, keys, inv[sub], z[sub], None if ts is None else ts[sub],
            lambda j: _standardized(record, z, burn, int(sub[j])))
        accepted[sub] = acc1
        alarm[sub] = al1
        fields = {}
        for name, col in f1.items():
            full = np.full(n, np.nan) if col.dtype.kind == "f" else np.zeros(n, col.dtype)
            full[sub] = col
            fields[name] = full
        special = {int(sub[j]): o for j, o in sp1.items()}
    dead.extend((1, d) for d in dead1)
    return accepted, alarm, fields, special, dead


def _standardized(record: Callable[[int], dict], z: np.ndarray, burn: np.ndarray,
                  r: int) -> dict:
    """Row ``r``'s record as the standardiser outputs it."""
    out = {**record(r), "value": float(z[r])}
    if burn[r]:
        out["burn_in"] = True
    return out
