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
DEFAULT_DETECTORS = ["river:ADWIN", "river:PageHinkley", "river:KSWIN", "cs", "shape"]

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
    report = {**evaluation.report, "keys": evaluation.key_reports()}  # keys.jsonl read back
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
          "scored with TCPD F1 (margins 5 and 1% of the length) and covering.", file=stream)
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
              "metric": "TCPD F1 (margin 5, index 0 counted), the same F1 with a margin of 1% "
                        "of the length (TSSB's convention) and covering, mean over annotators"}
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
    out = {k: agg.get(k) for k in ("f1", "f1_1pct", "precision", "recall", "covering")}
    located = agg.get("located_f1") is not None
    out["located_f1"] = agg["located_f1"] if located else out["f1"]
    out["located_f1_1pct"] = agg.get("located_f1_1pct") if located else out["f1_1pct"]
    out["located_covering"] = agg.get("located_covering") if located else out["covering"]
    out["location_error"] = agg.get("location_error")
    return out


def _located(report: dict) -> list[int]:
    keys = report.get("keys") or {}
    located: list[int] = []
    for per_key in keys.values():
        located += [int(p) for p in per_key.get("located", [])]
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
    head += f"{'mean F1':>10}{'F1@1%':>8}{'mean cover':>12}"
    for title, f1_key, pct_key, cover_key in (
            ("detected at: alarms scored where they were raised", "f1", "f1_1pct", "covering"),
            ("located at: each alarm's change_at scored", "located_f1", "located_f1_1pct",
             "located_covering")):
        print(f"\n{title} (F1 margin 5 per series; means of F1, of F1 with a margin of 1% "
              "of the length (TSSB), of covering)", file=stream)
        print(head, file=stream)
        print("-" * len(head), file=stream)
        for row in rows:
            f1s = [results[d]["runs"][row][f1_key] for d in datasets]
            pcts = [results[d]["runs"][row][pct_key] for d in datasets]
            covers = [results[d]["runs"][row][cover_key] for d in datasets]
            line = f"{row:<{width}}" + "".join(f"{f:>14.3f}" for f in f1s)
            line += (f"{sum(f1s) / len(f1s):>10.3f}{sum(pcts) / len(pcts):>8.3f}"
                     f"{sum(covers) / len(covers):>12.3f}")
            print(line, file=stream)
    print("", file=stream)


#: What each channel of River's TCPD series is, and its unit, for the plots. Occupancy is
#: River's V1..V4 (its docstring: temperature, humidity, light, CO2; the values match the UCI
#: Occupancy data's Temperature in Celsius, relative Humidity in %, Light in lux and CO2 in
#: ppm); RunLog's Pace is in minutes per mile and Distance in metres (Pace matches the
#: Distance change over time per mile to 1%).
CHANNELS: dict[str, list[tuple[str, str]]] = {
    "Occupancy": [("temperature", "°C"), ("relative humidity", "%"), ("light", "lux"),
                  ("CO2", "ppm")],
    "RunLog": [("pace", "min/mile"), ("distance", "m")],
    "AirlinePassengers": [("passengers at JFK", "per month")],
    "Bitcoin": [("market price", "USD")],
    "UKCoalEmploy": [("UK coal mine employment", "workers")],
}


def channel_names(dataset: str, width: int) -> list[tuple[str, str]]:
    """``(name, unit)`` of each channel of ``dataset`` (``value[i]`` when unknown)."""
    known = CHANNELS.get(dataset, [])
    return known if len(known) == width else [(f"value[{i}]", "") for i in range(width)]


def _span_text(records: list[dict]) -> str:
    from shiftwatch.sinks.time_axis import is_epoch_seconds, iso_utc

    ts = [r.get("ts") for r in records]
    if not ts or not is_epoch_seconds(ts):
        return f"{len(records)} samples"
    first, last = iso_utc(min(ts)), iso_utc(max(ts))
    cut = 16 if max(ts) - min(ts) < 30 * 86400 else 10  # minutes for days, dates for years
    return f"{len(records)} samples, {first[:cut].replace('T', ' ')} to " \
           f"{last[:cut].replace('T', ' ')} UTC"


def plot_channels(axes, records: list[dict], dataset: str, truth: list[int]) -> None:
    """One panel per channel of ``records``' values, in its own unit, with the annotated
    change points dashed."""
    import numpy as np

    values = np.array([r["value"] for r in records], dtype=float).reshape(len(records), -1)
    for j, (ax, (name, unit)) in enumerate(zip(axes, channel_names(dataset, values.shape[1]),
                                               strict=True)):
        ax.plot(values[:, j], lw=0.8, color="0.25")
        for i in truth:
            ax.axvline(i, color="0.55", ls="--", lw=0.8)
        ax.set_ylabel(f"{name}\n({unit})" if unit else name, fontsize=8)
        if np.nanmax(np.abs(values[:, j])) >= 1e5:  # 1.2M, not an offset text over the title
            from matplotlib.ticker import EngFormatter

            ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(labelsize=7, labelbottom=False)
        ax.set_xlim(0, max(len(records) - 1, 1))


def plot_lanes(ax, names: list[str], alarms: dict, located: dict, truth: list[int],
               n: int) -> None:
    """One lane per detector: its alarms (``v``) and the changes they located (``|``)."""
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
              "tab:pink"]
    for i in truth:
        ax.axvline(i, color="0.55", ls="--", lw=0.8)
    for j, name in enumerate(names):
        y = len(names) - 1 - j  # first detector on top
        color = colors[j % len(colors)]
        ax.scatter(alarms.get(name, []), [y] * len(alarms.get(name, [])), marker="v", s=26,
                   color=color, zorder=3)
        ax.scatter(located.get(name, []), [y] * len(located.get(name, [])), marker="|", s=90,
                   color=color, linewidths=1.6, zorder=3)
    ax.set_yticks(range(len(names)), list(reversed(names)), fontsize=7)
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.set_xlim(0, max(n - 1, 1))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("position in series (records since the start)", fontsize=8)


def marker_legend(fig) -> None:
    """The figure's one legend, below the panels: what the marks mean."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.55", ls="--", lw=0.8, label="annotated change point"),
               Line2D([], [], color="0.3", marker="v", ls="", label="alarm (where raised)"),
               Line2D([], [], color="0.3", marker="|", ls="", markersize=10, mew=1.6,
                      label="located change (the alarm's change_at)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)


def _plot(series: dict, results: dict, detectors: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights: list[float] = []
    blocks = []
    for ds, (records, _) in series.items():
        width = len(records[0]["value"]) if records and isinstance(records[0]["value"],
                                                                   list) else 1
        heights += [1.35 if width == 1 else 0.9] * width + [0.22 * len(detectors) + 0.55]
        blocks.append((ds, width))
    fig = plt.figure(figsize=(11, sum(heights) + 0.35 * len(series) + 0.5), layout="constrained")
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights})
    row = 0
    for ds, width in blocks:
        records, truth_sets = series[ds]
        truth = sorted({i for idx in truth_sets.values() for i in idx})
        block = axes[row:row + width + 1]
        for ax in block[1:]:
            ax.sharex(block[0])
        plot_channels(block[:width], records, ds, truth)
        runs = results[ds]["runs"]
        plot_lanes(block[width], detectors, {d: runs[d]["alarms"] for d in detectors},
                   {d: runs[d].get("located", []) for d in detectors}, truth, len(records))
        block[0].set_title(f"{ds} ({_span_text(records)})", fontsize=9, loc="left")
        row += width + 1
    fig.suptitle("River's annotated TCPD series in their units; where each detector (run on "
                 "the standardised series) raised alarms and located the change", fontsize=10)
    marker_legend(fig)
    fig.savefig(path, dpi=100)
    plt.close(fig)
