"""The ``shape`` detector: its defaults' sensitivity on the TSSB development series, and its
false-alarm rate on stationary streams.

    python benchmarks/shape.py sensitivity [--data ../shared/data]
    python benchmarks/shape.py null [--runs 20] [--n 20000]

``sensitivity``: one knob at a time around the defaults (threshold, a number or ``"null"``
at its default rate, block, min_blocks, confirm,
max_blocks, burn_in, span, dmax, shrinkage, min_spread, refine), mean F1 at margin 5 and at
1% of the length and covering over the 25 series of ``tssb-dev.json``, scored at
``change_at`` (``shiftwatch.sinks.scoring.evaluate_detector``). A plateau around a default
says it was not picked off a spike.

``null``: seeded stationary streams (white noise, AR(1) with rho 0.5 and 0.9, a sine of
period 10 or 37 under noise): alarms per 10,000 records and per 100 periods (the period the
burn-in chose), with 95% Poisson intervals, over ``--runs`` streams of ``--n`` records each;
``--threshold null`` for the null's curve.

Results: ``benchmarks/results/shape.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: (knob, values) tried one at a time around the defaults.
KNOBS = [
    ("threshold", [3.0, 4.0, 5.0, 7.0, 9.0, 12.0, "null"]),
    ("block", [1.0, 1.5, 2.5, 3.0]),
    ("min_blocks", [2, 4, 5]),
    ("confirm", [0, 2, 3]),
    ("max_blocks", [25, 100]),
    ("burn_in", [192, 256, 512, 768]),
    ("span", [0.5, 0.75, 1.5, 2.0]),
    ("dmax", [8, 12, 24]),
    ("shrinkage", [0.01, 0.025, 0.1, 0.2]),
    ("min_spread", [0.003, 0.03, 0.1]),
    ("refine", [False]),
]


def _located(values: np.ndarray, periods: list | None = None, **params) -> list[int]:
    from shiftwatch.operators.shape.detector import ShapeDetector

    det = ShapeDetector(**params)
    alarm, change_at, _, extra = det.update_many(values)
    out = [int(c) for c in change_at[alarm == 1]]
    for e in extra:
        out += [int(c) for c in e[:-1]]
    if periods is not None:
        periods.append(len(values) / det.time_scale["period"] if det.time_scale else 0.0)
    return sorted(set(out))


def score_tssb(series: list[dict], **params) -> dict:
    from shiftwatch.sinks.scoring import evaluate_detector

    rows = []
    t0 = time.perf_counter()
    for s in series:
        pts = _located(s["values"], **params)
        r = evaluate_detector(pts, {"0": s["cps"]}, s["n"])
        rows.append((r["f1"], r["f1_1pct"], r["covering"], len(pts)))
    seconds = time.perf_counter() - t0
    a = np.array(rows, dtype=float)
    return {"f1": a[:, 0].mean(), "f1_1pct": a[:, 1].mean(), "covering": a[:, 2].mean(),
            "alarms": a[:, 3].mean(), "records_per_s": sum(s["n"] for s in series) / seconds}


def sensitivity(data: Path) -> list[str]:
    series = json.loads((data / "tssb-dev.json").read_text())["series"]
    for s in series:
        s["values"] = np.asarray(s["values"], dtype=float)
    _located(series[0]["values"])  # compile
    lines = ["| setting | F1@5 | F1@1% | covering | alarms/series |",
             "| --- | ---: | ---: | ---: | ---: |"]

    def row(label: str, r: dict) -> str:
        return (f"| {label} | {r['f1']:.3f} | {r['f1_1pct']:.3f} | {r['covering']:.3f} | "
                f"{r['alarms']:.2f} |")

    base = score_tssb(series)
    lines.append(row("defaults", base))
    print(lines[-1], flush=True)
    for knob, values in KNOBS:
        for v in values:
            lines.append(row(f"{knob}={v}", score_tssb(series, **{knob: v})))
            print(lines[-1], flush=True)
    return lines


def null(runs: int, n: int, **params) -> list[str]:
    from scipy import signal, stats

    t = np.arange(n)
    streams = {
        "white noise": lambda r: r.normal(size=n),
        "AR(1), rho 0.5": lambda r: signal.lfilter([1], [1, -0.5], r.normal(size=n)),
        "AR(1), rho 0.9": lambda r: signal.lfilter([1], [1, -0.9], r.normal(size=n)),
        "sine, period 10, noise 0.3": lambda r: np.sin(2 * np.pi * t / 10)
        + 0.3 * r.normal(size=n),
        "sine, period 37, noise 0.3": lambda r: np.sin(2 * np.pi * t / 37)
        + 0.3 * r.normal(size=n),
    }
    lines = ["| stream | alarms | per 10,000 records [95% interval] | period | "
             "per 100 periods [95% interval] |",
             "| --- | ---: | --- | ---: | --- |"]
    for name, make in streams.items():
        periods: list[float] = []
        alarms = sum(len(_located(make(np.random.default_rng(seed)), periods, **params))
                     for seed in range(runs))
        lo = stats.chi2.ppf(0.025, 2 * alarms) / 2 if alarms else 0.0
        hi = stats.chi2.ppf(0.975, 2 * alarms + 2) / 2
        cells = []
        for exposure in (runs * n / 1e4, sum(periods) / 100):
            cells.append(f"{alarms / exposure:.2f} [{lo / exposure:.2f}, {hi / exposure:.2f}]"
                         if exposure else "-")
        P = np.median([n / p for p in periods if p]) if any(periods) else 0
        lines.append(f"| {name} | {alarms} | {cells[0]} | {P:.0f} | {cells[1]} |")
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["sensitivity", "null"])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--threshold", type=lambda v: v if v == "null" else float(v),
                    default=None, help="null: 'null' or a fixed threshold (default: the "
                    "detector's default)")
    args = ap.parse_args(argv)
    t0 = time.time()
    extra = {} if args.threshold is None else {"threshold": args.threshold}
    lines = (sensitivity(Path(args.data)) if args.what == "sensitivity"
             else null(args.runs, args.n, **extra))
    print(f"\n`python benchmarks/shape.py {' '.join(sys.argv[1:])}` "
          f"({time.strftime('%Y-%m-%d %H:%M')}, {time.time() - t0:.0f} s)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
