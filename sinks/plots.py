"""The report's PNGs: the series with alarms, located changes and labels; the detector
statistic; learners' accuracy curves (matplotlib's object API with the Agg canvas).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.sinks.key_names import key_label
from shiftwatch.sinks.metrics import (
    prequential_accuracy,
)

__all__ = ["plot_series", "plot_statistic", "plot_accuracy"]


#: A vector input with more coordinates than this is plotted as its Euclidean norm.
_MAX_COORDS = 8


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


# ---- drawing (matplotlib's object API with the Agg canvas: no pyplot, no display) -----


def _figure(rows: int, title: str) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 1.2 + 2.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    fig.suptitle(title)
    return fig, axes


class _XAxis:
    """Positions in a key's series, drawn as time when its inputs' ``ts`` are dates.

    With epoch-second ``ts`` in order (:func:`shiftwatch.sinks.time_axis.time_axis_ts`) a
    position ``p`` is drawn at the time of the key's ``p``-th input, with a date axis in UTC;
    otherwise at ``p``, labelled as a position.
    """

    def __init__(self, trace: Any):  # the evaluation sink's per-key trace
        from shiftwatch.sinks.time_axis import time_axis_ts

        ts = time_axis_ts(trace.input_ts) if trace.input_ts else None
        self._days = None
        if ts is not None:
            from matplotlib import dates as mdates

            micros = np.round(np.asarray(ts) * 1e6).astype("int64").astype("datetime64[us]")
            self._days = np.asarray(mdates.date2num(micros), dtype=float)
        self.label = "time (UTC)" if self._days is not None else "position in series"

    @property
    def is_time(self) -> bool:
        return self._days is not None

    def __call__(self, positions: Any) -> np.ndarray:
        pos = np.asarray(positions, dtype=float)
        if self._days is None:
            return pos
        out = np.full(pos.shape, np.nan)
        ok = np.isfinite(pos)
        idx = np.clip(np.round(pos[ok]).astype(int), 0, len(self._days) - 1)
        out[ok] = self._days[idx]
        return out

    def style(self, ax: Any, n: int) -> None:
        """Label the axis and set its range over the ``n`` positions of the series."""
        if self._days is not None:
            from matplotlib import dates as mdates

            locator = mdates.AutoDateLocator(tz="UTC")
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz="UTC"))
            lo, hi = self([0, max(n - 1, 0)])
            if hi > lo:
                ax.set_xlim(lo, hi)
        else:
            ax.set_xlim(0, max(n - 1, 1))


def _truth_lines(ax: Any, ann: Any, x: Any = None) -> None:
    if ann is None:
        return
    sets = ann.values() if isinstance(ann, Mapping) else [ann]
    points = sorted({int(c) for s in sets for c in s if int(c) > 0})
    for i, c in enumerate(x(points) if x is not None else points):
        ax.axvline(
            c, color="0.35", linestyle="--", linewidth=1, label="true change" if i == 0 else None
        )


def _alarm_lines(ax: Any, alarms: Sequence[int], x: Any = None) -> None:
    alarms = list(alarms[:500])
    for i, a in enumerate(x(alarms) if x is not None and alarms else alarms):
        ax.axvline(a, color="tab:red", alpha=0.6, linewidth=1, label="alarm" if i == 0 else None)


def _located_marks(ax: Any, located: Sequence[int], x: Any = None) -> None:
    located = list(located[:500])
    for i, c in enumerate(x(located) if x is not None and located else located):
        ax.axvline(c, color="tab:green", linestyle=":", linewidth=1.4,
                   label="located change" if i == 0 else None)


def _key_title(key: Any, d: Mapping | None = None) -> str:
    """``key NAME``, with its alarms: how many, and the first as position and time."""
    title = "unkeyed stream" if key is None else f"key {key_label(key)}"
    if d is None or "alarms" not in d:
        return title
    alarms = d.get("alarms") or []
    if not alarms:
        return title + ": no alarm"
    first = f"position {alarms[0]}"
    ts = (d.get("alarm_ts") or [None])[0]
    trace = d.get("trace")
    if ts is not None and trace is not None and _XAxis(trace).is_time:
        from shiftwatch.sinks.time_axis import iso_utc

        first += f", {iso_utc(ts)}"
    n = len(alarms)
    return f"{title}: {n} alarm{'' if n == 1 else 's'}, the first at {first}"


def _alarmed_first(data: list) -> list:
    """The keys with alarms first (most first), the others after, each in the given order."""
    return sorted(data, key=lambda kd: -len(kd[1].get("alarms") or ()))


def _which_keys(shown: list, total: int, alarmed: int | None) -> str:
    """Which keys a figure shows, e.g. ``6 of 30 keys: the 3 with alarms, then 3 without``."""
    n = len(shown)
    with_alarms = sum(1 for _, d in shown if d.get("alarms"))
    if alarmed is None:
        alarmed = with_alarms
    if total <= n:
        if total <= 1:
            return ""
        if not alarmed:
            return f" ({total} keys)"
        return f" ({total} keys, the {alarmed} with alarms first)"
    if not alarmed:
        return f" (the first {n} of {total} keys; none has an alarm)"
    head = (f"the {with_alarms} with alarms" if with_alarms == alarmed else
            f"{with_alarms} of the {alarmed} with alarms")
    tail = f", then the first {n - with_alarms} without" if n > with_alarms else ""
    return f" ({n} of {total} keys: {head}{tail})"


def plot_series(data: list, max_panels: int, name: str, total: int | None = None,
                alarmed: int | None = None) -> Any:
    """The input series of up to ``max_panels`` keys of ``data`` ((key, data) pairs), the
    keys with alarms first; ``total`` and ``alarmed`` (default: counted in ``data``) are
    how many keys the run had and how many alarmed, for the title."""
    with_inputs = _alarmed_first([(k, d) for k, d in data if d["trace"].input_offsets])
    if not with_inputs:
        return None
    shown = with_inputs[:max_panels]
    fig, axes = _figure(len(shown), name)
    fig.suptitle(f"{name}: series" + _which_keys(
        shown, max(total or 0, len(with_inputs)), alarmed))
    for ax, (key, d) in zip(axes, shown, strict=True):
        trace = d["trace"]
        width = max(len(v) for v in trace.values)
        values = np.array([v + (math.nan,) * (width - len(v)) for v in trace.values])
        to_x = _XAxis(trace)
        x = to_x(np.arange(len(values)))
        labels = trace.value_labels()
        for j in range(values.shape[1]):
            ax.plot(x, values[:, j], linewidth=0.8, label=labels[j] if j < len(labels) else None)
        _truth_lines(ax, d["annotations"], to_x)
        _alarm_lines(ax, d.get("alarms", []), to_x)
        _located_marks(ax, d.get("located", []), to_x)
        ax.set_title(_key_title(key, d), fontsize=9, loc="left")
        to_x.style(ax, len(values))
        ax.set_xlabel(to_x.label)
        ax.set_ylabel("value")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)  # beside the data
    return fig


def _field_array(outputs: list[dict], field: str) -> np.ndarray:
    out = np.full(len(outputs), np.nan)
    for i, o in enumerate(outputs):
        v = o.get(field)
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out[i] = float(v)
    return out


def plot_statistic(data: list, max_panels: int, name: str, total: int | None = None,
                   alarmed: int | None = None) -> Any:
    """The detector statistic of up to ``max_panels`` keys, the keys with alarms first (see
    :func:`plot_series`)."""
    panels = []
    for key, d in _alarmed_first(data):
        outs = d["trace"].outputs
        if not any("alarm" in o for o in outs):
            continue
        fields = {f: _field_array(outs, f) for f in ("statistic", "threshold", "lower", "upper")}
        if any(np.isfinite(a).any() for a in fields.values()):
            panels.append((key, d, fields))
    if not panels:
        return None
    shown = panels[:max_panels]
    fig, axes = _figure(len(shown), name)
    fig.suptitle(f"{name}: detector statistic" + _which_keys(
        [(k, d) for k, d, _ in shown], max(total or 0, len(panels)), alarmed))
    for ax, (key, d, fields) in zip(axes, shown, strict=True):
        pos = np.array([np.nan if p is None else p for p in d["positions"]], dtype=float)
        order = np.argsort(pos, kind="stable")
        to_x = _XAxis(d["trace"])
        pos = to_x(pos[order])
        f = {k: v[order] for k, v in fields.items()}
        if np.isfinite(f["lower"]).any() or np.isfinite(f["upper"]).any():
            ax.fill_between(
                pos, f["lower"], f["upper"], color="tab:blue", alpha=0.2, label="interval"
            )
        if np.isfinite(f["statistic"]).any():
            ax.plot(pos, f["statistic"], linewidth=0.8, color="tab:blue", label="statistic")
        if np.isfinite(f["threshold"]).any():
            ax.plot(
                pos,
                f["threshold"],
                linewidth=1,
                linestyle=":",
                color="tab:orange",
                label="threshold",
            )
        _truth_lines(ax, d["annotations"], to_x)
        _alarm_lines(ax, d.get("alarms", []), to_x)
        _located_marks(ax, d.get("located", []), to_x)
        ax.set_title(_key_title(key, d), fontsize=9, loc="left")
        if to_x.is_time:
            to_x.style(ax, d["n"])
        ax.set_xlabel(to_x.label)
        ax.set_ylabel("statistic")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)  # beside the data
    return fig


def plot_accuracy(data: list, max_panels: int, name: str) -> Any:
    outputs = [
        o
        for _, d in data
        for o in d["trace"].outputs
        if o.get("y") is not None and any(f.startswith("y_pred") for f in o)
    ]
    if not outputs:
        return None
    outputs.sort(key=lambda o: o["_seq"])
    fields = sorted(
        {f for o in outputs for f in o if f.startswith("y_pred")}, key=lambda f: (f != "y_pred", f)
    )
    tasks = [o.get("task") for o in outputs]
    has_tasks = any(t is not None for t in tasks)
    fig, axes = _figure(2 if has_tasks else 1, name)
    fig.suptitle(f"{name}: prequential accuracy")
    n = len(outputs)
    window = max(10, min(500, n // 20))
    ax = axes[0]
    for field in fields:
        idx = [i for i, o in enumerate(outputs) if o.get(field) is not None]
        if not idx:
            continue
        curve = prequential_accuracy(
            [outputs[i]["y"] for i in idx], [outputs[i][field] for i in idx], window=window
        )
        ax.plot(idx, curve, linewidth=0.9, label=f"{field} (window {window})")
    boundaries = [i for i in range(1, n) if tasks[i] != tasks[i - 1]]
    for b in boundaries[:200]:
        for a in axes:
            a.axvline(b, color="0.6", linestyle=":", linewidth=0.8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("accuracy")
    ax.legend(loc="lower right", fontsize=7)
    if has_tasks:
        ax2 = axes[1]
        field = fields[0]
        seen: dict[Any, list[int]] = {}
        for i, o in enumerate(outputs):
            if o.get("task") is not None and o.get(field) is not None:
                seen.setdefault(_hashable(o["task"]), []).append(i)
        for task, idx in list(seen.items())[:20]:
            curve = prequential_accuracy(
                [outputs[i]["y"] for i in idx], [outputs[i][field] for i in idx]
            )
            ax2.plot(
                idx, curve, linewidth=0.9, marker=".", markersize=2, label=f"task {key_label(task)}"
            )
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel(f"cumulative accuracy per task ({field})")
        ax2.legend(loc="lower right", fontsize=7, ncol=2)
    axes[-1].set_xlabel("labelled prediction")
    return fig
