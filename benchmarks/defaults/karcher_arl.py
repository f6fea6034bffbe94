"""Monte Carlo of KarcherDetector's false-alarm run length on change-free input, and of its
detection delay on the paper's SPD(8) Wishart change (issue 36, item 6).

Configurations (all other parameters the detector's defaults, update="exp"):
  adaptive  : threshold="adaptive" (the authors' rule; the default before issue 36)
  cal500    : threshold="calibrated", target_arl=1000, calibration=500
  cal1000   : threshold="calibrated", target_arl=1000, calibration=1000

Nulls (no change; run r uses numpy default_rng(SEED + r)):
  wishart   : i.i.d. Wishart(df=11, M0) SPD(8), M0 the paper's (benchmarks/riemannian.py
              authors_spd_scales)
  cov20     : 3 independent N(0,1) channels -> window_covariance window=20 (shrinkage 0.1,
              the operator's formula) -> SPD(3)
  ar50      : 3 independent AR(1) rho=0.5 channels -> window_covariance window=50 -> SPD(3)
Run length: records to the first alarm (censored at HORIZON); "from start" counts every
record, "monitored" only those after which an alarm was possible (burn-in, and calibration
for threshold="calibrated", removed): the latter is what target_arl means.

Delay: the paper's change (Wishart M0 -> M1 at 1500, T = 2000, the authors' scales), seeds
10_000 + SEED + r as benchmarks/riemannian.py spd_run_authors; alarms with resets; delay of
the first alarm at or after 1500, misses, false alarms before 1500.

Usage: python karcher_arl.py choose RUNS DELAY_RUNS   (seeds 1000+, for choosing)
       python karcher_arl.py report RUNS DELAY_RUNS   (seeds 0+, for reporting)
"""
import json
import math
import pathlib
import sys
import time

import numpy as np
import torch
from scipy import signal, stats

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from riemannian import authors_spd_scales  # noqa: E402

from shiftwatch.operators.riemannian.karcher import KarcherDetector  # noqa: E402

torch.set_num_threads(1)
HORIZON = 20_000
CONFIGS = {"adaptive": dict(threshold="adaptive"),
           "cal500": dict(threshold="calibrated", target_arl=1000.0, calibration=500),
           "cal1000": dict(threshold="calibrated", target_arl=1000.0, calibration=1000)}
M0, M1 = authors_spd_scales()


def window_cov(x, w, shrinkage=0.1, min_eig=1e-6):
    """window_covariance's output for every full window of x (T, d)."""
    v = np.lib.stride_tricks.sliding_window_view(x, w, axis=0)  # (N, d, w)
    c = v - v.mean(axis=2, keepdims=True)
    s = c @ c.transpose(0, 2, 1) / (w - 1)
    d = x.shape[1]
    tr = np.trace(s, axis1=1, axis2=2)[:, None, None]
    s = (1 - shrinkage) * s + (shrinkage * tr / d + min_eig) * np.eye(d)
    return np.ascontiguousarray(0.5 * (s + s.transpose(0, 2, 1)))


def null(kind, rng, n):
    if kind == "wishart":
        x = stats.wishart(df=11, scale=M0).rvs(size=n, random_state=rng)
        return np.ascontiguousarray((x + x.transpose(0, 2, 1)) / 2)
    if kind == "cov20":
        return window_cov(rng.normal(size=(n + 19, 3)), 20)
    e = rng.normal(size=(n + 49, 3))
    e[0] /= math.sqrt(1 - 0.25)
    return window_cov(signal.lfilter([1.0], [1.0, -0.5], e, axis=0), 50)


def first_alarm(cfg, kind, seed):
    """(records to the first alarm from the start, records monitored, censored)."""
    rng = np.random.default_rng(seed)
    det = KarcherDetector("spd", **CONFIGS[cfg])
    done, chunk, censored = 0, 2500, False
    while done < HORIZON:
        xs = null(kind, rng, min(chunk, HORIZON - done))
        _, al, _ = det.update_many(xs, stop_at_alarm=True)
        if al.size and al[-1]:
            rl = done + len(al)
            break
        done += len(xs)
        chunk *= 2
    else:
        rl, censored = HORIZON, True
    dead = det.burn_in_length + (det.calibration if det.threshold == "calibrated" else 0)
    return rl, rl - dead, censored


def t_ci(v):
    v = np.asarray(v, float)
    h = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return float(v.mean()), float(v.mean() - h), float(v.mean() + h)


def median_ci(v):
    """Median and its distribution-free 95% interval (order statistics)."""
    v = np.sort(np.asarray(v, float))
    n = len(v)
    lo = int(stats.binom.ppf(0.025, n, 0.5)) - 1
    hi = int(stats.binom.ppf(0.975, n, 0.5))
    return float(np.median(v)), float(v[max(lo, 0)]), float(v[min(hi, n - 1)])


def delays(cfg, seed0, runs):
    fa, delay, miss = [], [], 0
    for r in range(runs):
        rng = np.random.default_rng(10_000 + seed0 + r)
        a = stats.wishart(df=11, scale=M0).rvs(size=1500, random_state=rng)
        b = stats.wishart(df=11, scale=M1).rvs(size=500, random_state=rng)
        x = np.concatenate([a, b])
        x = np.ascontiguousarray((x + x.transpose(0, 2, 1)) / 2)
        _, al, _ = KarcherDetector("spd", **CONFIGS[cfg]).update_many(x)
        idx = np.flatnonzero(al)
        fa.append(int(np.sum(idx < 1500)))
        post = idx[idx >= 1500]
        if post.size:
            delay.append(int(post[0] - 1500))
        else:
            miss += 1
    return {"delay_mean_ci": t_ci(delay) if len(delay) > 1 else None,
            "delay_median": float(np.median(delay)) if delay else None,
            "detected": runs - miss, "runs": runs, "fa_before_mean_ci": t_ci(fa),
            "runs_with_fa": int(np.sum(np.array(fa) > 0))}


def main():
    phase, runs, druns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed0 = 1000 if phase == "choose" else 0
    cfgs = sys.argv[4].split(",") if len(sys.argv) > 4 else list(CONFIGS)
    out = {}
    for cfg in cfgs:
        for kind in ("wishart", "cov20", "ar50"):
            t0 = time.perf_counter()
            res = [first_alarm(cfg, kind, {"wishart": 0, "cov20": 100_000,
                                           "ar50": 200_000}[kind] + seed0 + r)
                   for r in range(runs)]
            rl = np.array([x[0] for x in res])
            mon = np.array([x[1] for x in res])
            cens = int(sum(x[2] for x in res))
            e = {"runs": runs, "censored": cens, "horizon": HORIZON,
                 "rl_start_mean_ci": t_ci(rl), "rl_start_median_ci": median_ci(rl),
                 "rl_mon_mean_ci": t_ci(mon), "rl_mon_median_ci": median_ci(mon),
                 "alarms_per_1000_first_1000": float(np.mean(rl <= 1000)),
                 "seconds": time.perf_counter() - t0}
            out[f"{cfg}/{kind}"] = e
            m, lo, hi = e["rl_mon_mean_ci"]
            md, mlo, mhi = e["rl_mon_median_ci"]
            s, slo, shi = e["rl_start_mean_ci"]
            print(f"{cfg:8s} {kind:8s} runs {runs} censored {cens:3d} | RL from start mean "
                  f"{s:6.0f} [{slo:6.0f}, {shi:6.0f}] | monitored mean {m:6.0f} [{lo:6.0f}, "
                  f"{hi:6.0f}] median {md:6.0f} [{mlo:6.0f}, {mhi:6.0f}] | P(alarm in first "
                  f"1000) {e['alarms_per_1000_first_1000']:.2f} ({e['seconds']:.0f} s)",
                  flush=True)
        if druns:
            t0 = time.perf_counter()
            d = delays(cfg, seed0, druns)
            out[f"{cfg}/delay"] = d
            dm = d["delay_mean_ci"]
            print(f"{cfg:8s} delay    runs {druns} detected {d['detected']} | delay mean "
                  f"{dm[0]:.1f} [{dm[1]:.1f}, {dm[2]:.1f}] median {d['delay_median']:.0f} | "
                  f"false alarms before 1500 {d['fa_before_mean_ci'][0]:.2f} (runs with any "
                  f"{d['runs_with_fa']}) ({time.perf_counter() - t0:.0f} s)", flush=True)
    path = pathlib.Path(__file__).with_name(f"karcher_arl_{phase}.json")
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
