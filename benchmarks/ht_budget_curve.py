"""Accuracy per record against records/s (issue 49, item 1): `hare-tortoise` and the plain
online MLP at several update budgets, deep-river's MLP in the same run.

    python benchmarks/ht_budget_curve.py choose [--seeds 100 101 102]
    python benchmarks/ht_budget_curve.py report [--seeds 0 1 2]

The budget is the optimiser steps per labelled record, ``replay_ratio / batch_size``: the
operators' default is 1/32 (a step per micro-batch of 32). deep-river takes one Adam step per
record. Points of the curve, each an override of the operator's defaults:
``batch_size`` / ``replay_ratio`` = 32/1 (1/32, the default), 16/1 (1/16), 8/1 (1/8), 8/2
(1/4) and 4/2 (1/2). The plain online MLP (``learners_vs_peers.plain_params()``) runs at the
same budgets. Streams, scores and timing are ``benchmarks/learners_vs_peers.py``'s: mnist1d,
6,000 records a stream, stationary and labels permuted at 2,000 and 4,000; (a) accuracy on
the stationary stream's second half; (b) accuracy over the last 1,000 records of each changed
segment; records/s over both streams, learner calls only, median over seeds.

Rule (written before any run of this script): on the choosing seeds (>= 100), among the
`hare-tortoise` points whose median records/s is at least 5x deep-river's median in the same
run, take the one with the highest mean of (a) and (b). A tie within 0.005 goes to the
cheaper budget. The report runs the curve on the issue's seeds 0, 1, 2, deep-river beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
import learners_vs_peers as L  # noqa: E402

torch.set_num_threads(1)
POINTS = {"1/32": (32, 1), "1/16": (16, 1), "1/8": (8, 1), "1/4": (8, 2), "1/2": (4, 2)}


def run_seed(seed: int, log) -> dict:
    from shiftwatch.operators.learners.hare_tortoise import HareTortoise

    streams = L.make_streams(seed)
    out: dict = {}
    # constant budgets: the boost after alarm resets (ht_alarm_boost.md, later) is off
    for arm, base in (("hare-tortoise", {"alarm_replay_ratio": None}),
                      ("plain", L.plain_params())):
        for name, (bs, rr) in POINTS.items():
            rows, wall, n = {}, 0.0, 0
            for kind, s in streams.items():
                op = HareTortoise(in_dim=L.IN_DIM, n_classes=L.N_CLASSES, seed=seed,
                                  **{**base, "batch_size": bs, "replay_ratio": rr})
                preds, w = L.run_operator(op, s["x"], s["y"])
                rows[kind] = L.scores(kind, L.hits_of(preds, s["y"]))
                wall, n = wall + w, n + len(s["y"])
            out[f"{arm} {name}"] = {"a": rows["stationary"]["second_half"],
                                    "b": rows["permuted"]["after_changes"],
                                    "records_per_s": n / wall}
            log(f"seed {seed} {arm:14s} {name:5s} a {out[f'{arm} {name}']['a']:.3f} "
                f"b {out[f'{arm} {name}']['b']:.3f} {n / wall:8.0f} rec/s")
    out["deep-river"] = deep_river_point(streams, seed)
    log(f"seed {seed} deep-river           a {out['deep-river']['a']:.3f} "
        f"b {out['deep-river']['b']:.3f} {out['deep-river']['records_per_s']:8.0f} rec/s")
    return out


def deep_river_point(streams: dict, seed: int) -> dict:
    """deep-river's MLP on one seed's two streams, in its own virtual environment: scores
    (a), (b) and records/s over both streams (its update calls only)."""
    from deep_river_env import run_deep_river

    doc = run_deep_river([{"name": k, "x": s["x"].tolist(), "y": s["y"].tolist()}
                          for k, s in streams.items()], seed)
    res = {r["name"]: r for r in doc["results"]}
    a = L.scores("stationary", L.hits_of(res["stationary"]["y_pred"],
                                         streams["stationary"]["y"]))["second_half"]
    b = L.scores("permuted", L.hits_of(res["permuted"]["y_pred"],
                                       streams["permuted"]["y"]))["after_changes"]
    n = sum(r["n"] for r in doc["results"])
    return {"a": a, "b": b, "records_per_s": n / sum(r["wall_s"] for r in doc["results"])}


def table(per_seed: list[dict]) -> tuple[list[str], dict]:
    arms = list(per_seed[0])
    summ = {}
    lines = ["| arm | steps per record | (a) stationary | (b) after changes | mean | records/s "
             "(median) | x deep-river |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    dr = float(np.median([s["deep-river"]["records_per_s"] for s in per_seed]))
    for arm in arms:
        a = float(np.mean([s[arm]["a"] for s in per_seed]))
        b = float(np.mean([s[arm]["b"] for s in per_seed]))
        r = float(np.median([s[arm]["records_per_s"] for s in per_seed]))
        summ[arm] = {"a": a, "b": b, "mean": (a + b) / 2, "records_per_s": r, "x_dr": r / dr}
        budget = arm.split()[-1] if arm != "deep-river" else "1"
        lines.append(f"| {arm} | {budget} | {a:.3f} | {b:.3f} | {(a + b) / 2:.3f} | {r:,.0f} | "
                     f"{r / dr:.1f}x |")
    return lines, summ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=("choose", "report"))
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    a = ap.parse_args()
    seeds = a.seeds or ([100, 101, 102] if a.cmd == "choose" else [0, 1, 2])
    if a.cmd == "choose" and min(seeds) < 100:
        raise SystemExit("choose runs on choosing seeds only (>= 100)")
    t0 = time.time()
    per = [run_seed(s, lambda m: print(m, flush=True)) for s in seeds]
    lines, summ = table(per)
    out = {"cmd": a.cmd, "seeds": seeds, "per_seed": per, "summary": summ,
           "seconds": time.time() - t0}
    if a.cmd == "choose":
        fast = {k: v for k, v in summ.items() if k.startswith("hare-tortoise")
                and v["x_dr"] >= 5}
        best = max(v["mean"] for v in fast.values()) if fast else None
        tied = [k for k, v in fast.items() if best - v["mean"] <= 0.005] if fast else []
        order = list(POINTS)
        out["chosen"] = min(tied, key=lambda k: order.index(k.split()[-1])) if tied else None
        lines.append("")
        lines.append(f"chosen by the rule: {out['chosen']}")
    print("\n".join(lines))
    (HERE / "results" / f"ht_budget_curve_{a.cmd}.json").write_text(json.dumps(out, indent=1))
    (HERE / "results" / f"ht_budget_curve_{a.cmd}.md").write_text(
        f"`python benchmarks/ht_budget_curve.py {a.cmd}` (seeds {seeds}, "
        f"{out['seconds']:.0f} s)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
