"""``report.html``: one self-contained page per replay, read in any browser without a network.

The page opens on a table of the keys, the keys with alarms first: records, alarms, the first
alarm (position in the key's series and time), the first located change and, when the run
is labelled, the key's scores. Clicking a column header sorts by it, the search box filters
by key, and clicking a row opens the key's charts below it: the series, zoomable (mouse
wheel or the buttons; drag to pan; double-click to reset), with alarms, located changes and
true change points marked, the detector statistic below on the same x range, tooltips that
give a mark's position and time, and the key's scores. Then the run: summary, dead letters
(by reason, the first few with where they came from), the operators with every parameter,
and the command's parameters.

**Size.** The data are inlined as one JSON document and drawn on ``<canvas>`` by plain
JavaScript in the page (no library, no CDN), a key's charts only when its row is opened.
Each chart's series is reduced to a budget of values (all its channels together): the first
10 keys of the table (the alarmed ones first) get up to 20,000 per chart, the next 40 4,000
(:data:`TIERS`), the others share :data:`SHARED_POINTS` (at least :data:`MIN_POINTS` each);
a longer series keeps the minimum and the maximum of each bucket of positions, and every
value is stored in two characters (12 bits of its chart's range), so 10,000 keys make a page
of a few MB. The table lists at
most ``max_table_keys`` keys (the evaluating sink's parameter); every key is in
``keys.jsonl``.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["render_html_report", "encode_values", "TIERS", "SHARED_POINTS", "MIN_POINTS"]

#: The first keys of the table get these many values per chart: (keys, values) tiers.
TIERS = ((10, 20_000), (50, 4000))
FULL_KEYS = TIERS[-1][0]
FULL_POINTS = TIERS[0][1]
#: The values the other keys' charts share, and the fewest one chart gets.
SHARED_POINTS = 1_000_000
MIN_POINTS = 48
#: Marks (alarms, located changes) kept per key for the charts; the table counts them all.
MAX_MARKS = 500
#: Knots of a key's time axis when its ``ts`` are not evenly spaced (full keys, others).
TIME_KNOTS = (400, 24)

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_CODES = np.frombuffer(_ALPHABET, dtype=np.uint8)
_LEVELS = 4094  # 0..4094 are values; 4095 is a missing one


def encode_values(y: np.ndarray) -> dict:
    """``y`` in two characters per value: ``lo`` + (``hi`` - ``lo``) x code / 4094, where a
    character's index in ``A-Za-z0-9-_`` gives 6 bits; ``__`` (4095) is a missing value.

    >>> e = encode_values(np.array([0.0, 0.5, 1.0, np.nan]))
    >>> e["lo"], e["hi"], e["q"]
    (0.0, 1.0, 'AAf__-__')
    """
    return _encode_rows(np.asarray(y, dtype=np.float64)[None, :])[0]


def _encode_rows(y: np.ndarray) -> list[dict]:
    """:func:`encode_values` of each row of ``y`` (channels x values), at once (compiled:
    :func:`~shiftwatch.sinks.report_kernel.encode_rows`; :func:`_encode_rows_numpy` is the
    same in NumPy)."""
    from shiftwatch.sinks.report_kernel import encode_rows

    lo, hi, chars = encode_rows(np.ascontiguousarray(y, dtype=np.float64), _LEVELS, _CODES)
    return [{"lo": _round(a), "hi": _round(b), "q": row.tobytes().decode("ascii")}
            for a, b, row in zip(lo.tolist(), hi.tolist(), chars, strict=True)]


def _encode_rows_numpy(y: np.ndarray) -> list[dict]:
    """:func:`_encode_rows` in NumPy (the tests' oracle)."""
    ok = np.isfinite(y)
    has = ok.any(axis=1)
    lo = np.where(has, np.min(np.where(ok, y, np.inf), axis=1), 0.0)
    hi = np.where(has, np.max(np.where(ok, y, -np.inf), axis=1), 0.0)
    span = (hi - lo)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(span > 0, (y - lo[:, None]) / np.where(span > 0, span, 1.0), 0.0)
    code = np.where(ok, np.rint(scaled * _LEVELS), _LEVELS + 1).astype(np.int64)
    chars = np.empty((y.shape[0], 2 * y.shape[1]), dtype=np.uint8)
    chars[:, 0::2] = _CODES[code >> 6]
    chars[:, 1::2] = _CODES[code & 63]
    return [{"lo": _round(a), "hi": _round(b), "q": row.tobytes().decode("ascii")}
            for a, b, row in zip(lo.tolist(), hi.tolist(), chars, strict=True)]


def _round(v: float) -> float:
    return float(f"{v:.7g}")


def _reduce(columns: list[np.ndarray], budget: int) -> dict:
    """Each column (one per channel, all of length n) in at most ``budget`` values in all:
    as they are, or as the minimum and maximum of each bucket of ``w`` positions, in the
    order they occur (the page draws bucket ``b``'s two at ``b w + w/4`` and ``b w + 3w/4``).
    """
    from shiftwatch.sinks.report_kernel import reduce_rows

    return _reduced(columns, budget, _encode_rows, reduce_rows)


def _reduced(columns: list[np.ndarray], budget: int, encode: Any, reduce: Any) -> dict:
    """:func:`_reduce` by ``encode`` (rows -> coded rows) and ``reduce`` (values, buckets,
    w -> each bucket's two values)."""
    n = len(columns[0]) if columns else 0
    if not n:
        return {"n": 0, "w": 1, "y": [{"lo": 0.0, "hi": 0.0, "q": ""} for _ in columns]}
    values = np.ascontiguousarray(np.vstack(columns), dtype=np.float64)
    per = max(budget // len(columns), 4)
    if n <= per:
        return {"n": n, "w": 1, "y": encode(values)}
    buckets = per // 2
    w = -(-n // buckets)
    buckets = -(-n // w)
    return {"n": n, "w": int(w), "y": encode(reduce(values, buckets, w))}


def _reduce_numpy(columns: list[np.ndarray], budget: int) -> dict:
    """:func:`_reduce` in NumPy (the tests' oracle)."""
    return _reduced(columns, budget, _encode_rows_numpy, _pairs_numpy)


def _pairs_numpy(values: np.ndarray, buckets: int, w: int) -> np.ndarray:
    """Each bucket's minimum and maximum in the order they occur, in NumPy (the oracle of
    :func:`~shiftwatch.sinks.report_kernel.reduce_rows`)."""
    columns, n = values.shape
    pad = np.full((columns, buckets * w), np.nan)
    pad[:, :n] = values
    m = pad.reshape(columns, buckets, w)
    finite = np.isfinite(m)
    i_min = np.argmin(np.where(finite, m, np.inf), axis=2)[..., None]
    i_max = np.argmax(np.where(finite, m, -np.inf), axis=2)[..., None]
    v_min = np.take_along_axis(m, i_min, axis=2)[..., 0]
    v_max = np.take_along_axis(m, i_max, axis=2)[..., 0]
    first_min = (i_min <= i_max)[..., 0]
    pair = np.empty((columns, 2 * buckets))
    pair[:, 0::2] = np.where(first_min, v_min, v_max)
    pair[:, 1::2] = np.where(first_min, v_max, v_min)
    return pair


def _time_knots(ts: np.ndarray, knots: int) -> dict:
    """Position -> epoch seconds at a few positions (the page interpolates between them):
    the two ends when the ``ts`` are evenly spaced (within 0.1% of the span), else
    ``knots`` positions spread evenly."""
    n = len(ts)
    span = float(ts[-1] - ts[0])
    line = ts[0] + (ts[-1] - ts[0]) * np.arange(n) / max(n - 1, 1)
    if n <= 2 or float(np.max(np.abs(ts - line))) <= 1e-3 * span:
        idx = np.array([0, n - 1]) if n > 1 else np.array([0])
    else:
        idx = np.unique(np.linspace(0, n - 1, min(knots, n)).round().astype(int))
    return {"x": [int(i) for i in idx], "t": [_int_if_whole(float(ts[i])) for i in idx]}


def _num(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return v if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def _int_if_whole(v: float | None) -> float | int | None:
    return int(v) if v is not None and v.is_integer() and abs(v) < 2**53 else v


def _times(ts: Any) -> list:
    return [None if not math.isfinite(t) else float(t) for t in np.asarray(ts, float).tolist()]


def _key_payload(view: Mapping, budget: int, knots: int) -> dict:
    """One key of the page: its table fields and its charts, reduced to ``budget`` values
    per chart."""
    out: dict[str, Any] = {"key": view["key"], "n": view["n"], "a": view.get("n_alarms", 0)}
    timed = view.get("time") is not None
    if "values" in view:
        values = np.asarray(view["values"], dtype=float)
        out["series"] = _reduce([values[:, j] for j in range(values.shape[1])], budget)
        labels = list(view.get("labels") or [])[:values.shape[1]]
        if labels != ["value"]:
            out["series"]["labels"] = labels
        if timed:
            out["time"] = _time_knots(np.asarray(view["time"], dtype=float), knots)
    if view.get("stat"):
        pos = np.asarray(view["stat_pos"], dtype=np.int64)
        length = max(int(view["n"]), int(pos.max()) + 1 if len(pos) else 0)
        dense = []
        for v in view["stat"].values():
            col = np.full(length, np.nan)
            col[pos] = v
            dense.append(col)
        out["stat"] = _reduce(dense, budget)
        if list(view["stat"]) != ["statistic"]:
            out["stat"]["labels"] = list(view["stat"])
    # Empty lists and default labels are left out (the page fills them in): at 10,000 keys
    # every byte of a key's entry is 10 kB of page.
    marks = {"alarms": view.get("alarms", []), "located": view.get("located", []),
             "truth": view.get("truth", []), "beyond": view.get("beyond", [])}
    for name, pos in marks.items():
        pos = [int(p) for p in np.asarray(pos, dtype=np.int64)[:MAX_MARKS].tolist()]
        if pos:
            out[name] = pos
    if timed:
        for name, ts in (("alarm_t", view.get("alarm_ts", [])),
                         ("located_t", view.get("located_ts", []))):
            t = [_int_if_whole(v) for v in _times(ts)[:MAX_MARKS]]
            if t:
                out[name] = t
    if view.get("scores") is not None:
        out["scores"] = {k: _num(v) for k, v in view["scores"].items()}
    if view.get("accuracy") is not None:
        out["accuracy"] = _num(view["accuracy"])
    return out


def render_html_report(report: Mapping, keys: Iterable[Mapping],
                       parameters: Mapping | None = None, n_listed: int | None = None) -> str:
    """The page for one run: ``report`` (the report.json document) and ``keys``, the views of
    the keys to list in table order (the evaluating sink's: ``key`` label, ``n``,
    ``n_alarms``, ``values`` (n x d) and ``labels``, ``time`` (epoch seconds per position,
    when the key's ``ts`` are dates), ``stat_pos`` and ``stat`` (field -> values there),
    ``alarms``, ``alarm_ts``, ``located``, ``located_ts``, ``truth``, ``scores``,
    ``accuracy``). ``n_listed`` is how many there are (for the budget; counted if None).

    Examples
    --------
    >>> page = render_html_report({"name": "run", "summary": {}}, [])
    >>> page.startswith("<!DOCTYPE html>") and "http" not in page.split("<script>")[1]
    True
    """
    views = list(keys) if n_listed is None else keys
    listed = len(views) if n_listed is None else n_listed  # type: ignore[arg-type]
    shared = max(listed - FULL_KEYS, 1)
    small = int(min(TIERS[-1][1], max(MIN_POINTS, SHARED_POINTS // (2 * shared))))
    payload = []
    for i, view in enumerate(views):
        budget = next((b for top, b in TIERS if i < top), small)
        payload.append(_key_payload(view, budget,
                                    TIME_KNOTS[0] if i < FULL_KEYS else TIME_KNOTS[1]))
    summary = {k: _num(v) for k, v in (report.get("summary") or {}).items()}
    agg = report.get("aggregate") or {}
    run = {"name": report.get("name"), "operator": report.get("operator"),
           "incomplete": report.get("incomplete"),
           "annotations": report.get("annotations"), "margin": report.get("margin"),
           "keys": agg.get("n_keys", summary.get("keys")), "listed": len(payload),
           "labelled": bool((summary.get("labelled_keys") or 0) > 0),
           "points": {"tiers": [list(t) for t in TIERS], "other": small}}
    doc = {"run": run, "summary": summary, "labels": summary_labels(report.get("margin") or 5),
           "rules": report.get("rules") or {}, "parameters": dict(parameters or {}),
           "by_op": report.get("alarms_by_operator") or [],
           "operators": report.get("operators") or [],
           "dead_letters": report.get("dead_letters") or {},
           "labels_beyond_end": report.get("labels_beyond_end"),
           "short_keys": report.get("short_keys"),
           "keys_file": report.get("keys_file"), "keys": payload}
    data = json.dumps(doc, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"shiftwatch: {report.get('name') or 'run'}")
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", data)


def summary_labels(margin: int) -> dict[str, str]:
    """How report.html names each summary figure: with the rule that matched it
    (:func:`~shiftwatch.sinks.scoring.scoring_rules`) and the keys it is taken over."""
    m = f"margin rule, {margin} records"
    return {
        "labelled_keys": "labelled keys (the scores below are taken over them)",
        "f1": f"f1 ({m}; mean over labelled keys)",
        "precision": f"precision ({m})",
        "recall": f"recall ({m}; a key labelled [] without alarms: 1, TCPD's convention)",
        "f1_1pct": "f1 (margin rule, int(0.01 n) records)",
        "covering": "covering (mean over labelled keys)",
        "changes": "labelled changes (delay rule)",
        "detected": "detected (delay rule: the first alarm after a change, at any delay)",
        "missed": "missed (delay rule)",
        "false_alarms": "false alarms (delay rule: every alarm that detects no change)",
        "mean_delay": "mean delay (delay rule)",
        "average_run_length": "average run length (delay rule)",
        "located_f1": f"located f1 (change_at, {m})",
        "located_f1_1pct": "located f1 (change_at, margin rule, int(0.01 n) records)",
        "located_covering": "located covering (change_at)",
        "location_error": "location error (change_at to the nearest labelled change)",
    }


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:24px 0 4px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
th[scope=row]{text-align:left;font-weight:normal;background:#f8f8f8}
#keys thead th{cursor:pointer;user-select:none;position:sticky;top:0;z-index:1}
#keys tbody tr.row{cursor:pointer}#keys tbody tr.row:hover{background:#eef4fb}
#keys tbody tr.alarmed td.a{color:#b00;font-weight:bold}
#keys td.k{text-align:left;max-width:28em;overflow:hidden;text-overflow:ellipsis;
white-space:nowrap}
tr.detail>td{text-align:left;background:#fcfcfc;padding:8px}
.keysbox{max-height:70vh;overflow:auto;border:1px solid #ddd;display:inline-block;
max-width:100%}
canvas{display:block;border:1px solid #ddd;cursor:grab;width:100%}
.chartbox{position:relative;min-width:700px}
.tip{position:absolute;pointer-events:none;background:#333;color:#fff;font-size:12px;
padding:2px 6px;border-radius:3px;white-space:nowrap;display:none;z-index:2}
.legend span{margin-right:14px;white-space:nowrap}.legend i{display:inline-block;width:18px;
height:3px;vertical-align:middle;margin-right:4px}.tools button{margin-right:4px}
.note{color:#666;font-size:12px}#search{width:20em;margin-right:8px}
</style></head><body>
<h1 id="title"></h1>
<p id="partial" style="color:#a00;font-weight:bold"></p>
<div><input id="search" type="search" placeholder="search keys"><span id="count"
class="note"></span></div>
<div class="keysbox" id="keysbox"><table id="keys"><thead></thead><tbody></tbody></table>
</div><div id="more"><button id="more1">show 1000 more</button> <button id="moreall">show all
</button></div>
<p class="note" id="keysnote"></p>
<h2>Run</h2><div id="run"></div>
<h2>Dead letters</h2><div id="dead"></div>
<h2>Operators</h2><div id="ops"></div>
<h2>Parameters</h2><div id="params"></div>
<p class="note">Click a row for its charts. Mouse wheel or +/- zoom, drag pans, double-click
resets. x: time (UTC) when the records' ts are dates, else the position in the key's series
(0-based); positions are what --labels and change_at count. Marks: alarm (red), located change
(green dotted), true change (grey dashed); hover a mark for its position and time.</p>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
D.keys.forEach(k => { ["alarms", "located", "truth"].forEach(m => { if (!k[m]) k[m] = []; });
  if (k.series && !k.series.labels) k.series.labels = ["value"];
  if (k.stat && !k.stat.labels) k.stat.labels = ["statistic"]; });
const COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
                "#7f7f7f"];
const MARKS = {alarms: ["#d62728", []], located: ["#2ca02c", [2, 3]], truth: ["#555", [6, 4]]};
const MARK_NAMES = {alarms: "alarm", located: "located change", truth: "true change"};
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
  if (text !== undefined) e.textContent = text;
  return e;
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;"})[c]);
}
function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(
    v.toPrecision(4)));
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}
function table(rows, head, rowHeads) {
  const t = el("table");
  if (head) { const tr = el("tr"); head.forEach(h => tr.appendChild(el("th", {}, h)));
    t.appendChild(tr); }
  rows.forEach(r => { const tr = el("tr");
    r.forEach((c, i) => tr.appendChild(rowHeads && i === 0 ? el("th", {scope: "row"}, fmt(c))
      : el("td", {}, fmt(c))));
    t.appendChild(tr); });
  return t;
}
// ---- the reduced series: two characters per value (see encode_values) ----
const DEC = new Int16Array(128);
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".split("").forEach(
  (c, i) => { DEC[c.charCodeAt(0)] = i; });
function decodeValues(e) {
  const q = e.q, n = q.length / 2, out = new Float64Array(n), span = e.hi - e.lo;
  for (let i = 0; i < n; i++) {
    const c = DEC[q.charCodeAt(2 * i)] * 64 + DEC[q.charCodeAt(2 * i + 1)];
    out[i] = c === 4095 ? NaN : e.lo + span * c / 4094;
  }
  return out;
}
function decodePart(p) {
  const ys = p.y.map(decodeValues), m = ys.length ? ys[0].length : 0, x = new Float64Array(m);
  if (p.w === 1) { for (let i = 0; i < m; i++) x[i] = i; }
  else { for (let i = 0; i < m; i++) { const b = i >> 1;
    x[i] = Math.min(b * p.w + (i % 2 ? 0.75 : 0.25) * p.w, p.n - 1); } }
  return {x: x, y: ys, labels: p.labels, w: p.w};
}
function ticks(lo, hi, n) {
  const span = hi - lo || 1, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => span / s <= n) || 10 * mag;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * span; t += step) out.push(t);
  return out;
}
// Time axis: the page gets (position, epoch seconds) pairs and interpolates between them.
function interp(xs, ys, v) {
  if (v <= xs[0]) return ys[0];
  if (v >= xs[xs.length - 1]) return ys[ys.length - 1];
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { const m = (lo + hi) >> 1; if (xs[m] <= v) lo = m; else hi = m; }
  return ys[lo] + (ys[hi] - ys[lo]) * (v - xs[lo]) / (xs[hi] - xs[lo] || 1);
}
const DAY = 86400, STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
  10800, 21600, 43200, DAY, 2 * DAY, 7 * DAY, 14 * DAY];
function timeTicks(t0, t1, n) {
  const span = t1 - t0, out = [];
  const step = STEPS.find(s => span / s <= n);
  if (step) {
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push([t, step]);
    return out;
  }
  const months = [1, 2, 3, 6, 12, 24, 60, 120, 240, 600].find(m => span / (m * 30.44 * DAY) <= n)
    || 1200;
  const d = new Date(t0 * 1000);
  let m = Math.ceil((d.getUTCFullYear() * 12 + d.getUTCMonth() + (d.getUTCDate() > 1 ||
    d.getUTCHours() > 0 ? 1 : 0)) / months) * months;
  for (;; m += months) {
    const t = Date.UTC(Math.floor(m / 12), m % 12, 1) / 1000;
    if (t > t1) break;
    out.push([t, months * 30 * DAY]);
  }
  return out;
}
function timeText(t, step) {
  const s = new Date(t * 1000).toISOString();
  if (step >= 365 * DAY) return s.slice(0, 4);
  if (step >= 28 * DAY) return s.slice(0, 7);
  if (step >= DAY) return s.slice(0, 10);
  if (step >= 60) return s.slice(5, 10) + " " + s.slice(11, 16);
  return s.slice(11, 19);
}
function isoTime(t) {
  if (t === null || t === undefined || !isFinite(t)) return null;
  const s = new Date(Math.round(t * 1000)).toISOString();
  return s.endsWith(".000Z") ? s.slice(0, 19) + "Z" : s;
}
// A position as "position p" and, when the key has a time axis, its time.
function where(key, p, t) {
  let s = "position " + Math.round(p);
  if (key.time) { const iso = isoTime(t !== undefined && t !== null ? t :
    interp(key.time.x, key.time.t, p)); if (iso) s += ", " + iso; }
  return s;
}
function markTime(key, m, i) {
  const ts = m === "alarms" ? key.alarm_t : m === "located" ? key.located_t : null;
  return ts ? ts[i] : undefined;
}
function Chart(parent, part, key, view, ylabel) {
  const box = el("div", {class: "chartbox"}), canvas = el("canvas", {height: 220});
  const tip = el("div", {class: "tip"}), legend = el("div", {class: "legend"});
  box.appendChild(canvas); box.appendChild(tip); parent.appendChild(box);
  parent.appendChild(legend);
  part.labels.forEach((l, j) => {
    const s = el("span"); const i = el("i"); i.style.background = COLORS[j % COLORS.length];
    s.appendChild(i); s.appendChild(document.createTextNode(l)); legend.appendChild(s); });
  Object.keys(MARKS).forEach(m => { if (!key[m].length) return; const s = el("span"),
      i = el("i"); i.style.background = MARKS[m][0]; s.appendChild(i);
    s.appendChild(document.createTextNode(MARK_NAMES[m])); legend.appendChild(s); });
  if (part.w > 1) legend.appendChild(el("span", {class: "note"}, "reduced: min and max of " +
    "each " + part.w + " positions"));
  const L = 64, R = 10, T = 8, B = 34, H = 220;
  let X = x => x;
  this.draw = function () {
    const w = canvas.clientWidth || 800, h = H, ctx = canvas.getContext("2d");
    canvas.width = w;
    const x0 = view.lo, x1 = view.hi;
    X = x => L + (x - x0) / (x1 - x0 || 1) * (w - L - R);
    let ymin = Infinity, ymax = -Infinity;
    part.y.forEach(ys => { for (let i = 0; i < ys.length; i++) { const v = ys[i], x = part.x[i];
      if (!isNaN(v) && x >= x0 && x <= x1) { if (v < ymin) ymin = v; if (v > ymax) ymax = v; } }
    });
    if (!isFinite(ymin)) { ymin = 0; ymax = 1; }
    if (ymax === ymin) { ymin -= 0.5; ymax += 0.5; }
    const pad = (ymax - ymin) * 0.05; ymin -= pad; ymax += pad;
    const Y = y => T + (ymax - y) / (ymax - ymin) * (h - T - B);
    ctx.clearRect(0, 0, w, h); ctx.font = "11px sans-serif"; ctx.fillStyle = "#333";
    ctx.strokeStyle = "#eee"; ctx.lineWidth = 1;
    ticks(ymin, ymax, 5).forEach(t => { ctx.beginPath(); ctx.moveTo(L, Y(t));
      ctx.lineTo(w - R, Y(t)); ctx.stroke(); ctx.textAlign = "right";
      ctx.fillText(fmt(Number(t.toPrecision(6))), L - 4, Y(t) + 4); });
    ctx.textAlign = "center";
    if (key.time) {
      const tm = key.time, t0 = interp(tm.x, tm.t, x0), t1 = interp(tm.x, tm.t, x1);
      timeTicks(t0, t1, 7).forEach(([t, step]) => {
        ctx.fillText(timeText(t, step), X(interp(tm.t, tm.x, t)), h - B + 14); });
    } else {
      ticks(x0, x1, 8).forEach(t => {
        ctx.fillText(fmt(Number(t.toPrecision(8))), X(t), h - B + 14); });
    }
    ctx.fillText(key.time ? "time (UTC)" : "position in series", L + (w - L - R) / 2, h - 4);
    ctx.save(); ctx.translate(12, T + (h - T - B) / 2); ctx.rotate(-Math.PI / 2);
    ctx.fillText(ylabel, 0, 0); ctx.restore();
    ctx.save(); ctx.beginPath(); ctx.rect(L, T, w - L - R, h - T - B); ctx.clip();
    Object.entries(MARKS).forEach(([m, [color, dash]]) => {
      ctx.strokeStyle = color; ctx.setLineDash(dash); ctx.globalAlpha = 0.8;
      key[m].forEach(p => { if (p < x0 || p > x1) return; ctx.beginPath();
        ctx.moveTo(X(p), T); ctx.lineTo(X(p), h - B); ctx.stroke(); }); });
    ctx.setLineDash([]); ctx.globalAlpha = 1;
    part.y.forEach((ys, j) => {
      ctx.strokeStyle = COLORS[j % COLORS.length]; ctx.beginPath(); let up = false;
      for (let i = 0; i < ys.length; i++) { const v = ys[i], x = part.x[i];
        if (isNaN(v) || x < x0 - (x1 - x0) || x > x1 + (x1 - x0)) { up = false; continue; }
        if (up) ctx.lineTo(X(x), Y(v)); else ctx.moveTo(X(x), Y(v)); up = true; }
      ctx.stroke(); });
    ctx.restore(); ctx.strokeStyle = "#999"; ctx.strokeRect(L, T, w - L - R, h - T - B);
  };
  // Tooltip: the nearest mark within 5 pixels (its position and time), else the cursor's.
  canvas.addEventListener("mousemove", e => {
    const r = canvas.getBoundingClientRect(), px = e.clientX - r.left;
    if (px < L || px > r.width - R) { tip.style.display = "none"; return; }
    let best = null;
    Object.keys(MARKS).forEach(m => key[m].forEach((p, i) => {
      const d = Math.abs(X(p) - px);
      if (d <= 5 && (!best || d < best.d)) best = {d: d, m: m, p: p, t: markTime(key, m, i)};
    }));
    const p = view.lo + (px - L) / (r.width - L - R) * (view.hi - view.lo);
    tip.textContent = best ? MARK_NAMES[best.m] + " at " + where(key, best.p, best.t)
      : where(key, Math.max(0, p));
    tip.style.display = "block";
    tip.style.left = Math.min(px + 12, r.width - tip.offsetWidth - 4) + "px";
    tip.style.top = (e.clientY - r.top + 12) + "px";
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  this.canvas = canvas;
}
function zoomable(view, charts, full) {
  const redraw = () => charts.forEach(c => c.draw());
  const zoom = (f, at) => { const c = at === undefined ? (view.lo + view.hi) / 2 : at;
    let lo = c - (c - view.lo) * f, hi = c + (view.hi - c) * f;
    if (hi - lo < 5) return; view.lo = Math.max(full.lo, lo); view.hi = Math.min(full.hi, hi);
    redraw(); };
  charts.forEach(c => {
    const cv = c.canvas, xAt = e => { const r = cv.getBoundingClientRect();
      return view.lo + (e.clientX - r.left - 64) / (r.width - 74) * (view.hi - view.lo); };
    cv.addEventListener("wheel", e => { e.preventDefault();
      zoom(e.deltaY < 0 ? 0.8 : 1.25, xAt(e)); }, {passive: false});
    let drag = null;
    cv.addEventListener("mousedown", e => { drag = {x: e.clientX, lo: view.lo, hi: view.hi}; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", e => { if (!drag) return;
      const r = cv.getBoundingClientRect(), d = (e.clientX - drag.x) / (r.width - 74) *
        (drag.hi - drag.lo);
      let lo = drag.lo - d, hi = drag.hi - d;
      if (lo < full.lo) { hi += full.lo - lo; lo = full.lo; }
      if (hi > full.hi) { lo -= hi - full.hi; hi = full.hi; }
      view.lo = lo; view.hi = hi; redraw(); });
    cv.addEventListener("dblclick", () => { view.lo = full.lo; view.hi = full.hi; redraw(); });
  });
  return {zoom, redraw};
}
// ---- one key's charts, built when its row is opened ----
const charts = [];
function keyDetail(k) {
  const sec = el("div");
  const tools = el("div", {class: "tools"}); sec.appendChild(tools);
  const full = {lo: 0, hi: Math.max(k.n - 1, 1)}, view = {lo: full.lo, hi: full.hi};
  const mine = [];
  if (k.series) mine.push(new Chart(sec, decodePart(k.series), k, view, "value"));
  if (k.stat) mine.push(new Chart(sec, decodePart(k.stat), k, view, "statistic"));
  if (!mine.length) sec.appendChild(el("div", {class: "note"}, "nothing to draw"));
  const z = zoomable(view, mine, full);
  [["+", () => z.zoom(0.5)], ["-", () => z.zoom(2)], ["reset", () => { view.lo = full.lo;
    view.hi = full.hi; z.redraw(); }]].forEach(([t, f]) => { const b = el("button", {}, t);
    b.addEventListener("click", f); tools.appendChild(b); });
  if (k.scores) { const s = Object.entries(k.scores);
    sec.appendChild(table([s.map(([, v]) => v)], s.map(([n]) => n))); }
  const lists = [["alarms", "alarms", k.alarm_t], ["located", "located changes", k.located_t],
                 ["truth", "true changes", null]];
  lists.forEach(([m, name, ts]) => { const v = k[m]; if (!v.length) return;
    const shown = v.slice(0, 40).map((p, i) => where(k, p, ts ? ts[i] : undefined));
    const more = (m === "alarms" ? k.a : v.length) - shown.length;
    sec.appendChild(el("div", {class: "note"}, name + ": " + shown.join("; ") +
      (more > 0 ? "; ... " + more + " more" : ""))); });
  if (k.beyond) sec.appendChild(el("div", {class: "note"}, "labels past the end of the " +
    "key's " + k.n + " records (counted as missed): " + k.beyond.join(", ")));
  charts.push(...mine);
  requestAnimationFrame(() => mine.forEach(c => c.draw()));
  return sec;
}
// ---- the table of keys ----
const LAB = D.run.labelled, ACC = D.keys.some(k => k.accuracy !== undefined);
function firstAt(k, m) { return k[m].length ? k[m][0] : null; }
function firstTime(k, m) {
  const ts = m === "alarms" ? k.alarm_t : k.located_t;
  if (!k[m].length || !k.time) return null;
  return ts && ts[0] !== null ? ts[0] : interp(k.time.x, k.time.t, k[m][0]);
}
function cellAt(k, m) {
  const p = firstAt(k, m); if (p === null) return "-";
  const iso = isoTime(firstTime(k, m));
  return iso ? p + " \\u00b7 " + iso.replace("T", " ").replace(/:00Z$|Z$/, "") : String(p);
}
const COLUMNS = [
  ["key", k => k.key, k => esc(k.key === "None" ? "(unkeyed)" : k.key), "k"],
  ["records", k => k.n], ["alarms", k => k.a, null, "a"],
  ["first alarm (position \\u00b7 time)", k => firstAt(k, "alarms"), k => cellAt(k, "alarms")],
  ["first located change", k => firstAt(k, "located"), k => cellAt(k, "located")]];
if (LAB) [["f1 (margin " + D.run.margin + ")", "f1"], ["precision", "precision"],
  ["recall", "recall"], ["mean delay (delay rule)", "mean_delay"],
  ["false alarms (delay rule)", "false_alarms"], ["missed (delay rule)", "missed"]].forEach(
  ([h, f]) => COLUMNS.push([h, k => k.scores ? k.scores[f] : null]));
if (ACC) COLUMNS.push(["accuracy", k => k.accuracy === undefined ? null : k.accuracy]);
const order = D.keys.map((_, i) => i);
let sortBy = null, sortDir = 1, shownRows = order;
function renderHead() {
  const tr = el("tr");
  COLUMNS.forEach(([h], j) => { const th = el("th", {"data-j": j},
    h + (sortBy === j ? (sortDir > 0 ? " \\u25b2" : " \\u25bc") : ""));
    tr.appendChild(th); });
  const head = document.querySelector("#keys thead"); head.textContent = ""; head.appendChild(tr);
}
// Rows are rendered a page at a time (scrolling the table or "show more" adds the next):
// laying out 10,000 rows at once takes seconds, 200 a few milliseconds.
const PAGE = 200;
let rendered = 0;
function rowsHtml(from, to) {
  const parts = [];
  shownRows.slice(from, to).forEach(i => { const k = D.keys[i];
    parts.push('<tr class="row' + (k.a ? " alarmed" : "") + '" data-i="' + i + '">');
    COLUMNS.forEach(([, val, show, cls]) => { const v = show ? show(k) : esc(fmt(val(k)));
      parts.push(cls ? '<td class="' + cls + '">' + v + "</td>" : "<td>" + v + "</td>"); });
    parts.push("</tr>"); });
  return parts.join("");
}
function more(n) {
  const to = Math.min(shownRows.length, rendered + n);
  if (to <= rendered) return;
  document.querySelector("#keys tbody").insertAdjacentHTML("beforeend", rowsHtml(rendered, to));
  rendered = to;
  counts();
}
function counts() {
  document.getElementById("count").textContent = shownRows.length + " of " + D.keys.length +
    " keys listed" + (D.run.keys > D.keys.length ? " (" + D.run.keys + " in the run)" : "") +
    (rendered < shownRows.length ? "; showing " + rendered + ", scroll for more" : "");
  document.getElementById("more").style.display = rendered < shownRows.length ? "" : "none";
}
function renderBody() {
  const q = document.getElementById("search").value.trim().toLowerCase();
  shownRows = q ? order.filter(i => D.keys[i].key.toLowerCase().includes(q)) : order;
  document.querySelector("#keys tbody").textContent = "";
  rendered = 0;
  more(PAGE);
  counts();
}
function toggle(tr) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("detail")) { next.remove(); return; }
  const k = D.keys[+tr.getAttribute("data-i")], row = el("tr", {class: "detail"}),
    td = el("td", {colspan: COLUMNS.length});
  row.appendChild(td); tr.after(row); td.appendChild(keyDetail(k));
}
document.querySelector("#keys thead").addEventListener("click", e => {
  const th = e.target.closest("th"); if (!th) return;
  const j = +th.getAttribute("data-j"), val = COLUMNS[j][1];
  sortDir = sortBy === j ? -sortDir : (j === 0 ? 1 : -1); sortBy = j;
  order.sort((a, b) => { const x = val(D.keys[a]), y = val(D.keys[b]);
    if (x === y) return a - b; if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (typeof x === "string" ? x.localeCompare(y) : x - y) * sortDir; });
  renderHead(); renderBody();
});
document.querySelector("#keys tbody").addEventListener("click", e => {
  const tr = e.target.closest("tr.row"); if (tr) toggle(tr); });
document.getElementById("search").addEventListener("input", renderBody);
document.getElementById("more1").addEventListener("click", () => more(1000));
document.getElementById("moreall").addEventListener("click", () => more(shownRows.length));
const keysbox = document.getElementById("keysbox");
keysbox.addEventListener("scroll", () => {
  if (keysbox.scrollTop + keysbox.clientHeight > keysbox.scrollHeight - 400) more(PAGE); });
document.getElementById("title").textContent = "shiftwatch: " + (D.run.name || "run");
if (D.run.incomplete) document.getElementById("partial").textContent =
  "Partial results: the run stopped before its source ended (" + D.run.incomplete.why +
  ", after " + D.run.incomplete.records_read + " records read); every figure below is of " +
  "what was processed.";
renderHead(); renderBody();
const firstRow = document.querySelector("#keys tbody tr.row");
if (firstRow) toggle(firstRow);
const note = [];
if (D.run.keys > D.keys.length) note.push("The table lists " + D.keys.length + " of the run's " +
  D.run.keys + " keys, the keys with alarms first.");
if (D.keys_file) note.push("Every key's detail: " + D.keys_file + ".");
const T = D.run.points.tiers;
if (D.keys.length) note.push("A chart keeps at most " + T[0][1] + " values (the first " + T[0][0] +
  " keys listed)" + (D.keys.length > T[0][0] ? ", " + T[1][1] + " (up to the " + T[1][0] +
  "th)" : "") + (D.keys.length > T[1][0] ? ", " + D.run.points.other + " (the others)" : "") +
  ": longer series show each bucket's min and max; outputs.jsonl has every value.");
document.getElementById("keysnote").textContent = note.join(" ");
// ---- the run ----
const run = D.run, S = D.summary, runRows = [["name", run.name], ["operator", run.operator],
  ["labels", run.annotations || "none"], ["F1 margin", run.margin]];
Object.entries(S).forEach(([k, v]) => runRows.push([D.labels[k] || k.replace(/_/g, " "), v]));
Object.entries(D.rules).forEach(([k, v]) => runRows.push(["rule: " + k.replace(/_/g, " "), v]));
if (D.by_op.length > 1 || (D.by_op.length && S.alarms === undefined))
  D.by_op.forEach(o => runRows.push(["alarms of operator " + (o.position + 1) + " (" + o.operator +
    ")", o.alarms]));
if (!run.labelled && S.alarms !== undefined) runRows.push(["scores", "none: no labels " +
  "(give --labels to score alarms as detections, false alarms and missed changes)"]);
if (D.labels_beyond_end) runRows.push(["labels past the end", D.labels_beyond_end.count +
  " (they count as missed), e.g. " + D.labels_beyond_end.first.slice(0, 5).map(b =>
  "key " + b.key + ": " + b.labels.join(", ") + " of " + b.n_records + " records").join("; ")]);
if (D.short_keys) runRows.push(["keys shorter than the warm-up", D.short_keys.count + " with " +
  "fewer than " + D.short_keys.warm_up + " records: " + D.short_keys.operator + " could not " +
  "alarm on them, e.g. " + D.short_keys.first.slice(0, 5).map(b => "key " + b.key + " (" +
  b.n_records + ")").join(", ")]);
document.getElementById("run").appendChild(table(runRows, null, true));
const DL = D.dead_letters, dead = document.getElementById("dead");
if (!DL.count) dead.appendChild(el("div", {class: "note"}, "none"));
else {
  dead.appendChild(el("div", {}, DL.count + " dead letter" + (DL.count === 1 ? "" : "s") +
    " (every one is in dead_letters.jsonl)"));
  dead.appendChild(table(Object.entries(DL.by_reason).map(([r, n]) => [n, r]),
    ["count", "reason"]));
  dead.appendChild(table(DL.first.map(d => { const o = d.origin || {};
    const at = o.line !== undefined ? (o.file ? o.file + " " : "") + "line " + o.line
      : o.partition !== undefined ? "partition " + o.partition + " offset " + o.offset
      : "offset " + fmt(o.offset);
    return [at, d.operator || "source", d.key, d.reason, d.raw]; }),
    ["where", "rejected by", "key", "reason", "input"]));
}
const ops = document.getElementById("ops");
if (!D.operators.length) ops.appendChild(el("div", {class: "note"}, "not recorded"));
D.operators.forEach((o, i) => { ops.appendChild(el("div", {}, "operator " + (i + 1) + ": " +
  o.name)); ops.appendChild(table(Object.entries(o.params || {}), ["parameter", "value"],
  true)); });
document.getElementById("params").appendChild(table(Object.entries(D.parameters), null, true));
window.addEventListener("resize", () => charts.forEach(c => c.draw()));
</script></body></html>
"""
