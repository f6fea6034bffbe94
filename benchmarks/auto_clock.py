"""``auto``'s level route: River ADWIN's ``clock`` (32, 8, 1) on the development data.

    python benchmarks/auto_clock.py [--data ../shared/data] [--sets SET[,SET]] [--jobs N]

Runs ``auto`` (its defaults) with ``level_params`` = ``None`` (ADWIN's ``clock=32``),
``{"clock": 8}`` and ``{"clock": 1}`` on tssb-dev, mocap6 and River's TCPD series with
``benchmarks/auto_level.py``'s harness, then the seeded synthetic streams of
``benchmarks/auto_handover.py`` (with a 40-record one) and the replay cost of each candidate.
The rule that uses these numbers is declared in ``benchmarks/results/auto.md`` ("ADWIN's
clock on the level route"); this script only measures.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import auto_cs_level  # noqa: E402
import auto_handover  # noqa: E402
import auto_level  # noqa: E402

CANDIDATES: list[dict | None] = [None, {"clock": 8}, {"clock": 1}]


def label(params: dict | None) -> str:
    return "clock 32 (None)" if params is None else f"clock {params['clock']}"


def auto_params(params: dict | None) -> dict:
    return {} if params is None else {"level_params": dict(params)}


def use_candidates() -> None:
    auto_cs_level.point(CANDIDATES, label, auto_params)


def run_one(job):
    use_candidates()
    return auto_level.run_one(job)


def cost(n: int = 200_000, repeats: int = 3) -> str:
    """Records/s of ``auto`` on one aperiodic key (AR(1) 0.5, level route), best of repeats."""
    from shiftwatch.operators import create

    rng = np.random.default_rng(20261204)
    y = np.empty(n)
    y[0] = 0.0
    e = rng.normal(size=n)
    for t in range(1, n):
        y[t] = 0.5 * y[t - 1] + e[t]
    recs = [{"ts": i, "value": float(v)} for i, v in enumerate(y)]
    lines = ["| candidate | records/s (best of 3, one key, 200,000 records) |", "| --- | ---: |"]
    for p in CANDIDATES:
        best = np.inf
        for _ in range(repeats):
            op = create("auto", **auto_params(p))
            t0 = time.perf_counter()
            for k in range(0, n, 1000):
                op.process_batch(recs[k:k + 1000])
            best = min(best, time.perf_counter() - t0)
        lines.append(f"| {label(p)} | {n / best:,.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    use_candidates()
    got = auto_level.run(argv, "benchmarks/auto_clock.py", run_one)
    if got == 2:
        return 2
    auto_cs_level.report(*got)
    print("#### Synthetic streams (reported beside the rule, not part of it; seeds "
          "`[20261204, 0..49]`)\n")
    print(auto_handover.synthetic(CANDIDATES, label, auto_params,
                                  kinds=("short", "shift", "white", "ar")))
    print("\n#### Replay cost (reported beside the rule, not part of it)\n")
    print(cost())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
