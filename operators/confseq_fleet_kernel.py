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

__all__ = ["fleet_hull_run", "fleet_compact", "grown_cap", "F_ALARM", "F_LOWER", "F_UPPER", "F_AT", "F_TS", "F_ROWS"]

#: Rows of the fleet kernel's ``out``: alarm, lower, upper (data units), located position
#: (the key's 0-based record count; -1 without an alarm), the located start's ts.
F_ALARM, F_LOWER, F_UPPER, F_AT, F_TS = 0, 1, 2, 3, 4
F_ROWS = 5


@njit(cache=True)
def _down32(m):
    """A float32 at or below ``m``: ``m`` lowered by 2**-22 of itself (four times float32's
    largest rounding error) and 1e-30 (for values float32 rounds to zero), then rounded.
    Arithmetic only, no branch: this runs 2J times a step. (``m`` is a sum of z-scores:
    far below float32's largest value.)"""
    return np.float32(min(m - abs(m) * 2.384185791015625e-07 - 1e-30, 3e38))


@njit(cache=True)
def _up32(m):
    """A float32 at or above ``m >= 0`` (as :func:`_down32`, upwards)."""
    return np.float32(m + m * 2.384185791015625e-07 + 1e-30)


@njit(cache=True)
def grown_cap(c):
    """A hull block's next capacity: a quarter more, at least 2 more (4 at first). Small
    steps: most hulls stay small, and a block's slack is memory every key pays."""
    return c + max(2, c // 4) if c else 4


@njit(cache=True)
def fleet_hull_run(slots, xs, ts, start, grid, scal, brow, burn, bfree, walk, sup, sup_r, count,
                   off, cap, size, pool_x, pool_y, pool_t, pmeta, out):
    """Run values ``xs[start:]`` through the detectors of ``slots``; return the count consumed.

    ``scal[k]``, ``walk[k, s]``, ``sup[k, s, :]`` and ``sup_r[k, s]`` (the skip filter: ``J``
    minima and the largest ``|y|``, and the running max they are for), ``count[k]`` (records
    so far) and the hull block of side ``s`` (``off[k, s]``, ``cap[k, s]``, ``size[k, s]``)
    are slot ``k``'s state.

    ``sup`` is float32, rounded the safe way: a minimum down, the largest ``|y|`` up. Either
    can only make the filter's test pass more often (a step searched that could have been
    skipped), never skip a step that could move the running max: the outputs stay
    ``cs_hull_run``'s, bit for bit, at half the memory per key.

    A key in its burn-in keeps its values in row ``brow[k]`` of ``burn``; other keys have
    ``brow[k] = -1``. Free rows are a stack: ``bfree[0]`` of them, in ``bfree[1:]``. A key
    takes a row when its burn-in starts and gives it back when it ends, so the rows in use
    are those of keys in burn-in (new keys, and keys restarting after an alarm).

    A full hull block moves to the pool's unused tail (``pmeta[0]`` points used, ``pmeta[1]``
    of them in live blocks), a quarter larger (:func:`grown_cap`); the block it leaves is
    garbage until the caller compacts the pool.

    Returns ``i < len(xs)`` when value ``i`` needs a larger hull block and the pool's tail
    has no room, or a burn-in row when none is free (the caller makes room and calls again
    from ``i``;
    nothing of value ``i`` is consumed: a restart done before returning leaves a state the
    next call takes as it is). ``ts[i]`` is NaN for a value without ``ts``. ``pool_x`` holds
    the points' record indices since the restart (integers; int32 or float64 -- the
    arithmetic is in float64 either way, exactly).
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
            sup_r[k, 0] = np.nan
            sup_r[k, 1] = np.nan
            if scal[k, S_BURN] > 0:
                scal[k, S_NBURN] = 0.0
        position = count[k]
        if scal[k, S_NBURN] < scal[k, S_BURN]:
            b = brow[k]
            if b < 0:  # the burn-in starts: take a free row
                nf = bfree[0]
                if nf == 0:
                    return i
                b = bfree[nf]
                bfree[0] = nf - 1
                brow[k] = b
            nb = int(scal[k, S_NBURN])
            burn[b, nb] = x
            nb += 1
            scal[k, S_NBURN] = nb
            if nb == int(scal[k, S_BURN]):  # _finish_burn_in, indexed in place
                mean = 0.0
                for q in range(nb):
                    mean += burn[b, q]
                mean /= nb
                ss = 0.0
                for q in range(nb):
                    ss += (burn[b, q] - mean) ** 2
                sd = math.sqrt(ss / (nb - 1))
                scal[k, S_CENTER] = mean
                scal[k, S_SCALE] = max(sd, 1e-12 * max(1.0, abs(mean)))
                brow[k] = -1  # the row goes back to the free stack
                nf = bfree[0] + 1
                bfree[nf] = b
                bfree[0] = nf
            count[k] = position + 1
            out[F_ALARM, i] = 0.0
            out[F_LOWER, i] = -np.inf
            out[F_UPPER, i] = np.inf
            out[F_AT, i] = -1.0
            out[F_TS, i] = np.nan
            i += 1
            continue
        if size[k, 0] >= cap[k, 0] or size[k, 1] >= cap[k, 1]:
            for s in range(2):
                c = cap[k, s]
                if size[k, s] < c:
                    continue
                nc = grown_cap(c)
                used = pmeta[0]
                if used + nc > pool_x.shape[0]:
                    return i
                o = off[k, s]
                for q in range(size[k, s]):
                    pool_x[used + q] = pool_x[o + q]
                    pool_y[used + q] = pool_y[o + q]
                    pool_t[used + q] = pool_t[o + q]
                off[k, s] = used
                cap[k, s] = nc
                pmeta[0] = used + nc
                pmeta[1] += nc - c
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
                if sup_r[k, s] != r:
                    ymax = 0.0
                    for q in range(h):
                        ymax = max(ymax, abs(pool_y[o + q]))
                    sup[k, s, n_grid] = _up32(ymax)
                    for j in range(n_grid):
                        sj = r + grid[1, j] * v
                        m = np.inf
                        for q in range(h):
                            c = pool_y[o + q] - sj * pool_x[o + q]
                            if c < m:
                                m = c
                        sup[k, s, j] = _down32(m)
                    sup_r[k, s] = r
                ymax = max(np.float64(sup[k, s, n_grid]), abs(py))
                sup[k, s, n_grid] = _up32(ymax)
                lim = -1e-9 * (abs(wsum) + grid[2, n_grid - 1] + ymax + 1.0
                               + (abs(r + grid[1, 0] * v) + abs(r + grid[1, n_grid - 1] * v)
                                  + abs(r)) * n)
                hit = 0
                for j in range(n_grid):
                    sj = r + grid[1, j] * v
                    m = min(np.float64(sup[k, s, j]), py - sj * px)
                    sup[k, s, j] = _down32(m)
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


@njit(cache=True)
def fleet_compact(n, off, cap, size, new_cap, pool_x, pool_y, pool_t, nx, ny, nt):
    """Copy the hull blocks of slots ``0..n-1`` to the front of the new pool ``nx, ny, nt``,
    block after block, with capacities ``new_cap`` (at least each block's size); return the
    points used."""
    used = 0
    for k in range(n):
        for s in range(2):
            c = new_cap[k, s]
            if c == 0:
                continue
            o = off[k, s]
            for q in range(size[k, s]):
                nx[used + q] = pool_x[o + q]
                ny[used + q] = pool_y[o + q]
                nt[used + q] = pool_t[o + q]
            off[k, s] = used
            cap[k, s] = c
            used += c
    return used
