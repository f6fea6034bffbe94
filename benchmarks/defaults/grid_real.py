"""Grid over the long-run burn-in's two constants with the project's own cs (this worktree):
burn_in_effective x LONG_RUN_BATCHES, burn_in_max 1000, alpha 0.001, behind standardize."""
import itertools
import json
import sys

from harness import chain, evaluate

import shiftwatch.operators.confseq.detector as D

targets = [int(t) for t in sys.argv[1].split(",")]
Ks = [int(t) for t in sys.argv[2].split(",")]
nmax = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
res = {}
for K, target in itertools.product(Ks, targets):
    D.LONG_RUN_BATCHES = K
    row = []
    for ds in ("tssb", "river"):
        r = evaluate(chain(("standardize", {}), ("cs", {"burn_in_effective": target, "burn_in_max": nmax})), ds)
        res[f"{ds}|{target}|{K}|{nmax}"] = {"mean": r["mean"], "rows": [{k: v for k, v in x.items()} for x in r["rows"]]}
        m = r["mean"]
        row.append(f"{m['f1_5']:.3f} {m['f1_1']:.3f} {m['cover']:.3f} {m['alarms']:5.2f}")
    print(f"K {K:3d} ess {target:3d} nmax {nmax} | tssb {row[0]} | river {row[1]}", flush=True)
json.dump(res, open(f"grid_real_{'_'.join(map(str, targets))}_{'_'.join(map(str, Ks))}_{nmax}.json", "w"), default=float, indent=1)
