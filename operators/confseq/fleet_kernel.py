"""Numba kernel of :mod:`shiftwatch.operators.confseq.fleet`: many keys' ``cs`` in one call.

:func:`fleet_hull_run` is :func:`~shiftwatch.operators.confseq.kernels.cs_hull_run`'s
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
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from shiftwatch._jit import njit
from shiftwatch.operators.confseq.detector import N_LAMBDAS
from shiftwatch.operators.confseq.kernels import (
    B_EFFECTIVE,
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
    long_run_burn_step,
)

__all__ = ["fleet_hull_run", "fleet_compact", "grown_cap", "take_burn_row", "return_burn_row",
           "move_block", "cap_class", "N_CLASSES", "C_WALK", "C_SUPR", "C_COUNT",
           "C_ROW", "X_OFF", "X_CAP", "X_SIZE", "X_BROW", "X_ROW", "F_ALARM", "F_LOWER",
           "F_UPPER", "F_AT", "F_TS", "F_ROWS"]

#: Rows of the fleet kernel's ``out``: alarm, lower, upper (data units), located position
#: (the key's 0-based record count; -1 without an alarm), the located start's ts.
F_ALARM, F_LOWER, F_UPPER, F_AT, F_TS = 0, 1, 2, 3, 4
F_ROWS = 5

#: Columns of a slot's float64 row: the detector's scalars (``S_*``, 0-13), the two walks, the
#: skip filter's two running maxima, the record count; then the filter's float32 minima
#: (``J + 1`` per side, in the float32 view from ``C_SUP32``).
C_WALK, C_SUPR, C_COUNT = 14, 16, 18
C_SUP32 = 2 * 19
C_ROW = 19 + N_LAMBDAS + 1  # float64 columns: 19, then 2 (J + 1) float32s
#: Columns of a slot's int32 row: hull block offsets, capacities and sizes (two sides), the
#: burn-in row (-1: none).
X_OFF, X_CAP, X_SIZE, X_BROW = 0, 2, 4, 6
X_ROW = 8


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


#: Hull block capacities are the sizes of :func:`grown_cap`'s sequence (4, 6, 8, 10, 12,
#: 15, ...): "classes". A block a hull grew out of goes on its class's free list (heads in
#: ``pmeta[2:]``), and the next hull growing into that class takes it: growth then leaves
#: garbage only where a class empties, and compactions are rarer.
N_CLASSES = 48


@njit(cache=True)
def cap_class(c):
    """The class of capacity ``c`` (its index in :func:`grown_cap`'s sequence from 4), or -1
    when ``c`` is not in it or beyond the ``N_CLASSES`` kept on free lists."""
    x = 4
    for i in range(N_CLASSES):
        if x == c:
            return i
        if x > c:
            return -1
        x = grown_cap(x)
    return -1


@njit(cache=True)
def take_burn_row(ix, k, bfree):
    """Lend slot ``k`` a burn-in row from the free stack (see :func:`fleet_hull_run`):
    its index, or -1 when none is free."""
    nf = bfree[0]
    if nf == 0:
        return -1
    b = bfree[nf]
    bfree[0] = nf - 1
    ix[k, X_BROW] = b
    return b


@njit(cache=True)
def return_burn_row(ix, k, bfree):
    """Put slot ``k``'s burn-in row back on the free stack."""
    nf = bfree[0] + 1
    bfree[nf] = ix[k, X_BROW]
    bfree[0] = nf
    ix[k, X_BROW] = -1


@njit(cache=True)
def move_block(ix, k, s, pool_x, pool_yt, to_x, to_yt, dest):
    """Copy the hull points of (slot ``k``, side ``s``) to ``to_x, to_yt`` from ``dest`` (the
    same pool or a new one) and point the block there (growth and compaction; rare)."""
    o = ix[k, X_OFF + s]
    for q in range(ix[k, X_SIZE + s]):
        to_x[dest + q] = pool_x[o + q]
        to_yt[dest + q, 0] = pool_yt[o + q, 0]
        to_yt[dest + q, 1] = pool_yt[o + q, 1]
    ix[k, X_OFF + s] = dest


@intrinsic
def _prefetch(typingctx, arr, flat):
    """Ask the processor to bring the cache line of ``arr``'s element ``flat`` (a flat index
    into a C-contiguous array) into cache, without waiting for it (LLVM's prefetch: never
    faults, even past the array's end)."""
    sig = types.void(arr, flat)

    def codegen(context, builder, signature, args):
        a = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=args[0])
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        # read, locality 3 (keep in all levels), data cache
        builder.call(fn, [builder.bitcast(builder.gep(a.data, [args[1]]), byte), i32(0), i32(3),
                          i32(1)])
        return context.get_dummy_value()

    return sig, codegen


#: How many values ahead the kernel prefetches a key's row; its hull blocks are prefetched
#: half as far ahead, from the block offsets that row prefetch brought in.
PREFETCH_AHEAD = 16
#: Prefetch only when the rows alone pass this many bytes (a core's L2 cache holds at least
#: about this much): with fewer keys their lines stay in cache and prefetching only costs.
PREFETCH_BYTES = 1 << 20


@njit(cache=True)
def fleet_hull_run(slots, xs, ts, start, grid, st, st32, ix, burn, bfree, pool_x, pool_yt, pmeta,
                   out, burn_cfg):
    """Run values ``xs[start:]`` through the detectors of ``slots``; return the count consumed.

    Slot ``k``'s state is row ``k`` of ``st`` (float64: the detector's scalars, the walks,
    the skip filter's running maxima, the record count; ``st32``, the same memory as float32,
    holds the filter's minima) and of ``ix`` (int32: its hull blocks and burn-in row), so a
    step touches a few adjacent cache lines per key (see the ``C_*`` and ``X_*`` columns).
    The skip filter (``J`` minima and the largest ``|y|`` per side, for the running max
    ``st[k, C_SUPR + s]``) is float32, rounded the safe way: a minimum down, the largest
    ``|y|`` up. Either can only make the filter's test pass more often (a step searched that
    could have been skipped), never skip a step that could move the running max: the outputs
    stay ``cs_hull_run``'s, bit for bit, at half the memory per key. The filter is also used
    lazily: after a step that moved a side's running max (``C_SUPR`` NaN) the next step of
    that side searches without it, and the filter is recomputed (O(``J`` h)) only once a step
    left the max where it was (``C_SUPR`` -inf); young keys move their max on most steps,
    where recomputing the filter costs more than the search it could save. Which steps are
    searched never changes an output: the queries walk every lambda the same way whatever
    the filter let through (see ``cs_hull_run``).

    A key in its burn-in keeps its values in row ``ix[k, X_BROW]`` of ``burn``; other keys
    have -1 there. Free rows are a stack: ``bfree[0]`` of them, in ``bfree[1:]``. A key takes
    a row when its burn-in starts and gives it back when it ends, so the rows in use are those
    of keys in burn-in (new keys, and keys restarting after an alarm). A row holds the values
    (``burn_cfg`` all zeros: the marginal scale) or the accumulators of
    :func:`~shiftwatch.operators.confseq.kernels.long_run_burn_step` (the long-run scale).

    The hull points of side ``s`` are ``pool_x`` (record indices since the restart: int32 or
    float64, the arithmetic is float64 either way, exactly) and ``pool_yt`` (walk value and
    ``ts``) at ``[off, off + size)``, within a block of ``cap`` points. A full block moves to
    the pool's unused tail (``pmeta[0]`` points used, ``pmeta[1]`` of them in live blocks),
    larger by :func:`grown_cap`, or to a free block of that size (``N_CLASSES``): the block it
    leaves goes on its size's free list (the next free block's offset in its first ``y``),
    and is garbage until another hull grows into it or the caller compacts.

    Returns ``i < len(xs)`` when value ``i`` needs a larger hull block and the pool's tail
    has no room, or a burn-in row when none is free (the caller makes room and calls again
    from ``i``; nothing of value ``i`` is consumed: a restart done before returning leaves a
    state the next call takes as it is). ``ts[i]`` is NaN for a value without ``ts``.
    """
    n_grid = grid.shape[1]
    n_xs = xs.shape[0]
    # With 100,000 keys nearly every step's lines are in memory, not cache: fetch the rows of
    # the keys a few values ahead, and the hull blocks of those half as far ahead, so that many
    # lines are on their way at once instead of one step's at a time.
    far = st.shape[0] * C_ROW * 8 > PREFETCH_BYTES
    i = start
    while i < n_xs:
        if far and i + PREFETCH_AHEAD < n_xs:
            kd = slots[i + PREFETCH_AHEAD] * C_ROW
            for c in range(0, C_ROW, 8):
                _prefetch(st, kd + c)
            _prefetch(st, kd + C_ROW - 1)
            _prefetch(ix, slots[i + PREFETCH_AHEAD] * X_ROW)
        if far and i + PREFETCH_AHEAD // 2 < n_xs:
            kp = slots[i + PREFETCH_AHEAD // 2]
            for s in range(2):
                o = ix[kp, X_OFF + s]
                e = o + ix[kp, X_SIZE + s]
                _prefetch(pool_x, o)
                _prefetch(pool_x, e)
                for q in range(o, e + 1, 4):
                    _prefetch(pool_yt, 2 * q)
        k = slots[i]
        x = xs[i]
        if st[k, S_ALARM] != 0.0:  # restart after an alarm
            st[k, S_ALARM] = 0.0
            st[k, S_N] = 0.0
            st[k, S_LOWER] = -np.inf
            st[k, S_UPPER] = np.inf
            st[k, S_SUM] = 0.0
            st[k, S_ARGLO] = 0.0
            st[k, S_ARGHI] = 0.0
            st[k, S_TSLO] = np.nan
            st[k, S_TSHI] = np.nan
            ix[k, X_SIZE] = 0
            ix[k, X_SIZE + 1] = 0
            st[k, C_WALK] = 0.0
            st[k, C_WALK + 1] = 0.0
            st[k, C_SUPR] = np.nan
            st[k, C_SUPR + 1] = np.nan
            if st[k, S_BURN] > 0:
                st[k, S_NBURN] = 0.0
        position = st[k, C_COUNT]
        if st[k, S_NBURN] < st[k, S_BURN]:
            b = ix[k, X_BROW]
            if b < 0:  # the burn-in starts: take a free row
                b = take_burn_row(ix, k, bfree)
                if b < 0:
                    return i
            if burn_cfg[B_EFFECTIVE] > 0.0:  # the detector's own step (views: burn-in only)
                long_run_burn_step(st[k], burn[b], x, burn_cfg)
                if st[k, S_NBURN] >= st[k, S_BURN]:
                    return_burn_row(ix, k, bfree)
                st[k, C_COUNT] = position + 1.0
                out[F_ALARM, i] = 0.0
                out[F_LOWER, i] = -np.inf
                out[F_UPPER, i] = np.inf
                out[F_AT, i] = -1.0
                out[F_TS, i] = np.nan
                i += 1
                continue
            nb = int(st[k, S_NBURN])
            burn[b, nb] = x
            nb += 1
            st[k, S_NBURN] = nb
            if nb == int(st[k, S_BURN]):  # _finish_burn_in, indexed in place
                mean = 0.0
                for q in range(nb):
                    mean += burn[b, q]
                mean /= nb
                ss = 0.0
                for q in range(nb):
                    ss += (burn[b, q] - mean) ** 2
                sd = math.sqrt(ss / (nb - 1))
                st[k, S_CENTER] = mean
                st[k, S_SCALE] = max(sd, 1e-12 * max(1.0, abs(mean)))
                return_burn_row(ix, k, bfree)
            st[k, C_COUNT] = position + 1.0
            out[F_ALARM, i] = 0.0
            out[F_LOWER, i] = -np.inf
            out[F_UPPER, i] = np.inf
            out[F_AT, i] = -1.0
            out[F_TS, i] = np.nan
            i += 1
            continue
        if ix[k, X_SIZE] >= ix[k, X_CAP] or ix[k, X_SIZE + 1] >= ix[k, X_CAP + 1]:
            for s in range(2):
                c = ix[k, X_CAP + s]
                if ix[k, X_SIZE + s] < c:
                    continue
                nc = grown_cap(c)
                ci = cap_class(nc)
                if ci >= 0 and pmeta[2 + ci] >= 0:  # a free block of that class
                    dest = pmeta[2 + ci]
                    pmeta[2 + ci] = int(pool_yt[dest, 0])
                else:  # the pool's tail
                    dest = pmeta[0]
                    if dest + nc > pool_x.shape[0]:
                        return i
                    pmeta[0] = dest + nc
                old = ix[k, X_OFF + s]
                move_block(ix, k, s, pool_x, pool_yt, pool_x, pool_yt, dest)
                ix[k, X_CAP + s] = nc
                pmeta[1] += nc - c
                co = cap_class(c) if c > 0 else -1
                if co >= 0:  # the block left behind goes on its free list
                    pool_yt[old, 0] = pmeta[2 + co]
                    pmeta[2 + co] = old
        tsv = ts[i]
        z = (x - st[k, S_CENTER]) / st[k, S_SCALE]
        n = st[k, S_N] + 1.0
        st[k, S_N] = n
        v = st[k, S_VAR]
        st[k, S_SUM] += z
        px = n - 1.0
        for s in range(2):
            sign = 1.0 - 2.0 * s
            best = -np.inf
            arg = 0.0
            argt = np.nan
            o = ix[k, X_OFF + s]
            h = ix[k, X_SIZE + s]
            q0 = C_SUP32 + s * (n_grid + 1)
            py = st[k, C_WALK + s]
            while h >= 2 and ((pool_x[o + h - 1] - pool_x[o + h - 2])
                              * (py - pool_yt[o + h - 2, 0])
                              - (pool_yt[o + h - 1, 0] - pool_yt[o + h - 2, 0])
                              * (px - pool_x[o + h - 2])) <= 0.0:
                h -= 1
            pool_x[o + h] = px
            pool_yt[o + h, 0] = py
            pool_yt[o + h, 1] = tsv
            h += 1
            ix[k, X_SIZE + s] = h
            wsum = py + sign * z
            st[k, C_WALK + s] = wsum
            r = st[k, S_LOWER] if s == 0 else -st[k, S_UPPER]
            hit = (1 << n_grid) - 1  # bit j: lambda_j's bound may exceed r
            fr = st[k, C_SUPR + s]  # the r the filter is for; NaN, -inf: see the docstring
            if r != -np.inf and (fr == r or fr == -np.inf):
                # The skip filter of cs_hull_run (see kernels._support_refresh), with
                # the slopes s_j = r + a_j v recomputed instead of stored.
                if fr != r:
                    ymax = 0.0
                    for q in range(h):
                        ymax = max(ymax, abs(pool_yt[o + q, 0]))
                    st32[k, q0 + n_grid] = _up32(ymax)
                    for j in range(n_grid):
                        sj = r + grid[1, j] * v
                        m = np.inf
                        for q in range(h):
                            c = pool_yt[o + q, 0] - sj * pool_x[o + q]
                            if c < m:
                                m = c
                        st32[k, q0 + j] = _down32(m)
                    st[k, C_SUPR + s] = r
                ymax = max(np.float64(st32[k, q0 + n_grid]), abs(py))
                st32[k, q0 + n_grid] = _up32(ymax)
                lim = -1e-9 * (abs(wsum) + grid[2, n_grid - 1] + ymax + 1.0
                               + (abs(r + grid[1, 0] * v) + abs(r + grid[1, n_grid - 1] * v)
                                  + abs(r)) * n)
                hit = 0
                for j in range(n_grid):
                    sj = r + grid[1, j] * v
                    m = min(np.float64(st32[k, q0 + j]), py - sj * px)
                    st32[k, q0 + j] = _down32(m)
                    if (wsum - grid[2, j] - sj * n - m) > lim:
                        hit |= 1 << j
            if hit:
                # cs_hull_run's tangent queries: one walk for all lambdas, a bound for each
                # lambda the filter let through.
                q = h - 1
                for j in range(n_grid):
                    qy = wsum - grid[2, j]
                    while q > 0 and not ((qy - pool_yt[o + q - 1, 0]) * (n - pool_x[o + q])
                                         < (qy - pool_yt[o + q, 0]) * (n - pool_x[o + q - 1])):
                        q -= 1
                    if (hit >> j) & 1:
                        b = (qy - pool_yt[o + q, 0]) / (n - pool_x[o + q]) - grid[1, j] * v
                        if b > best:
                            best = b
                            arg = pool_x[o + q]
                            argt = pool_yt[o + q, 1]
            # The filter's state: valid for r (C_SUPR = r); r moved at this step (NaN: the
            # next step searches without it, as r often moves again); stale but r stayed
            # (-inf: the next step recomputes it).
            if s == 0:
                if best > st[k, S_LOWER]:
                    st[k, S_LOWER] = best
                    st[k, S_ARGLO] = arg
                    st[k, S_TSLO] = argt
                    st[k, C_SUPR] = np.nan
                elif fr != fr:
                    st[k, C_SUPR] = -np.inf
            else:
                if -best < st[k, S_UPPER]:
                    st[k, S_UPPER] = -best
                    st[k, S_ARGHI] = arg
                    st[k, S_TSHI] = argt
                    st[k, C_SUPR + 1] = np.nan
                elif fr != fr:
                    st[k, C_SUPR + 1] = -np.inf
        lower = st[k, S_LOWER]
        upper = st[k, S_UPPER]
        out[F_LOWER, i] = st[k, S_CENTER] + st[k, S_SCALE] * lower
        out[F_UPPER, i] = st[k, S_CENTER] + st[k, S_SCALE] * upper
        st[k, C_COUNT] = position + 1.0
        if lower > upper:
            st[k, S_ALARM] = 1.0
            out[F_ALARM, i] = 1.0
            if st[k, S_ARGLO] >= st[k, S_ARGHI]:
                out[F_AT, i] = position - (n - 1.0 - st[k, S_ARGLO])
                out[F_TS, i] = st[k, S_TSLO]
            else:
                out[F_AT, i] = position - (n - 1.0 - st[k, S_ARGHI])
                out[F_TS, i] = st[k, S_TSHI]
        else:
            out[F_ALARM, i] = 0.0
            out[F_AT, i] = -1.0
            out[F_TS, i] = np.nan
        i += 1
    return i


@njit(cache=True)
def fleet_compact(n, ix, new_cap, pool_x, pool_yt, nx, nyt):
    """Copy the hull blocks of slots ``0..n-1`` to the front of the new pool ``nx, nyt``,
    block after block, with capacities ``new_cap`` (at least each block's size); return the
    points used."""
    used = 0
    for k in range(n):
        for s in range(2):
            c = new_cap[k, s]
            if c == 0:
                continue
            move_block(ix, k, s, pool_x, pool_yt, nx, nyt, used)
            ix[k, X_CAP + s] = c
            used += c
    return used
