"""Numba kernel of :mod:`shiftwatch.operators.confseq_fleet`: many keys' ``cs`` in one call.

:func:`fleet_hull_run` is :func:`~shiftwatch.operators.confseq_kernels.cs_hull_run`'s
shared-hull path (sub-Gaussian or Hoeffding CS, no ``pfa``, no ``prune``) for a micro-batch
whose values belong to many keys: value ``i`` updates the state of slot ``slots[i]``. Every
key's state lives in rows of arrays (struct of arrays); the hull points live in one pool, each
(slot, side) owning a block ``[off, off + cap)`` of it. The arithmetic is
``cs_hull_run``'s, operation for operation, so each key's outputs are bit-identical to a
detector of its own (tested).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from shiftwatch.operators.confseq_kernels import (
    S_ALARM,
    S_ARGHI,
    S_ARGLO,
    S_BURN,
    S_CENTER,
    S_LOWER,
    S_N,
    S_NBURN,
    S_SCALE,
    S_SUM,
    S_TSHI,
    S_TSLO,
    S_UPPER,
    S_VAR,
)

__all__ = ["fleet_hull_run", "F_ALARM", "F_LOWER", "F_UPPER", "F_AT", "F_TS", "F_ROWS"]

#: Rows of the fleet kernel's ``out``: alarm, lower, upper (data units), located position
#: (the key's 0-based record count; -1 without an alarm), the located start's ts.
F_ALARM, F_LOWER, F_UPPER, F_AT, F_TS = 0, 1, 2, 3, 4
F_ROWS = 5


@njit(cache=True)
def fleet_hull_run(slots, xs, ts, start, grid, scal, burn, walk, sup, count, off, cap, size,
                   pool_x, pool_y, pool_t, out):
    """Run values ``xs[start:]`` through the detectors of ``slots``; return the count consumed.

    ``scal[k]``, ``burn[k]``, ``walk[k, s]``, ``sup[k, s, :]`` (the skip filter: ``J`` minima,
    the largest ``|y|``, the running max they are for), ``count[k]`` (records so far) and the
    hull block of side ``s`` (``off[k, s]``, ``cap[k, s]``, ``size[k, s]``) are slot ``k``'s
    state. Returns ``i < len(xs)`` when value ``i`` needs a hull block larger than its
    ``cap`` (the caller grows it and calls again from ``i``; nothing of value ``i`` is
    consumed). ``ts[i]`` is NaN for a value without ``ts``.
    """
    n_grid = grid.shape[1]
    i = start
    while i < xs.shape[0]:
        k = slots[i]
        x = xs[i]
        if scal[k, S_ALARM] != 0.0:  # restart after an alarm
            scal[k, S_ALARM] = 0.0
            scal[k, S_N] = 0.0
            scal[k, S_LOWER] = -np.inf
            scal[k, S_UPPER] = np.inf
            scal[k, S_SUM] = 0.0
            scal[k, S_ARGLO] = 0.0
            scal[k, S_ARGHI] = 0.0
            scal[k, S_TSLO] = np.nan
            scal[k, S_TSHI] = np.nan
            size[k, 0] = 0
            size[k, 1] = 0
            walk[k, 0] = 0.0
            walk[k, 1] = 0.0
            sup[k, 0, n_grid + 1] = np.nan
            sup[k, 1, n_grid + 1] = np.nan
            if scal[k, S_BURN] > 0:
                scal[k, S_NBURN] = 0.0
        position = count[k]
        if scal[k, S_NBURN] < scal[k, S_BURN]:
            nb = int(scal[k, S_NBURN])
            burn[k, nb] = x
            nb += 1
            scal[k, S_NBURN] = nb
            if nb == int(scal[k, S_BURN]):  # _finish_burn_in, indexed in place
                mean = 0.0
                for q in range(nb):
                    mean += burn[k, q]
                mean /= nb
                ss = 0.0
                for q in range(nb):
                    ss += (burn[k, q] - mean) ** 2
                sd = math.sqrt(ss / (nb - 1))
                scal[k, S_CENTER] = mean
                scal[k, S_SCALE] = max(sd, 1e-12 * max(1.0, abs(mean)))
            count[k] = position + 1
            out[F_ALARM, i] = 0.0
            out[F_LOWER, i] = -np.inf
            out[F_UPPER, i] = np.inf
            out[F_AT, i] = -1.0
            out[F_TS, i] = np.nan
            i += 1
            continue
        if size[k, 0] >= cap[k, 0] or size[k, 1] >= cap[k, 1]:
            return i
        tsv = ts[i]
        z = (x - scal[k, S_CENTER]) / scal[k, S_SCALE]
        n = scal[k, S_N] + 1.0
        scal[k, S_N] = n
        v = scal[k, S_VAR]
        scal[k, S_SUM] += z
        px = n - 1.0
        for s in range(2):
            sign = 1.0 - 2.0 * s
            best = -np.inf
            arg = 0.0
            argt = np.nan
            o = off[k, s]
            h = size[k, s]
            py = walk[k, s]
            while h >= 2 and ((pool_x[o + h - 1] - pool_x[o + h - 2]) * (py - pool_y[o + h - 2])
                              - (pool_y[o + h - 1] - pool_y[o + h - 2])
                              * (px - pool_x[o + h - 2])) <= 0.0:
                h -= 1
            pool_x[o + h] = px
            pool_y[o + h] = py
            pool_t[o + h] = tsv
            h += 1
            size[k, s] = h
            wsum = py + sign * z
            walk[k, s] = wsum
            r = scal[k, S_LOWER] if s == 0 else -scal[k, S_UPPER]
            hit = 1
            if r != -np.inf:
                # The skip filter of cs_hull_run (see confseq_kernels._support_refresh), with
                # the slopes s_j = r + a_j v recomputed instead of stored.
                if sup[k, s, n_grid + 1] != r:
                    ymax = 0.0
                    for q in range(h):
                        ymax = max(ymax, abs(pool_y[o + q]))
                    sup[k, s, n_grid] = ymax
                    for j in range(n_grid):
                        sj = r + grid[1, j] * v
                        m = np.inf
                        for q in range(h):
                            c = pool_y[o + q] - sj * pool_x[o + q]
                            if c < m:
                                m = c
                        sup[k, s, j] = m
                    sup[k, s, n_grid + 1] = r
                ymax = max(sup[k, s, n_grid], abs(py))
                sup[k, s, n_grid] = ymax
                lim = -1e-9 * (abs(wsum) + grid[2, n_grid - 1] + ymax + 1.0
                               + (abs(r + grid[1, 0] * v) + abs(r + grid[1, n_grid - 1] * v)
                                  + abs(r)) * n)
                hit = 0
                for j in range(n_grid):
                    sj = r + grid[1, j] * v
                    m = min(sup[k, s, j], py - sj * px)
                    sup[k, s, j] = m
                    hit += (wsum - grid[2, j] - sj * n - m) > lim
            if hit:
                for j in range(n_grid):
                    qy = wsum - grid[2, j]
                    lo = 0
                    hi = h - 1
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if (qy - pool_y[o + mid]) * (n - pool_x[o + mid + 1]) \
                                < (qy - pool_y[o + mid + 1]) * (n - pool_x[o + mid]):
                            lo = mid + 1
                        else:
                            hi = mid
                    b = (qy - pool_y[o + lo]) / (n - pool_x[o + lo]) - grid[1, j] * v
                    if b > best:
                        best = b
                        arg = pool_x[o + lo]
                        argt = pool_t[o + lo]
            if s == 0:
                if best > scal[k, S_LOWER]:
                    scal[k, S_LOWER] = best
                    scal[k, S_ARGLO] = arg
                    scal[k, S_TSLO] = argt
            else:
                if -best < scal[k, S_UPPER]:
                    scal[k, S_UPPER] = -best
                    scal[k, S_ARGHI] = arg
                    scal[k, S_TSHI] = argt
        lower = scal[k, S_LOWER]
        upper = scal[k, S_UPPER]
        out[F_LOWER, i] = scal[k, S_CENTER] + scal[k, S_SCALE] * lower
        out[F_UPPER, i] = scal[k, S_CENTER] + scal[k, S_SCALE] * upper
        count[k] = position + 1
        if lower > upper:
            scal[k, S_ALARM] = 1.0
            out[F_ALARM, i] = 1.0
            if scal[k, S_ARGLO] >= scal[k, S_ARGHI]:
                out[F_AT, i] = position - (n - 1.0 - scal[k, S_ARGLO])
                out[F_TS, i] = scal[k, S_TSLO]
            else:
                out[F_AT, i] = position - (n - 1.0 - scal[k, S_ARGHI])
                out[F_TS, i] = scal[k, S_TSHI]
        else:
            out[F_ALARM, i] = 0.0
            out[F_AT, i] = -1.0
            out[F_TS, i] = np.nan
        i += 1
    return i
