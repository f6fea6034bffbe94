"""karcher on mocap6 before/after, chains a user would write (change_at + W - 1 = frames).
before: burn_in=400, warm_start=False (the old defaults); after: the new defaults."""
import json

from harness import evaluate, line, never
from mocap_k import kchain

out = {"never": evaluate(never, "mocap")}
print("| chain | F1@5 | F1@1% | cover | alarms/series |\n| --- | --- | --- | --- | --- |")
print(line("never alarm", out["never"]))
for W in (50, 20, 10):
    for label, kw in (("before", dict(burn_in=400, warm_start=False)), ("after", dict())):
        r = evaluate(kchain(W=W, **kw), "mocap")
        out[f"W{W} {label}"] = r
        print(line(f"standardize -> window_covariance(window={W}) -> karcher, {label}", r), flush=True)
for label, kw in (("warm_start=False", dict(warm_start=False)), ("warm_start=True", dict())):
    r = evaluate(kchain(W=10, manifold="spd", step_slow=0.05, step_fast=0.1, burn_in=20, **kw), "mocap")
    out[f"readme {label}"] = r
    print(line(f"README parameters (window 10, steps 0.05/0.1, burn_in=20), {label}", r), flush=True)
json.dump(out, open("mocap_final.json", "w"), indent=1, default=float)
