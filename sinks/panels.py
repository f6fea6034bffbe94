"""Per-key views of a run: the rows of ``report.html`` and the panels of the PNG plots (part of
:class:`~shiftwatch.sinks.evaluation.EvaluationSink`).

A key's view holds its values (a scalar, up to eight coordinates, or a matrix's trace or a
vector's norm), its time axis, its detector's statistic and bounds, its alarms and located
changes, its labels and scores. :class:`KeyViews` is a mixin of the sink; the drawing itself
is :mod:`shiftwatch.sinks.plots` and :mod:`shiftwatch.sinks.html_report`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.codec import key_text
from shiftwatch.sinks.fleet import Fleet
from shiftwatch.sinks.key_names import key_label
from shiftwatch.sinks.plots import plot_accuracy, plot_series, plot_statistic
from shiftwatch.sinks.report import _key_scores

__all__ = ["KeyViews", "SCALAR", "value_kind", "plot_value"]

#: A vector input with more coordinates than this is plotted as its Euclidean norm.
_MAX_COORDS = 8
SCALAR = ("scalar", 1)


class _PlotTrace:
    """One key's series as the plots draw it (built at close, for the keys drawn only)."""

    def __init__(self, input_offsets: list, input_ts: list, values: list[tuple],
                 value_kind: tuple[str, int] | None, outputs: list[dict],
                 channels: Sequence[str] | None):
        self.input_offsets = input_offsets
        self.input_ts = input_ts
        self.values = values
        self.value_kind = value_kind
        self.outputs = outputs
        self.channels = channels

    def value_labels(self) -> list[str]:
        return _value_labels(self.value_kind, self.channels)

def _value_labels(kind_d: tuple[str, int] | None, channels: Sequence[str] | None) -> list[str]:
    kind, d = kind_d or SCALAR
    if kind == "coords" and channels is not None and len(channels) == d:
        return [key_label(str(c)) for c in channels]
    return {"scalar": ["value"], "trace": ["trace(value)"], "norm": ["|value|"]}.get(
        kind, [f"value[{i}]" for i in range(d)])

def value_kind(arr: np.ndarray) -> tuple[str, int]:
    if arr.ndim == 0 or arr.size == 1:
        return SCALAR
    if arr.ndim == 1 and arr.size <= _MAX_COORDS:
        return ("coords", arr.size)
    if arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
        return ("trace", 1)
    return ("norm", 1)

def plot_value(kind_d: tuple[str, int], arr: np.ndarray) -> tuple[float, ...]:
    kind, d = kind_d
    if kind == "scalar":
        return (float(arr.reshape(-1)[0]),) if arr.size == 1 else (math.nan,)
    if kind == "coords":
        return tuple(arr.tolist()) if arr.shape == (d,) else (math.nan,) * d
    if kind == "trace":
        if arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
            return (float(np.trace(arr)),)
        return (math.nan,)
    return (float(np.linalg.norm(arr.reshape(-1))),)


class KeyViews:
    """The per-key views and plots of an :class:`~shiftwatch.sinks.evaluation.EvaluationSink`
    (a mixin)."""

    def _key_values(self, fleet: Fleet, k: int) -> tuple[np.ndarray, list[str]]:
        """Key ``k``'s plot values (n x d) and their labels."""
        kind = self._kinds.get(k)
        if kind is not None and kind[0] == "coords":
            vec = self._vectors.get(k) or []
            d = kind[1]
            values = np.array([v if len(v) == d else (math.nan,) * d for v in vec],
                              dtype=float).reshape(-1, d)
        else:
            values = fleet.in_val[fleet.input_rows(k)][:, None]
        return values, _value_labels(kind, self.channels)

    def _key_stats(self, fleet: Fleet, k: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Key ``k``'s detector outputs: positions (sorted) and the finite fields there."""
        rows = fleet.output_rows(k)
        pos = fleet.out_pos[rows]
        ok = pos >= 0
        if not ok.all():
            rows, pos = rows[ok], pos[ok]
        if len(pos) > 1 and not bool(np.all(pos[1:] >= pos[:-1])):  # else sorted already
            order = np.argsort(pos, kind="stable")
            rows, pos = rows[order], pos[order]
        fields = {}
        for f, col in fleet.stats.items():
            v = col[rows]
            if np.isfinite(v).any():
                fields[f] = v
        return pos, fields

    def _time_of(self, fleet: Fleet, k: int) -> np.ndarray | None:
        from shiftwatch.sinks.time_axis import time_axis_array

        if not len(fleet.in_ts) or fleet.n_in[k] < 2:  # one record spans no time
            return None
        return time_axis_array(fleet.in_ts[fleet.input_rows(k)])

    def _view(self, fleet: Fleet, k: int) -> dict:
        key = self._keys[k]
        view: dict[str, Any] = {"key": key_label(key_text(key)), "n": int(fleet.n[k]),
                                "n_alarms": int(fleet.a_count[k])}
        if fleet.n_in[k]:
            view["values"], view["labels"] = self._key_values(fleet, k)
            view["time"] = self._time_of(fleet, k)
        pos, fields = self._key_stats(fleet, k)
        if fields:
            view["stat_pos"], view["stat"] = pos, fields
        alarms = fleet.alarms_of(k)
        view["alarms"] = alarms
        view["alarm_ts"] = fleet.ts_at(k, alarms[:500])
        view["located"] = fleet.located_of(k)
        view["located_ts"] = fleet.ts_at(k, view["located"][:500])
        view["detector"] = bool(fleet.has_detector[k])
        ann = self._plan.for_key(key_text(key)) if self._plan is not None else None
        if ann is not None:
            sets = ann.values() if isinstance(ann, Mapping) else [ann]
            truth = sorted({int(c) for s in sets for c in s if int(c) > 0})
            view["truth"] = [c for c in truth if c < view["n"]]
            view["beyond"] = [c for c in truth if c >= view["n"]]
        det = self._scores.get(k)
        if det is not None:
            view["scores"] = _key_scores(det)
        learner = self._learner_scores.get(k)
        if learner is not None:
            main = learner.get("y_pred") or {}
            view["accuracy"] = main.get("accuracy")
        return view

    @property
    def _plot_data(self) -> dict:
        """The plot data of the keys the PNGs draw, built on first use (a run without plots
        never builds it): see :meth:`_defer_panels`."""
        pending = self.__dict__.get("_plot_pending")
        if pending is not None:
            self.__dict__["_plot_pending"] = None
            self.__dict__["_plot_built"] = self._panels(*pending)
        return self.__dict__.get("_plot_built", {})

    @_plot_data.setter
    def _plot_data(self, data: dict) -> None:
        self.__dict__["_plot_pending"] = None
        self.__dict__["_plot_built"] = data

    def _defer_panels(self, fleet: Fleet, order: np.ndarray) -> None:
        """Make ``_plot_data`` the panels of ``fleet``'s keys in ``order`` when first read."""
        self.__dict__["_plot_built"] = {}
        self.__dict__["_plot_pending"] = (fleet, order)

    def _panels(self, fleet: Fleet, order: np.ndarray) -> dict:
        """The plot data of the keys the PNGs draw: alarmed keys first, then the others."""
        data = {}
        for k in order.tolist():
            if len(data) >= self.max_panels:
                break
            data[self._keys[k]] = self._panel(fleet, k)
        self._panel_counts = (fleet.n_keys, int((fleet.a_count > 0).sum()),
                              int((fleet.n_in > 0).sum()))
        return data

    def _panel(self, fleet: Fleet, k: int, learner_only: bool = False) -> dict:
        key = self._keys[k]
        outputs: list[dict]
        learner = self._learner.get(k) or []
        if learner_only:
            return {"trace": _PlotTrace([], [], [], None, learner, self.channels)}
        rows = fleet.output_rows(k)
        alarm = fleet.alarm[rows].tolist()
        stats = {f: col[rows].tolist() for f, col in fleet.stats.items()}
        outputs = []
        for i in range(len(rows)):
            o: dict[str, Any] = {f: v[i] for f, v in stats.items() if not math.isnan(v[i])}
            if alarm[i] >= 0:
                o["alarm"] = bool(alarm[i])
            outputs.append(o)
        rows_in = fleet.input_rows(k)
        if fleet.n_in[k]:
            values, _ = self._key_values(fleet, k)
            trace = _PlotTrace(list(range(len(rows_in))),
                               [None if math.isnan(t) else t for t in
                                fleet.in_ts[rows_in].tolist()],
                               [tuple(v) for v in values.tolist()], self._kinds.get(k),
                               outputs, self.channels)
        else:
            trace = _PlotTrace([], [], [], None, outputs, self.channels)
        ann = self._plan.for_key(key_text(key))
        if ann is not None and not isinstance(ann, Mapping):
            ann = {"labels": list(ann)}
        data: dict[str, Any] = {"trace": trace, "positions": [
            None if p < 0 else p for p in fleet.out_pos[rows].tolist()],
            "n": int(fleet.n[k]), "annotations": ann}
        if fleet.has_detector[k]:
            data["alarms"] = fleet.alarms_of(k).tolist()
            data["alarm_ts"] = fleet.ts_at(k, data["alarms"][:1]).tolist()
            if fleet.locates.any():
                data["located"] = fleet.located_of(k).tolist()
        return data

    def _write_plots(self) -> list[str]:
        errors = []
        data = list(self._plot_data.items())
        _, n_alarmed, n_with_inputs = getattr(self, "_panel_counts", (len(data), None, 0))
        fleet = self._fleet
        n_detectors = int(fleet.has_detector.sum()) if fleet is not None else len(data)
        learners = [(self._keys[k], self._panel(fleet, k, learner_only=True))
                    for k in self._learner] if fleet is not None else []
        for fname, draw in (("series.png", lambda: plot_series(
                                data, self.max_panels, self.name, total=n_with_inputs,
                                alarmed=n_alarmed)),
                            ("statistic.png", lambda: plot_statistic(
                                data, self.max_panels, self.name, total=n_detectors,
                                alarmed=n_alarmed)),
                            ("accuracy.png", lambda: plot_accuracy(
                                learners, self.max_panels, self.name))):
            try:
                fig = draw()
                if fig is None:
                    continue
                if self._write_file(fname, "wb",
                                    lambda fh, fig=fig: fig.savefig(fh, format="png", dpi=100)):
                    self._files.append(self._path(fname))
                else:
                    errors.append(f"{fname}: {self.failed[self._path(fname)]}")
            except Exception as exc:  # a plot must never cost the report
                errors.append(f"{fname}: {type(exc).__name__}: {exc}")
        return errors
