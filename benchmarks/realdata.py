"""Real annotated series: quality and speed of every detector side by side, ClaSS as the peer.

    python benchmarks/realdata.py [--data ../shared/data] [--class-venv DIR] [--no-class]
        [--only NAME[,NAME]] [--sets SET[,SET]] [--out FILE] [--compare OLD.json]
        [--note NOTE.md]

Scores never alarming, River's ADWIN, Page-Hinkley and KSWIN, ``cs``, the ``karcher`` chain
(``standardize -> embed -> window_covariance -> karcher``; for vectors ``standardize ->
window_covariance -> karcher``) with its default threshold and with ``threshold="adaptive"``
(the default before issue 36 item 6), ``shape`` and ClaSS (the authors' ``claspy``, run in its
own virtual environment by ``benchmarks/peers/peer_env.py``) on

* ``tssb-dev.json``: 25 TSSB series (changes of shape, period, correlation), univariate;
* ``mocap6.json``: 6 CMU motion-capture sequences, 12 channels;
* River's TCPD series (``Occupancy``, ``RunLog``, ``AirlinePassengers``, ``Bitcoin``,
  ``UKCoalEmploy``), all annotators;
* ``benchmarks/data/mts-dev.json``: 20 multichannel series built by
  ``benchmarks/build_mts_dev.py`` from recordings aeon ships (10 of BasicMotions, 6 channels,
  segments of 100; 10 of JapaneseVowels, 12 channels, segments of 7-29).

Every detector runs with its defaults (KSWIN with ``seed=7``) behind ``standardize`` (burn-in
30) where it needs a scale (``shape`` and ClaSS take the raw series). Alarms are scored at
their ``change_at`` (where the detector says the change began) with TCPDBench's F1 at margin
5, the same F1 with a margin of ``int(0.01 * n)`` (TSSB / ClaSS's convention) and covering,
mean over series (``shiftwatch.sinks.scoring.evaluate_detector``). records/s: the operators
alone over each series in micro-batches of 1,000 (the stage executor, as replay and Kafka run
them), total records over total seconds; ClaSS's is its own update loop, timed by the peer.

Per data set, a per-series table for ``shape`` and for the level detector (River's three,
``cs``) with the best mean F1@1% on that set in this run: length, channels, the period
``shape`` fixed for the series (its key's state ``P``; block ``B`` = ``block * P`` records),
true changes, alarms, false alarms, missed changes, F1@1% and covering, and ClaSS's alarms for
the same series. Alarms are matched to true changes as in
:func:`shiftwatch.sinks.metrics.true_positives` (each true change, in increasing order, takes
the closest unmatched alarm within the F1@1% margin ``int(0.01 n)``; several annotators: their
points merged within 5 as :func:`~shiftwatch.sinks.scoring.evaluate_detector` does);
an unmatched alarm is a false alarm, an unmatched change a missed one (position 0,
which TCPDBench's F1 adds to both, is left out of the counts).

``--only`` runs a subset of the detectors (names as in the tables, ``ClaSS`` included; never
alarming is always scored), ``--sets`` a subset of the data sets (``tssb-dev``, ``mocap6``,
``tcpd``, ``mts-dev``). A full run writes ``benchmarks/results/realdata.md`` and
``realdata.json``; a subset run prints its tables and writes only with ``--out``.
``--compare`` puts a table of the summary rows that moved against an earlier
``realdata.json`` in the results; ``--note`` adds a hand-written markdown file (the reading
of this run) to them.

``../shared/data`` holds development data (for choosing); the held-out series are not in the
repository.
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
ADAPTIVE = "karcher chain (threshold=adaptive)"
AUTO_PERIOD = "auto (multichannel=period)"
AUTO_RELAY = "auto (level=relay)"
#: auto's options beside its default (class, a gated ADWIN beside it; auto.md's rounds)
AUTO_OPTIONS = {
    "auto (before level_gate)": {"period": "shape", "aperiodic": "level", "level_gate": None,
                                 "multichannel_delta": None},
    "auto (multichannel_delta=None)": {"multichannel_delta": None},
    "auto (period=shape)": {"period": "shape"},
    "auto (period=shape+class)": {"period": "shape+class"},
    "auto (level_gate=None)": {"level_gate": None},
    "auto (level_gate=2)": {"level_gate": 2.0},
    "auto (level_gate_stat=median)": {"level_gate_stat": "median"},
    "auto (level_gate_stat=winsorised)": {"level_gate_stat": "winsorised"},
    "auto (multichannel_restart, delta 0.002)": {"multichannel_restart": True,
                                                 "multichannel_delta": None},
}
SHAPE_ASYM = "shape (asymmetry=True)"
#: ``class`` with claspy's two-sided significance test (its default before clasp.md's round)
CLASS_TWO = "class (test=two-sided)"


def detectors(channels: int) -> dict[str, list[tuple[str, dict]]]:
    """name -> the operator chain (registered names and parameters) for ``channels``."""
    std = ("standardize", {})

    def chain(**karcher) -> list:
        return ([std, ("embed", {}), ("window_covariance", {}), ("karcher", karcher)]
                if channels == 1 else [std, ("window_covariance", {}), ("karcher", karcher)])

    return {
        "river:ADWIN": [std, ("river:ADWIN", {})],
        "river:PageHinkley": [std, ("river:PageHinkley", {})],
        "river:KSWIN": [std, ("river:KSWIN", {"seed": 7})],
        "cs": [std, ("cs", {})],
        "karcher chain": chain(),
        ADAPTIVE: chain(threshold="adaptive"),
        "shape": [("shape", {})],
        "class": [("class", {})],
        CLASS_TWO: [("class", {"test": "two-sided"})],
        SHAPE_ASYM: [("shape", {"asymmetry": True})],
        "auto": [("auto", {})],
        AUTO_PERIOD: [("auto", {"multichannel": "period"})],
        AUTO_RELAY: [("auto", {"level": "relay"})],
        **{name: [("auto", kw)] for name, kw in AUTO_OPTIONS.items()},
    }


DETECTOR_NAMES = [ZERO, *detectors(1), "ClaSS"]
LEVEL = ["river:ADWIN", "river:PageHinkley", "river:KSWIN", "cs"]
SETS = {"tssb-dev": "tssb-dev", "mocap6": "mocap6", "tcpd": "TCPD (River)",
        "mts-dev": "mts-dev"}
#: multichannel series built from recordings aeon ships (benchmarks/build_mts_dev.py)
MTS_DEV = ROOT / "benchmarks" / "data" / "mts-dev.json"


def load(data: Path, sets: list[str]) -> dict[str, list[dict]]:
    """Data set -> series ``{"name", "values" (n,) or (n, c), "annotations", "n"}``."""
    from shiftwatch.streams import RiverDriftSource

    out: dict[str, list[dict]] = {}
    for key, file in (("tssb-dev", "tssb-dev.json"), ("mocap6", "mocap6.json")):
        if key in sets:
            doc = json.loads((data / file).read_text())["series"]
            out[SETS[key]] = [{"name": s["name"], "values": np.asarray(s["values"], dtype=float),
                               "annotations": {"0": list(s["cps"])}, "n": s["n"]} for s in doc]
    if "mts-dev" in sets:
        doc = json.loads(MTS_DEV.read_text())["series"]
        out[SETS["mts-dev"]] = [{"name": s["name"], "values": np.asarray(s["values"], dtype=float),
                                 "annotations": {"0": list(s["annotations"]["truth"])},
                                 "n": s["n"]} for s in doc]
    if "tcpd" in sets:
        tcpd = []
        for name in TCPD:
            src = RiverDriftSource(name)
            recs = list(src)
            vals = np.asarray([r["value"] for r in recs], dtype=float)
            tcpd.append({"name": name, "values": vals, "annotations": src.annotations,
                         "n": len(recs)})
        out[SETS["tcpd"]] = tcpd
    return out


def _channels(values: np.ndarray) -> int:
    return 1 if values.ndim == 1 else int(values.shape[1])


def _records(values: np.ndarray) -> list[dict]:
    if values.ndim == 1:
        return [{"key": "s", "ts": float(i), "value": float(v)} for i, v in enumerate(values)]
    return [{"key": "s", "ts": float(i), "value": v.tolist()} for i, v in enumerate(values)]


def time_scale(op) -> dict | None:
    """``{"period", "block"}`` the operator fixed for the key ``s`` (``shape``'s state ``P``
    and ``B``), or None (another operator, or the burn-in never ended)."""
    from shiftwatch.operators.keyed import Keyed

    inner = op.existing("s") if isinstance(op, Keyed) else op
    if inner is None:
        return None
    st = inner.state_dict().get("state", {})
    if not st.get("P"):
        return None
    return {"period": int(st["P"]), "block": int(st["B"])}


def period_origin(values: np.ndarray) -> dict:
    """How ``shape``'s default burn-in rule fixes the period on ``values``: ``period``, the
    burn-in length ``at`` which it was fixed, ``rule`` (``fft``, ``acf``: a clear period;
    ``acf-weak``, ``none``: none clear by ``burn_in``) and ``clear``. Re-derived with the
    detector's own function (:func:`~shiftwatch.operators.period.time_scale_rule`); checked
    against the operator's state by the caller."""
    from shiftwatch.operators import create
    from shiftwatch.operators.period import time_scale_rule

    sh = create("shape")
    r = time_scale_rule(values, sh.burn_in_min, sh.burn_in, sh.p_min, sh.min_acf)
    if r is None:
        return {"period": None, "at": None, "clear": None, "rule": None}
    return {"period": int(r["period"]), "at": int(r["at"]), "rule": r["rule"],
            "clear": r["rule"] in ("fft", "acf")}


def located(records: list[dict], chain, annotations, workdir: Path):
    """The located changes (``change_at`` mapped to positions by the evaluating sink) and
    the time scale the last operator fixed (:func:`time_scale`)."""
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.operators import create
    from shiftwatch.sinks import EvaluationSink

    ops = [create(name, **params) for name, params in chain]
    # labels name the key (the stream is keyed "s"); its value: {annotator: [positions]}
    sink = EvaluationSink(workdir, annotations={"s": annotations}, plots=False)
    pipe = Pipeline(records, ops, [sink], progress=False)
    pipe.run()
    out: list[int] = []
    for per_key in sink.key_reports().values():  # keys.jsonl read back
        out += [int(p) for p in per_key.get("located", [])]
    return sorted(out), time_scale(pipe.operators[-1])


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


def match(alarms: list[int], truth: list[int], n: int) -> dict:
    """Alarms matched to the true changes ``truth`` within the F1@1% margin ``int(0.01 n)``,
    by :func:`shiftwatch.sinks.metrics.true_positives`'s rule (each change, in increasing
    order, takes the closest unmatched alarm; on a tie the earlier). False alarms carry the
    segment they fall in (between true changes)."""
    import bisect

    from shiftwatch.sinks.metrics import true_positives

    margin = int(0.01 * n)
    truth = sorted(c for c in truth if c > 0)
    alarm_list = sorted(set(alarms))
    rem = list(alarm_list)
    hit: dict[int, int] = {}
    for t in truth:
        lo, hi = bisect.bisect_left(rem, t - margin), bisect.bisect_right(rem, t + margin)
        if lo == hi:
            continue
        best = min(range(lo, hi), key=lambda i, t=t: (abs(rem[i] - t), rem[i]))
        hit[t] = rem.pop(best)
    if len(hit) != len(true_positives(truth, alarm_list, margin)):  # the library's count
        raise AssertionError("matching differs from shiftwatch.sinks.metrics.true_positives")
    starts, ends = [0, *truth], [*truth, n]
    false = []
    for a in rem:
        k = bisect.bisect_right(truth, a)
        false.append({"at": a, "segment": [starts[k], ends[k]], "offset": a - starts[k],
                      "fraction": (a - starts[k]) / max(1, ends[k] - starts[k]),
                      "after_detected_change": starts[k] in hit})
    return {"margin_1pct": margin, "true_changes": truth, "matched": hit,
            "false_alarms": false, "missed": [t for t in truth if t not in hit]}


def score(points: list[int], annotations, n: int) -> dict:
    from shiftwatch.sinks.scoring import evaluate_detector

    r = evaluate_detector(points, annotations, n)
    # the true changes: evaluate_detector's (annotators merged within its margin 5)
    m = match(points, r["change_points"], n)
    return {"f1": r["f1"], "f1_1pct": r["f1_1pct"], "covering": r["covering"],
            "alarms": len(points), "located": points, "true_changes": m["true_changes"],
            "n_false": len(m["false_alarms"]), "n_missed": len(m["missed"]),
            "false_alarms": m["false_alarms"], "missed": m["missed"]}


def run_ours(datasets: dict, names: list[str] | None = None) -> dict:
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ds, series in datasets.items():
            res = results.setdefault(ds, {})
            res[ZERO] = {"series": [score([], s["annotations"], s["n"]) for s in series]}
            for det in detectors(1):
                if names and det not in names:
                    continue
                per, total_s, total_n = [], 0.0, 0
                for s in series:
                    chain = detectors(_channels(s["values"]))[det]
                    recs = _records(s["values"])
                    pts, scale = located(recs, chain, s["annotations"],
                                         Path(tmp) / ds / det.replace(":", "-") / s["name"])
                    row = score(pts, s["annotations"], s["n"])
                    if det == "shape":
                        origin = period_origin(s["values"])
                        if scale and origin["period"] != scale["period"]:
                            raise AssertionError(f"{s['name']}: period re-derived "
                                                 f"{origin['period']}, operator {scale}")
                        row["time_scale"] = {**(scale or {}), **origin}
                    per.append(row)
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


def means(res: dict) -> dict:
    s = res["series"]
    return {"F1@5": _mean(r["f1"] for r in s), "F1@1%": _mean(r["f1_1pct"] for r in s),
            "covering": _mean(r["covering"] for r in s),
            "alarms/series": _mean(r["alarms"] for r in s)}


def summarise(res: dict) -> str:
    m = means(res)
    rate = res.get("records_per_s")
    return (f"F1@5 {m['F1@5']:.3f}  F1@1% {m['F1@1%']:.3f}  cover {m['covering']:.3f}  "
            f"alarms/series {m['alarms/series']:.2f}" + (f"  {rate:,.0f} rec/s" if rate else ""))


def table(results: dict) -> str:
    lines = []
    for ds, res in results.items():
        n = len(next(iter(res.values()))["series"])
        lines += [f"### {ds} ({n} series)", "",
                  "| detector | F1@5 | F1@1% | covering | alarms/series | false/series | "
                  "missed/series | records/s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for det in DETECTOR_NAMES:
            if det not in res:
                continue
            s = res[det]["series"]
            m = means(res[det])
            rate = res[det].get("records_per_s")
            lines.append(f"| {det} | {m['F1@5']:.3f} | {m['F1@1%']:.3f} | "
                         f"{m['covering']:.3f} | {m['alarms/series']:.2f} | "
                         f"{_mean(r['n_false'] for r in s):.2f} | "
                         f"{_mean(r['n_missed'] for r in s):.2f} | "
                         f"{f'{rate:,.0f}' if rate else '-'} |")
        if "ClaSS" in res and res["ClaSS"].get("records_per_s"):
            lines.append("")
            for det in ("shape", "class"):
                if det in res:
                    ratio = res[det]["records_per_s"] / res["ClaSS"]["records_per_s"]
                    lines.append(f"`{det}` runs {ratio:.1f}x ClaSS's records/s on these "
                                 "series.")
        lines.append("")
    return "\n".join(lines)


def _shortest(row: dict, n: int) -> int:
    cuts = [0, *row["true_changes"], n]
    return min(b - a for a, b in zip(cuts, cuts[1:], strict=False))


def _false_text(row: dict) -> str:
    return ", ".join(f"{f['at']:,} (+{f['offset']:,}, {100 * f['fraction']:.0f}%)"
                     for f in row["false_alarms"]) or "-"


def _class_text(res: dict, i: int) -> str:
    if "ClaSS" not in res:
        return ""
    c = res["ClaSS"]["series"][i]
    return f" {c['alarms']} / {c['n_false']} / {c['n_missed']} / {c['f1_1pct']:.3f} |"


def series_tables(results: dict, datasets: dict) -> str:
    """Per data set: ``shape``, ``class`` and ``auto`` (where they alarm) and the best level
    detector, series by series."""
    lines = []
    for ds, res in results.items():
        series = datasets[ds]
        cls_head = " ClaSS alarms / false / missed / F1@1% |" if "ClaSS" in res else ""
        cls_rule = " ---: |" if "ClaSS" in res else ""
        if "shape" in res:
            lines += [f"### {ds}: `shape` series by series", "",
                      "| series | n | ch | period P (block B) | fixed at | changes | alarms | "
                      "false | missed | F1@1% | covering | false alarms at (offset into "
                      "segment, % of segment) | shortest segment / B |" + cls_head,
                      "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | "
                      "---: | --- | ---: |" + cls_rule]
            for i, (s, r) in enumerate(zip(series, res["shape"]["series"], strict=True)):
                ts = r.get("time_scale") or {}
                per = (f"{ts['period']} ({ts['block']})" if ts.get("block")
                       else "- (burn-in not over)")
                how = (f"{ts['at']} ({ts.get('rule') or ('clear' if ts['clear'] else 'fallback')})"
                       if ts.get("at") else "-")
                short = (f"{_shortest(r, s['n']) / ts['block']:.1f}" if ts.get("block")
                         else "-")
                lines.append(
                    f"| {s['name']} | {s['n']:,} | {_channels(s['values'])} | {per} | {how} | "
                    f"{len(r['true_changes'])} | {r['alarms']} | {r['n_false']} | "
                    f"{r['n_missed']} | {r['f1_1pct']:.3f} | {r['covering']:.3f} | "
                    f"{_false_text(r)} | {short} |" + _class_text(res, i))
            lines += ["", causes(res["shape"]["series"], series), ""]
        for det, why in (("class", "ClaSS written here"), ("auto", "the recommended default")):
            if det not in res or not any(r["alarms"] for r in res[det]["series"]):
                continue
            lines += [f"### {ds}: `{det}` ({why}) series by series", "",
                      "| series | n | changes | alarms | false | missed | F1@1% | covering | "
                      "false alarms at (offset into segment, % of segment) |" + cls_head,
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
                      + cls_rule]
            for i, (s, r) in enumerate(zip(series, res[det]["series"], strict=True)):
                lines.append(f"| {s['name']} | {s['n']:,} | {len(r['true_changes'])} | "
                             f"{r['alarms']} | {r['n_false']} | {r['n_missed']} | "
                             f"{r['f1_1pct']:.3f} | {r['covering']:.3f} | {_false_text(r)} |"
                             + _class_text(res, i))
            lines.append("")
        level = [d for d in LEVEL if d in res]
        if level:
            best = max(level, key=lambda d: means(res[d])["F1@1%"])
            lines += [f"### {ds}: `{best}` (the best level detector here by F1@1%) series "
                      "by series", "",
                      "| series | changes | alarms | false | missed | false in first 10% of "
                      "segment | F1@1% | covering |" + cls_head,
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + cls_rule]
            for i, (s, r) in enumerate(zip(series, res[best]["series"], strict=True)):
                early = sum(f["fraction"] < 0.1 for f in r["false_alarms"])
                lines.append(f"| {s['name']} | {len(r['true_changes'])} | {r['alarms']} | "
                             f"{r['n_false']} | {r['n_missed']} | {early} | "
                             f"{r['f1_1pct']:.3f} | {r['covering']:.3f} |"
                             + _class_text(res, i))
            lines.append("")
    return "\n".join(lines)


def causes(rows: list[dict], series: list[dict]) -> str:
    """Counts, over a data set's series, of the causes issue 36 names (for ``shape``)."""
    from shiftwatch.operators import create

    sh = create("shape")
    edge = sh.burn_in // 4
    false = [f for r in rows for f in r["false_alarms"]]
    missed = [(r, s, c) for r, s in zip(rows, series, strict=True) for c in r["missed"]]
    at_edge = [s["name"] for r, s in zip(rows, series, strict=True)
               if (r.get("time_scale") or {}).get("period") == edge]
    fallback = [s["name"] for r, s in zip(rows, series, strict=True)
                if (r.get("time_scale") or {}).get("clear") is False]
    silent = [s["name"] for r, s in zip(rows, series, strict=True)
              if r["alarms"] == 0 and r["true_changes"]]

    def short_side(r, s, c) -> bool:  # a side of the change shorter than min_blocks blocks
        ts = r.get("time_scale") or {}
        if not ts.get("block"):
            return True
        cuts = [0, *r["true_changes"], s["n"]]
        k = cuts.index(c)
        return min(c - cuts[k - 1], cuts[k + 1] - c) < sh.min_blocks * ts["block"]

    def in_burn_in(r, s, c) -> bool:  # the change lies before the period was fixed
        at = (r.get("time_scale") or {}).get("at")
        return c < (at if at is not None else s["n"])

    def names(xs):
        return ", ".join(xs) if xs else "none"

    def mean_f1(which):
        m = _mean(r["f1_1pct"] for r, s in zip(rows, series, strict=True)
                  if s["name"] in which)
        return "-" if np.isnan(m) else f"{m:.3f}"

    others = [s["name"] for s in series if s["name"] not in at_edge]
    return "\n".join([
        f"Causes (issue 36) in `shape`'s rows above, {len(rows)} series:",
        "",
        f"* false alarms: {len(false)} in all; {sum(f['fraction'] < 0.1 for f in false)} in "
        f"the first 10% of their segment, {sum(f['fraction'] < 0.25 for f in false)} in the "
        f"first 25%; {sum(f['after_detected_change'] for f in false)} in a segment whose "
        f"starting change was detected (within the margin), "
        f"{sum(f['segment'][0] == 0 for f in false)} before the first change;",
        f"* period at the upper edge of the allowed range ({edge} = burn_in / 4): "
        f"{len(at_edge)} series ({names(at_edge)}); mean F1@1% {mean_f1(at_edge)} there, "
        f"{mean_f1(others)} on the others; periods fixed with no clear period by "
        f"{sh.burn_in} records (a weak ACF peak, or none: the short scale): {len(fallback)} "
        f"({names(fallback)});",
        f"* silent series (no alarm, at least one true change): {len(silent)} "
        f"({names(silent)});",
        f"* missed changes: {len(missed)}; {sum(short_side(*m) for m in missed)} of them with "
        f"a segment on one side shorter than min_blocks = {sh.min_blocks} blocks (or no "
        f"period fixed), {sum(in_burn_in(*m) for m in missed)} before the period was fixed.",
    ])


def compare(results: dict, old_path: Path) -> str:
    """The summary rows that moved against an earlier ``realdata.json`` (records/s left out:
    it depends on the machine's load)."""
    old = json.loads(old_path.read_text())
    meta = old.pop("_meta", {})
    label = meta.get("run", f"`{old_path.name}`, an earlier results file")
    moved, same = [], []
    for ds, res in results.items():
        for det, r in res.items():
            if det not in old.get(ds, {}):
                continue
            a, b = means(old[ds][det]), means(r)
            if all(abs(a[k] - b[k]) < 5e-4 for k in a):
                same.append(f"{ds} / {det}")
                continue
            moved.append(f"| {ds} | {det} | " + " | ".join(
                f"{a[k]:.3f} -> {b[k]:.3f} ({b[k] - a[k]:+.3f})" for k in a) + " |")
    out = [f"## Against the previous run ({label})", ""]
    if moved:
        out += ["| set | detector | F1@5 | F1@1% | covering | alarms/series |",
                "| --- | --- | --- | --- | --- | --- |", *moved, ""]
    out += [f"Unchanged (all four within 0.0005): {', '.join(same) or 'none'}.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="folder with tssb-dev.json and mocap6.json (default ../shared/data)")
    ap.add_argument("--class-venv", default=None,
                    help="the ClaSS peer venv (default ~/.cache/shiftwatch-peers/class; made "
                         "when missing, about 1-2 minutes)")
    ap.add_argument("--no-class", action="store_true", help="leave ClaSS out")
    ap.add_argument("--only", help="comma-separated detectors to run, e.g. shape,ClaSS "
                                   f"(default: all; names: {', '.join(DETECTOR_NAMES[1:])})")
    ap.add_argument("--sets", help="comma-separated data sets (default: all; "
                                   f"{', '.join(SETS)})")
    ap.add_argument("--out", default=None,
                    help="results file (.md; the .json beside it); default "
                         "benchmarks/results/realdata.md for a full run, none for a subset")
    ap.add_argument("--compare", default=None,
                    help="an earlier realdata.json: the summary rows that moved go in the "
                         "results")
    ap.add_argument("--note", default=None, help="a markdown file added to the results")
    args = ap.parse_args(argv)
    data = Path(args.data)
    names = args.only.split(",") if args.only else None
    sets = args.sets.split(",") if args.sets else list(SETS)
    bad = [x for x in names or [] if x not in DETECTOR_NAMES[1:]] + [
        x for x in sets if x not in SETS]
    if bad:
        print(f"unknown detector or data set: {', '.join(bad)}", file=sys.stderr)
        return 2
    if {"tssb-dev", "mocap6"} & set(sets) and not (data / "tssb-dev.json").exists():
        print(f"no tssb-dev.json in {data}: give --data", file=sys.stderr)
        return 2
    subset = bool(args.only or args.sets)
    out = Path(args.out) if args.out else (
        None if subset else ROOT / "benchmarks" / "results" / "realdata.md")
    t0 = time.time()
    datasets = load(data, sets)
    results = run_ours(datasets, names)
    class_params = None
    if not args.no_class and (names is None or "ClaSS" in names):
        peer = run_class(datasets, args.class_venv)
        for ds in datasets:
            results[ds]["ClaSS"] = peer[ds]
        first = next(iter(peer.values()))
        class_params = {"claspy": first["claspy"], "params": first["params"]}
    import numba
    import river

    import shiftwatch

    command = "python benchmarks/realdata.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    run = (f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
           f"{time.time() - t0:.0f} s; {platform.processor() or platform.machine()}, "
           f"2 cores shared with other jobs, Python {platform.python_version()}, shiftwatch "
           f"{shiftwatch.__version__}, NumPy {np.__version__}, Numba {numba.__version__}, "
           f"River {river.__version__}")
    head = [
        "# Real annotated series: every detector with its defaults, and ClaSS",
        "",
        f"`{command}` ({run}).",
        "",
        "Development data (`../shared/data`, for choosing) and River's TCPD series; alarms "
        "scored at `change_at`; F1@5 = TCPDBench F1 with a margin of 5, F1@1% = the same F1 "
        "with a margin of 1% of the series length (TSSB / ClaSS), covering as TCPDBench; "
        "means over series (several annotators: TCPDBench's mean over annotators). "
        "false/missed: alarms not matched to a true change within the F1@1% margin, true "
        "changes not matched by an alarm (matching of `shiftwatch.sinks.metrics."
        "true_positives`, changes in increasing order; the true changes are "
        "`evaluate_detector`'s: several annotators' points merged within 5). "
        "records/s: the operators alone (micro-batches of 1,000), ClaSS its own update loop, "
        "on this machine in this run. `karcher chain` runs with the `karcher` default "
        "(`threshold=\"calibrated\"` since issue 36 item 6, `calibration_margin=1` since "
        "issue 48), `karcher chain "
        "(threshold=adaptive)` with the default before it. `auto` runs with its defaults "
        "(since the \"side by side\" round of auto.md: every univariate key to `class` at "
        "its warm-up, ADWIN beside it with `level_gate=3`; multichannel keys to per-channel "
        "ADWIN with `delta=0.2`, its \"multichannel keys' ADWIN delta\" round), `auto "
        "(before level_gate)` with the default before those rounds (`shape` for a clear "
        "period, ADWIN alone otherwise, River's delta), and each other `auto (...)` row with "
        "one option changed from the defaults (auto.md: `multichannel=period`, `level=relay`, "
        "`period=shape`, `level_gate=None` or `2`, the robust gates, `multichannel_delta="
        "None`; `auto (multichannel_restart, delta 0.002)` two, `multichannel_restart=True, "
        "multichannel_delta=None`; each rejected as the default by its declared rule). "
        "`class` runs "
        "with its defaults (ClaSS written here; `n_warmup=500`, the one-sided significance test, "
        "clasp.md), `class (test=two-sided)` with claspy's test (the default before clasp.md's "
        "round on the test's alternative). "
        "`shape` runs with its default `threshold=6.0`; `shape "
        "(asymmetry=True)` adds the time-asymmetry scan (an option; rejected as the default "
        "by its declared rule, shape.md); `threshold=\"null\"` is in "
        "`benchmarks/results/shape.md`.",
        "",
    ]
    if class_params:
        head += [f"ClaSS: claspy {class_params['claspy']} in its own venv "
                 "(`benchmarks/peers/peer_env.py`), fed one value at a time; parameters "
                 f"(the first series): `{json.dumps(class_params['params'])}`. Its "
                 "authors publish F1@1% 0.742 / covering 0.807 over all 75 TSSB series; "
                 "multichannel series are projected on the first principal component of "
                 "the warm-up (ClaSS is univariate).", ""]
    else:
        head += ["ClaSS was not run.", ""]
    body = ["## Summary", "", table(results)]
    if args.compare:
        body += [compare(results, Path(args.compare))]
    if args.note:
        body += [Path(args.note).read_text().rstrip(), ""]
    body += ["## Series by series", "",
             "`shape`: the period P its burn-in fixed for the series (the key's state; block "
             "B = 2P records), the burn-in length at which it was fixed and by which rule "
             "(fft, acf: a clear period; acf-weak, none: none clear by 384 records; "
             "re-derived with `shiftwatch.operators.period.time_scale_rule` and checked "
             "equal to the state); false alarms at their position (+ records since the "
             "start of their segment between true changes, and that as % of the segment); shortest "
             "segment / B: the scan needs min_blocks = 3 blocks on each side of a change.",
             "", series_tables(results, datasets)]
    text = "\n".join(head + body)
    print(text)
    if out is not None:
        out.write_text(text)
        doc = {"_meta": {"command": command, "run": run, "class": class_params},
               **{ds: dict(res) for ds, res in results.items()}}
        out.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=_json))
        print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


def _json(x):
    if isinstance(x, np.integer):
        return int(x)
    return float(x)


if __name__ == "__main__":
    raise SystemExit(main())
