"""`class` for short multichannel series: the candidates and rule of
``benchmarks/results/clasp.md`` ("Short multichannel series"), scored as realdata.py scores.

    python benchmarks/clasp_short.py [--round 1|2] [--data ../shared/data]

Scores a round's candidates (``--round 1|2``, default 2) on ``mts-dev`` (the choice), then
the chosen one on mocap6 and tssb-dev beside per-channel ADWIN (``standardize ->
river:ADWIN``), ``auto`` and ``auto(multichannel="period")``; prints the tables and writes
nothing (the reading goes into clasp.md by hand, with the command).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
import realdata as R  # noqa: E402

ROUNDS = {
    1: {f"class(n_warmup={w}, excl_radius={e})":
        [("class", {"n_warmup": w, "window": 2000, "excl_radius": e})]
        for w in (50, 100, 200) for e in (5, 2)},
    2: {f"class(threshold={t:g}, excl_radius={e})":
        [("class", {"n_warmup": 50, "window": 2000, "excl_radius": e, "threshold": t})]
        for t in (1e-5, 1e-10, 1e-15) for e in (5, 2)},
}
CANDIDATES: dict = {}
PEERS = {"river:ADWIN": None, "auto": None, "auto (multichannel=period)": None}


def table(results: dict, ds: str, names: list[str]) -> list[str]:
    lines = [f"### {ds}", "", "| detector | F1@1% | covering | alarms/series | records/s |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for n in names:
        m = R.means(results[ds][n])
        rps = results[ds][n].get("records_per_s")
        lines.append(f"| {n} | {m['F1@1%']:.3f} | {m['covering']:.3f} | "
                     f"{m['alarms/series']:.2f} | {'-' if not rps else f'{rps:,.0f}'} |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--round", type=int, default=2, choices=sorted(ROUNDS))
    args = ap.parse_args()
    CANDIDATES.update(ROUNDS[args.round])
    base = R.detectors

    def with_candidates(channels: int) -> dict:
        return {**base(channels), **CANDIDATES}

    R.detectors = with_candidates
    mts = R.load(Path(args.data), ["mts-dev"])
    res = R.run_ours(mts, list(CANDIDATES) + list(PEERS))
    ds = R.SETS["mts-dev"]
    cov = {n: R.means(res[ds][n])["covering"] for n in CANDIDATES}
    def tie_key(n: str) -> tuple:  # round 1: larger E, then larger W; round 2: smaller T,
        p = CANDIDATES[n][0][1]    # then larger E
        return ((-p["excl_radius"], -p["n_warmup"]) if args.round == 1 else
                (p["threshold"], -p["excl_radius"]))
    order = sorted(CANDIDATES, key=lambda n: -cov[n])
    best = max(cov.values())
    tied = [n for n in CANDIDATES if best - cov[n] <= 0.005]
    chosen = sorted(tied, key=tie_key)[0]
    lines = table(res, ds, [R.ZERO, *order, *PEERS])
    lines.append(f"Chosen by the rule: **{chosen}** (mean covering {cov[chosen]:.3f}; "
                 f"within 0.005 of the best: {', '.join(tied)}).")
    lines.append("")
    others = R.load(Path(args.data), ["mocap6", "tssb-dev"])
    res2 = R.run_ours(others, [chosen, *PEERS, "class"])
    for d in others:
        lines += table(res2, d, [R.ZERO, chosen, "class", *PEERS])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
