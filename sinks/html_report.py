"""``report.html``: one self-contained page per replay, read in any browser without a network.

Per key (the first ``max_keys``): the series, zoomable (mouse wheel or the buttons; drag to
pan; double-click to reset), with alarms, located changes and true change points marked, the
detector statistic below it on the same x range, and the key's scores; then the run's
parameters and summary. The data are inlined as JSON and drawn on ``<canvas>`` by ~150 lines
of plain JavaScript in the page: no library, no CDN. Long series are reduced to the minimum
and maximum of each of ``max_points / 2`` buckets, so the file stays small (about 0.5 MB per
key at the default 20000 points).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["render_html_report"]

_SCORES = ("n", "n_alarms", "f1", "f1_1pct", "precision", "recall", "covering", "mean_delay",
           "false_alarms", "missed", "average_run_length")


def _reduce(x: np.ndarray, ys: list[np.ndarray], max_points: int) -> tuple[list, list]:
    """Keep each channel's min and max per bucket when there are more than ``max_points``."""
    n = len(x)
    if n <= max_points:
        return _clean(x), [_clean(y) for y in ys]
    buckets = max(max_points // (2 * max(len(ys), 1)), 1)  # at most 2 points per channel
    edges = np.linspace(0, n, buckets + 1).astype(int)
    keep: list[int] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:
            continue
        idx = set()
        for y in ys:
            seg = y[lo:hi]
            if np.isfinite(seg).any():
                idx.add(lo + int(np.nanargmin(seg)))
                idx.add(lo + int(np.nanargmax(seg)))
        keep.extend(sorted(idx) or [lo])
    k = np.array(keep)
    return _clean(x[k]), [_clean(y[k]) for y in ys]


def _clean(a: np.ndarray) -> list:
    return [None if not math.isfinite(v) else round(float(v), 6) for v in a]


def _number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _time_axis(trace: Any, points: int = 2000) -> dict | None:
    """Position -> epoch seconds at up to ``points`` positions (the page interpolates between
    them), when the key's ``ts`` are dates in order; None keeps the axis in positions."""
    from shiftwatch.sinks.time_axis import time_axis_ts

    ts = time_axis_ts(getattr(trace, "input_ts", None) or [])
    if ts is None:
        return None
    idx = np.unique(np.linspace(0, len(ts) - 1, min(points, len(ts))).round().astype(int))
    return {"x": [int(i) for i in idx], "t": [ts[i] for i in idx]}


def _key_payload(key_text: str, d: Mapping, entry: Mapping, max_points: int) -> dict:
    from shiftwatch.sinks.key_label import key_label

    trace = d["trace"]
    out: dict[str, Any] = {"key": key_label(key_text), "n": int(d["n"])}
    if trace.input_offsets:
        width = max(len(v) for v in trace.values)
        values = np.array([v + (math.nan,) * (width - len(v)) for v in trace.values])
        x = np.arange(len(values), dtype=float)
        xs, ys = _reduce(x, [values[:, j] for j in range(values.shape[1])], max_points)
        out["series"] = {"x": xs, "y": ys, "labels": trace.value_labels()[:width]}
        time = _time_axis(trace)
        if time is not None:
            out["time"] = time
    fields = {}
    for f in ("statistic", "threshold", "lower", "upper"):
        arr = np.full(len(trace.outputs), np.nan)
        for i, o in enumerate(trace.outputs):
            v = o.get(f)
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
                arr[i] = float(v)
        if np.isfinite(arr).any():
            fields[f] = arr
    if fields:
        pos = np.array([np.nan if p is None else p for p in d["positions"]], dtype=float)
        ok = np.isfinite(pos)
        order = np.argsort(pos[ok], kind="stable")
        names = list(fields)
        xs, ys = _reduce(pos[ok][order], [fields[f][ok][order] for f in names], max_points)
        out["stat"] = {"x": xs, "y": ys, "labels": names}
    ann = d.get("annotations")
    sets = ann.values() if isinstance(ann, Mapping) else ([ann] if ann is not None else [])
    out["truth"] = sorted({int(c) for s in sets for c in s if int(c) > 0})
    out["alarms"] = [int(a) for a in d.get("alarms", [])][:5000]
    out["located"] = [int(a) for a in d.get("located", [])][:5000]
    det = entry.get("detector") or {}
    scores = {k: _number(det.get(k)) for k in _SCORES if k in det}
    detection = det.get("detection") or {}
    for k, name in (("mean_delay", "mean_delay"), ("n_false_alarms", "false_alarms"),
                    ("n_missed", "missed"), ("average_run_length", "average_run_length")):
        if k in detection:
            scores[name] = _number(detection[k])
    out["scores"] = scores
    return out


def render_html_report(report: Mapping, plot_data: Sequence[tuple[Any, Mapping]],
                       key_text: Any, parameters: Mapping | None = None, max_keys: int = 20,
                       max_points: int = 20000) -> str:
    """The page for one run: ``report`` (the sink's report), ``plot_data`` (key, data) pairs.

    ``key_text`` turns a record key into the report's key text; ``parameters`` are shown as
    they are (e.g. the command line's source, operators and options).

    Examples
    --------
    >>> page = render_html_report({"name": "run", "keys": {}, "summary": {}}, [], str)
    >>> page.startswith("<!DOCTYPE html>") and "http" not in page.split("<script>")[1]
    True
    """
    keys = report.get("keys") or {}
    payload = []
    for key, d in list(plot_data)[:max_keys]:
        kt = key_text(key)
        payload.append(_key_payload(kt, d, keys.get(kt) or {}, max_points))
    run = {"name": report.get("name"), "operator": report.get("operator"),
           "annotations": report.get("annotations"), "margin": report.get("margin"),
           "keys": len(keys), "keys_shown": len(payload)}
    doc = {"run": run, "parameters": dict(parameters or {}),
           "summary": {k: _number(v) for k, v in (report.get("summary") or {}).items()},
           "keys": payload}
    data = json.dumps(doc, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"shiftwatch: {report.get('name') or 'run'}")
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", data)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:24px 0 4px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
canvas{display:block;border:1px solid #ddd;cursor:grab;width:100%}
.legend span{margin-right:14px;white-space:nowrap}.legend i{display:inline-block;width:18px;
height:3px;vertical-align:middle;margin-right:4px}.tools button{margin-right:4px}
.note{color:#666;font-size:12px}
</style></head><body>
<h1 id="title"></h1><div id="run"></div><div id="keys"></div>
<h2>Parameters</h2><div id="params"></div>
<p class="note">Mouse wheel or +/- zoom, drag pans, double-click resets. x: time (UTC) when the
records' ts are dates, else the position in the key's series (0-based). Marks: alarm (red),
located change (green dotted), true change (grey dashed).</p>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
                "#7f7f7f"];
const MARKS = {alarms: ["#d62728", []], located: ["#2ca02c", [2, 3]], truth: ["#555", [6, 4]]};
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(4);
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}
function table(rows, head) {
  const t = el("table");
  if (head) { const tr = el("tr"); head.forEach(h => tr.appendChild(el("th", {}, h)));
    t.appendChild(tr); }
  rows.forEach(r => { const tr = el("tr"); r.forEach(c => tr.appendChild(el("td", {}, fmt(c))));
    t.appendChild(tr); });
  return t;
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
function Chart(parent, part, key, view, ylabel) {
  const canvas = el("canvas", {height: 220});
  const legend = el("div", {class: "legend"});
  parent.appendChild(canvas); parent.appendChild(legend);
  part.labels.forEach((l, j) => {
    const s = el("span"); const i = el("i"); i.style.background = COLORS[j % COLORS.length];
    s.appendChild(i); s.appendChild(document.createTextNode(l)); legend.appendChild(s); });
  [["alarms", "alarm"], ["located", "located change"], ["truth", "true change"]].forEach(
    ([m, l]) => { if (!key[m].length) return; const s = el("span"), i = el("i");
      i.style.background = MARKS[m][0]; s.appendChild(i);
      s.appendChild(document.createTextNode(l)); legend.appendChild(s); });
  this.draw = function () {
    const w = canvas.clientWidth || 800, h = 220, ctx = canvas.getContext("2d");
    canvas.width = w;
    const L = 64, R = 10, T = 8, B = 34, x0 = view.lo, x1 = view.hi;
    const X = x => L + (x - x0) / (x1 - x0 || 1) * (w - L - R);
    let ymin = Infinity, ymax = -Infinity;
    part.y.forEach(ys => ys.forEach((v, i) => { const x = part.x[i];
      if (v !== null && x >= x0 && x <= x1) { ymin = Math.min(ymin, v); ymax = Math.max(ymax, v); }
    }));
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
      ys.forEach((v, i) => { const x = part.x[i];
        if (v === null || x < x0 - (x1 - x0) || x > x1 + (x1 - x0)) { up = false; return; }
        if (up) ctx.lineTo(X(x), Y(v)); else ctx.moveTo(X(x), Y(v)); up = true; });
      ctx.stroke(); });
    ctx.restore(); ctx.strokeStyle = "#999"; ctx.strokeRect(L, T, w - L - R, h - T - B);
  };
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
document.getElementById("title").textContent = "shiftwatch: " + (D.run.name || "run");
const run = D.run, head = document.getElementById("run");
head.appendChild(table([["operator", run.operator], ["annotations", run.annotations],
  ["keys", run.keys_shown < run.keys ? run.keys_shown + " shown of " + run.keys : run.keys],
  ...Object.entries(D.summary)], ["run", ""]));
const box = document.getElementById("keys"), charts = [];
D.keys.forEach(k => {
  const sec = el("section"); box.appendChild(sec);
  sec.appendChild(el("h2", {}, k.key === "None" ? "series (unkeyed)" : "key " + k.key));
  const tools = el("div", {class: "tools"}); sec.appendChild(tools);
  const full = {lo: 0, hi: Math.max(k.n - 1, 1)}, view = {lo: full.lo, hi: full.hi};
  const mine = [];
  if (k.series) mine.push(new Chart(sec, k.series, k, view, "value"));
  if (k.stat) mine.push(new Chart(sec, k.stat, k, view, "statistic"));
  const z = zoomable(view, mine, full);
  [["+", () => z.zoom(0.5)], ["-", () => z.zoom(2)], ["reset", () => { view.lo = full.lo;
    view.hi = full.hi; z.redraw(); }]].forEach(([t, f]) => { const b = el("button", {}, t);
    b.addEventListener("click", f); tools.appendChild(b); });
  const s = Object.entries(k.scores);
  if (s.length) sec.appendChild(table([s.map(([, v]) => v)], s.map(([n]) => n)));
  const marks = [["alarms", k.alarms], ["located changes", k.located], ["true changes", k.truth]];
  marks.forEach(([n, v]) => { if (v.length) sec.appendChild(el("div", {class: "note"},
    n + ": " + v.slice(0, 40).join(", ") + (v.length > 40 ? ", ..." : ""))); });
  charts.push(...mine);
});
document.getElementById("params").appendChild(table(Object.entries(D.parameters)));
const drawAll = () => charts.forEach(c => c.draw());
window.addEventListener("resize", drawAll); drawAll();
</script></body></html>
"""
