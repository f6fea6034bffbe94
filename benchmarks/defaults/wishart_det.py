"""The detector with its adaptive threshold (alarms, resets) on the paper's SPD(8) Wishart
setting (authors' M0 -> M1 at 1500, T = 2000; benchmarks/riemannian.py spd_run_authors,
seeds 10_000 + r): first alarm, false alarms before the change, delay of the first alarm at
or after it. Also change-free streams of 5000 (seeds 60_000 + r): alarms per 1000 samples."""
import json
import math
import sys

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from riemannian import authors_spd_scales, spd_run_authors

from shiftwatch.operators.riemannian.karcher import KarcherDetector

runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
cfgs = {"before: burn_in=400, warm_start=False": dict(burn_in=400, warm_start=False),
        "after: defaults": dict()}
for B in (int(b) for b in sys.argv[2].split(",")) if len(sys.argv) > 2 else ():
    cfgs[f"warm_start, burn_in={B}"] = dict(burn_in=B)
m0, m1 = authors_spd_scales()
data = [spd_run_authors(r, m0, m1) for r in range(runs)]
res = {}
for label, kw in cfgs.items():
    first, fa, delay, miss = [], [], [], 0
    for xs in data:
        _, al, _ = KarcherDetector("spd", update="retraction", **kw).update_many(xs)
        a = np.flatnonzero(al)
        first.append(a[0] if a.size else 2000)
        fa.append(int(np.sum(a < 1500)))
        post = a[a >= 1500]
        if post.size:
            delay.append(int(post[0] - 1500))
        else:
            miss += 1
    first, fa, delay = np.array(first), np.array(fa), np.array(delay)
    ci = lambda v: 1.96 * v.std(ddof=1) / math.sqrt(len(v))
    res[label] = {"first_mean": first.mean(), "first_ci": ci(first), "first_median": float(np.median(first)),
                  "fa_mean": fa.mean(), "fa_ci": ci(fa), "share_fa": float(np.mean(fa > 0)),
                  "delay_mean": delay.mean(), "delay_ci": ci(delay), "delay_median": float(np.median(delay)),
                  "missed": miss, "runs": runs}
    print(f"{label:40s} first alarm {first.mean():6.0f} +- {ci(first):4.0f} (median {np.median(first):5.0f}) | "
          f"false alarms before 1500 {fa.mean():.2f} +- {ci(fa):.2f} (runs with any {np.mean(fa > 0):.2f}) | "
          f"delay {delay.mean():5.1f} +- {ci(delay):4.1f} (median {np.median(delay):4.0f}) missed {miss}", flush=True)
json.dump(res, open("wishart_det.json", "w"), indent=1, default=float)
