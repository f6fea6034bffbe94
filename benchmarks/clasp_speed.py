"""`class` against claspy's ClaSS on long series, where the window is full (issue 48, item 2).

    python benchmarks/clasp_speed.py [--n 40000] [--series 3] [--window 10000] [--out FILE]

On TSSB most series are shorter than the window (10,000), so `benchmarks/realdata.py`
measures both detectors mostly while the window fills. Here every series is ``--n`` values
long (seeded noisy sines whose period changes every 8,000 values, as TSSB's changes of
period), so most of the run is at a full window, where a value costs the most. Both run with
the same parameters (claspy 0.2.8's defaults, ``n_warmup=500`` for both), each fed one value
at a time in its own loop: `class` through ``ClassDetector.update`` and through the operator's
micro-batches (``process_batch`` of 1,000 records, as replay and Kafka run it); ClaSS with
``StreamingClaSPSegmentation.update`` in its virtual environment (`benchmarks/peers`). records/s
are total values over total seconds in this run, on this machine; the change points of both
are listed beside the planted ones.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))


def series(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    periods = rng.choice([17, 23, 31, 40, 55], size=n // 8000 + 1)
    while len(set(periods[:2])) < 2:
        periods = rng.choice([17, 23, 31, 40, 55], size=n // 8000 + 1)
    cps = list(range(8000, n, 8000))
    x = np.empty(n)
    phase = 0.0
    for i in range(n):
        p = periods[i // 8000]
        phase += 2 * np.pi / p
        x[i] = np.sin(phase) + 0.3 * rng.standard_normal()
    return x, cps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40_000)
    ap.add_argument("--series", type=int, default=3)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "clasp_speed.md"))
    args = ap.parse_args()

    from peer_env import run_class_doc

    from shiftwatch.operators import create
    from shiftwatch.operators.clasp.detector import ClassDetector

    data = [series(args.n, seed) for seed in range(args.series)]
    params = {"window": args.window, "n_warmup": 500}
    ClassDetector(**{**params, "window": 2000}).update(0.0)  # compile outside the timing
    rows = []
    t_upd = t_batch = 0.0
    ours, ours_batch = [], []
    for x, _ in data:
        det = ClassDetector(**params)
        cps = []
        t0 = time.perf_counter()
        for v in x:
            det.update(float(v))
            if det.drift_detected:
                cps.append(int(det.change_at))
        t_upd += time.perf_counter() - t0
        ours.append(cps)
        op = create("class", **params)
        recs = [{"value": float(v)} for v in x]
        got = []
        t0 = time.perf_counter()
        for b in range(0, len(recs), 1000):
            for o in op.process_batch(recs[b:b + 1000]):
                if o["alarm"]:
                    got.append(int(o["change_at"]))
        t_batch += time.perf_counter() - t0
        ours_batch.append(got)
    doc = run_class_doc([{"name": f"s{i}", "values": x.tolist()} for i, (x, _) in
                         enumerate(data)],
                        params={"n_timepoints": args.window, "n_warmup": 500})
    t_class = sum(r["wall_s"] for r in doc["results"])
    total = args.n * args.series

    for i, ((_, truth), mine, batch, r) in enumerate(zip(data, ours, ours_batch,
                                                          doc["results"], strict=True)):
        theirs = sorted(int(c) for c in r["change_points"])
        rows.append({"series": i, "truth": truth, "class": mine, "class_batches": batch,
                     "ClaSS": theirs})
    lines = [
        "# `class` against ClaSS on long series (full window)", "",
        f"`python benchmarks/clasp_speed.py --n {args.n} --series {args.series} --window "
        f"{args.window}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{platform.machine()}, 2 cores shared, Python {platform.python_version()}, "
        f"claspy {doc.get('claspy_version')}).", "",
        f"{args.series} seeded series of {args.n:,} values (noisy sines, the period changing "
        f"every 8,000 values), window {args.window:,}, n_warmup 500, every other parameter "
        "claspy's default for both.", "",
        "| detector | records/s | ratio to ClaSS |", "| --- | ---: | ---: |",
        f"| `class`, `ClassDetector.update` one value at a time | {total / t_upd:,.0f} | "
        f"{t_class / t_upd:.1f}x |",
        f"| `class`, operator, micro-batches of 1,000 | {total / t_batch:,.0f} | "
        f"{t_class / t_batch:.1f}x |",
        f"| ClaSS (claspy), `update` one value at a time | {total / t_class:,.0f} | 1.0x |",
        "", "| series | planted changes | `class` | `class` (batches) | ClaSS |",
        "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['series']} | {r['truth']} | {r['class']} | {r['class_batches']} | "
                     f"{r['ClaSS']} |")
    diff = sum(len(set(r["class"]) ^ set(r["ClaSS"])) for r in rows)
    total_cps = sum(len(r["ClaSS"]) for r in rows)
    lines += ["", f"Change points of `class` not among ClaSS's or the reverse: {diff} "
              f"(ClaSS found {total_cps}); the two `class` columns are "
              + ("equal." if all(r["class"] == r["class_batches"] for r in rows) else
                 "NOT equal.")]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"rows": rows, "records_per_s": {"class_update": total / t_upd,
                                         "class_batches": total / t_batch,
                                         "ClaSS": total / t_class}}, indent=1))


if __name__ == "__main__":
    main()
