"""Numba kernels of :mod:`shiftwatch.operators.confseq`: the exact max/min over all start times.

Two families, each a plain ``@njit(cache=True)`` function that consumes a whole array of
observations and mutates state arrays owned by a
:class:`~shiftwatch.operators.confseq.ConfSeqDetector`.

* :func:`cs_hull_run` — confidence sequences whose bound, for each ``lambda_j`` of a fixed
  grid, is linear in partial sums (sub-Gaussian, Hoeffding, empirical Bernstein). The bound of
  the CS started at ``m`` is the slope from ``(n, W_n - d_j)`` to the point
  ``(m - 1, W_{m-1} + pen(m) / lambda_j)`` of a walk ``W``; the maximum over ``m`` is a
  maximum-slope (tangent) query on the lower convex hull of those points (FOCuS, Romano et
  al. 2023): amortised O(1) insertion, and a tangent query that walks from the previous
  step's answer (amortised O(1) in practice; ``h`` = hull size, O(log n) expected for a
  random walk). With a constant variance proxy and no ``pfa`` offsets the walks of all
  ``lambda_j`` differ by a linear drift, which leaves the hull unchanged, so one hull per side
  serves the whole grid; otherwise each ``lambda_j`` has its own. With ``prune = K`` it
  instead scans the last ``K`` starts, keeping each start's own running intersection.
* :func:`cs_betting_run` — hedged-capital (betting) CSs for the mean and the one-sided
  betting CSs of a quantile, on a grid of ``theta``. With bets shared across start times the
  maximum capital over start times obeys the CUSUM recursion
  ``W_n = max(W_{n-1}, s_n) (1 + lambda (X_n - theta))`` (``s_n = 1``, or ``1/n^2`` for the
  ``alpha_m = 6 alpha / (pi^2 m^2)`` variant), O(grid) per step, independent of ``n``.

Both return the number of observations consumed: less than ``len(xs)`` only when a hull
array is full, in which case the caller grows it and calls again from there.
:func:`cs_hull_step` and :func:`cs_betting_step` run them on one value with the state packed
into two buffers, which is what makes ``ConfSeqDetector.update`` cheap to call from Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, types
from numba.core import cgutils
from numba.extending import intrinsic

from shiftwatch._jit import njit

__all__ = ["cs_hull_run", "cs_betting_run", "cs_hull_step", "cs_betting_step", "hull_argmax_slope",
           "hull_walk_argmax", "hull_tangents_walk", "long_run_burn_step", "long_run_variance",
           "HULL_STATE", "BETTING_STATE", "M_FLAG", "M_PFA", "M_LAYOUT",
           "M_HULL_SIZE",
           "S_N", "S_LOWER", "S_UPPER", "S_SUM", "S_ALARM", "S_NBURN", "S_CENTER", "S_SCALE",
           "S_VAR", "S_BURN", "S_ARGLO", "S_ARGHI", "S_TSLO", "S_TSHI", "S_SEEN", "N_SCALARS",
           "OUT_ROWS",
           "B_EFFECTIVE", "B_BATCHES", "B_LEVELS", "B_FIRST", "N_BURN_CFG"]

# Layout of the scalar state vector shared by both kernels.
S_N = 0        # observations in the current run (after the burn-in)
S_LOWER = 1    # running max of lower bounds (hull) / index of the highest excluded theta (bet)
S_UPPER = 2    # running min of upper bounds (hull) / index of the lowest excluded theta (bet)
S_SUM = 3      # sum of the standardised observations (empirical-Bernstein mean estimate)
S_ALARM = 4    # 1.0 when the last observation raised an alarm (restart on the next one)
S_NBURN = 5    # values collected in the current burn-in
S_CENTER = 6   # location subtracted before the CS (fixed, or learned on the burn-in)
S_SCALE = 7    # scale divided by (fixed, or learned on the burn-in)
S_VAR = 8      # sub-Gaussian variance proxy of the standardised values (constant-v modes)
S_BURN = 9     # burn-in length (0: none)
S_ARGLO = 10   # hull CSs: run index of the start whose CS attains the max lower bound
S_ARGHI = 11   # hull CSs: run index of the start whose CS attains the min upper bound
S_TSLO = 12    # hull CSs: ts of the start S_ARGLO (NaN: none)
S_TSHI = 13    # hull CSs: ts of the start S_ARGHI
S_SEEN = 14    # values taken since the start (NaN: unknown, a state of an earlier release)
N_SCALARS = 15

# Single-value path (``update``): every array of a detector lives in one int64 allocation (the
# meta block, then a float64 buffer stored bit for bit), so that a call from Python passes two
# arguments instead of fifteen (each array argument costs ~0.1 us to type and unbox). ``meta``
# holds the flags, then for each array of ``*_STATE`` its offset in the float buffer and shape
# (padded with 1s to 3 axes), then the hull sizes. The float arrays, in order:
HULL_STATE = ("_grid", "_hull_x", "_hull_y", "_walk", "_scalars", "_burn", "_ring_y",
              "_ring_best", "_last", "_one", "_hint", "_hull_t", "_ring_t", "_support",
              "_burn_cfg")
BETTING_STATE = ("_theta", "_lam_plus", "_lam_minus", "_cap_plus", "_cap_minus", "_scalars",
                 "_burn", "_last", "_one", "_params")
M_FLAG = 0     # empirical Bernstein (hull) / quantile (betting)
M_PFA = 1      # alpha_m variant
M_LAYOUT = 2   # first of the (offset, d0, d1, d2) blocks
M_HULL_SIZE = M_LAYOUT + 4 * len(HULL_STATE)  # the (2, n_lambdas) hull sizes (hull CSs only)
#: Rows of the kernels' ``out``: alarm, lower, upper, located lag, located ts (cs_hull_run).
OUT_ROWS = 5


@njit(cache=True)
def hull_argmax_slope(hx, hy, h, qx, qy):
    """The index ``k`` of the max over hull points of ``(qy - hy[k]) / (qx - hx[k])``, by
    binary search (the leftmost one at a tie).

    The points form a lower convex hull with increasing x, all left of ``qx``, so the slope
    is unimodal along the hull.
    """
    lo = 0
    hi = h - 1
    while lo < hi:
        mid = (lo + hi) // 2
        # slope(mid) < slope(mid + 1), cross-multiplied (both run lengths are positive)
        if (qy - hy[mid]) * (qx - hx[mid + 1]) < (qy - hy[mid + 1]) * (qx - hx[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def hull_walk_argmax(hx, hy, h, qx, qy, k):
    """:func:`hull_argmax_slope` by walking from the hint ``k`` instead of a binary search.

    The slope is unimodal along the hull, so stepping towards the larger neighbour from any
    start reaches the leftmost maximum, which is what the binary search returns; from the
    previous step's answer that is usually zero or one step (amortised O(1)). The results can
    differ from the binary search's only where rounding breaks the unimodality, i.e. at a
    near-tie of two slopes.
    """
    if k > h - 1:
        k = h - 1
    while k < h - 1 and (qy - hy[k]) * (qx - hx[k + 1]) < (qy - hy[k + 1]) * (qx - hx[k]):
        k += 1
    while k > 0 and not ((qy - hy[k - 1]) * (qx - hx[k]) < (qy - hy[k]) * (qx - hx[k - 1])):
        k -= 1
    return k


@njit(cache=True)
def hull_tangents_walk(hx, hy, h, qx, qys, out):
    """:func:`hull_argmax_slope` for each of the queries ``(qx, qys[j])``, ``qys``
    decreasing, in one walk: ``out[j]`` the index for ``qys[j]``.

    For two hull points ``k < k'`` the slope to ``k'`` gains on the slope to ``k`` as ``qy``
    grows (it divides by the shorter run ``qx - hx[k']``), so the leftmost maximum moves
    left as ``qy`` decreases: each query walks down from the previous one's answer with the
    binary search's own comparison, O(``h`` + queries) in all instead of a search each. As
    with :func:`hull_walk_argmax`, the result can differ from the binary search's only at a
    near-tie of two slopes. The kernels' shared-hull queries (``d_j`` grows with ``j``, so
    ``qy_j = w - d_j`` decreases) are this walk written out in place.
    """
    k = h - 1
    for j in range(qys.shape[0]):
        qy = qys[j]
        while k > 0 and not ((qy - hy[k - 1]) * (qx - hx[k]) < (qy - hy[k]) * (qx - hx[k - 1])):
            k -= 1
        out[j] = k


def _pointer_intrinsic(as_float64: bool):
    """An intrinsic ``(buf, offset) -> pointer to buf[offset]`` (a 1-d array), typed as a
    pointer to the array's own dtype, or to float64 (the packed state's float part lives in
    the same int64 allocation as its int part). For views without reference counting."""

    @intrinsic
    def address(typingctx, buf, offset):
        sig = types.CPointer(types.float64 if as_float64 else buf.dtype)(buf, offset)

        def codegen(context, builder, signature, args):
            arr = cgutils.create_struct_proxy(signature.args[0])(context, builder,
                                                                  value=args[0])
            ptr = builder.gep(arr.data, [args[1]])
            return builder.bitcast(ptr, context.get_value_type(signature.return_type))

        return sig, codegen

    return address


_address = _pointer_intrinsic(False)
_address_f64 = _pointer_intrinsic(True)


# Views of the packed buffer: ``carray`` views carry no reference count, whereas slicing would
# cost two atomic updates per view and call (~25 ns each). ``buf`` outlives the call.
@njit(cache=True)
def _view1(buf, meta, k):
    b = M_LAYOUT + 4 * k
    return carray(_address(buf, meta[b]), (meta[b + 1],))


@njit(cache=True)
def _view2(buf, meta, k):
    b = M_LAYOUT + 4 * k
    return carray(_address(buf, meta[b]), (meta[b + 1], meta[b + 2]))


@njit(cache=True)
def _view3(buf, meta, k):
    b = M_LAYOUT + 4 * k
    return carray(_address(buf, meta[b]), (meta[b + 1], meta[b + 2], meta[b + 3]))


@njit(cache=True)
def _finish_burn_in(scal, burn, scale_from_burn):
    nb = int(scal[S_NBURN])
    mean = 0.0
    for k in range(nb):
        mean += burn[k]
    mean /= nb
    if scale_from_burn:
        ss = 0.0
        for k in range(nb):
            ss += (burn[k] - mean) ** 2
        sd = math.sqrt(ss / (nb - 1))
        scal[S_CENTER] = mean
        scal[S_SCALE] = max(sd, 1e-12 * max(1.0, abs(mean)))


#: Layout of ``burn_cfg`` (the long-run burn-in's configuration, not state; all zeros: the
#: burn-in of ``burn_in`` values with the marginal standard deviation).
B_EFFECTIVE = 0  # effective values the burn-in must hold (> 0: the long-run scale)
B_BATCHES = 1    # least number of batches at a batch size used in the estimate
B_LEVELS = 2     # batch sizes 2^1 .. 2^levels are tracked
B_FIRST = 3      # the first checkpoint (burn_in values)
N_BURN_CFG = 4


@njit(cache=True)
def long_run_variance(w, n, batches, levels):
    """``(marginal, long_run)`` variances from the burn-in accumulators ``w`` after ``n``
    values (see :func:`long_run_burn_step`).

    ``marginal`` is the sample variance (ddof 1); ``long_run`` the largest of it and
    ``b`` times the sample variance of the means of the ``n // b`` complete batches of
    ``b = 2, 4, 8, ...`` consecutive values, over the sizes with at least ``batches``
    batches: an estimate of ``max_k Var(S_k) / k``, the variance per value that partial
    sums of every length up to ``n / batches`` need (``sigma^2`` for independent values,
    the long-run variance ``sum_h gamma_h`` for positively correlated ones).
    """
    ni = int(n)
    marginal = w[4] / (n - 1.0)
    top = marginal
    for j in range(1, levels + 1):
        m = ni >> j
        if m < batches or m < 2:
            break
        v = (1 << j) * w[2 + 3 * j + 2] / (m - 1.0)
        if v > top:
            top = v
    return marginal, top


@njit(cache=True)
def long_run_burn_step(scal, w, x, cfg):
    """One value ``x`` of the long-run burn-in (``cfg[B_EFFECTIVE] > 0``); ends it when due.

    The accumulators ``w``: ``w[0]`` the burn-in's first value (subtracted from every value
    before summing, so that a large level does not cost digits), ``w[1]`` the next
    checkpoint, then for each batch size ``2^j`` (``j = 0 .. levels``) the sum of its
    current incomplete batch, and the running mean and sum of squared deviations
    (Welford) of its complete batches' means. A batch of ``2^j`` is the sum of two of
    ``2^(j-1)``, carried up when it completes: O(1) amortised per value and O(levels)
    memory, whatever the burn-in's length.

    At checkpoints (the ``burn_in``-th value, then 10% more values each time) the burn-in
    ends if it holds ``cfg[B_EFFECTIVE]`` effective values, ``n * marginal / long_run >=
    effective`` (:func:`long_run_variance`); at ``scal[S_BURN]`` values (``burn_in_max``) it
    ends anyway. At the end the location is the burn-in's mean and the scale the square
    root of the long-run variance, and ``scal[S_NBURN]`` jumps to ``scal[S_BURN]``.
    """
    n = scal[S_NBURN] + 1.0
    scal[S_NBURN] = n
    levels = int(cfg[B_LEVELS])
    if n == 1.0:  # a new burn-in: the accumulators may hold an earlier one's
        for q in range(w.shape[0]):
            w[q] = 0.0
        w[0] = x
        w[1] = cfg[B_FIRST]
    ni = int(n)
    s = x - w[0]
    for j in range(levels + 1):
        base = 2 + 3 * j
        if j > 0:
            w[base] += s
            if ni % (1 << j) != 0:
                break
            s = w[base]
            w[base] = 0.0
        mean = s / (1 << j)
        delta = mean - w[base + 1]
        w[base + 1] += delta / (ni >> j)
        w[base + 2] += delta * (mean - w[base + 1])
    last = n >= scal[S_BURN]
    if n >= w[1] or last:
        marginal, top = long_run_variance(w, n, cfg[B_BATCHES], levels)
        if last or n * marginal >= cfg[B_EFFECTIVE] * top:
            center = w[0] + w[3]
            scal[S_CENTER] = center
            scal[S_SCALE] = max(math.sqrt(top), 1e-12 * max(1.0, abs(center)))
            scal[S_NBURN] = scal[S_BURN]
        else:
            w[1] = n + max(1, ni // 10)


@njit(cache=True)
def _support_refresh(hull_x, hull_y, s, h, grid, v, r, sup):
    """Recompute the skip filter of the shared hull of side ``s`` for the running max ``r``.

    The filter (written out in :func:`cs_hull_run`) asks whether some ``lambda_j``'s bound may
    exceed ``r``. For the slope ``s_j = r + a_j v`` the CS started at hull point ``k`` beats
    ``r`` iff ``qy - d_j - hy_k - s_j (qx - hx_k) > 0``, i.e. iff ``qy - d_j - s_j qx >
    min_k (hy_k - s_j hx_k)``. ``sup[s, j]`` keeps that minimum over every point of the run
    (O(1) per new point while ``r`` stays), ``sup[s, J + j]`` the slope ``s_j``, ``sup[s, 2 J]``
    the largest ``|y|`` of those points and ``sup[s, 2 J + 1]`` the ``r`` they are for; when
    ``r`` moved they are recomputed here from the hull. The test keeps a margin of 1e-9
    relative to the largest magnitude in either computation (the test's, or the tangent
    query's), far above their rounding (~1e-15 relative), so it never skips a step where the
    tangent queries would raise the running max: it only saves them where they cannot.
    """
    n_grid = grid.shape[1]
    ymax = 0.0
    for k in range(h):
        ymax = max(ymax, abs(hull_y[s, 0, k]))
    sup[s, 2 * n_grid] = ymax
    for j in range(n_grid):
        sj = r + grid[1, j] * v
        m = np.inf
        for k in range(h):
            c = hull_y[s, 0, k] - sj * hull_x[s, 0, k]
            if c < m:
                m = c
        sup[s, j] = m
        sup[s, n_grid + j] = sj
    sup[s, 2 * n_grid + 1] = r


@njit(cache=True)
def cs_hull_run(xs, start, bernstein, pfa, grid, hull_x, hull_y, hull_size, walk, scal, burn,
                ring_y, ring_best, out, stop_at_alarm, hint, ts, hull_t, ring_t, support,
                burn_cfg):
    """Run the linear-boundary CS detector over ``xs[start:]``; return the count consumed.

    ``grid[0]`` holds ``lambda_j``, ``grid[1]`` the drift coefficient ``a_j`` (the walk of side
    ``s`` moves by ``sign_s z - a_j v``), ``grid[2]`` the query offset ``d_j = c_j / lambda_j``.
    ``v`` is ``scal[S_VAR]`` or, with ``bernstein``, ``(z - mu_hat)^2`` with the predictable
    ``mu_hat = (1/2 + sum z) / n``. Side 0 gives lower bounds, side 1 upper bounds (negated
    walk). ``ring_y.shape[2] > 1`` selects the pruned scan over the last ``ring_y.shape[2]``
    starts. ``out[0, i]`` is 1.0 at an alarm, ``out[1:3, i]`` the interval (data units).

    Locating: each side also remembers the start (its run index, 0-based after the burn-in)
    whose CS attains the running max lower / min upper bound (``scal[S_ARGLO]``,
    ``scal[S_ARGHI]``; in the pruned scan, the start attaining the max over the active ones)
    and that start's ``ts`` (``scal[S_TSLO]``, ``scal[S_TSHI]``: ``ts[i]`` of the value that
    started it, kept with each hull point in ``hull_t`` / ``ring_t``; NaN without ``ts``,
    which may be empty). At an alarm ``out[3, i]`` is the lag from the later of the two starts
    to the alarm (``0`` = the alarm value itself) and ``out[4, i]`` its ``ts``; -1 and NaN
    otherwise. With ``stop_at_alarm`` the run returns right after the first alarm (the caller
    may restart the detector before going on).

    With one hull per side (the shared case) a step first asks a filter whether any
    ``lambda_j`` can raise the running max (:func:`_support_refresh`); only then are the
    tangent queries run (one walk for all lambdas, :func:`hull_tangents_walk`), and a bound is
    computed only for the lambdas the filter let through. Under no change the
    running max moves on a few percent of the steps, so most steps cost O(``n_grid``)
    multiply-adds and no search; the outputs are the same as with the queries on every
    step. ``support`` (2, ``2 n_grid + 2``) is that filter's cache: not state (NaN in its
    last column = recompute).

    The burn-in (``scal[S_BURN] > 0``, the scale-free sub-Gaussian CS) learns the location
    and scale: from ``burn`` holding the first ``scal[S_BURN]`` values (marginal standard
    deviation) when ``burn_cfg`` is all zeros, else with :func:`long_run_burn_step` (``burn``
    its accumulators, ``burn_cfg`` its configuration, ``B_*``).

    ``hint[s, j]`` is where the tangent query of side ``s`` and ``lambda_j`` starts walking
    in the per-lambda hulls (:func:`hull_walk_argmax`); it holds the last answer and is not
    part of the state (any value gives the same result up to near-ties).
    """
    n_grid = grid.shape[1]
    cap = hull_x.shape[2]
    prune = ring_y.shape[2]
    pruned = prune > 1
    # With a constant v and no pfa offsets the walks of all lambda_j differ by a linear drift,
    # which does not change which points are on the hull: one hull per side serves all j.
    shared = (not bernstein) and (not pfa) and (not pruned)
    n_hulls = 1 if shared else n_grid
    n_burn = int(scal[S_BURN])
    has_ts = ts.shape[0] > 0
    i = start
    while i < xs.shape[0]:
        x = xs[i]
        scal[S_SEEN] += 1.0
        if scal[S_ALARM] != 0.0:  # restart after an alarm, as River detectors do
            scal[S_ALARM] = 0.0
            scal[S_N] = 0.0
            scal[S_LOWER] = -np.inf
            scal[S_UPPER] = np.inf
            scal[S_SUM] = 0.0
            scal[S_ARGLO] = 0.0
            scal[S_ARGHI] = 0.0
            scal[S_TSLO] = np.nan
            scal[S_TSHI] = np.nan
            hull_size[:, :] = 0
            walk[:, :] = 0.0
            support[:, 2 * n_grid + 1] = np.nan
            if n_burn > 0:
                scal[S_NBURN] = 0.0
        if scal[S_NBURN] < n_burn:
            if burn_cfg[B_EFFECTIVE] > 0.0:
                long_run_burn_step(scal, burn, x, burn_cfg)
            else:
                burn[int(scal[S_NBURN])] = x
                scal[S_NBURN] += 1.0
                if scal[S_NBURN] == n_burn:
                    _finish_burn_in(scal, burn, True)
            out[0, i] = 0.0
            out[1, i] = -np.inf
            out[2, i] = np.inf
            out[3, i] = -1.0
            out[4, i] = np.nan
            i += 1
            continue
        if not pruned:
            full = False
            for s in range(2):
                for j in range(n_hulls):
                    if hull_size[s, j] >= cap:
                        full = True
            if full:
                return i
        tsv = ts[i] if has_ts else np.nan
        z = (x - scal[S_CENTER]) / scal[S_SCALE]
        n = scal[S_N] + 1.0
        scal[S_N] = n
        pen = 2.0 * math.log(n) if pfa else 0.0
        if bernstein:
            mu = (0.5 + scal[S_SUM]) / n
            v = (z - mu) * (z - mu)
        else:
            v = scal[S_VAR]
        scal[S_SUM] += z
        px = n - 1.0
        slot = 0
        if pruned:
            slot = int(px) % prune
            ring_t[slot] = tsv
        for s in range(2):
            sign = 1.0 - 2.0 * s
            best = -np.inf
            arg = 0.0
            argt = np.nan
            if shared:
                # walk[s, 0] is the plain walk sum(sign z); the hull is of its points. Indexed
                # in place: a view (hull_x[s, 0]) costs reference counting on every step.
                h = hull_size[s, 0]
                py = walk[s, 0]
                while h >= 2 and ((hull_x[s, 0, h - 1] - hull_x[s, 0, h - 2])
                                  * (py - hull_y[s, 0, h - 2])
                                  - (hull_y[s, 0, h - 1] - hull_y[s, 0, h - 2])
                                  * (px - hull_x[s, 0, h - 2])) <= 0.0:
                    h -= 1
                hull_x[s, 0, h] = px
                hull_y[s, 0, h] = py
                hull_t[s, 0, h] = tsv
                h += 1
                hull_size[s, 0] = h
                wsum = py + sign * z
                walk[s, 0] = wsum
                r = scal[S_LOWER] if s == 0 else -scal[S_UPPER]
                hit = (1 << n_grid) - 1  # bit j: lambda_j's bound may exceed r
                if r != -np.inf:
                    # The skip filter (see _support_refresh; written out here: a call would
                    # reference-count its array arguments on every step).
                    if support[s, 2 * n_grid + 1] != r:
                        _support_refresh(hull_x, hull_y, s, h, grid, v, r, support)
                    ymax = max(support[s, 2 * n_grid], abs(py))
                    support[s, 2 * n_grid] = ymax
                    # s_j is monotone in j, so its largest magnitude is at an end of the grid.
                    lim = -1e-9 * (abs(wsum) + grid[2, n_grid - 1] + ymax + 1.0
                                   + (abs(support[s, n_grid]) + abs(support[s, 2 * n_grid - 1])
                                      + abs(r)) * n)
                    hit = 0
                    for j in range(n_grid):
                        sj = support[s, n_grid + j]
                        m = min(support[s, j], py - sj * px)
                        support[s, j] = m
                        if (wsum - grid[2, j] - sj * n - m) > lim:
                            hit |= 1 << j
                if hit:
                    # The tangent queries, all lambdas in one walk (hull_tangents_walk, indexed
                    # in place); the bounds of the lambdas the filter let through.
                    k = h - 1
                    for j in range(n_grid):
                        qy = wsum - grid[2, j]
                        while k > 0 and not ((qy - hull_y[s, 0, k - 1]) * (n - hull_x[s, 0, k])
                                             < (qy - hull_y[s, 0, k]) * (n - hull_x[s, 0, k - 1])):
                            k -= 1
                        if (hit >> j) & 1:
                            b = (qy - hull_y[s, 0, k]) / (n - hull_x[s, 0, k]) - grid[1, j] * v
                            if b > best:
                                best = b
                                arg = hull_x[s, 0, k]
                                argt = hull_t[s, 0, k]
            for j in range(n_grid if not shared else 0):
                lam = grid[0, j]
                py = walk[s, j] + pen / lam
                walk[s, j] += sign * z - grid[1, j] * v
                qy = walk[s, j] - grid[2, j]
                if pruned:
                    ring_y[s, j, slot] = py
                else:
                    h = hull_size[s, j]
                    hx = hull_x[s, j]
                    hy = hull_y[s, j]
                    ht = hull_t[s, j]
                    # Monotone chain: drop points that are not strictly convex from below.
                    while h >= 2 and ((hx[h - 1] - hx[h - 2]) * (py - hy[h - 2])
                                      - (hy[h - 1] - hy[h - 2]) * (px - hx[h - 2])) <= 0.0:
                        h -= 1
                    hx[h] = px
                    hy[h] = py
                    ht[h] = tsv
                    h += 1
                    hull_size[s, j] = h
                    k = hull_walk_argmax(hx, hy, h, n, qy, int(hint[s, j]))
                    hint[s, j] = k
                    b = (qy - hy[k]) / (n - hx[k])
                    if b > best:
                        best = b
                        arg = hx[k]
                        argt = ht[k]
            if pruned:
                ring_best[s, slot] = -np.inf
                active = int(min(n, prune))
                best = -np.inf
                for k in range(active):
                    p = n - 1.0 - k
                    sl = int(p) % prune
                    b_start = -np.inf
                    for j in range(n_grid):
                        b = (walk[s, j] - grid[2, j] - ring_y[s, j, sl]) / (n - p)
                        if b > b_start:
                            b_start = b
                    if b_start > ring_best[s, sl]:
                        ring_best[s, sl] = b_start
                    if ring_best[s, sl] > best:
                        best = ring_best[s, sl]
                        arg = p
                        argt = ring_t[sl]
                if s == 0:
                    scal[S_LOWER] = best
                    scal[S_ARGLO] = arg
                    scal[S_TSLO] = argt
                else:
                    scal[S_UPPER] = -best
                    scal[S_ARGHI] = arg
                    scal[S_TSHI] = argt
            else:
                if s == 0:
                    if best > scal[S_LOWER]:
                        scal[S_LOWER] = best
                        scal[S_ARGLO] = arg
                        scal[S_TSLO] = argt
                else:
                    if -best < scal[S_UPPER]:
                        scal[S_UPPER] = -best
                        scal[S_ARGHI] = arg
                        scal[S_TSHI] = argt
        lower = scal[S_LOWER]
        upper = scal[S_UPPER]
        out[1, i] = scal[S_CENTER] + scal[S_SCALE] * lower
        out[2, i] = scal[S_CENTER] + scal[S_SCALE] * upper
        if lower > upper:
            scal[S_ALARM] = 1.0
            out[0, i] = 1.0
            if scal[S_ARGLO] >= scal[S_ARGHI]:
                out[3, i] = n - 1.0 - scal[S_ARGLO]
                out[4, i] = scal[S_TSLO]
            else:
                out[3, i] = n - 1.0 - scal[S_ARGHI]
                out[4, i] = scal[S_TSHI]
            if stop_at_alarm:
                return i + 1
        else:
            out[0, i] = 0.0
            out[3, i] = -1.0
            out[4, i] = np.nan
        i += 1
    return i


@njit(cache=True)
def cs_betting_run(xs, start, quantile, p, pfa, theta, lam_plus, lam_minus, log_thr, cap_plus,
                   cap_minus, scal, burn, out, stop_at_alarm):
    """Run the betting CS detector over ``xs[start:]``; return the count consumed.

    Mean (``quantile=False``): ``z = (x - center) / scale`` in [0, 1]; side + bets
    ``1 + lambda (z - theta_g)`` (large capital excludes every mean <= theta_g), side - bets
    ``1 - lambda (z - theta_g)``. Quantile: thresholds ``theta_g`` come from the sorted burn-in
    values; side + bets ``1 + lambda (p - 1{x <= theta_g})`` against ``q_p <= theta_g``, side -
    bets ``1 + lambda (1{x < theta_g} - p)`` against ``q_p >= theta_g``. Both capitals are
    monotone in ``theta``, so the excluded set on each side is a half-line and the state keeps
    the index of its edge (``scal[S_LOWER]``, ``scal[S_UPPER]``). Capitals are compared with
    ``exp(log_thr)`` (union over the bets, hedged: ``2 n_bets / alpha``). ``out[3]`` is -1
    (these CSs do not locate the change); ``stop_at_alarm`` as in :func:`cs_hull_run`.
    """
    n_theta = theta.shape[0]
    n_bets = lam_plus.shape[0]
    thr = math.exp(log_thr)
    n_burn = int(scal[S_BURN])
    i = start
    while i < xs.shape[0]:
        x = xs[i]
        scal[S_SEEN] += 1.0
        if scal[S_ALARM] != 0.0:
            scal[S_ALARM] = 0.0
            scal[S_N] = 0.0
            scal[S_LOWER] = -1.0
            scal[S_UPPER] = n_theta
            cap_plus[:, :] = 0.0
            cap_minus[:, :] = 0.0
            if n_burn > 0:
                scal[S_NBURN] = 0.0
        if scal[S_NBURN] < n_burn:
            burn[int(scal[S_NBURN])] = x
            scal[S_NBURN] += 1.0
            if scal[S_NBURN] == n_burn:
                theta[:] = np.sort(burn)
            out[0, i] = 0.0
            out[1, i] = -np.inf
            out[2, i] = np.inf
            out[3, i] = -1.0
            out[4, i] = np.nan
            i += 1
            continue
        n = scal[S_N] + 1.0
        scal[S_N] = n
        floor = 1.0 / (n * n) if pfa else 1.0
        z = x if quantile else (x - scal[S_CENTER]) / scal[S_SCALE]
        lo = int(scal[S_LOWER])
        hi = int(scal[S_UPPER])
        # Loops over theta innermost (contiguous, branch-free: SIMD); the same operations on
        # each cell as the textbook recursion, so the capitals are bit-identical. The exclusion
        # edges move only when some capital crosses, which the count detects cheaply.
        crossed = 0
        for b in range(n_bets):
            lp = lam_plus[b]
            cp = cap_plus[b]
            if quantile:
                for g in range(lo + 1, n_theta):
                    w = max(cp[g], floor) * (1.0 + lp[g] * (p - (1.0 if z <= theta[g] else 0.0)))
                    cp[g] = w
                    crossed += w >= thr
            else:
                for g in range(lo + 1, n_theta):
                    w = max(cp[g], floor) * (1.0 + lp[g] * (z - theta[g]))
                    cp[g] = w
                    crossed += w >= thr
        new_lo = lo
        if crossed:
            for g in range(n_theta - 1, lo, -1):
                for b in range(n_bets):
                    if cap_plus[b, g] >= thr:
                        new_lo = g
                        break
                if new_lo != lo:
                    break
        crossed = 0
        for b in range(n_bets):
            lm = lam_minus[b]
            cm = cap_minus[b]
            if quantile:
                for g in range(hi):
                    w = max(cm[g], floor) * (1.0 + lm[g] * ((1.0 if z < theta[g] else 0.0) - p))
                    cm[g] = w
                    crossed += w >= thr
            else:
                for g in range(hi):
                    w = max(cm[g], floor) * (1.0 + lm[g] * (theta[g] - z))
                    cm[g] = w
                    crossed += w >= thr
        new_hi = hi
        if crossed:
            for g in range(hi):
                for b in range(n_bets):
                    if cap_minus[b, g] >= thr:
                        new_hi = g
                        break
                if new_hi != hi:
                    break
        scal[S_LOWER] = new_lo
        scal[S_UPPER] = new_hi
        if quantile:
            out[1, i] = theta[new_lo] if new_lo >= 0 else -np.inf
            out[2, i] = theta[new_hi] if new_hi < n_theta else np.inf
        else:
            out[1, i] = scal[S_CENTER] + scal[S_SCALE] * (theta[new_lo] if new_lo >= 0 else 0.0)
            out[2, i] = scal[S_CENTER] + scal[S_SCALE] * (
                theta[new_hi] if new_hi < n_theta else 1.0)
        out[3, i] = -1.0
        out[4, i] = np.nan
        if new_lo >= new_hi:
            scal[S_ALARM] = 1.0
            out[0, i] = 1.0
            if stop_at_alarm:
                return i + 1
        else:
            out[0, i] = 0.0
        i += 1
    return i


@njit(cache=True)
def _unpack(mem):
    """The packed state ``mem`` (int64): ``[n_meta, meta..., float buffer as int64 bits...]``,
    as the views ``(buf, meta)`` (no reference counting)."""
    n_meta = mem[0]
    meta = carray(_address(mem, 1), (n_meta,))
    buf = carray(_address_f64(mem, 1 + n_meta), (mem.shape[0] - 1 - n_meta,))
    return buf, meta


@njit(cache=True)
def cs_hull_step(x, mem):
    """:func:`cs_hull_run` on the single value ``x``, state packed as ``HULL_STATE`` in ``mem``
    (one array: each array argument costs ~0.1 us to unbox on the call from Python).

    Returns 1, or 0 when a hull array is full (the caller grows it, repacks and calls again).
    The interval goes to ``_last``.
    """
    buf, meta = _unpack(mem)
    one = _view1(buf, meta, 9)
    one[0] = x
    hull_size = carray(_address(meta, M_HULL_SIZE), (2, (meta.shape[0] - M_HULL_SIZE) // 2))
    return cs_hull_run(one, 0, meta[M_FLAG] != 0, meta[M_PFA] != 0, _view2(buf, meta, 0),
                       _view3(buf, meta, 1), _view3(buf, meta, 2), hull_size,
                       _view2(buf, meta, 3), _view1(buf, meta, 4), _view1(buf, meta, 5),
                       _view3(buf, meta, 6), _view2(buf, meta, 7),
                       _view1(buf, meta, 8).reshape((OUT_ROWS, 1)), False,
                       _view2(buf, meta, 10), carray(_address(buf, 0), (0,)),
                       _view3(buf, meta, 11), _view1(buf, meta, 12), _view2(buf, meta, 13),
                       _view1(buf, meta, 14))


@njit(cache=True)
def cs_betting_step(x, mem):
    """:func:`cs_betting_run` on the single value ``x``, state packed as ``BETTING_STATE``."""
    buf, meta = _unpack(mem)
    one = _view1(buf, meta, 8)
    one[0] = x
    params = _view1(buf, meta, 9)
    return cs_betting_run(one, 0, meta[M_FLAG] != 0, params[0], meta[M_PFA] != 0,
                          _view1(buf, meta, 0), _view2(buf, meta, 1), _view2(buf, meta, 2),
                          params[1], _view2(buf, meta, 3), _view2(buf, meta, 4),
                          _view1(buf, meta, 5), _view1(buf, meta, 6),
                          _view1(buf, meta, 7).reshape((OUT_ROWS, 1)), False)
