"""Monte Carlo of the cs scale-free mode, before (scale='marginal', burn_in=30: the old
default) and after (the new defaults: scale='long-run', burn_in_effective=60,
burn_in_max=1000).

  arl   : no-change streams (i.i.d. N(0,1), i.i.d. t(3), AR(1) rho 0.5 / 0.9 with N(0,1)
          innovations), alarms with restarts; ARL = monitored values (after burn-ins) /
          alarms, 95% CI by a bootstrap over runs and an exact Poisson CI on the count;
          also the burn-in lengths.
  delay : N(0,1) for 2000 values then N(shift, 1) for 3000; delay of the first alarm at or
          after the change; false alarms before it; misses.

Usage: python mc.py arl RUNS N   |   python mc.py delay RUNS
Seeds: run r uses numpy default_rng(SEED0 + r), SEED0 = 20260 (arl) / 30260 (delay).
"""
import json
import math
import sys
import time

import numpy as np
from scipy import signal, stats

from shiftwatch.operators.confseq.detector import ConfSeqDetector

BEFORE = {"scale": "marginal"}
AFTER = {}


def stream(kind, rng, n):
    if kind == "iid":
        return rng.normal(size=n)
    if kind == "t3":
        return rng.standard_t(3, size=n)
    rho = {"ar0.5": 0.5, "ar0.9": 0.9}[kind]
    e = rng.normal(size=n)
    e[0] /= math.sqrt(1 - rho ** 2)  # stationary start
    return signal.lfilter([1.0], [1.0, -rho], e)


def count(params, alpha, xs):
    det = ConfSeqDetector(alpha=alpha, **params)
    out = det._run(np.ascontiguousarray(xs))
    monitored = np.isfinite(out[1])
    alarms = np.flatnonzero(out[0] != 0.0)
    # burn-in lengths: runs of non-monitored values starting at 0 and after each alarm
    starts = np.r_[0, alarms + 1]
    burns = []
    for s in starts:
        if s >= len(xs):
            continue
        nxt = np.flatnonzero(monitored[s:])
        if nxt.size:
            burns.append(int(nxt[0]))
    return len(alarms), int(monitored.sum()), burns


def ci_ratio(m, a, reps=4000, seed=1):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(m), (reps, len(m)))
    ms, as_ = m[idx].sum(axis=1), a[idx].sum(axis=1)
    r = ms / np.maximum(as_, 1e-9)
    r[as_ == 0] = np.inf
    return np.percentile(r, [2.5, 97.5])


def arl(runs, n):
    res = []
    for kind in ("iid", "t3", "ar0.5", "ar0.9"):
        for alpha in (0.1, 0.01, 0.001):
            for label, params in (("before", BEFORE), ("after", AFTER)):
                t0 = time.time()
                a = np.zeros(runs)
                m = np.zeros(runs)
                burns = []
                for r in range(runs):
                    xs = stream(kind, np.random.default_rng(20260 + r), n)
                    a[r], m[r], b = count(params, alpha, xs)
                    burns += b
                A, M = a.sum(), m.sum()
                est = M / A if A else math.inf
                lo, hi = ci_ratio(m, a)
                plo = M / (stats.chi2.ppf(0.975, 2 * A + 2) / 2)
                phi = M / (stats.chi2.ppf(0.025, 2 * A) / 2) if A else math.inf
                row = {"stream": kind, "alpha": alpha, "which": label, "runs": runs, "n": n,
                       "alarms": int(A), "monitored": int(M), "arl": est,
                       "boot_lo": float(lo), "boot_hi": float(hi), "pois_lo": float(plo),
                       "pois_hi": float(phi), "burn_mean": float(np.mean(burns)),
                       "burn_median": float(np.median(burns)),
                       "burn_p90": float(np.percentile(burns, 90)), "sec": time.time() - t0}
                res.append(row)
                print(f"{kind:6s} alpha {alpha:<6} {label:6s} alarms {int(A):6d} ARL {est:12.0f} "
                      f"boot [{lo:.0f}, {hi:.0f}] pois [{plo:.0f}, {phi:.0f}] 1/alpha {1/alpha:.0f} "
                      f"burn-in mean {np.mean(burns):.0f} median {np.median(burns):.0f} "
                      f"({time.time()-t0:.0f}s)", flush=True)
    return res


def delay(runs):
    res = []
    for shift in (0.25, 0.5, 1.0, 2.0):
        for label, params in (("before", BEFORE), ("after", AFTER)):
            d, fa, miss = [], 0, 0
            for r in range(runs):
                rng = np.random.default_rng(30260 + r)
                xs = np.r_[rng.normal(size=2000), rng.normal(shift, 1.0, 3000)]
                al = ConfSeqDetector(alpha=0.001, **params).update_many(xs)
                fa += int(np.sum(al < 2000))
                after = al[al >= 2000]
                if after.size:
                    d.append(int(after[0] - 2000))
                else:
                    miss += 1
            d = np.array(d)
            half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))
            # CI of the median: order statistics (binomial)
            k = stats.binom.ppf([0.025, 0.975], len(d), 0.5).astype(int)
            ds = np.sort(d)
            row = {"shift": shift, "which": label, "runs": runs, "mean": float(d.mean()),
                   "half": float(half), "median": float(np.median(d)),
                   "med_lo": float(ds[max(k[0] - 1, 0)]), "med_hi": float(ds[min(k[1], len(d) - 1)]),
                   "missed": miss, "false_alarms": fa}
            res.append(row)
            print(f"shift {shift:4} {label:6s} mean delay {d.mean():7.1f} +- {half:6.1f} median "
                  f"{np.median(d):6.1f} [{row['med_lo']:.0f}, {row['med_hi']:.0f}] missed {miss} "
                  f"false alarms before the change {fa}", flush=True)
    return res


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "arl":
        out = arl(int(sys.argv[2]), int(sys.argv[3]))
    else:
        out = delay(int(sys.argv[2]))
    json.dump(out, open(f"mc_{what}.json", "w"), indent=1)
