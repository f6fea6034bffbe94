"""``shape``'s time-scale rule on seeded synthetic series: the rule before issue 36 and now.

    python benchmarks/time_scale_synthetic.py [--seeds 8] [--ar-seeds 40] [--null-runs 5]

The synthetic data the time-scale rule (issue 36 item 2,
:func:`shiftwatch.operators.period.time_scale_rule`) was checked on, regenerated with fixed
seeds (``[20261204, case, seed]``) so that the tables in ``benchmarks/results/shape.md``
("Time-scale rule") can be reproduced:

1. **Bee-dance-like series** (:func:`bee_dance_like`): 3 channels of AR(1) noise (rho 0.95)
   whose level, scale or AR coefficient changes every ``lo``-``hi`` records (20-30 and 30-60
   records in 900; 60-120 records in 1,100): no period, segments as short as the bee dance's.
2. **A carrier with a faster component** (:func:`carrier`): a period-37 sine plus a period-10
   component that alternates between a sine and a sawtooth every 400 records (2,400
   records, noise sd 0.2): a change visible at a shorter scale than the dominant period.
3. **Univariate AR(1) noise** (400 records, rho 0.9, 0.95, 0.99): which branch of the rule
   fixes the period, and the period the rule before took.
4. **False alarms of stationary noise at a given period** (``ShapeDetector(period=P)``,
   threshold 6; white noise, AR(1) 0.9 and 0.95; one and three channels; streams of
   20,000 records): what a short scale costs when there is no change.

"Before" is the rule before issue 36 (:func:`~shiftwatch.operators.period.progressive_period`:
the first ACF peak at 64, 128, 256 records, else the periodogram's strongest period at 384,
the edge of the range included), run as a given period (``burn_in_min=384``), the median
over channels. "Now" is ``ShapeDetector()`` with its defaults. Alarms are located at
``change_at`` and scored with ``evaluate_detector`` (F1 with a margin of 5 records, covering).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np
from scipy import signal

SEED = 20261204


def bee_dance_like(seed, n: int = 1100, lo: int = 60, hi: int = 120, c: int = 3,
                   rho: float = 0.95) -> tuple[np.ndarray, list[int]]:
    """AR(1) ``rho`` in ``c`` channels; every ``lo``-``hi`` records the level, the scale or the
    AR coefficient of all channels changes (the bee dance: 3 channels, 600-1,100 records, red
    noise, no period). Returns ``(y, change points)``."""
    rng = np.random.default_rng(seed)
    cps, t = [], 0
    while True:
        t += int(rng.integers(lo, hi + 1))
        if t >= n - lo:
            break
        cps.append(t)
    y, prev = np.zeros((n, c)), np.zeros(c)
    lev, sd, ar = np.zeros(c), np.ones(c), np.full(c, rho)
    for a, b in zip([0, *cps], [*cps, n], strict=True):
        kind = rng.integers(3)
        if a > 0:
            if kind == 0:
                lev = rng.normal(0, 3, size=c)
            elif kind == 1:
                sd = np.exp(rng.normal(0, 0.8, size=c))
            else:
                ar = rng.choice([rho, 0.5, 0.0], size=c)
        for i in range(a, b):
            prev = ar * prev + sd * rng.normal(size=c)
            y[i] = lev + prev
    return y, cps


def carrier(seed, n: int = 2400, every: int = 400, noise: float = 0.2
            ) -> tuple[np.ndarray, list[int]]:
    """A period-37 sine plus a period-10 component alternating sine / sawtooth every
    ``every`` records, under Gaussian noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    fast = np.where((t // every) % 2 == 0, np.sin(2 * np.pi * t / 10),
                    signal.sawtooth(2 * np.pi * t / 10))
    y = np.sin(2 * np.pi * t / 37) + 0.5 * fast + noise * rng.normal(size=n)
    return y, list(range(every, n, every))


def ar1(n: int, c: int, rho: float, seed) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = signal.lfilter([1], [1, -rho], rng.normal(size=(n, c)), axis=0)
    return x[:, 0] if c == 1 else x


def period_before(y: np.ndarray) -> int | None:
    """The rule before issue 36: the median over channels of ``progressive_period``."""
    from shiftwatch.operators.period import progressive_period

    y = y.reshape(len(y), -1)
    found = [progressive_period(y[:, ch]) for ch in range(y.shape[1])]
    ps = [p for p, _ in (f for f in found if f is not None)]
    return int(np.median(ps)) if ps else None


def _score(alarm: np.ndarray, change: np.ndarray, cps: list[int], n: int) -> dict:
    from shiftwatch.sinks.scoring import evaluate_detector

    located = sorted(int(change[i]) for i in np.flatnonzero(alarm))
    r = evaluate_detector(located, {"truth": cps}, n)
    return {"alarms": len(located), "f1": r["f1"], "covering": r["covering"]}


def changing(seeds: int) -> list[str]:
    from shiftwatch.operators.shape.detector import ShapeDetector

    cases = [("3 channels AR(1) rho 0.95, level / scale / AR coefficient change every 20-30 "
              "records, n = 900", lambda s: bee_dance_like(s, 900, 20, 30)),
             ("same, changes every 30-60 records, n = 900",
              lambda s: bee_dance_like(s, 900, 30, 60)),
             ("same, changes every 60-120 records, n = 1,100",
              lambda s: bee_dance_like(s, 1100, 60, 120)),
             ("period-37 carrier, a period-10 component alternating sine / sawtooth every 400 "
              "records, n = 2,400", carrier)]
    lines = ["| case | rule | P per seed (rule) | alarms per seed | F1@5 | covering |",
             "| --- | --- | --- | --- | ---: | ---: |"]
    for ci, (name, make) in enumerate(cases):
        rows = {"before": [], "now": []}
        for s in range(seeds):
            y, cps = make([SEED, ci, s])
            n = len(y)
            p = period_before(y)
            if p is not None:
                a, c, _, _ = ShapeDetector(period=p, burn_in_min=384).update_many(y)
                rows["before"].append((str(p), _score(a, c, cps, n)))
            det = ShapeDetector()
            a, c, _, _ = det.update_many(y)
            ts = det.time_scale or {}
            rows["now"].append((f"{ts.get('period')} ({ts.get('rule')})", _score(a, c, cps, n)))
        for rule, got in rows.items():
            lines.append(
                f"| {name if rule == 'before' else 'same'} | {rule} | "
                + ", ".join(p for p, _ in got) + " | "
                + ", ".join(str(r["alarms"]) for _, r in got) + " | "
                + f"{np.mean([r['f1'] for _, r in got]):.3f} | "
                + f"{np.mean([r['covering'] for _, r in got]):.3f} |")
    return lines


def red_noise(seeds: int) -> list[str]:
    from shiftwatch.operators.shape.detector import ShapeDetector

    lines = ["| AR(1) rho (400 records, scalar) | seeds | now: rules | now: periods | "
             "before: periods (at the edge, 96) |", "| ---: | ---: | --- | --- | --- |"]
    for ri, rho in enumerate((0.9, 0.95, 0.99)):
        rules, now, before = Counter(), [], []
        for s in range(seeds):
            y = ar1(400, 1, rho, [SEED, 10 + ri, s])
            det = ShapeDetector()
            det.update_many(y)
            ts = det.time_scale or {}
            rules[ts.get("rule")] += 1
            now.append(ts.get("period"))
            before.append(period_before(y))
        b = [p for p in before if p is not None]
        lines.append(f"| {rho} | {seeds} | "
                     + ", ".join(f"{k} {v}" for k, v in sorted(rules.items())) + " | "
                     + f"{min(now)}-{max(now)} | {min(b)}-{max(b)} ({sum(p == 96 for p in b)}) |")
    return lines


def stationary(runs: int, n: int = 20_000) -> list[str]:
    from shiftwatch.operators.shape.detector import ShapeDetector

    lines = ["| channels | P | white noise | AR(1) 0.9 | AR(1) 0.95 |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for c in (1, 3):
        for P in (4, 8, 16):
            cells = []
            for fi, rho in enumerate((0.0, 0.9, 0.95)):
                alarms = 0
                for s in range(runs):
                    y = ar1(n, c, rho, [SEED, 20 + fi, c, P, s])
                    alarms += int(ShapeDetector(period=P).update_many(y)[0].sum())
                cells.append(f"{alarms / (runs * n) * 10_000:.2f}")
            lines.append(f"| {c} | {P} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=8, help="seeds per changing case")
    ap.add_argument("--ar-seeds", type=int, default=40, help="seeds per AR(1) coefficient")
    ap.add_argument("--null-runs", type=int, default=5, help="stationary streams per cell")
    args = ap.parse_args(argv)
    t0 = time.time()
    print("`python benchmarks/time_scale_synthetic.py"
          + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
          + f"` ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)\n")
    print("Series with changes (F1 at margin 5, covering; means over the seeds):\n")
    print("\n".join(changing(args.seeds)))
    print("\nWhich branch fixes the period on red noise:\n")
    print("\n".join(red_noise(args.ar_seeds)))
    print("\nFalse alarms per 10,000 records of stationary noise at a given period "
          f"(threshold 6, {args.null_runs} streams of 20,000 records per cell):\n")
    print("\n".join(stationary(args.null_runs)))
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
