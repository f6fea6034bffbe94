"""Numba kernels of the ``shape`` detector: per-sample embedding sums, per-block log-covariance
features, the self-normalised two-sample scan over blocks and the sample-level split.

Plain ``@njit(cache=True)`` functions over arrays held by the Python object (the project's
convention); all state lives in the arrays passed in, so a run split over several calls gives
the same result as one call.

Layout of the state (see
:meth:`~shiftwatch.operators.shape.detector.ShapeDetector._try_fix_period`):

* ``ring`` (R, c): the last R standardised input vectors, position p at row p % R;
* ``s1`` (G, g), ``s2`` (G, g, g): sums of the embedded vectors of the current block, per
  group (one group = all coordinates, or one group per channel);
* ``feats`` (max_blocks, q): the features of the blocks since the last change (oldest first);
* ``ist`` (int64): [pos, bcount, nf, fblock0, t0, cur_split, nblocks];
* ``fst`` (float64): [cur_z, last_z, cur_h, last_h]: the Z of the crossing awaiting
  confirmation and of the last scan, and the thresholds they were compared with.
"""

from __future__ import annotations

import math

import numpy as np

from shiftwatch._jit import njit

# indices into ist / fst
POS, BCOUNT, NF, FBLOCK0, T0, CUR_SPLIT, NBLOCKS, ASYM = range(8)
N_IST = 8
CUR_Z, LAST_Z, CUR_H, LAST_H = range(4)
N_FST = 4


@njit(cache=True)
def _shrunk_cov(s1, s2, cnt, shrink, out):
    """Centred covariance from sums, shrunk towards (tr / g) I, plus 1e-9 I (always SPD)."""
    g = s1.shape[0]
    tr = 0.0
    for i in range(g):
        mi = s1[i] / cnt
        for j in range(g):
            out[i, j] = (1.0 - shrink) * (s2[i, j] / cnt - mi * (s1[j] / cnt))
        tr += s2[i, i] / cnt - mi * mi
    add = shrink * tr / g + 1e-9
    for i in range(g):
        out[i, i] += add


@njit(cache=True)
def _log_vech(a, out, start):
    """vech(log A) with off-diagonal entries times sqrt(2) (so that the Euclidean norm of the
    feature is the Frobenius norm of log A: the log-Euclidean metric), written at out[start:]."""
    w, q = np.linalg.eigh(a)
    n = a.shape[0]
    lw = np.empty(n)
    for i in range(n):
        lw[i] = math.log(max(w[i], 1e-300))
    k = start
    r2 = math.sqrt(2.0)
    for i in range(n):
        for j in range(i, n):
            s = 0.0
            for m in range(n):
                s += q[i, m] * lw[m] * q[j, m]
            out[k] = s if i == j else r2 * s
            k += 1
    return k


@njit(cache=True)
def block_feature(s1, s2, cnt, shrink, gauss, out):
    """The feature of one block: per group vech(log C) (``gauss=0``) or vech(log A) with
    A = [[C + mu mu^T, mu], [mu^T, 1]], the SPD embedding of the Gaussian (mean and
    covariance; ``gauss=1``)."""
    G, g = s1.shape
    k = 0
    c = np.empty((g, g))
    a = np.empty((g + 1, g + 1))
    for grp in range(G):
        _shrunk_cov(s1[grp], s2[grp], cnt, shrink, c)
        if gauss == 0:
            k = _log_vech(c, out, k)
        else:
            for i in range(g):
                mi = s1[grp, i] / cnt
                for j in range(g):
                    a[i, j] = c[i, j] + mi * (s1[grp, j] / cnt)
                a[i, g] = mi
                a[g, i] = mi
            a[g, g] = 1.0
            k = _log_vech(a, out, k)


@njit(cache=True)
def zscan(feats, nf, m, min_spread=0.01, dep=0):
    """Best split of the first ``nf`` feature rows, each side >= m rows.

    Z(k) = k (N - k) / N * ||mean_left - mean_right||^2 / V, V the pooled within-side
    scatter / (N - 2): the log-Euclidean distance between the two sides' Frechet means,
    self-normalised by the block-to-block Frechet variance (about 1 per split without a
    change, whatever the scale, units or dimension). V is floored at q * min_spread^2: block
    to block fluctuations below ``min_spread`` (log units, i.e. a relative change of about
    1% of a covariance entry) count as that much, so that a noiseless periodic stream (V ~ 0)
    does not turn rounding errors into alarms. ``dep=1``: Z at the best split is divided by
    ``(1 + rho) / (1 - rho)``, ``rho`` the within-side lag-1 autocorrelation of the rows
    (:func:`lag1_within`), clipped to [0, 0.9]: the variance of a side's mean of dependent
    blocks. Returns (k, Z)."""
    q = feats.shape[1]
    N = nf
    tot = np.zeros(q)
    sq = 0.0
    for i in range(N):
        for j in range(q):
            v = feats[i, j]
            tot[j] += v
            sq += v * v
    left = np.zeros(q)
    floor = q * min_spread * min_spread
    best = -1.0
    bk = -1
    for k in range(1, N - m + 1):
        for j in range(q):
            left[j] += feats[k - 1, j]
        if k < m:
            continue
        nl = float(k)
        nr = float(N - k)
        dist2 = 0.0
        ml2 = 0.0
        mr2 = 0.0
        for j in range(q):
            ml = left[j] / nl
            mr = (tot[j] - left[j]) / nr
            dist2 += (ml - mr) * (ml - mr)
            ml2 += ml * ml
            mr2 += mr * mr
        within = (sq - nl * ml2 - nr * mr2) / (N - 2)
        if within < floor:
            within = floor
        z = nl * nr / N * dist2 / within
        if z > best:
            best = z
            bk = k
    if dep and bk > 0:
        rho = lag1_within(feats, N, bk)
        if rho > 0.9:
            rho = 0.9
        if rho > 0.0:
            best = best * (1.0 - rho) / (1.0 + rho)
    return bk, best


@njit(cache=True)
def _skew_feature(a23, d, cnt, out):
    """The block's skewness of lag increments per channel and lag into ``out``; the sums
    reset. A lag without spread gives 0."""
    col = 0
    for ch in range(a23.shape[1]):
        for j in range(1, d):
            m2 = a23[0, ch, j] / cnt
            m3 = a23[1, ch, j] / cnt
            out[col] = m3 / m2 ** 1.5 if m2 > 1e-300 else 0.0
            col += 1
            a23[0, ch, j] = 0.0
            a23[1, ch, j] = 0.0


@njit(cache=True)
def lag1_within(feats, N, k):
    """Lag-1 autocorrelation of the first ``N`` rows split at ``k``: deviations from each
    side's own mean, products of consecutive rows on the same side, pooled over coordinates
    and sides, over the sum of squared deviations (0 when there is no spread)."""
    q = feats.shape[1]
    ml = np.zeros(q)
    mr = np.zeros(q)
    for i in range(N):
        for j in range(q):
            if i < k:
                ml[j] += feats[i, j]
            else:
                mr[j] += feats[i, j]
    for j in range(q):
        ml[j] /= k
        mr[j] /= N - k
    num = 0.0
    den = 0.0
    for i in range(N):
        same = i + 1 < N and (i + 1 < k) == (i < k)
        for j in range(q):
            mu = ml[j] if i < k else mr[j]
            a = feats[i, j] - mu
            den += a * a
            if same:
                num += a * (feats[i + 1, j] - mu)
    return num / den if den > 0.0 else 0.0


@njit(cache=True)
def _embedded(ring, R, p, d, tau, joint, grp, out):
    """The embedded vector at position p for group ``grp`` into ``out``."""
    c = ring.shape[1]
    if joint:
        k = 0
        for ch in range(c):
            for j in range(d):
                out[k] = ring[(p - j * tau) % R, ch]
                k += 1
    else:
        for j in range(d):
            out[j] = ring[(p - j * tau) % R, grp]


@njit(cache=True)
def _logdet_chol(a):
    n = a.shape[0]
    s = 0.0
    low = np.zeros((n, n))
    for j in range(n):
        v = a[j, j]
        for k in range(j):
            v -= low[j, k] * low[j, k]
        if v < 1e-300:
            v = 1e-300
        ljj = math.sqrt(v)
        low[j, j] = ljj
        s += 2.0 * math.log(ljj)
        for i in range(j + 1, n):
            v = a[i, j]
            for k in range(j):
                v -= low[i, k] * low[j, k]
            low[i, j] = v / ljj
    return s


@njit(cache=True)
def refine_split(ring, R, lo, hi, d, tau, joint, G, g, shrink, m):
    """The split of positions [lo, hi) with the largest Gaussian likelihood ratio of the
    embedded vectors (own mean and covariance per side, groups independent): the
    sample-resolution location. Each side >= max(g + 1, (hi - lo) // 4). -1 if too short."""
    n = hi - lo
    m = max(g + 1, m)
    if n < 2 * m:
        return -1
    c1 = np.zeros((n + 1, G, g))
    c2 = np.zeros((n + 1, G, g, g))
    e = np.empty(g)
    for u in range(n):
        for grp in range(G):
            _embedded(ring, R, lo + u, d, tau, joint, grp, e)
            for i in range(g):
                c1[u + 1, grp, i] = c1[u, grp, i] + e[i]
                for j in range(g):
                    c2[u + 1, grp, i, j] = c2[u, grp, i, j] + e[i] * e[j]
    cov = np.empty((g, g))
    ld_all = 0.0
    for grp in range(G):
        _shrunk_cov(c1[n, grp], c2[n, grp], float(n), shrink, cov)
        ld_all += _logdet_chol(cov)
    best = -1e300
    bk = -1
    for k in range(m, n - m + 1):
        ll = 0.0
        lr = 0.0
        for grp in range(G):
            _shrunk_cov(c1[k, grp], c2[k, grp], float(k), shrink, cov)
            ll += _logdet_chol(cov)
            _shrunk_cov(c1[n, grp] - c1[k, grp], c2[n, grp] - c2[k, grp], float(n - k),
                        shrink, cov)
            lr += _logdet_chol(cov)
        v = n * ld_all - k * ll - (n - k) * lr
        if v > best:
            best = v
            bk = k
    return lo + bk


@njit(cache=True)
def refine_skew(ring, R, lo, hi, d, tau, m):
    """The split of positions [lo, hi) where the skewness of the lag increments (per channel
    and lag ``j tau``, ``j = 1 .. d-1``) differs most between the two sides:
    ``nL nR / n * sum (skew_L - skew_R)^2``; each side >= max(2, m). -1 if too short."""
    n = hi - lo
    m = max(2, m)
    if n < 2 * m:
        return -1
    c = ring.shape[1]
    L = d - 1
    c2 = np.zeros((n + 1, c, L))
    c3 = np.zeros((n + 1, c, L))
    for u in range(n):
        p = lo + u
        for ch in range(c):
            for j in range(1, d):
                inc = ring[p % R, ch] - ring[(p - j * tau) % R, ch]
                c2[u + 1, ch, j - 1] = c2[u, ch, j - 1] + inc * inc
                c3[u + 1, ch, j - 1] = c3[u, ch, j - 1] + inc * inc * inc
    best = -1.0
    bk = -1
    for k in range(m, n - m + 1):
        nl = float(k)
        nr = float(n - k)
        v = 0.0
        for ch in range(c):
            for j in range(L):
                l2 = c2[k, ch, j] / nl
                r2 = (c2[n, ch, j] - c2[k, ch, j]) / nr
                sl = (c3[k, ch, j] / nl) / l2 ** 1.5 if l2 > 1e-300 else 0.0
                sr = ((c3[n, ch, j] - c3[k, ch, j]) / nr) / r2 ** 1.5 if r2 > 1e-300 else 0.0
                v += (sl - sr) * (sl - sr)
        v *= nl * nr / n
        if v > best:
            best = v
            bk = k
    return lo + bk


@njit(cache=True)
def shape_run(xs, ring, s1, s2, feats, ist, fst, d, tau, joint, B, m, confirm, hcurve, shrink,
              gauss, refine, min_spread, ref_half, ref_min, alarm_out, change_out, stat_out,
              thr_out, dep, a23, feats2, asym_factor):
    """Advance the detector over the rows of ``xs`` (T, c), already standardised.

    ``hcurve[N]`` is the threshold of a scan over ``N`` blocks (``len(hcurve) > maxb``).
    Writes, per row, alarm (0/1), change_at (-1 if none), the last scan statistic Z (at an
    alarm, the Z of the crossing it reports: above its threshold even when later scans fell
    back) and the threshold that Z was compared with (``thr_out``).
    ``ref_half`` / ``ref_min``: reach of the record-level refinement around the chosen block
    boundary and the least side, in blocks. ``dep``: see :func:`zscan`. ``a23`` (2, c, d):
    the block's sums of squared and cubed lag increments per channel and lag, ``feats2``
    (maxb, c (d - 1)): the blocks' increment skewness (the time-asymmetry scan; no columns:
    off), whose alarms are refined by :func:`refine_skew`; with it both scans compare with
    ``hcurve[N] * asym_factor``."""
    R = ring.shape[0]
    G, g = s1.shape
    maxb = feats.shape[0]
    asym = feats2.shape[1] > 0
    off = (d - 1) * tau  # first position with a full embedding: the block grid origin
    e = np.empty(g)
    for t in range(xs.shape[0]):
        p = ist[POS]
        for ch in range(xs.shape[1]):
            ring[p % R, ch] = xs[t, ch]
        alarm_out[t] = 0
        change_out[t] = -1
        if p >= off:
            if asym:
                for ch in range(xs.shape[1]):
                    y0 = ring[p % R, ch]
                    for j in range(1, d):
                        inc = y0 - ring[(p - j * tau) % R, ch]
                        a23[0, ch, j] += inc * inc
                        a23[1, ch, j] += inc * inc * inc
            for grp in range(G):
                _embedded(ring, R, p, d, tau, joint, grp, e)
                for i in range(g):
                    ei = e[i]
                    s1[grp, i] += ei
                    for j in range(i, g):
                        s2[grp, i, j] += ei * e[j]
            ist[BCOUNT] += 1
            if ist[BCOUNT] == B:
                for grp in range(G):
                    for i in range(g):
                        for j in range(i + 1, g):
                            s2[grp, j, i] = s2[grp, i, j]
                if ist[NF] == maxb:  # window full: forget the oldest block
                    for r in range(maxb - 1):
                        feats[r, :] = feats[r + 1, :]
                        if asym:
                            feats2[r, :] = feats2[r + 1, :]
                    ist[NF] -= 1
                    ist[FBLOCK0] += 1
                block_feature(s1, s2, float(B), shrink, gauss, feats[ist[NF]])
                if asym:
                    _skew_feature(a23, d, float(B), feats2[ist[NF]])
                ist[NF] += 1
                ist[NBLOCKS] += 1
                s1[:] = 0.0
                s2[:] = 0.0
                ist[BCOUNT] = 0
                if ist[NF] >= 2 * m:
                    k, z = zscan(feats, ist[NF], m, min_spread, dep)
                    h = hcurve[ist[NF]]
                    if asym:  # the time-asymmetry scan: the larger Z decides
                        h = h * asym_factor
                        k2, z2 = zscan(feats2, ist[NF], m, min_spread, 0)
                        if z2 > z:
                            k, z = k2, z2
                            if z > h:
                                ist[ASYM] = 1
                        elif z > h:
                            ist[ASYM] = 0
                    fst[LAST_Z] = z
                    fst[LAST_H] = h
                    if z > h:
                        if ist[T0] < 0:
                            ist[T0] = ist[NBLOCKS]
                        ist[CUR_SPLIT] = ist[FBLOCK0] + k
                        fst[CUR_Z] = z
                        fst[CUR_H] = h
                    if ist[T0] >= 0 and ist[NBLOCKS] - ist[T0] >= confirm:
                        split = ist[CUR_SPLIT]
                        at = off + split * B
                        if refine:
                            r = int(ref_half * B)
                            lo = max(off, at - r)
                            hi = min(p + 1, at + r)
                            if asym and ist[ASYM]:
                                s = refine_skew(ring, R, lo, hi, d, tau, int(ref_min * B))
                            else:
                                s = refine_split(ring, R, lo, hi, d, tau, joint, G, g, shrink,
                                                 int(ref_min * B))
                            if s >= 0:
                                at = s
                        alarm_out[t] = 1
                        change_out[t] = at
                        # the new segment starts at the first block whose embedded vectors
                        # all come after the located change (block j holds the vectors
                        # ending in [off + jB, off + (j+1)B), which reach back to jB): a
                        # block straddling the change would make a second alarm
                        first = max(split, (at + B - 1) // B)
                        if first > ist[FBLOCK0] + ist[NF]:
                            first = ist[FBLOCK0] + ist[NF]
                        drop = first - ist[FBLOCK0]
                        keep = ist[NF] - drop
                        for r in range(keep):
                            feats[r, :] = feats[r + drop, :]
                            if asym:
                                feats2[r, :] = feats2[r + drop, :]
                        ist[NF] = keep
                        ist[FBLOCK0] = first
                        ist[T0] = -1
        # an alarm reports the Z that crossed the threshold (the crossing whose split it
        # located), decided up to ``confirm`` blocks later; other rows the last scan's Z
        stat_out[t] = fst[CUR_Z] if alarm_out[t] else fst[LAST_Z]
        thr_out[t] = fst[CUR_H] if alarm_out[t] else fst[LAST_H]
        ist[POS] = p + 1
