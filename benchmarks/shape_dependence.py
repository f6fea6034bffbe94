"""``shape``'s scan scale with block dependence (``dependence="lag1"``) against ``"none"``.

    python benchmarks/shape_dependence.py [--data ../shared/data] [--runs 100]

Runs ``shape`` (its defaults; ``dependence`` = ``"none"``, then ``"lag1"``) on tssb-dev and
mocap6 with ``benchmarks/realdata.py``'s harness (``load``, ``located``, ``score``: the same
records, evaluating sink and scores as its ``shape`` row), prints per set F1@5, F1@1%,
covering, alarms / false / missed per series and the series whose scores differ; then, not
part of the decision, the false alarms per 100 periods of both on the seeded stationary
families of ``benchmarks/shape_null.py check`` (fixed threshold 6, the period given) and the
throughput of ``ShapeDetector.update_many``. The rule that uses these numbers is declared in
``benchmarks/results/shape.md`` ("Block dependence in the scan's scale"); this script only
measures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realdata  # noqa: E402
import shape_null  # noqa: E402

ARMS = ("none", "lag1")
SETS = ("tssb-dev", "mocap6")
KEYS = ("F1@5", "F1@1%", "covering", "alarms/series", "false/series", "missed/series")


def run_arm(job: tuple[str, dict, str, list[dict]]) -> tuple[str, str, list[dict]]:
    """One arm (a label and ``shape``'s parameters) on one data set: per-series score rows."""
    label, params, ds, series = job
    chain = [("shape", dict(params))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in series:
            pts, _ = realdata.located(realdata._records(s["values"]), chain, s["annotations"],
                                      Path(tmp) / s["name"])
            row = realdata.score(pts, s["annotations"], s["n"])
            row["name"] = s["name"]
            rows.append(row)
    return label, ds, rows


def compare(arms: dict[str, dict], data: dict, column: str = "dependence") -> None:
    """Score every arm on every set of ``data`` (two worker processes) and print, per set,
    the means and the series whose scores differ between the first two arms."""
    res: dict = {}
    jobs = [(a, p, ds, data[ds]) for a, p in arms.items() for ds in data]
    with ProcessPoolExecutor(max_workers=2) as pool:
        for label, ds, rows in pool.map(run_arm, jobs):
            res[(label, ds)] = rows
    first, second = list(arms)[:2]
    for ds in data:
        print(f"#### {ds} ({len(data[ds])} series)\n")
        print(f"| {column} | " + " | ".join(KEYS) + " |")
        print("| --- |" + " ---: |" * len(KEYS))
        for label in arms:
            rows = res[(label, ds)]
            m = realdata.means({"series": rows})
            m["false/series"] = float(np.mean([r["n_false"] for r in rows]))
            m["missed/series"] = float(np.mean([r["n_missed"] for r in rows]))
            print(f"| {label} | " + " | ".join(f"{m[k]:.3f}" if "/" not in k else f"{m[k]:.2f}"
                                                 for k in KEYS) + " |")
        print("\nSeries whose scores differ (alarms / false / missed / F1@1% / covering):\n")
        print(f"| series | {first} | {second} |\n| --- | --- | --- |")
        for a, b in zip(res[(first, ds)], res[(second, ds)], strict=True):
            fa = (a["alarms"], a["n_false"], a["n_missed"], a["f1_1pct"], a["covering"])
            fb = (b["alarms"], b["n_false"], b["n_missed"], b["f1_1pct"], b["covering"])
            if fa != fb:
                print(f"| {a['name']} | " + " | ".join(
                    f"{x[0]} / {x[1]} / {x[2]} / {x[3]:.3f} / {x[4]:.3f}" for x in (fa, fb))
                      + " |")
        print()


def null_rates(runs: int, seed: int = 20261204) -> list[str]:
    lines = ["| family (P = 9, fixed threshold 6) | 100 periods | none: alarms per 100 periods "
             "| lag1: alarms per 100 periods |", "| --- | ---: | ---: | ---: |"]
    tot = {d: [0, 0.0] for d in ARMS}
    for fi, name in enumerate(shape_null.FAMILIES):
        got = {}
        for dep in ARMS:
            k, _, per = shape_null.null_alarms(name, 9, 1, runs, [seed, 9, fi], 0.2,
                                               threshold=6.0, dependence=dep)
            got[dep] = (k, per)
            tot[dep] = [tot[dep][0] + k, tot[dep][1] + per]
        lines.append(f"| {name} | {got['none'][1]:.0f} | {got['none'][0] / got['none'][1]:.3f}"
                     f" | {got['lag1'][0] / got['lag1'][1]:.3f} |")
    lines.append(f"| **mean of the eight** | {tot['none'][1]:.0f} | "
                 f"{tot['none'][0] / tot['none'][1]:.3f} | {tot['lag1'][0] / tot['lag1'][1]:.3f} |")
    return lines


def speed(n: int = 300_000, repeats: int = 3) -> list[str]:
    from shiftwatch.operators.shape.detector import ShapeDetector

    rng = np.random.default_rng(20261204)
    t = np.arange(n)
    y = np.sin(2 * np.pi * t / 24) + 0.3 * rng.normal(size=n)
    lines = ["| dependence | records/s, `update_many` (best of 3, period 24, 300,000 records) |",
             "| --- | ---: |"]
    for dep in ARMS:
        best = np.inf
        for _ in range(repeats):
            det = ShapeDetector(dependence=dep)
            det.update_many(y[:500])
            t0 = time.perf_counter()
            det.update_many(y[500:])
            best = min(best, time.perf_counter() - t0)
        lines.append(f"| {dep} | {(n - 500) / best:,.0f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(realdata.ROOT.parent / "shared" / "data"))
    ap.add_argument("--runs", type=int, default=100, help="streams per null family")
    args = ap.parse_args(argv)
    t0 = time.time()
    data = realdata.load(Path(args.data), list(SETS))
    print("`python benchmarks/shape_dependence.py"
          + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
          + f"` ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)\n")
    compare({d: {"dependence": d} for d in ARMS}, data)
    print(f"({time.time() - t0:.0f} s for the real series)\n")
    print("#### Seeded stationary families (not part of the rule)\n")
    print("\n".join(null_rates(args.runs)))
    print("\n#### Throughput (not part of the rule)\n")
    print("\n".join(speed()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
