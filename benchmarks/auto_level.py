"""``auto``'s level detector: River's ADWIN ``delta`` candidates on the development data.

    python benchmarks/auto_level.py [--data ../shared/data] [--sets SET[,SET]] [--jobs N]
                                    [--multichannel]

Runs ``auto`` (its defaults, ``multichannel="level"``) with each candidate ``level_params``
(``None`` = River's ADWIN defaults, delta 0.002; then delta 0.0002, 0.00002, 0.000002) on
tssb-dev, mocap6 and River's TCPD series, with ``benchmarks/realdata.py``'s own harness
(``load``, ``located``, ``score``: the same records, pipeline, evaluating sink and scores as
its ``auto`` row). Prints, per set, F1@5, F1@1%, covering, alarms / false / missed per series
and the means over the three sets (each set's mean over its series, the three averaged with
equal weight), then the alarms, series by series, of the series whose key ends on the level
route. The rule that uses these numbers is declared in ``benchmarks/results/auto.md``
("The level detector's ADWIN delta"); this script only measures. ``--multichannel`` runs the
candidates of "The multichannel keys' ADWIN delta" instead (delta 0.002, 0.01, 0.05, 0.2; run
it with ``--sets mocap6,mts-dev``); ``--multichannel-gate`` those of "The multichannel keys'
level gate" (``multichannel_gate=3`` with delta 0.2, 0.05, 0.01, 0.002, beside the default
without a gate; the same sets); ``--multichannel-restart`` those of "One change, one restart"
(``multichannel_restart=True`` with delta 0.2 and 0.002, beside the default; the same sets).
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

CANDIDATES: list[dict | None] = [None, {"delta": 0.0002}, {"delta": 0.00002},
                                 {"delta": 0.000002}]
#: realdata.md / auto.md's ``auto`` row (F1@1%, covering): the harness check for ``None``.
EXPECTED = {"tssb-dev": (0.566, 0.632), "mocap6": (0.483, 0.717),
            "TCPD (River)": (0.638, 0.573)}
#: ``--multichannel``: the candidates of auto.md's "The multichannel keys' ADWIN delta"
MULTI_CANDIDATES: list[dict | None] = [None, {"delta": 0.01}, {"delta": 0.05}, {"delta": 0.2}]
#: ``auto``'s defaults when the rounds of 2026-12-04 ran (and ``auto_clock``, ``auto_handover``,
#: ``auto_cs_level``, which use this harness): the candidates are changes of these, so a
#: re-run reproduces those rounds whatever ``auto``'s defaults are now.
BASE: dict = {"period": "shape", "aperiodic": "level", "level_gate": None,
              "multichannel_delta": None}
KEYS = ("F1@5", "F1@1%", "covering", "alarms/series")


#: ``--multichannel-gate``: the candidates of auto.md's "The multichannel keys' level gate"
#: (None: ``auto``'s defaults of that round, delta 0.2 and no gate)
GATE_CANDIDATES: list[dict | None] = [None] + [{"delta": d, "gate": 3.0}
                                               for d in (0.2, 0.05, 0.01, 0.002)]


#: ``--multichannel-restart``: the candidates of auto.md's "One change, one restart"
#: (None: ``auto``'s defaults of that round, delta 0.2, no gate, no restart)
RESTART_CANDIDATES: list[dict | None] = [None] + [{"delta": d, "restart": True}
                                                  for d in (0.2, 0.002)]


#: what the candidate None is called (``run`` changes it for a round on other defaults)
NONE_LABEL = "None (delta 0.002)"


def label(params: dict | None) -> str:
    if params is None:
        return NONE_LABEL
    if "restart" in params:
        return f"restart, delta {params['delta']:g}"
    if "gate" in params:
        return f"gate {params['gate']:g}, delta {params['delta']:g}"
    return f"delta {params['delta']:g}"


def auto_params(params: dict | None) -> dict:
    """``auto``'s parameters for a candidate (a caller may point this elsewhere)."""
    return {} if params is None else {"level_params": dict(params)}


def _multi_params(params: dict | None) -> dict:
    """``--multichannel``: a candidate's delta for the multichannel keys."""
    return {} if params is None else {"multichannel_delta": params["delta"]}


def _restart_params(params: dict | None) -> dict:
    """``--multichannel-restart``: a candidate's delta and restart for multichannel keys."""
    return {} if params is None else {"multichannel_delta": params["delta"],
                                      "multichannel_restart": params["restart"]}


def _gate_params(params: dict | None) -> dict:
    """``--multichannel-gate``: a candidate's delta and gate for the multichannel keys."""
    return {} if params is None else {"multichannel_delta": params["delta"],
                                      "multichannel_gate": params["gate"]}


def route(op) -> str | None:
    """The route ``auto`` ended on for the key ``s`` (``"shape"``, ``"level"``, ...)."""
    from shiftwatch.operators.keyed import Keyed

    inner = op.existing("s") if isinstance(op, Keyed) else op
    if inner is None:
        return None
    return inner.state_dict().get("state", {}).get("route")


def located_with_route(records, chain, annotations, workdir: Path):
    """:func:`realdata.located`'s run, also returning the final route of ``auto``."""
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.operators import create
    from shiftwatch.sinks import EvaluationSink

    ops = [create(name, **params) for name, params in chain]
    sink = EvaluationSink(workdir, annotations={"s": annotations}, plots=False)
    pipe = Pipeline(records, ops, [sink], progress=False)
    pipe.run()
    out: list[int] = []
    for per_key in sink.key_reports().values():
        out += [int(p) for p in per_key.get("located", [])]
    return sorted(out), route(pipe.operators[-1])


def run_one(job: tuple[int, str, list[dict]]) -> tuple[int, str, list[dict], float]:
    """One candidate on one data set: per-series score rows (with ``name`` and ``route``)."""
    ci, ds, series = job
    params = CANDIDATES[ci]
    chain = [("auto", {**BASE, **auto_params(params)})]
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for s in series:
            recs = realdata._records(s["values"])
            pts, rt = located_with_route(recs, chain, s["annotations"],
                                         Path(tmp) / s["name"])
            row = realdata.score(pts, s["annotations"], s["n"])
            row.update(name=s["name"], route=rt)
            # the same located points through realdata.located (the None check is exact)
            if ci == 0 and s is series[0]:
                again, _ = realdata.located(recs, chain, s["annotations"], Path(tmp) / "chk")
                if again != pts:
                    raise AssertionError(f"{s['name']}: located differs from realdata's")
            rows.append(row)
    return ci, ds, rows, time.perf_counter() - t0


def means(rows: list[dict]) -> dict:
    return realdata.means({"series": rows})


def tables(results: dict, sets: list[str]) -> str:
    lines = []
    for ds in sets:
        n = len(results[0][ds])
        lines += [f"### {ds} ({n} series)", "",
                  "| level_params | F1@5 | F1@1% | covering | alarms/series | false/series | "
                  "missed/series |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for ci, p in enumerate(CANDIDATES):
            rows = results[ci][ds]
            m = means(rows)
            lines.append(f"| {label(p)} | {m['F1@5']:.3f} | {m['F1@1%']:.3f} | "
                         f"{m['covering']:.3f} | {m['alarms/series']:.2f} | "
                         f"{realdata._mean(r['n_false'] for r in rows):.2f} | "
                         f"{realdata._mean(r['n_missed'] for r in rows):.2f} |")
        lines.append("")
    lines += [f"### Means over the {len(sets)} sets (equal weight)", "",
              "| level_params | " + " | ".join(f"{ds} F1@1% / cov" for ds in sets)
              + " | mean F1@5 | mean F1@1% | mean covering |",
              "| --- | " + " | ".join("---:" for _ in sets) + " | ---: | ---: | ---: |"]
    for ci, p in enumerate(CANDIDATES):
        per = {ds: means(results[ci][ds]) for ds in sets}
        avg = {k: float(np.mean([per[ds][k] for ds in sets])) for k in KEYS}
        lines.append(f"| {label(p)} | " + " | ".join(
            f"{per[ds]['F1@1%']:.3f} / {per[ds]['covering']:.3f}" for ds in sets)
            + f" | {avg['F1@5']:.3f} | {avg['F1@1%']:.4f} | {avg['covering']:.4f} |")
    lines.append("")
    return "\n".join(lines)


def level_series(results: dict, sets: list[str]) -> str:
    """Per series not routed to ``shape`` in the default's run (``level``, or ``deciding``:
    shorter than the burn-in, so only the level detector ran): alarms / false / F1@1% / cov."""
    lines = ["### Series left to the level detector (route `level`, or `deciding`: shorter "
             "than the burn-in); alarms / false / F1@1% / covering per candidate", "",
             "| set | series | route | changes | " + " | ".join(label(p) for p in CANDIDATES)
             + " |",
             "| --- | --- | --- | ---: | " + " | ".join("---" for _ in CANDIDATES) + " |"]
    for ds in sets:
        for i, r0 in enumerate(results[0][ds]):
            if r0["route"] == "shape":
                continue
            cells = []
            for ci in range(len(CANDIDATES)):
                r = results[ci][ds][i]
                mark = "" if r["route"] == r0["route"] else f" ({r['route']})"
                cells.append(f"{r['alarms']} / {r['n_false']} / {r['f1_1pct']:.3f} / "
                             f"{r['covering']:.3f}{mark}")
            lines.append(f"| {ds} | {r0['name']} | {r0['route']} | {len(r0['true_changes'])} | "
                         + " | ".join(cells) + " |")
    lines += ["", "Alarms on the other (shape-route) series, per candidate: " + "; ".join(
        f"{label(p)} " + ", ".join(
            f"{ds} {sum(r['alarms'] for r in results[ci][ds] if r['route'] == 'shape')}"
            for ds in sets) for ci, p in enumerate(CANDIDATES)) + ".", ""]
    return "\n".join(lines)


def check(results: dict, sets: list[str]) -> str:
    out = []
    for ds in sets:
        m = means(results[0][ds])
        got = (round(m["F1@1%"], 3), round(m["covering"], 3))
        exp = EXPECTED.get(ds)
        ok = exp is None or got == exp
        out.append(f"{ds}: None gives F1@1% {got[0]:.3f}, covering {got[1]:.3f}; "
                   f"realdata.md {exp} -> {'same' if ok else 'DIFFERENT'}")
    return ("Harness check (candidate None against realdata.md's `auto` of the rounds' time, "
            "now its `auto (before level_gate)` row): " + "; ".join(out))


def run(argv, script: str, runner=None):
    """Parse the command line, run every candidate (``CANDIDATES``, ``label``: this module's
    or what a caller pointed them at) on every set in worker processes, print the progress
    and the command; returns ``(results, sets)``, or 2 for an unknown set."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(realdata.ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default=",".join(realdata.SETS),
                    help=f"comma-separated ({', '.join(realdata.SETS)})")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--multichannel", action="store_true",
                    help="the multichannel keys' delta candidates (auto.md)")
    ap.add_argument("--multichannel-gate", action="store_true",
                    help="the multichannel keys' level gate candidates (auto.md)")
    ap.add_argument("--multichannel-restart", action="store_true",
                    help="the multichannel keys' restart candidates (auto.md)")
    args = ap.parse_args(argv)
    global BASE, auto_params, NONE_LABEL
    if args.multichannel_restart:  # on the defaults of its round (2026-12-08)
        CANDIDATES[:] = RESTART_CANDIDATES
        BASE = {}
        auto_params = _restart_params
        NONE_LABEL = "default (delta 0.2, no restart)"
    elif args.multichannel_gate:  # on the defaults of its round (2026-12-07 16:00 UTC)
        CANDIDATES[:] = GATE_CANDIDATES
        BASE = {"period": "shape+class", "aperiodic": "class", "level_gate": 3.0,
                "multichannel_delta": 0.2, "multichannel_gate": None}
        auto_params = _gate_params
    elif args.multichannel:  # on the defaults of its round (2026-12-07): class, the gate
        CANDIDATES[:] = MULTI_CANDIDATES
        BASE = {"period": "class", "aperiodic": "class", "level_gate": 3.0,
                "multichannel_delta": None}
        auto_params = _multi_params
    keys = args.sets.split(",")
    bad = [k for k in keys if k not in realdata.SETS]
    if bad:
        print(f"unknown data set: {', '.join(bad)}", file=sys.stderr)
        return 2
    t0 = time.time()
    datasets = realdata.load(Path(args.data), keys)
    sets = list(datasets)
    jobs = [(ci, ds, datasets[ds]) for ci in range(len(CANDIDATES)) for ds in sets]
    results: dict = {ci: {} for ci in range(len(CANDIDATES))}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for ci, ds, rows, secs in pool.map(runner or run_one, jobs):
            results[ci][ds] = rows
            m = means(rows)
            print(f"  {label(CANDIDATES[ci]):<26} {ds:<14} "
                  + "  ".join(f"{k} {m[k]:.3f}" for k in KEYS) + f"  ({secs:.0f} s)",
                  flush=True)
    command = f"python {script}" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    print(f"\n`{command}` ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
          f"{time.time() - t0:.0f} s)\n")
    return results, sets


def main(argv=None) -> int:
    got = run(argv, "benchmarks/auto_level.py")
    if got == 2:
        return 2
    results, sets = got
    print(tables(results, sets))
    print(level_series(results, sets))
    print(check(results, sets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
