"""Scoring harness of the scripts that chose the defaults of ``cs`` and ``karcher`` (issue 23;
results and commands in ``benchmarks/results/defaults.md``). A candidate is a
function ``values -> list of change_at`` (causal stream detector run over the series).

Datasets: "tssb" (25 univariate), "mocap" (6 x 12 channels), "river" (the demo's five TCPD
series, all annotators).  Scores per series: F1 margin 5, F1 margin int(0.01 n), covering,
number of predictions; then the mean over series.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from shiftwatch.sinks.metrics import covering, f_measure

#: The development data (for choosing): ``SHIFTWATCH_DEV_DATA`` or ``../shared/data``.
_DATA = Path(os.environ.get("SHIFTWATCH_DEV_DATA",
                            Path(__file__).resolve().parents[3] / "shared" / "data"))
TSSB_PATH = str(_DATA / "tssb-dev.json")
MOCAP_PATH = str(_DATA / "mocap6.json")
RIVER = ["Occupancy", "RunLog", "AirlinePassengers", "Bitcoin", "UKCoalEmploy"]
_CACHE: dict[str, list[dict]] = {}


def load(name: str) -> list[dict]:
    if name in _CACHE:
        return _CACHE[name]
    if name == "river":
        from shiftwatch.streams import RiverDriftSource
        out = []
        for ds in RIVER:
            src = RiverDriftSource(ds)
            recs = list(src)
            vals = np.array([r["value"] for r in recs], dtype=np.float64)
            out.append({"name": ds, "n": len(recs), "ann": {k: list(v) for k, v in
                                                            src.annotations.items()},
                        "values": vals})
        _CACHE[name] = out
        return out
    path = TSSB_PATH if name == "tssb" else MOCAP_PATH
    raw = json.load(open(path))["series"]
    _CACHE[name] = [{"name": s["name"], "n": int(s["n"]), "ann": {0: [int(c) for c in s["cps"]]},
                     "values": np.asarray(s["values"], dtype=np.float64)} for s in raw]
    return _CACHE[name]


def score(ann: dict, preds: Sequence[int], n: int) -> dict:
    preds = sorted({int(p) for p in preds if 0 < int(p) < n})
    return {"f1_5": f_measure(ann, preds, margin=5),
            "f1_1": f_measure(ann, preds, margin=int(0.01 * n)),
            "cover": covering(ann, preds, n), "alarms": len(preds)}


KEYS = ("f1_5", "f1_1", "cover", "alarms")


def evaluate(fn: Callable[[np.ndarray], list[int]], dataset: str, verbose: bool = False,
             label: str = "") -> dict:
    rows = []
    for s in load(dataset):
        t0 = time.perf_counter()
        preds = fn(s["values"])
        dt = time.perf_counter() - t0
        r = score(s["ann"], preds, s["n"])
        r.update(name=s["name"], n=s["n"], sec=dt, preds=sorted(int(p) for p in preds))
        rows.append(r)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in KEYS}
    if verbose:
        print(f"\n== {label} on {dataset} ==")
        for r in rows:
            print(f"{r['name'][:28]:28s} {r['n']:6d} F1@5 {r['f1_5']:.3f} F1@1% {r['f1_1']:.3f} "
                  f"cover {r['cover']:.3f} alarms {r['alarms']:4d}")
        print(f"{'MEAN':35s} F1@5 {mean['f1_5']:.3f} F1@1% {mean['f1_1']:.3f} "
              f"cover {mean['cover']:.3f} alarms {mean['alarms']:.2f}")
    return {"rows": rows, "mean": mean}


def line(label: str, res: dict) -> str:
    m = res["mean"]
    return f"| {label} | {m['f1_5']:.3f} | {m['f1_1']:.3f} | {m['cover']:.3f} | {m['alarms']:.2f} |"


def records(values: np.ndarray) -> list[dict]:
    return [{"key": "k", "ts": float(i), "value": (v.tolist() if np.ndim(v) else float(v))}
            for i, v in enumerate(values)]


def chain(*specs: tuple[str, dict]) -> Callable[[np.ndarray], list[int]]:
    """``create(name, **params)`` operators in sequence (process_batch); predictions are the
    alarms' change_at."""
    from shiftwatch.operators import create

    def fn(values: np.ndarray) -> list[int]:
        ops = [create(name, **params) for name, params in specs]
        recs = records(values)
        for op in ops:
            recs = op.process_batch(recs)
        return [int(o["change_at"]) for o in recs if isinstance(o, dict) and o.get("alarm")
                and o.get("change_at") is not None]

    fn.__name__ = " -> ".join(n for n, _ in specs)
    return fn


def never(values: np.ndarray) -> list[int]:
    return []
