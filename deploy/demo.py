"""``shiftwatch demo``: the embedded default job, no broker.

Replays the real, annotated change-point series that River ships (from the TCPD benchmark,
van den Burg & Williams 2020) through several detectors side by side, each behind the same
``standardize`` stage, scores every run with the TCPD F1 (margin 5) and covering, prints a
comparison table and writes ``report.json`` and ``demo.png``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from shiftwatch.operators import create
from shiftwatch.operators.transforms import Standardize

__all__ = ["run_demo", "DEFAULT_DATASETS", "DEFAULT_DETECTORS", "DEMO_PARAMS"]

#: The River TCPD series whose annotations line up with the shipped data (Apple and
#: BrentSpotPrice do not; see shiftwatch.streams.river_data).
DEFAULT_DATASETS = ["Occupancy", "RunLog", "AirlinePassengers", "Bitcoin", "UKCoalEmploy"]

#: Detectors compared by default; method operators add themselves here when registered.
DEFAULT_DETECTORS = ["river:ADWIN", "river:PageHinkley", "river:KSWIN", "cs"]

#: Parameters the demo passes; everything else is the operator's default. Seeds fixed so the
#: demo prints the same table on every machine.
DEMO_PARAMS: dict[str, dict] = {"river:KSWIN": {"seed": 7},
                                 # scale-free mode: scale learned on its own burn-in
                                 "cs": {"cs": "subgaussian", "sigma": None, "alpha": 0.001}}

#: Values the scale is learned on before it is frozen (see
#: shiftwatch.operators.transforms.Standardize).
BURN_IN = 30


def _slug(name: str) -> str:
    return name.replace(":", "-").replace("/", "-")


def _score_run(records: list[dict], detector: str, annotations, out_dir: Path, name: str):
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.sinks import EvaluationSink, JsonlSink

    params = DEMO_PARAMS.get(detector, {})
    ops = [Standardize(burn_in=BURN_IN), create(detector, **params)]
    run_dir = out_dir / name / _slug(detector)
    evaluation = EvaluationSink(run_dir, annotations=annotations, name=name, operator=detector,
                                plots=False)
    t0 = time.perf_counter()
    summary = Pipeline(records, ops, [JsonlSink(run_dir / "outputs.jsonl"), evaluation],
                       progress=False).run()
    seconds = time.perf_counter() - t0
    report = evaluation.report
    return report, summary, seconds


def run_demo(out_dir: Path = Path("shiftwatch-demo"), datasets: list[str] | None = None,
             detectors: list[str] | None = None, plots: bool = True, stream=None) -> int:
    """Run the comparison; returns the process exit status."""
    import sys

    from shiftwatch.operators.registry import registered_names
    from shiftwatch.sinks import evaluate_detector
    from shiftwatch.streams import RiverDriftSource

    stream = stream or sys.stdout
    datasets = datasets or DEFAULT_DATASETS
    detectors = detectors or [d for d in DEFAULT_DETECTORS if d in registered_names()]
    for det in detectors:  # fail before any work on a bad name
        create(det, **DEMO_PARAMS.get(det, {}))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    print(f"shiftwatch demo: {len(detectors)} detectors x {len(datasets)} annotated series "
          f"from River's TCPD sets, each after `standardize` (burn-in {BURN_IN}); "
          "scored with TCPD F1 (margin 5) and covering.", file=stream)
    results: dict[str, dict] = {}
    series: dict[str, tuple] = {}
    for ds in datasets:
        source = RiverDriftSource(ds)
        records = list(source)
        n = len(records)
        annotations = source.annotations
        series[ds] = (records, annotations)
        results[ds] = {"n": n, "annotators": len(annotations), "runs": {}}
        zero = evaluate_detector([], annotations, n)
        results[ds]["runs"]["zero (no alarm)"] = _slim(zero)
        for det in detectors:
            report, summary, seconds = _score_run(records, det, annotations, out_dir, ds)
            agg = report["summary"]
            run = _slim(agg)
            run.update({"seconds": round(seconds, 4), "dead_letters": summary.dead_letters,
                        "alarms": _alarms(report), "located": _located(report)})
            results[ds]["runs"][det] = run

    rows = ["zero (no alarm)"] + detectors
    _print_table(results, datasets, rows, stream)
    report = {"datasets": results, "detectors": detectors, "burn_in": BURN_IN,
              "params": {d: DEMO_PARAMS.get(d, {}) for d in detectors},
              "metric": "TCPD F1 (margin 5, index 0 counted) and covering, mean over annotators"}
    (out_dir / "report.json").write_text(json.dumps(report, indent=2))
    written = [str(out_dir / "report.json")]
    if plots:
        _plot(series, results, detectors, out_dir / "demo.png")
        written.append(str(out_dir / "demo.png"))
    print(f"wrote {', '.join(written)} (per-run outputs under {out_dir}/<dataset>/<detector>/)",
          file=stream)
    return 0


def _slim(agg: dict) -> dict:
    """Scores at the alarms ("detected at") and, for detectors that locate, at ``change_at``
    ("located at"). The never-alarm row scores the same both ways."""
    out = {k: agg.get(k) for k in ("f1", "precision", "recall", "covering")}
    located = agg.get("located_f1") is not None
    out["located_f1"] = agg["located_f1"] if located else out["f1"]
    out["located_covering"] = agg.get("located_covering") if located else out["covering"]
    out["location_error"] = agg.get("location_error")
    return out


def _located(report: dict) -> list[int]:
    keys = report.get("keys") or {}
    located: list[int] = []
    for per_key in keys.values():
        block = (per_key.get("detector") or {}).get("location") or {}
        located += [int(p) for p in block.get("located", [])]
    return sorted(located)


def _alarms(report: dict) -> list[int]:
    keys = report.get("keys") or {}
    alarms: list[int] = []
    for per_key in keys.values():
        alarms += list(per_key.get("alarms", []))
    return sorted(alarms)


def _print_table(results: dict, datasets: list[str], rows: list[str], stream) -> None:
    """Two tables: scored at the alarm positions, then at the located ``change_at``."""
    width = max(len(r) for r in rows) + 2
    head = f"{'detector':<{width}}" + "".join(f"{d[:12]:>14}" for d in datasets)
    head += f"{'mean F1':>10}{'mean cover':>12}"
    for title, f1_key, cover_key in (
            ("detected at: alarms scored where they were raised", "f1", "covering"),
            ("located at: each alarm's change_at scored", "located_f1", "located_covering")):
        print(f"\n{title} (F1 margin 5 per series; mean F1, mean covering)", file=stream)
        print(head, file=stream)
        print("-" * len(head), file=stream)
        for row in rows:
            f1s = [results[d]["runs"][row][f1_key] for d in datasets]
            covers = [results[d]["runs"][row][cover_key] for d in datasets]
            line = f"{row:<{width}}" + "".join(f"{f:>14.3f}" for f in f1s)
            line += f"{sum(f1s) / len(f1s):>10.3f}{sum(covers) / len(covers):>12.3f}"
            print(line, file=stream)
    print("", file=stream)


def _plot(series: dict, results: dict, detectors: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(series), 1, figsize=(11, 2.4 * len(series)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (ds, (records, truth_sets)) in zip(axes[:, 0], series.items(), strict=True):
        values = np.array([r["value"] for r in records], dtype=float)
        values = values.reshape(len(values), -1)
        scale = values.std(axis=0)
        z = (values - values.mean(axis=0)) / np.where(scale > 0, scale, 1.0)
        ax.plot(z, lw=0.8, color="0.35")
        truth = sorted({i for idx in truth_sets.values() for i in idx})
        for i in truth:
            ax.axvline(i, color="0.6", ls="--", lw=0.8)
        top = float(np.nanmax(z)) if z.size else 1.0
        for j, det in enumerate(detectors):
            alarms = results[ds]["runs"][det]["alarms"]
            first = ds == next(iter(series))
            ax.scatter(alarms, [top + 0.4 * (j + 1)] * len(alarms), marker="v", s=22,
                       color=colors[j % len(colors)], label=f"{det} alarm" if first else None)
            located = results[ds]["runs"][det].get("located", [])
            ax.scatter(located, [top + 0.4 * (j + 1)] * len(located), marker="|", s=60,
                       color=colors[j % len(colors)],
                       label=f"{det} located change" if first else None)
        ax.set_title(f"{ds}: standardised series, annotated change points (dashed), alarms (v) "
                     "and the changes they located (|)", fontsize=9)
        ax.set_xlabel("position in series", fontsize=8)
        ax.set_xlim(0, len(records))
    fig.legend(loc="lower center", ncol=min(4, 2 * len(detectors)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
