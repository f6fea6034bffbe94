"""Real annotated series: quality and speed of every detector side by side, ClaSS as the peer.

    python benchmarks/realdata.py [--data ../shared/data] [--class-venv DIR] [--no-class]

Scores never alarming, River's ADWIN, Page-Hinkley and KSWIN, ``cs``, the ``karcher`` chain
(``standardize -> embed -> window_covariance -> karcher``; for vectors ``standardize ->
window_covariance -> karcher``), ``shape`` and ClaSS (the authors' ``claspy``, run in its own
virtual environment by ``benchmarks/peers/peer_env.py``) on

* ``tssb-dev.json``: 25 TSSB series (changes of shape, period, correlation), univariate;
* ``mocap6.json``: 6 CMU motion-capture sequences, 12 channels;
* River's TCPD series (``Occupancy``, ``RunLog``, ``AirlinePassengers``, ``Bitcoin``,
  ``UKCoalEmploy``), all annotators.

Every detector runs with its defaults (KSWIN with ``seed=7``) behind ``standardize`` (burn-in
30) where it needs a scale (``shape`` and ClaSS take the raw series). Alarms are scored at
their ``change_at`` (where the detector says the change began) with TCPDBench's F1 at margin
5, the same F1 with a margin of ``int(0.01 * n)`` (TSSB / ClaSS's convention) and covering,
mean over series (``shiftwatch.sinks.scoring.evaluate_detector``). records/s: the operators
alone over each series in micro-batches of 1,000 (the stage executor, as replay and Kafka run
them), total records over total seconds; ClaSS's is its own update loop, timed by the peer.

``../shared/data`` holds development data (for choosing); the held-out series are not in the
repository. Writes ``benchmarks/results/realdata.md`` and ``realdata.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

TCPD = ["Occupancy", "RunLog", "AirlinePassengers", "Bitcoin", "UKCoalEmploy"]
ZERO = "zero (no alarm)"


def detectors(channels: int) -> dict[str, list[tuple[str, dict]]]:
    """name -> the operator chain (registered names and parameters) for ``channels``."""
    std = ("standardize", {})
    chain = ([std, ("embed", {}), ("window_covariance", {}), ("karcher", {})] if channels == 1
             else [std, ("window_covariance", {}), ("karcher", {})])
    return {
        "river:ADWIN": [std, ("river:ADWIN", {})],
        "river:PageHinkley": [std, ("river:PageHinkley", {})],
        "river:KSWIN": [std, ("river:KSWIN", {"seed": 7})],
        "cs": [std, ("cs", {})],
        "karcher chain": chain,
        "shape": [("shape", {})],
    }


DETECTOR_NAMES = [ZERO, *detectors(1), "ClaSS"]


def load(data: Path) -> dict[str, list[dict]]:
    """Dataset -> series ``{"name", "values" (n,) or (n, c), "annotations", "n"}``."""
    from shiftwatch.streams import RiverDriftSource

    out: dict[str, list[dict]] = {}
    tssb = json.loads((data / "tssb-dev.json").read_text())["series"]
    out["tssb-dev"] = [{"name": s["name"], "values": np.asarray(s["values"], dtype=float),
                        "annotations": {"0": list(s["cps"])}, "n": s["n"]} for s in tssb]
    mocap = json.loads((data / "mocap6.json").read_text())["series"]
    out["mocap6"] = [{"name": s["name"], "values": np.asarray(s["values"], dtype=float),
                      "annotations": {"0": list(s["cps"])}, "n": s["n"]} for s in mocap]
    tcpd = []
    for name in TCPD:
        src = RiverDriftSource(name)
        recs = list(src)
        vals = np.asarray([r["value"] for r in recs], dtype=float)
        tcpd.append({"name": name, "values": vals, "annotations": src.annotations,
                     "n": len(recs)})
    out["TCPD (River)"] = tcpd
    return out


def _records(values: np.ndarray) -> list[dict]:
    if values.ndim == 1:
        return [{"key": "s", "ts": float(i), "value": float(v)} for i, v in enumerate(values)]
    return [{"key": "s", "ts": float(i), "value": v.tolist()} for i, v in enumerate(values)]


def located(records: list[dict], chain, annotations, workdir: Path) -> list[int]:
    """The located changes (``change_at`` mapped to positions by the evaluating sink)."""
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.operators import create
    from shiftwatch.sinks import EvaluationSink

    ops = [create(name, **params) for name, params in chain]
    sink = EvaluationSink(workdir, annotations=annotations, plots=False)
    Pipeline(records, ops, [sink], progress=False).run()
    out: list[int] = []
    for per_key in sink.key_reports().values():  # keys.jsonl read back
        out += [int(p) for p in per_key.get("located", [])]
    return sorted(out)


def seconds(records: list[dict], chain, batch: int = 1000) -> float:
    """The operators' own time over ``records`` in micro-batches (no sink)."""
    from shiftwatch.deploy.executor import StageExecutor
    from shiftwatch.operators import create

    ex = StageExecutor([create(name, **params) for name, params in chain])
    recs = [{**r, "offset": i} for i, r in enumerate(records)]
    t0 = time.perf_counter()
    for i in range(0, len(recs), batch):
        ex.process(recs[i:i + batch])
    return time.perf_counter() - t0


def score(points: list[int], annotations, n: int) -> dict:
    from shiftwatch.sinks.scoring import evaluate_detector

    r = evaluate_detector(points, annotations, n)
    return {"f1": r["f1"], "f1_1pct": r["f1_1pct"], "covering": r["covering"],
            "alarms": len(points), "located": points}


def run_ours(datasets: dict, names: list[str] | None = None) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ds, series in datasets.items():
            res = results.setdefault(ds, {})
            res[ZERO] = {"series": [score([], s["annotations"], s["n"]) for s in series]}
            channels = 1 if series[0]["values"].ndim == 1 else series[0]["values"].shape[1]
            for det, _ in detectors(channels).items():
                if names and det not in names:
                    continue
                per, total_s, total_n = [], 0.0, 0
                for s in series:
                    c = 1 if s["values"].ndim == 1 else s["values"].shape[1]
                    chain = detectors(c)[det]
                    recs = _records(s["values"])
                    pts = located(recs, chain, s["annotations"],
                                  Path(tmp) / ds / det.replace(":", "-") / s["name"])
                    per.append(score(pts, s["annotations"], s["n"]))
                    total_s += seconds(recs, chain)
                    total_n += len(recs)
                res[det] = {"series": per, "records_per_s": total_n / total_s}
                print(f"  {ds:<14} {det:<18} {summarise(res[det])}", flush=True)
    return results


def run_class(datasets: dict, venv: str | None) -> dict:
    from peer_env import ensure_venv, run_class_doc

    ensure_venv(venv, log=lambda m: print(f"  ClaSS peer: {m}", flush=True))
    out: dict = {}
    for ds, series in datasets.items():
        doc = run_class_doc([{"name": s["name"], "values": s["values"]} for s in series],
                            venv=venv)
        per, wall, n = [], 0.0, 0
        for s, r in zip(series, doc["results"], strict=True):
            per.append({**score(sorted(int(c) for c in r["change_points"]), s["annotations"],
                                s["n"]), "status": r["status"]})
            wall += r["wall_s"]
            n += r["n"]
        params = doc["results"][0]["params"] if doc["results"] else {}
        out[ds] = {"series": per, "records_per_s": n / wall if wall else None,
                   "params": params, "claspy": doc.get("claspy_version")}
        print(f"  {ds:<14} {'ClaSS':<18} {summarise(out[ds])}", flush=True)
    return out


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def summarise(res: dict) -> str:
    s = res["series"]
    rate = res.get("records_per_s")
    return (f"F1@5 {_mean(r['f1'] for r in s):.3f}  F1@1% {_mean(r['f1_1pct'] for r in s):.3f}"
            f"  cover {_mean(r['covering'] for r in s):.3f}  alarms/series "
            f"{_mean(r['alarms'] for r in s):.2f}" + (f"  {rate:,.0f} rec/s" if rate else ""))


def table(results: dict) -> str:
    lines = []
    for ds, res in results.items():
        n = len(next(iter(res.values()))["series"])
        lines += [f"### {ds} ({n} series)", "",
                  "| detector | F1@5 | F1@1% | covering | alarms/series | records/s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for det in DETECTOR_NAMES:
            if det not in res:
                continue
            s = res[det]["series"]
            rate = res[det].get("records_per_s")
            lines.append(f"| {det} | {_mean(r['f1'] for r in s):.3f} | "
                         f"{_mean(r['f1_1pct'] for r in s):.3f} | "
                         f"{_mean(r['covering'] for r in s):.3f} | "
                         f"{_mean(r['alarms'] for r in s):.2f} | "
                         f"{f'{rate:,.0f}' if rate else '-'} |")
        if "ClaSS" in res and res["ClaSS"].get("records_per_s") and "shape" in res:
            ratio = res["shape"]["records_per_s"] / res["ClaSS"]["records_per_s"]
            lines.append("")
            lines.append(f"`shape` runs {ratio:.1f}x ClaSS's records/s on these series.")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="folder with tssb-dev.json and mocap6.json (default ../shared/data)")
    ap.add_argument("--class-venv", default=None,
                    help="the ClaSS peer venv (default ~/.cache/shiftwatch-peers/class; made "
                         "when missing, about 1-2 minutes)")
    ap.add_argument("--no-class", action="store_true", help="leave ClaSS out")
    ap.add_argument("--only", help="comma-separated detectors to run (default: all)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "realdata.md"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    if not (data / "tssb-dev.json").exists():
        print(f"no tssb-dev.json in {data}: give --data", file=sys.stderr)
        return 2
    t0 = time.time()
    datasets = load(data)
    names = args.only.split(",") if args.only else None
    results = run_ours(datasets, names)
    class_params = None
    if not args.no_class and (names is None or "ClaSS" in names):
        peer = run_class(datasets, args.class_venv)
        for ds in datasets:
            results[ds]["ClaSS"] = peer[ds]
        class_params = {"claspy": peer["tssb-dev"]["claspy"],
                        "params": peer["tssb-dev"]["params"]}
    import numba
    import river

    head = [
        "# Real annotated series: every detector with its defaults, and ClaSS",
        "",
        f"`python benchmarks/realdata.py` ({time.strftime('%Y-%m-%d %H:%M')}, "
        f"{time.time() - t0:.0f} s; {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, NumPy {np.__version__}, Numba "
        f"{numba.__version__}, River {river.__version__}).",
        "",
        "Development data (`../shared/data`, for choosing) and River's TCPD series; alarms "
        "scored at `change_at`; F1@5 = TCPDBench F1 with a margin of 5, F1@1% = the same F1 "
        "with a margin of 1% of the series length (TSSB / ClaSS), covering as TCPDBench; "
        "means over series (several annotators: TCPDBench's mean over annotators). "
        "records/s: the operators alone (micro-batches of 1,000), ClaSS its own update loop, "
        "on this machine in this run.",
        "",
    ]
    if class_params:
        head += [f"ClaSS: claspy {class_params['claspy']} in its own venv "
                 "(`benchmarks/peers/peer_env.py`), fed one value at a time; parameters "
                 f"(tssb-dev's first series): `{json.dumps(class_params['params'])}`. Its "
                 "authors publish F1@1% 0.742 / covering 0.807 over all 75 TSSB series; "
                 "multichannel series are projected on the first principal component of "
                 "the warm-up (ClaSS is univariate).", ""]
    Path(args.out).write_text("\n".join(head) + table(results))
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {ds: {det: r for det, r in res.items()} for ds, res in results.items()},
        indent=1, default=float))
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
