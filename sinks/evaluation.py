"""The evaluating sink: score a run against labels and annotations, write a report and plots.

Positions: alarms and change points are 0-based positions in each key's own series. The sink
receives the input records (``wants_inputs``) and maps each output's ``offset`` (the runner's
global position of its input) to the position of that input among the inputs of the same key.
Without inputs for a key it counts outputs instead (outputs sharing an offset share a
position).

A detector's alarm may carry ``change_at``: where the detector located the change, counted
in the records *it accepted* for the key (see the detectors' docstrings). The sink maps it to
a position through the key's detector outputs: ``change_at = j`` is the position of the key's
``j``-th detector output (one per accepted record), which is ``j`` itself when nothing was
dead-lettered. This assumes the sink saw the key's outputs from the detector's start (a
replay); a ``change_at`` beyond the outputs seen is left out and counted as
``unmatched_locations``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.codec import jsonable, key_text
from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed
from shiftwatch.sinks.base import Sink
from shiftwatch.sinks.key_label import key_label
from shiftwatch.sinks.labels import plan_labels
from shiftwatch.sinks.learner_scores import learner_metrics
from shiftwatch.sinks.plots import plot_accuracy, plot_series, plot_statistic
from shiftwatch.sinks.scoring import (
    evaluate_detector,
    evaluate_locations,
    located_positions,
    pool_detectors,
)

__all__ = ["EvaluationSink"]

#: Output fields the sink keeps (besides every ``y_pred*`` field).
_KEPT = (
    "offset",
    "alarm",
    "change_at",
    "change_ts",
    "statistic",
    "threshold",
    "lower",
    "upper",
    "y",
    "task",
    "train",
    "trained_through",
)
#: A vector input with more coordinates than this is plotted as its Euclidean norm.
_MAX_COORDS = 8


class _KeyTrace:
    """What the sink keeps of one key: plottable input values and the scored output fields."""

    def __init__(self) -> None:
        self.input_offsets: list[Any] = []
        self.input_ts: list[Any] = []  # for a time axis (see shiftwatch.sinks.time_axis)
        self.values: list[tuple[float, ...]] = []
        self.value_kind: tuple[str, int] | None = None  # ("scalar"|"coords"|"norm"|"trace", d)
        self.outputs: list[dict] = []
        self.channels: Sequence[str] | None = None

    def add_input(self, record: Mapping) -> None:
        self.input_offsets.append(record.get("offset"))
        ts = record.get("ts")
        self.input_ts.append(ts if isinstance(ts, (int, float, np.number)) else None)
        self.values.append(self._plot_value(record.get("value")))

    def _plot_value(self, value: Any) -> tuple[float, ...]:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        if arr is None or arr.size == 0:
            return (math.nan,) * (self.value_kind[1] if self.value_kind else 1)
        if self.value_kind is None:
            if arr.ndim == 0 or arr.size == 1:
                self.value_kind = ("scalar", 1)
            elif arr.ndim == 1 and arr.size <= _MAX_COORDS:
                self.value_kind = ("coords", arr.size)
            elif arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
                self.value_kind = ("trace", 1)
            else:
                self.value_kind = ("norm", 1)
        kind, d = self.value_kind
        if kind == "scalar":
            return (float(arr.reshape(-1)[0]),) if arr.size == 1 else (math.nan,)
        if kind == "coords":
            return tuple(arr.tolist()) if arr.shape == (d,) else (math.nan,) * d
        if kind == "trace":
            if arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
                return (float(np.trace(arr)),)
            return (math.nan,)
        return (float(np.linalg.norm(arr.reshape(-1))),)

    def value_labels(self) -> list[str]:
        kind, d = self.value_kind or ("scalar", 1)
        if kind == "coords" and self.channels is not None and len(self.channels) == d:
            return [key_label(str(c)) for c in self.channels]
        return {"scalar": ["value"], "trace": ["trace(value)"], "norm": ["|value|"]}.get(
            kind, [f"value[{i}]" for i in range(d)]
        )

    def positions(self) -> tuple[list[int | None], int]:
        """Each output's position in the key's series, and the series length."""
        if self.input_offsets:
            where: dict[Any, int] = {}
            for i, off in enumerate(self.input_offsets):
                if off is not None:
                    where.setdefault(off, i)
            return [where.get(o.get("offset")) for o in self.outputs], len(self.input_offsets)
        pos: list[int | None] = []
        last: Any = object()
        count = -1
        for o in self.outputs:
            off = o.get("offset")
            if off is None or off != last:
                count += 1
            last = off
            pos.append(count)
        return pos, count + 1


class EvaluationSink(Sink):
    """Score a run at close: write ``report.json`` and plots in ``out_dir``.

    Detector outputs (records with an ``alarm`` field) are scored per key with
    :func:`evaluate_detector` against the annotations; learner outputs (records with a
    ``y_pred`` field, also ``y_pred_*`` variants) get prequential accuracy, accuracy per task,
    the task accuracy matrix (:func:`~shiftwatch.sinks.metrics.accuracy_matrix`), forgetting and
    average accuracy.

    Parameters
    ----------
    out_dir
        The directory for ``report.json``, ``series.png``, ``statistic.png`` and
        ``accuracy.png`` (created).
    annotations
        True change points, as positions (0-based) in each key's own series: a list
        ``[positions]`` or ``{annotator: [positions]}`` applied to every key;
        ``{key: [positions]}`` (when every name is a key of the stream) or
        ``{key: {annotator: [positions]}}`` per key, where ``[]`` says the key never changed
        and a key left out is not scored; or None.
    name
        The run's name, written in the report.
    operator
        The operator (or its description), written in the report as text.
    plots
        Write the PNG files.
    margin
        The TCPD F1 margin.
    max_panels
        At most this many keys are drawn (the first seen).
    html
        Also write ``report.html`` (:mod:`shiftwatch.sinks.html_report`): one self-contained
        page with each key's series, zoomable, alarms and labels marked, and the scores.
    parameters
        The run's parameters (source, operators, options), shown in ``report.html`` and
        written in ``report.json`` under ``parameters``.
    channels
        Names of a vector value's coordinates (e.g. the CSV columns), for legends; default
        ``value[0]``, ``value[1]``, ...

    Notes
    -----
    The report (``self.report`` after :meth:`close`) holds, under ``keys`` (by key as text)
    and ``aggregate``:

    * ``n_records`` and, for detectors, ``alarms`` (positions, per key) and ``detector``:
      the output of :func:`evaluate_detector`. Aggregated: F1, precision, recall and
      covering are the unweighted mean over keys with annotations (as TCPDBench averages
      over series); delays, false alarms and missed changes are pooled, and the average run
      length is the pooled no-change samples over the pooled false alarms.
    * for learners, ``learner``: per prediction field, ``accuracy`` (over labelled outputs),
      ``accuracy_by_task``, ``accuracy_matrix`` (``tasks``, ``R``, ``counts``),
      ``forgetting`` and ``average_accuracy``. Aggregated by pooling the keys' outputs, the
      trained-through task being inferred within each key.

    ``summary`` is a flat block of the headline aggregate numbers: ``records``, ``keys``;
    ``alarms``, ``f1``, ``precision``, ``recall``, ``covering``, ``mean_delay``,
    ``false_alarms``, ``missed``, ``average_run_length`` for detectors; ``accuracy``,
    ``forgetting``, ``average_accuracy`` (of ``y_pred``) for learners.

    Missing or undefined numbers (no annotations, no false alarm so an infinite run length,
    no labels) are ``null``: the file is strict JSON.

    Examples
    --------
    >>> import tempfile
    >>> sink = EvaluationSink(tempfile.mkdtemp(), annotations=[50], plots=False)
    >>> sink.open()
    >>> sink.write_inputs([{"key": "s", "offset": i, "value": float(i >= 50)}
    ...                    for i in range(100)])
    >>> sink.write([{"key": "s", "offset": i, "alarm": i == 53} for i in range(100)])
    >>> sink.close()
    >>> det = sink.report["aggregate"]["detector"]
    >>> det["f1"], det["alarms"], det["detection"]["delays"]
    (1.0, 1, [3])
    """

    wants_inputs = True

    def __init__(
        self,
        out_dir: str | os.PathLike,
        annotations: Mapping | Sequence | None = None,
        name: str = "run",
        operator: Any = None,
        plots: bool = True,
        margin: int = 5,
        max_panels: int = 6,
        html: bool = True,
        parameters: Mapping | None = None,
        channels: Sequence[str] | None = None,
    ):
        if not isinstance(margin, int) or margin < 0:
            raise ValueError(f"margin must be an integer >= 0, got {margin!r}")
        if not isinstance(max_panels, int) or max_panels < 1:
            raise ValueError(f"max_panels must be an integer >= 1, got {max_panels!r}")
        _check_annotations(annotations)
        self.out_dir = out_dir
        self.annotations = annotations
        self.name = name
        self.operator = operator
        self.plots = plots
        self.margin = margin
        self.max_panels = max_panels
        self.html = html
        self.parameters = parameters
        self.channels = channels
        self.report: dict | None = None
        self._traces: dict[Hashable, _KeyTrace] = {}
        self._files: list[str] = []
        self.written: list[str] = []
        self.failed: dict[str, str] = {}
        self._closed = False
        self._seq = 0
        self._plot_data: dict = {}
        self._mode: str | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        """Create ``out_dir``. May raise ``OSError``."""
        os.makedirs(self.out_dir, exist_ok=True)

    def write(self, records: Sequence[dict]) -> None:
        """Keep the scored fields of each output record (non-mappings are ignored)."""
        for record in records:
            if not isinstance(record, Mapping):
                continue
            kept = {f: record[f] for f in _KEPT if f in record}
            kept.update(
                {f: v for f, v in record.items() if isinstance(f, str) and f.startswith("y_pred")}
            )
            kept["_seq"] = self._seq  # arrival order across keys, for the accuracy plot
            self._seq += 1
            self._trace(record.get("key")).outputs.append(kept)

    def write_inputs(self, records: Sequence[dict]) -> None:
        """Keep each input's offset and a plottable form of its value."""
        for record in records:
            if isinstance(record, Mapping):
                self._trace(record.get("key")).add_input(record)

    def close(self) -> None:
        """Compute the report, write ``report.json`` and the plots (once).

        A failing plot is reported under ``plot_errors`` and does not stop the report. Each
        file is written whole or not at all (:class:`~shiftwatch.sinks.atomic_file.AtomicFile`):
        ``written`` lists the files written, ``failed`` maps each file that could not be
        (a full disk) to the reason; close never raises for those. The collected records are
        released in ``finally``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            report = self._build_report()
            if self.plots:
                errors = self._write_plots()
                if errors:
                    report["plot_errors"] = errors
            if self.parameters is not None:
                report["parameters"] = dict(self.parameters)
            if self.html:
                error = self._write_html(jsonable(report))
                if error:
                    report["html_error"] = error
                else:
                    report["html"] = os.path.join(os.fspath(self.out_dir), "report.html")
            report["plots"] = list(self._files)
            self.report = jsonable(report)
            text = json.dumps(self.report, indent=2, allow_nan=False) + "\n"
            self._write_file("report.json", "w", lambda fh: fh.write(text))
        finally:
            self._traces = {}
            self._plot_data = {}

    def _write_html(self, report: dict) -> str | None:
        """Write ``report.html``; return the error instead of raising (it must not cost the
        report)."""
        from shiftwatch.sinks.html_report import render_html_report

        try:
            page = render_html_report(report, list(self._plot_data.items()), key_text,
                                      parameters=jsonable(self.parameters or {}))
        except Exception as exc:
            return f"report.html: {type(exc).__name__}: {exc}"
        if not self._write_file("report.html", "w", lambda fh: fh.write(page)):
            return f"report.html: {self.failed[self._path('report.html')]}"
        return None

    def _path(self, fname: str) -> str:
        return os.path.join(os.fspath(self.out_dir), fname)

    def _write_file(self, fname: str, mode: str, write: Any) -> bool:
        """Write ``out_dir/fname`` whole with ``write(file)``; a failure goes to ``failed``."""
        path = self._path(fname)
        try:
            with AtomicFile(path, mode) as fh:
                write(fh)
        except WriteFailed as exc:
            self.failed.update(exc.failed)
            return False
        self.written.append(path)
        return True

    def summary(self) -> dict:
        """The report path, the plots, and the report's ``summary`` block (after close);
        ``failed`` (file -> reason) when a file could not be written."""
        out: dict[str, Any] = {
            "report": os.path.join(os.fspath(self.out_dir), "report.json"),
            "plots": list(self._files),
        }
        if self.report:
            out.update(self.report["summary"])
        if self.failed:
            out["failed"] = dict(self.failed)
        return out

    # ---- scoring ------------------------------------------------------------------------

    def _trace(self, key: Any) -> _KeyTrace:
        key = _hashable(key)
        trace = self._traces.get(key)
        if trace is None:
            trace = self._traces[key] = _KeyTrace()
            trace.channels = self.channels
        return trace

    def _annotations_for(self, key: Any) -> Mapping | Sequence | None:
        found = self._plan.for_key(key_text(key))
        if found is not None and not isinstance(found, Mapping):
            return {"labels": list(found)}
        return found

    def _build_report(self) -> dict:
        keys: dict[str, dict] = {}
        plot_data: dict[Hashable, dict] = {}
        pooled_learner: list[tuple[dict, list]] = []  # (output, triples source) per key
        det_reports: list[dict] = []
        total_records = 0
        self._plan = plan_labels(self.annotations, {key_text(k) for k in self._traces})
        self._mode = self._plan.mode
        for key, trace in self._traces.items():
            positions, n = trace.positions()
            total_records += n
            entry: dict[str, Any] = {"n_records": n, "n_outputs": len(trace.outputs)}
            unmatched = sum(p is None for p in positions)
            if unmatched:
                entry["unmatched_outputs"] = unmatched
            ann = self._annotations_for(key)
            data = {"trace": trace, "positions": positions, "n": n, "annotations": ann}
            if any("alarm" in o for o in trace.outputs):
                alarms = sorted(
                    {
                        p
                        for p, o in zip(positions, trace.outputs, strict=True)
                        if p is not None and o.get("alarm")
                    }
                )
                det = evaluate_detector(alarms, ann, n, margin=self.margin)
                det["annotated"] = ann is not None
                entry["alarms"] = alarms
                if any("change_at" in o for o in trace.outputs):
                    located, lost = located_positions(trace.outputs, positions)
                    det["location"] = evaluate_locations(located, ann, n, margin=self.margin)
                    if lost:
                        det["location"]["unmatched_locations"] = lost
                    data["located"] = located
                entry["detector"] = det
                det_reports.append(det)
                data["alarms"] = alarms
            learner_outputs = [o for o in trace.outputs if any(f.startswith("y_pred") for f in o)]
            if learner_outputs:
                entry["learner"] = learner_metrics([learner_outputs])
                pooled_learner.append((key, learner_outputs))
            keys[key_text(key)] = entry
            plot_data[key] = data
        self._plot_data = plot_data

        aggregate: dict[str, Any] = {"n_keys": len(keys), "n_records": total_records}
        if det_reports:
            aggregate["detector"] = pool_detectors(det_reports)
        if pooled_learner:
            aggregate["learner"] = learner_metrics([outs for _, outs in pooled_learner])
        operator = self.operator
        if operator is not None and not isinstance(operator, str):
            operator = repr(operator)
        return {
            "name": self.name,
            "operator": operator,
            "margin": self.margin,
            "annotations": self._mode,
            "summary": _headline(aggregate),
            "aggregate": aggregate,
            "keys": keys,
        }

    # ---- plots --------------------------------------------------------------------------

    def _write_plots(self) -> list[str]:
        errors = []
        data = list(self._plot_data.items())
        for fname, draw in (
            ("series.png", plot_series),
            ("statistic.png", plot_statistic),
            ("accuracy.png", plot_accuracy),
        ):
            try:
                fig = draw(data, self.max_panels, self.name)
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


def _check_annotations(annotations: Any) -> None:
    """Raise ``ValueError`` now rather than at close for annotations that cannot be scored."""
    if annotations is None:
        return
    if isinstance(annotations, Mapping):
        groups = [v.values() if isinstance(v, Mapping) else [v] for v in annotations.values()]
        lists = [cps for g in groups for cps in g]
    else:
        lists = [annotations]
    for cps in lists:
        if isinstance(cps, (str, bytes)) or not isinstance(cps, Iterable):
            raise ValueError(f"annotations: expected lists of positions, got {cps!r}")
        for c in cps:
            if (
                isinstance(c, bool)
                or not isinstance(c, numbers.Integral)
                and not (isinstance(c, float) and c.is_integer())
            ):
                raise ValueError(f"annotations: positions must be integers, got {c!r}")
            if c < 0:
                raise ValueError(f"annotations: positions must be >= 0, got {c}")


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


def _headline(aggregate: dict) -> dict:
    """The flat ``summary`` block: the aggregate numbers a console line or a table needs."""
    out: dict[str, Any] = {"records": aggregate["n_records"], "keys": aggregate["n_keys"]}
    det = aggregate.get("detector")
    if det:
        d = det["detection"]
        out.update(
            alarms=det["alarms"],
            f1=det["f1"],
            f1_1pct=det.get("f1_1pct"),
            precision=det["precision"],
            recall=det["recall"],
            covering=det["covering"],
            mean_delay=d["mean_delay"],
            false_alarms=d["n_false_alarms"],
            missed=d["n_missed"],
            average_run_length=d["average_run_length"],
        )
        loc = det.get("location")
        if loc:
            out.update(
                located_f1=loc["f1"],
                located_f1_1pct=loc.get("f1_1pct"),
                located_covering=loc["covering"],
                location_error=loc["mean_abs_error"],
            )
    learner = aggregate.get("learner")
    if learner:
        main = learner.get("y_pred") or {}
        out.update(
            accuracy=main.get("accuracy"),
            forgetting=main.get("forgetting"),
            average_accuracy=main.get("average_accuracy"),
        )
    return out
