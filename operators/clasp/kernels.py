"""Numba kernels of the ``class`` detector (:class:`~shiftwatch.operators.clasp.ClassDetector`).

Written from the papers (ClaSP: Ermshaus, Schaefer & Leser, DMKD 2023; ClaSS: PVLDB 17(8),
2024) with the authors' ``claspy`` (0.2.8) as the oracle: the integer bookkeeping of its
streaming segmenter (which subsequences take part, when a profile is computed, how a change
point is numbered) is kept exactly, so that the same series give the same change points
(``tests/operators/test_clasp.py`` runs ``claspy`` beside this). What differs is storage and
arithmetic order, which is where the speed comes from:

* no array is rolled: the last ``N`` values (and the subsequences' means and standard
  deviations) live in *mirrored rings* (each value written at ``p % N`` and ``p % N + N``, so
  the window is always the contiguous slice ``[s, s + N)``), and the k-NN rows in a ring
  keyed by the subsequence's absolute number (its neighbours are absolute numbers too, so
  the per-step decrement of every stored offset disappears);
* one fused loop per step for the sliding dot products, the z-normalised distances (summed
  over channels: the multivariate k-NN), the k smallest (one pass instead of k) and the
  update of the older subsequences' neighbour lists; no temporaries;
* the first dot products are computed directly, not by FFT (claspy's ``_sliding_dot``), and
  without ``fastmath``: dot products can differ from claspy's in the last bits, which moves
  a change point only where two distances tie to ~1e-12. One such tie is built into claspy's
  bookkeeping, which is kept here. A subsequence up to ``excl + k`` places newer than a row
  can be its neighbour from the row's insertion. When that subsequence is itself the query,
  it is offered to the row again, and it enters a second time if the recomputed distance
  rounds below the stored one. ``benchmarks/results/clasp_speed.md`` traces one change point
  that moved 15 values this way.

Names follow claspy where the bookkeeping is the same (``lbound``, ``knn_filled``,
``last_cp``, ``knn_insert_idx``, ``min_seg_size``) so the two can be read side by side.
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit

# ---- integer state (``ist``) -----------------------------------------------------------
T_INGESTED = 0  # values ingested (claspy's ``ingested``; also the next value's position)
N_FILLED = 1  # claspy's knn ``n_filled`` (values, capped at the number of subsequences)
KNN_FILLED = 2  # subsequences with a k-NN row (capped at ``knn_insert_idx``)
LBOUND = 3  # oldest subsequence of the k-NN window + 1 (claspy's ``lbound`` after a step)
LAST_CP = 4  # the last change point, in window coordinates (claspy's ``last_cp``)
DOT_READY = 5  # 1 once the sliding dot products exist
N_IST = 6

# ---- parameters (``par``) ----------------------------------------------------------------
P_N = 0  # values in the sliding window (claspy's ``n_timepoints``)
P_W = 1  # subsequence width
P_K = 2  # neighbours
P_EXCL = 3  # k-NN exclusion radius, w // 2
P_MINSEG = 4  # smallest segment, excl_radius * w
P_JUMP = 5  # a profile every ``jump`` values
P_C = 6  # channels
P_SCORE = 7  # 0: macro F1, 1: balanced accuracy
P_TEST = 8  # 0: one-sided (the split's sides predicted as themselves), 1: two-sided (claspy)
N_PAR = 9


@njit(cache=True)
def _mod(a, n):
    r = a % n
    return r + n if r < 0 else r


# ---- SuSS (the subsequence width) --------------------------------------------------------

@njit(cache=True)
def suss_score(x, w, mean, std, span):
    """claspy's ``_suss_score``: the mean distance of the rolling (mean, std, max - min) of
    width ``w`` from the whole series', over the windows ending at ``w .. n-1`` (claspy
    skips the first full window), divided by ``sqrt(w)``. ``x`` is min-max normalised."""
    n = x.shape[0]
    if w >= n:
        return np.nan
    # running sums for the rolling mean / std (x is in [0, 1]: no cancellation to speak of)
    s = 0.0
    s2 = 0.0
    for i in range(w):
        s += x[i]
        s2 += x[i] * x[i]
    # monotone deques for the rolling min and max
    dq_min = np.empty(n, dtype=np.int64)
    dq_max = np.empty(n, dtype=np.int64)
    h1 = 0
    t1 = 0
    h2 = 0
    t2 = 0
    for i in range(w):
        while t1 > h1 and x[dq_min[t1 - 1]] >= x[i]:
            t1 -= 1
        dq_min[t1] = i
        t1 += 1
        while t2 > h2 and x[dq_max[t2 - 1]] <= x[i]:
            t2 -= 1
        dq_max[t2] = i
        t2 += 1
    total = 0.0
    count = 0
    for i in range(w, n):
        s += x[i] - x[i - w]
        s2 += x[i] * x[i] - x[i - w] * x[i - w]
        while t1 > h1 and x[dq_min[t1 - 1]] >= x[i]:
            t1 -= 1
        dq_min[t1] = i
        t1 += 1
        while dq_min[h1] <= i - w:
            h1 += 1
        while t2 > h2 and x[dq_max[t2 - 1]] <= x[i]:
            t2 -= 1
        dq_max[t2] = i
        t2 += 1
        while dq_max[h2] <= i - w:
            h2 += 1
        m = s / w
        v = s2 / w - m * m
        sd = math.sqrt(v) if v > 0.0 else 0.0
        rng = x[dq_max[h2]] - x[dq_min[h1]]
        a = m - mean
        b = sd - std
        c = rng - span
        total += math.sqrt(a * a + b * b + c * c) / math.sqrt(w)
        count += 1
    return total / count


@njit(cache=True)
def suss_width(values, lbound, threshold):
    """The SuSS subsequence width of ``values`` (claspy's ``suss``: an exponential then a
    binary search for the smallest width whose summary statistics score above
    ``threshold``, doubled). Returns -1 where claspy would warn and fall back (fewer than
    ``lbound`` values: the whole series; constant series or constant scores: ``lbound``),
    -2 where claspy's search never stops (no width below the length passes)."""
    n = values.shape[0]
    if n < lbound:
        return -1
    lo = values.min()
    hi = values.max()
    if lo == hi:
        return -1
    x = (values - lo) / (hi - lo)
    mean = x.mean()
    std = x.std()
    span = x.max() - x.min()
    max_score = suss_score(x, 1, mean, std, span)
    min_score = suss_score(x, n - 1, mean, std, span)
    if min_score == max_score:
        return -1
    e = 0
    while True:
        w = 2 ** e
        if w < lbound:
            e += 1
            continue
        if w >= n:
            return -2
        score = 1.0 - (suss_score(x, w, mean, std, span) - min_score) / (max_score - min_score)
        if score > threshold:
            break
        e += 1
    lo_w = max(lbound, 2 ** (e - 1))
    hi_w = 2 ** e + 1
    while lo_w <= hi_w:
        w = (lo_w + hi_w) // 2
        score = 1.0 - (suss_score(x, w, mean, std, span) - min_score) / (max_score - min_score)
        if score < threshold:
            lo_w = w + 1
        elif score > threshold:
            hi_w = w - 1
        else:
            break
    return 2 * lo_w


# ---- the ClaSP profile of one window -----------------------------------------------------

@njit(cache=True)
def _conf_update(conf, old_true, old_pred, new_true, new_pred):
    # claspy's _update_binary_conf_matrix (label 0's confusion counts)
    conf[0] -= (old_true == 0 and old_pred == 0) - (new_true == 0 and new_pred == 0)
    conf[1] -= (old_true == 1 and old_pred == 0) - (new_true == 1 and new_pred == 0)
    conf[2] -= (old_true == 0 and old_pred == 1) - (new_true == 0 and new_pred == 1)
    conf[3] -= (old_true == 1 and old_pred == 1) - (new_true == 1 and new_pred == 1)


@njit(cache=True)
def _score(conf, kind):
    total = 0.0
    for label in range(2):
        if label == 0:
            tp, fp, fn, tn = conf[0], conf[1], conf[2], conf[3]
        else:
            tp, fp, fn, tn = conf[3], conf[2], conf[1], conf[0]
        if kind == 0:  # macro F1
            if tp + fp == 0 or tp + fn == 0:
                return -np.inf
            pr = tp / (tp + fp)
            re = tp / (tp + fn)
            if pr + re == 0:
                return -np.inf
            total += 2 * (pr * re) / (pr + re)
        else:  # balanced accuracy as claspy computes it
            if tp + fp + fn + tn == 0:
                return -np.inf
            total += (tp + tn) / (tp + fp + fn + tn)
    return total / 2


@njit(cache=True)
def class_profile(offsets, w, min_seg, kind):
    """The classification score of every split of a window whose subsequences have the
    k-NN ``offsets`` (n, k) (window coordinates): the cross-validated k-NN classifier's
    score of "left of the split vs right", an exclusion zone of ``w`` after the split, each
    side at least ``min_seg`` (claspy's ``_profile``; O(n k) for all splits together by
    moving the split one subsequence at a time through the reverse neighbours)."""
    n, k = offsets.shape
    profile = np.full(n, -np.inf)
    # reverse neighbours
    counts = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for j in range(k):
            counts[offsets[i, j]] += 1
    starts = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        starts[i + 1] = starts[i] + counts[i]
    fill = np.zeros(n, dtype=np.int64)
    rnn = np.zeros(n * k, dtype=np.int64)
    for i in range(n):
        for j in range(k):
            nb = offsets[i, j]
            rnn[starts[nb] + fill[nb]] = i
            fill[nb] += 1
    # labels at the first split
    y_true = np.zeros(n, dtype=np.int64)
    y_true[min_seg:] = 1
    ones = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for j in range(k):
            ones[i] += y_true[offsets[i, j]]
    zeros = k - ones
    y_pred = (ones > zeros).astype(np.int64)
    conf = np.zeros(4, dtype=np.int64)
    es = min_seg
    ee = min_seg + w
    for i in range(n):
        if es <= i < ee:
            continue
        t = y_true[i]
        p = y_pred[i]
        if t == 0 and p == 0:
            conf[0] += 1
        elif t == 1 and p == 0:
            conf[1] += 1
        elif t == 0 and p == 1:
            conf[2] += 1
        else:
            conf[3] += 1
    for split in range(min_seg, n - min_seg):
        profile[split] = _score(conf, kind)
        # the split subsequence moves from the right (1) to the left (0)
        m = starts[split + 1] - starts[split]
        for r in range(m + 1):
            pos = rnn[starts[split] + r] if r < m else split
            if pos != split:
                zeros[pos] += 1
                ones[pos] -= 1
            label = 1 if zeros[pos] < ones[pos] else 0
            if not (ee > pos >= es):
                _conf_update(conf, y_true[pos], y_pred[pos], y_true[pos], label)
            y_pred[pos] = label
        y_true[split] = 0
        # the exclusion zone moves one to the right
        _conf_update(conf, y_true[ee], y_pred[ee], y_true[es], y_pred[es])
        es += 1
        ee += 1
    return profile


@njit(cache=True)
def significance_z(offsets, cp, w):
    """The rank-sum z of ClaSP's significance test at split ``cp``: the k-NN labels
    (majority of each subsequence's neighbours' sides, the ``w`` subsequences before the
    split labelled right) of the left part against the right part (claspy's
    ``significance_test``; its p-value is ``erfc(|z| / sqrt 2)``)."""
    n, k = offsets.shape
    if cp <= 0 or cp >= n:  # one side empty: claspy's test gives NaN (no change)
        return np.nan
    n0 = 0
    z1 = 0
    for i in range(n):
        ones = 0
        for j in range(k):
            if offsets[i, j] >= cp:
                ones += 1
        pred = 1 if ones > k - ones else 0
        if cp - w <= i < cp:
            pred = 1
        if pred == 0:
            n0 += 1
            if i < cp:
                z1 += 1
    zero_mean = (n0 - 1) / 2.0 + 1.0 if n0 > 0 else 0.0
    one_mean = (n0 + n - 1) / 2.0 + 1.0 if n0 < n else 0.0
    n1 = cp
    n2 = n - cp
    s = z1 * zero_mean + (n1 - z1) * one_mean
    expected = n1 * (n1 + n2 + 1) / 2.0
    return (s - expected) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12.0)


@njit(cache=True)
def split_passes(z, threshold, test):
    """Whether a split with rank-sum z (:func:`significance_z`) passes the test.

    ``test`` 1 is claspy's two-sided test, ``p = erfc(|z| / sqrt 2)``: it also passes a
    split whose left subsequences are predicted right and right ones left (z > 0), which
    says the two sides resemble each other more than themselves, not that they differ.
    ``test`` 0 is the one-sided test of the alternative the split claims (left predicted
    left: z < 0), ``p = erfc(-z / sqrt 2) / 2``. NaN (one side empty) never passes."""
    if test == 1:
        p = math.erfc(abs(z) / math.sqrt(2.0))
    else:
        p = 0.5 * math.erfc(-z / math.sqrt(2.0))
    return p <= threshold


# ---- the streaming step --------------------------------------------------------------------

@njit(cache=True)
def class_run(xs, par, ist, threshold, ts, tot, totsq, hist, histsq, means, stds, dot,
              dists, offs, out_alarm, out_cp):
    """Feed the values ``xs`` (T, C) through one key's streaming ClaSS state.

    ``out_alarm[i]`` is 1 where value ``i`` completed a profile whose best split passed
    the significance test (``p <= threshold``), and ``out_cp[i]`` is then the change point:
    the position (0-based, in the values fed since the state was created) of the first
    value of the new segment, numbered as claspy numbers it.

    State arrays (every one bounded by the window ``N``): ``ts`` (C, 2N) the mirrored ring
    of values; ``tot``/``totsq`` (C,) running sums and ``hist``/``histsq`` (C, w + 1) their
    last ``w + 1`` values (the newest subsequence's mean and std, as claspy computes them
    from cumulative sums); ``means``/``stds`` (C, 2 nw) mirrored rings of the subsequences'
    statistics; ``dot`` (C, nw) the sliding dot products with the query subsequence (window
    coordinates, as claspy's ``dot_rolled``); ``dists``/``offs`` (nw, k) the k-NN rows, in a
    ring keyed by the subsequence's absolute number, neighbours as absolute numbers.
    """
    N = par[P_N]
    w = par[P_W]
    k = par[P_K]
    excl = par[P_EXCL]
    min_seg = par[P_MINSEG]
    jump = par[P_JUMP]
    C = par[P_C]
    kind = par[P_SCORE]
    nw = N - w + 1
    insert = nw - excl - k - 1
    lag = w + excl + k
    dist = np.empty(nw)
    vals = np.empty(k)
    args = np.empty(k, dtype=np.int64)
    T = xs.shape[0]
    for i in range(T):
        out_alarm[i] = 0
        out_cp[i] = -1
        t = ist[T_INGESTED]  # this value's position
        ist[T_INGESTED] = t + 1
        ingested = t + 1
        # --- claspy StreamingKSubsequenceNeighbours.update(x, last_cp)
        lbound = insert - ist[KNN_FILLED] + 1 + ist[LAST_CP]
        n_filled = min(ist[N_FILLED] + 1, nw)
        ist[N_FILLED] = n_filled
        slot = t % N
        hs = t % (w + 1)
        hold = _mod(t - w, w + 1)
        a_new = t - w + 1  # the subsequence that ends with this value
        ms = _mod(a_new, nw)
        for c in range(C):
            v = xs[i, c]
            ts[c, slot] = v
            ts[c, slot + N] = v
            tot[c] += v
            totsq[c] += v * v
            hist[c, hs] = tot[c]
            histsq[c, hs] = totsq[c]
            if n_filled >= w:
                sm = tot[c] - hist[c, hold]
                sq = totsq[c] - histsq[c, hold]
                mu = sm / w
                var = sq / w - mu * mu
                if var < 0:
                    sd = 1.0
                else:
                    sd = math.sqrt(var)
                    if abs(sd) < 1e-3:
                        sd = 1.0
                means[c, ms] = mu
                means[c, ms + nw] = mu
                stds[c, ms] = sd
                stds[c, ms + nw] = sd
        if n_filled >= lag:
            base = t - N + 1  # absolute number of the window's first subsequence
            s0 = (t + 1) % N  # ring slot of the window's first value
            m0 = _mod(base, nw)  # ring slot of its first subsequence's statistics
            start = lbound - 1
            q = insert
            first = ist[DOT_READY] == 0
            for j in range(nw):
                dist[j] = 0.0
            for c in range(C):
                tsv = ts[c, s0:s0 + N]
                mv = means[c, m0:m0 + nw]
                sv = stds[c, m0:m0 + nw]
                dv = dot[c]
                if first:
                    for j in range(nw):
                        dv[j] = np.inf
                    for j in range(max(start, 0), nw):
                        acc = 0.0
                        for u in range(w):
                            acc += tsv[q + u] * tsv[j + u]
                        dv[j] = acc
                else:
                    head = tsv[q + w - 1]
                    for j in range(nw):
                        dv[j] = dv[j] + head * tsv[w - 1 + j]
                    if start >= 0:
                        acc = 0.0
                        for u in range(w):
                            acc += tsv[start + u] * tsv[q + u]
                        dv[start] = acc
                mq = mv[q]
                sq_ = sv[q]
                for j in range(max(start, 0), nw):
                    dist[j] += 2 * w * (1 - (dv[j] - w * mv[j] * mq) / (w * sv[j] * sq_))
            ist[DOT_READY] = 1
            for j in range(0, max(start, 0)):
                dist[j] = np.inf
            # claspy sets the exclusion zone to the largest distance (inf while the
            # window is not full or after a change point, NaN propagates)
            if start > 0:
                mx = np.inf
            else:
                mx = -np.inf
                for j in range(nw):
                    d = dist[j]
                    if d != d:
                        mx = d
                        break
                    if d > mx:
                        mx = d
            for j in range(max(0, q - excl), min(q + excl, nw)):
                dist[j] = mx
            # the k smallest from lbound on, ties to the lower index (claspy's _argkmin)
            for r in range(k):
                vals[r] = np.inf
                args[r] = -1
            for j in range(max(lbound, 0), nw):
                d = dist[j]
                if d < vals[k - 1]:
                    p = k - 1
                    while p > 0 and vals[p - 1] > d:
                        vals[p] = vals[p - 1]
                        args[p] = args[p - 1]
                        p -= 1
                    vals[p] = d
                    args[p] = j
            qa = base + q
            row = _mod(qa, nw)
            for r in range(k):
                dists[row, r] = vals[r]
                offs[row, r] = base + args[r] if args[r] >= 0 else -1
            # the query enters the neighbour lists of the older subsequences (claspy's
            # _roll_knns, which never inserts at the last of the k places)
            for j in range(max(lbound, 0), q):
                d = dist[j]
                rj = _mod(base + j, nw)
                for r in range(k - 1):
                    if d < dists[rj, r]:
                        for u in range(k - 1, r, -1):
                            dists[rj, u] = dists[rj, u - 1]
                            offs[rj, u] = offs[rj, u - 1]
                        dists[rj, r] = d
                        offs[rj, r] = qa
                        break
            ist[LBOUND] = max(0, lbound - 1)
            ist[KNN_FILLED] = min(ist[KNN_FILLED] + 1, insert)
            # the query moves on: drop its first value's products (claspy does this last)
            for c in range(C):
                tsv = ts[c, s0:s0 + N]
                dv = dot[c]
                tail = tsv[q]
                for j in range(nw):
                    dv[j] -= tail * tsv[j]
        # --- claspy StreamingClaSPSegmentation.update, after the k-NN update
        if ingested < min_seg * 2:
            continue
        if insert - ist[KNN_FILLED] == 0:
            ist[LAST_CP] = max(0, ist[LAST_CP] - 1)
        ps = ist[LBOUND]
        pe = insert
        L = pe - ps
        if L < 2 * min_seg or ingested % jump != 0:
            continue
        base = t - N + 1
        offsets = np.empty((L, k), dtype=np.int64)
        for r in range(L):
            rr = _mod(base + ps + r, nw)
            for u in range(k):
                o = offs[rr, u] - base - ps
                if o < 0:
                    o = 0
                elif o > L - 1:
                    o = L - 1
                offsets[r, u] = o
        profile = class_profile(offsets, w, min_seg, kind)
        cp = 0
        best = profile[0]
        for r in range(1, L):
            if profile[r] > best:
                best = profile[r]
                cp = r
        z = significance_z(offsets, cp, w)
        if not split_passes(z, threshold, par[P_TEST]):
            continue
        if cp < min_seg or L - cp < min_seg or L - min_seg - cp <= 0:
            continue
        ist[LAST_CP] += cp
        out_alarm[i] = 1
        out_cp[i] = ingested - lag - L + cp + w
