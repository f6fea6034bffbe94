"""``[standardize | embed ->] window_covariance -> karcher`` on columns: a key's records of a
replay's batch through the chain at once.

The replay's columnar path (:mod:`shiftwatch.deploy.columnar`) hands the chain a batch as
arrays: a vector per row (a CSV whose ``value`` is a list of columns, a JSON Lines file
whose ``value`` is a list) for ``[standardize ->] window_covariance -> karcher``, or a
number per row for ``embed -> window_covariance -> karcher``. :func:`karcher_chain_columns`
runs each key's rows stage by stage, each stage over the key's outputs of the stage before,
and gives what the ``Keyed.process_batch`` calls of the record path give for the same
records, in columns:

* ``standardize``: a key's burn-in (which moves its running mean and variance) record by
  record; once its scale is frozen, ``(x - mean) / max(sqrt(m2 / max(n - 1, 1)), min_std)``
  by the operator's own expression over the key's rows (the same element-wise operations);
  the rows standardised in the burn-in carry ``burn_in: true`` into the records the next
  stages get (their dead letters' ``raw`` holds it);
* ``embed`` (an integer ``d``): each row's delay vector read from the key's ring of values
  and the row's own, the ring updated as :meth:`~shiftwatch.operators.embed.DelayEmbed._push`
  updates it;
* ``window_covariance``: the windows that end at the rows emitting a point (the window full,
  ``stride`` met), all computed by
  :func:`~shiftwatch.operators.riemannian.window_kernel.cov_windows`, which the operator uses
  a record at a time too (the same bits); the key's buffer and count updated as
  ``_Window.process`` leaves them;
* ``karcher``: the points checked against the SPD manifold together (the checks of
  :meth:`~shiftwatch.operators.riemannian.spd.SPD.validate`: finite entries within
  ``MAX_ABS``, symmetric, eigenvalues from the same LAPACK routine, one matrix at a time),
  the valid runs through
  :meth:`~shiftwatch.operators.riemannian.karcher.KarcherDetector.update_many` and the
  operator's own bookkeeping (count, locate window, ``change_at`` at alarms), as
  ``KarcherOperator.process_batch`` does.

A row no output comes from (a window not yet full, a stride skipped) has ``accepted``
False and no dead letter. What the arrays do not handle goes through the key's operator
record by record (``Keyed``'s store, as the record path takes it), and its output on to the
next stage in its place: a key's first record at each stage (which creates the key's
operator), a value beyond ``max_abs``, a point the manifold check refuses (for its dead
letter's reason). ``embed`` with ``d="auto"`` (whose burn-in emits the vectors of earlier
records later) takes the record path, and so does a chain of other operators or fields.

``tests/deploy/test_columnar_karcher.py`` compares every file the two paths write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shiftwatch.records import MAX_ABS, DeadLetter

__all__ = ["chain_ready", "karcher_chain_columns"]

_SPD_SPECS = ("spd", "spd-affine", "spd-log-euclidean", "spd-bures-wasserstein")


def _clones(keyed: Any) -> bool:
    store = getattr(keyed, "_store", None)
    return (type(store).__name__ == "_Clones" and not keyed._deferred
            and keyed.expiry is None)


def chain_ready(ops: list) -> bool:
    """Whether the keyed operators ``ops`` are a chain :func:`karcher_chain_columns` runs:
    ``window_covariance -> karcher``, ``standardize -> window_covariance -> karcher`` or
    ``embed -> window_covariance -> karcher`` (``embed`` with an integer ``d``), each reading
    ``value``, one clone per key, ``karcher`` on an SPD manifold named by its string."""
    from shiftwatch.operators.embed import DelayEmbed
    from shiftwatch.operators.riemannian.operator import KarcherOperator
    from shiftwatch.operators.riemannian.transforms import WindowCovariance
    from shiftwatch.operators.transforms import Standardize

    if len(ops) not in (2, 3) or not all(_clones(k) for k in ops):
        return False
    inner = [getattr(k, "operator", None) for k in ops]
    if len(ops) == 3:
        e = inner.pop(0)
        if not ((type(e) is DelayEmbed and e.d != "auto") or type(e) is Standardize) \
                or e.field != "value":
            return False
    w, k = inner
    return (type(w) is WindowCovariance and w.field == "value"
            and type(k) is KarcherOperator and k.field == "value"
            and isinstance(k.manifold, str) and k.manifold in _SPD_SPECS)


def karcher_chain_columns(ops: list, keys: list, inv: np.ndarray, values: np.ndarray,
                          ts: np.ndarray | None, record: Callable[[int], dict]) -> tuple:
    """Run one batch through the keyed chain ``ops`` (see :func:`chain_ready`), key by key.

    ``values`` holds a vector per row ((n, d) for ``window_covariance`` first) or a number
    ((n,) for ``embed`` first); ``record(row)`` is a row as the record path's record.
    Returns ``(accepted, alarm, fields, special, dead)``: ``accepted`` whether the row has
    an output (the last stage's), ``fields`` ``{"statistic", "threshold"}`` (NaN: None),
    ``special`` ``{row: output}`` for the outputs more than the columns (alarms with
    ``change_at``, outputs of the record path), ``dead`` ``(stage, DeadLetter)`` pairs.
    """
    n = values.shape[0]
    run = _Run(ops, record, ts, n)
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=len(keys))
    ends = np.cumsum(counts)
    for u, key in enumerate(keys):
        rows = order[ends[u] - counts[u]:ends[u]]
        data = values[rows]
        for stage in range(len(ops)):
            rows, data = run.stage(stage, key, rows, data)
            if rows.shape[0] == 0:
                break
    return (run.accepted, run.alarm, {"statistic": run.stat, "threshold": run.thr},
            run.special, run.dead)


class _Run:
    """One batch's results, and the stages' runs for a key."""

    def __init__(self, ops: list, record: Callable[[int], dict], ts: np.ndarray | None,
                 n: int):
        self.ops, self.record, self.ts = ops, record, ts
        self.last = len(ops) - 1
        self.accepted = np.zeros(n, dtype=bool)
        self.alarm = np.zeros(n, dtype=bool)
        self.stat = np.full(n, np.nan)
        self.thr = np.full(n, np.nan)
        self.special: dict[int, dict] = {}
        self.dead: list[tuple[int, DeadLetter]] = []
        self.burn = np.zeros(n, dtype=bool)  # standardised in the burn-in (``burn_in: true``)
        self.kinds = [type(k.operator).__name__ for k in ops]

    def stage(self, stage: int, key: Any, rows: np.ndarray, data: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """The key's ``rows`` (their values ``data``) through stage ``stage``: the rows that
        gave an output and their output values (for the last stage: written in the
        columns)."""
        keyed = self.ops[stage]
        ops = keyed._store._ops
        kind = self.kinds[stage]
        flat = data.reshape(data.shape[0], -1)
        ok = np.all(np.abs(flat) <= keyed.operator.max_abs, axis=1)  # (NaN: False)
        out_rows: list[np.ndarray] = []
        out_data: list[np.ndarray] = []
        i, m = 0, rows.shape[0]
        while i < m:
            op = ops.get(key)
            if op is None or not ok[i] or (kind == "Standardize" and op._n < op.burn_in):
                # the record path, for this row (a standardiser's burn-in moves its scale)
                got = self._one(stage, int(rows[i]), data[i])
                if got is not None:
                    out_rows.append(rows[i:i + 1])
                    out_data.append(got[None])
                i += 1
                continue
            j = i + 1 + int(np.argmin(ok[i + 1:])) if not ok[i + 1:].all() else m
            if kind == "DelayEmbed":
                got_rows, got_data = _embed(op, rows[i:j], data[i:j])
            elif kind == "Standardize":  # (its scale frozen: the operator's expression)
                var = op._m2 / max(op._n - 1, 1)
                got_rows = rows[i:j]
                got_data = (data[i:j] - op._mean) / np.maximum(np.sqrt(var), op.min_std)
            elif kind == "WindowCovariance":
                got_rows, got_data = _windows(op, rows[i:j], data[i:j])
            else:
                self._karcher(op, rows[i:j], data[i:j])
                got_rows, got_data = rows[:0], data[:0]
            out_rows.append(got_rows)
            out_data.append(got_data)
            i = j
        if stage == self.last or not out_rows:
            return rows[:0], data[:0]
        return np.concatenate(out_rows), np.concatenate(out_data)

    def _input(self, stage: int, row: int, value: np.ndarray) -> dict:
        """The record stage ``stage`` gets for ``row`` on the record path."""
        rec = self.record(row)
        if stage:
            rec["value"] = value.tolist()
            if self.burn[row]:
                rec["burn_in"] = True
        return rec

    def _one(self, stage: int, row: int, value: np.ndarray) -> np.ndarray | None:
        """Row ``row`` through stage ``stage`` by the record path (``Keyed``'s store): its
        output value for the next stage, or None (no output, or a dead letter)."""
        keyed = self.ops[stage]
        got = None
        for o in keyed._store.process_batch([self._input(stage, row, value)], keyed):
            if isinstance(o, DeadLetter):
                self.dead.append((stage, o))
            elif stage == self.last:
                self.accepted[row] = True
                self.alarm[row] = bool(o.get("alarm"))
                self.special[row] = o
            else:
                got = np.asarray(o["value"], dtype=np.float64)
                if o.get("burn_in") is True:
                    self.burn[row] = True
        return got

    def _karcher(self, op: Any, rows: np.ndarray, pts: np.ndarray) -> None:
        """Points of one key through its ``karcher`` operator: the valid runs as
        ``KarcherOperator.process_batch`` runs them, the others by the record path."""
        good = _spd_ok(pts)
        i, m = 0, rows.shape[0]
        while i < m:
            if not good[i]:
                self._one(self.last, int(rows[i]), pts[i])  # (its dead letter)
                i += 1
                continue
            j = i + 1 + int(np.argmin(good[i + 1:])) if not good[i + 1:].all() else m
            self._points(op, rows[i:j], pts[i:j])
            i = j

    def _points(self, op: Any, rows: np.ndarray, pts: np.ndarray) -> None:
        """Valid points through ``op`` (the loop of ``KarcherOperator.process_batch``'s
        ``flush``, in columns)."""
        from shiftwatch.operators.riemannian.karcher import OVERFLOW_REASON
        from shiftwatch.records import BadInput

        det = op._detector
        t = None if self.ts is None else self.ts[rows]
        i, m = 0, rows.shape[0]
        while i < m:
            g, alarms, hs = det.update_many(pts[i:], stop_at_alarm=True,
                                            stop_at_overflow=True)
            k = g.shape[0]
            op._accept_ts(pts[i:i + k], [None] * k if t is None else t[i:i + k])
            r = rows[i:i + k]
            self.accepted[r] = True
            self.stat[r] = g
            self.thr[r] = hs
            self.alarm[r] = alarms
            if k and alarms[-1]:
                row = int(r[-1])
                h = hs[-1]
                out = op._output(self.record(row), alarm=True, statistic=float(g[-1]),
                                 threshold=None if h != h else float(h))
                op._after_alarm(out)
                self.special[row] = out
            elif i + k < m:  # the next point would overflow the estimates
                row = int(rows[i + k])
                self.dead.append((self.last, op._dead_letter(
                    self._input(self.last, row, pts[i + k]), BadInput(OVERFLOW_REASON))))
                i += 1
            i += k


def _embed(op: Any, rows: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numbers of one key through its ``embed`` (``d`` fixed): the rows with a vector and
    their vectors; the ring and count left as ``DelayEmbed._push`` leaves them."""
    ring, c0, d, tau = op._ring, op._count, op._d, op._tau
    L = ring.shape[0]
    m = xs.shape[0]
    h = min(c0, L)  # the values the ring holds, oldest first: counts c0 - h .. c0 - 1
    hist = ring[(np.arange(c0 - h, c0)) % L] if h else np.zeros(0)
    seq = np.concatenate([hist, xs.astype(np.float64)])
    pos = h + np.arange(m)  # each row's index in seq
    emit = c0 + np.arange(m) + 1 >= L
    p = pos[emit]
    vecs = seq[p[:, None] - tau * np.arange(d)[None, :]]
    take = min(m, L)  # the ring's slots of the last values
    ring[(c0 + np.arange(m - take, m)) % L] = xs[m - take:]
    op._count = c0 + m
    return rows[emit], np.ascontiguousarray(vecs)


def _windows(op: Any, rows: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of one key through its ``window_covariance``: the rows that emit a point and
    their points; the buffer and count left as ``_Window.process`` leaves them."""
    from shiftwatch.operators.riemannian.window_kernel import cov_windows

    buf, seen, w = op._buffer, op._seen, op.window
    m = xs.shape[0]
    z = np.ascontiguousarray(np.concatenate([buf, xs]), dtype=np.float64)
    L0 = buf.shape[0]
    t = np.arange(m)
    full = np.minimum(w, L0 + t + 1) == w
    emit = full & ((seen + t + 1 - w) % op.stride == 0)
    ends = (L0 + t + 1)[emit].astype(np.int64)
    pts = cov_windows(z, ends, w, float(op.shrinkage), float(op.min_eig)) if ends.shape[0] \
        else np.zeros((0, z.shape[1], z.shape[1]))
    op._buffer = z[-w:].copy()
    op._seen = seen + m
    return rows[emit], pts


def _spd_ok(pts: np.ndarray) -> np.ndarray:
    """Which points :meth:`~shiftwatch.operators.riemannian.spd.SPD.validate` passes
    (False: it may refuse them; the caller asks it)."""
    from shiftwatch.operators.riemannian.spd import MAX_CONDITION, MAX_EIGENVALUE, MIN_EIGENVALUE

    k = pts.shape[0]
    if k == 0:
        return np.zeros(0, dtype=bool)
    flat = pts.reshape(k, -1)
    ok = np.all(np.abs(flat) <= MAX_ABS, axis=1)  # (finite too)
    ok &= np.all(pts == pts.transpose(0, 2, 1), axis=(1, 2))  # (as made: exactly symmetric)
    idx = np.flatnonzero(ok)
    if idx.shape[0]:
        lam = np.linalg.eigvalsh(pts[idx])
        lo, hi = lam[:, 0], lam[:, -1]
        ok[idx] = (lo > 0.0) & (MIN_EIGENVALUE <= lo) & (hi <= MAX_EIGENVALUE) \
            & (hi <= MAX_CONDITION * lo)
    return ok
