"""Choose ``class``'s warm-up by the rule declared in ``benchmarks/results/clasp.md``.

    python benchmarks/clasp_defaults.py [--data ../shared/data] [--round warmup|threshold|test]

Runs ``class`` with each candidate ``n_warmup`` (round ``warmup``, the first) or
significance ``threshold`` (round ``threshold``, with ``n_warmup`` at its default) or the
significance ``test`` (round ``test``: claspy's two-sided, the one-sided) on
tssb-dev (located changes, scored as ``benchmarks/realdata.py`` scores them) and prints the
table and the choice by that round's rule (clasp.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realdata as rd  # noqa: E402

CANDIDATES = (200, 500, 1000, 2000)
#: round "threshold": the significance test's p-value (1e-50 the paper's)
THRESHOLDS = (1e-20, 1e-35, 1e-50, 1e-70, 1e-100)
PAPER = 1e-50
#: round "test": claspy's two-sided rank-sum test against the one-sided one
TESTS = ("two-sided", "one-sided")


def run(data: Path, param: str = "n_warmup") -> list[dict]:
    series = rd.load(data, ["tssb-dev"])[rd.SETS["tssb-dev"]]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cands = {"n_warmup": CANDIDATES, "threshold": THRESHOLDS, "test": TESTS}[param]
        for n_warmup in cands:
            chain = [("class", {param: n_warmup})]
            per = []
            t0 = time.perf_counter()
            for s in series:
                pts, _ = rd.located(rd._records(s["values"]), chain, s["annotations"],
                                    Path(tmp) / f"w{n_warmup}" / s["name"])
                per.append(rd.score(pts, s["annotations"], s["n"]))
            m = rd.means({"series": per})
            rows.append({param: n_warmup, **m, "objective": (m["F1@1%"] + m["covering"]) / 2,
                         "seconds": time.perf_counter() - t0, "series": per})
            print(f"{param}={n_warmup!s:<9} F1@1% {m['F1@1%']:.3f} covering {m['covering']:.3f} "
                  f"objective {rows[-1]['objective']:.4f} alarms/series "
                  f"{m['alarms/series']:.2f}", flush=True)
    return rows


def choose(rows: list[dict]) -> int:
    best = max(r["objective"] for r in rows)
    return min(r["n_warmup"] for r in rows if r["objective"] >= best - 0.01)


def choose_threshold(rows: list[dict]) -> float:
    """The paper's 1e-50 unless a candidate's objective is more than 0.01 above its."""
    paper = next(r["objective"] for r in rows if r["threshold"] == PAPER)
    better = [r for r in rows if r["objective"] > paper + 0.01]
    return max(better, key=lambda r: r["objective"])["threshold"] if better else PAPER


def choose_test(rows: list[dict]) -> str:
    """The one-sided test unless its objective is below the two-sided test's (clasp.md)."""
    obj = {r["test"]: r["objective"] for r in rows}
    return "one-sided" if obj["one-sided"] >= obj["two-sided"] else "two-sided"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=rd.ROOT.parent / "shared" / "data")
    ap.add_argument("--round", choices=("warmup", "threshold", "test"), default="warmup")
    args = ap.parse_args(argv)
    if args.round in ("test", "threshold"):
        param = args.round
        rows = run(args.data, param)
        fmt = "{:g}" if param == "threshold" else "{}"
        print(f"| {param} | F1@1% | covering | objective | alarms/series | seconds |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {fmt.format(r[param])} | {r['F1@1%']:.3f} | {r['covering']:.3f} | "
                  f"{r['objective']:.4f} | {r['alarms/series']:.2f} | {r['seconds']:.1f} |")
        chosen = choose_threshold(rows) if param == "threshold" else choose_test(rows)
        print(f"chosen: {param}={fmt.format(chosen)}")
        return 0
    rows = run(args.data)
    print("| n_warmup | F1@1% | covering | objective | alarms/series | seconds |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['n_warmup']} | {r['F1@1%']:.3f} | {r['covering']:.3f} | "
              f"{r['objective']:.4f} | {r['alarms/series']:.2f} | {r['seconds']:.1f} |")
    print(f"chosen: n_warmup={choose(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
