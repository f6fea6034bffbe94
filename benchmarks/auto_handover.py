"""``auto``'s level route: ADWIN alone, ADWIN until ``cs`` can judge, or a relay of the two.

    python benchmarks/auto_handover.py [--data ../shared/data] [--sets SET[,SET]] [--jobs N]

Runs ``auto`` (its defaults, ``multichannel="level"``) with ``level`` = ``"adwin"`` (the
default before this comparison), ``"handover"`` and ``"relay"`` (``operators/auto.py``) on
tssb-dev, mocap6 and River's TCPD series with ``benchmarks/auto_level.py``'s harness (hence
``benchmarks/realdata.py``'s ``load``, evaluating sink and ``score``), then the synthetic
streams reported beside the rule (a level shift in white noise; change-free white noise and
AR(1) streams; seeded). The rule that uses these numbers is declared in
``benchmarks/results/auto.md`` ("The level route: ADWIN first, ``cs`` once it can judge");
this script only measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import auto_cs_level  # noqa: E402
import auto_level  # noqa: E402

CANDIDATES: list[dict | None] = [None, {"level": "handover"}, {"level": "relay"}]
LABELS = {None: '(a) level="adwin"', "handover": '(d) level="handover"',
          "relay": '(e) level="relay"'}


def label(params: dict | None) -> str:
    return LABELS[None if params is None else params["level"]]


def auto_params(params: dict | None) -> dict:
    return {} if params is None else dict(params)


def use_candidates() -> None:
    auto_cs_level.point(CANDIDATES, label, auto_params)


def run_one(job):
    use_candidates()
    return auto_level.run_one(job)


def _stream(kind: str, rng) -> tuple[np.ndarray, int | None]:
    if kind == "shift":  # 1 sd level shift at 1,500 in white noise, 3,000 records
        return np.r_[rng.normal(0, 1, 1500), rng.normal(1, 1, 1500)], 1500
    if kind == "short":  # 2 sd level shift at 20 in white noise, 40 records
        return np.r_[rng.normal(0, 1, 20), rng.normal(2, 1, 20)], 20
    if kind == "white":
        return rng.normal(size=3000), None
    e = rng.normal(size=3000)  # AR(1) 0.9
    y = np.empty(3000)
    y[0] = e[0] / np.sqrt(1 - 0.81)
    for t in range(1, 3000):
        y[t] = 0.9 * y[t - 1] + e[t]
    return y, None


STREAMS = {"shift": "1 sd level shift at 1,500, white noise (3,000 records)",
           "white": "white noise, no change (3,000 records)",
           "ar": "AR(1) 0.9, no change (3,000 records)",
           "short": "2 sd level shift at 20, white noise (40 records)"}


def synthetic(candidates=None, name=None, params=None, kinds=("shift", "white", "ar"),
              seeds: int = 50) -> str:
    """Alarms of each candidate on seeded synthetic streams (reported, not part of the rule).
    ``candidates``, ``name`` and ``params``: the candidates, their labels and ``auto``'s
    parameters for each (this script's by default)."""
    from shiftwatch.operators import create

    candidates = CANDIDATES if candidates is None else candidates
    name, params = name or label, params or auto_params
    lines = [f"| stream ({seeds} seeds) | candidate | alarms/stream | "
             "streams with the shift found (an alarm within 300 records after it) | "
             "mean delay (records) |", "| --- | --- | ---: | ---: | ---: |"]
    for kind in kinds:
        for p in candidates:
            alarms, found, delays = 0, 0, []
            for seed in range(seeds):
                y, at = _stream(kind, np.random.default_rng([20261204, seed]))
                op = create("auto", **params(p))
                outs = op.process_batch([{"ts": i, "value": float(v)} for i, v in enumerate(y)])
                hits = [o["ts"] for o in outs if o["alarm"]]
                alarms += len(hits)
                if at is not None:
                    after = [h for h in hits if at <= h < at + 300]
                    if after:
                        found += 1
                        delays.append(after[0] - at)
            if at is None:
                tail = "- | -"
            else:
                tail = f"{found}/{seeds} | " + (f"{np.mean(delays):.0f}" if delays else "-")
            lines.append(f"| {STREAMS[kind]} | {name(p)} | {alarms / seeds:.2f} | {tail} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    use_candidates()
    got = auto_level.run(argv, "benchmarks/auto_handover.py", run_one)
    if got == 2:
        return 2
    auto_cs_level.report(*got)
    print("#### Synthetic streams (reported beside the rule, not part of it)\n")
    print(synthetic())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
