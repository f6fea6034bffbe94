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
from shiftwatch.sinks.base import Sink
from shiftwatch.sinks.metrics import (
    accuracy_matrix,
    average_accuracy,
    covering,
    detection_summary,
    evaluation_triples,
    f_measure,
    forgetting,
    prequential_accuracy,
)

__all__ = ["EvaluationSink", "evaluate_detector", "evaluate_locations", "merge_change_points"]

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


def merge_change_points(
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None, margin: int = 5
) -> list[int]:
    """One list of true change points from several annotators.

    The union of all annotators' points, sorted, where a point at most ``margin`` after the
    previous kept point is taken as the same change and dropped (annotators rarely agree to
    the sample). Position 0 is dropped.

    Examples
    --------
    >>> merge_change_points({"a": [100, 250], "b": [103, 400], "c": [0]})
    [100, 250, 400]
    """
    if annotations is None:
        return []
    sets = annotations.values() if isinstance(annotations, Mapping) else [annotations]
    kept: list[int] = []
    for c in sorted({int(c) for s in sets for c in s}):
        if c > 0 and (not kept or c - kept[-1] > margin):
            kept.append(c)
    return kept


def evaluate_detector(
    alarms: Iterable[int],
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None,
    n: int,
    margin: int = 5,
) -> dict:
    """Score the alarms of one series: TCPD F1 and covering, delays, false alarms, ARL.

    Parameters
    ----------
    alarms
        Alarm positions in the series (0-based).
    annotations
        ``{annotator: [change points]}``, one list of change points, or None (unknown).
        Change points at or beyond ``n`` (not reached yet) are left out of every score.
    n
        The length of the series.
    margin
        The F1 margin (TCPDBench: 5) and the merge distance of :func:`merge_change_points`.

    Returns
    -------
    dict
        ``n``, ``alarms``, ``n_alarms``, ``f1``, ``precision``, ``recall``, ``covering``
        (None without annotations), ``margin``, ``change_points`` (the merged truth, inside
        the series) and ``detection``: :func:`~shiftwatch.sinks.metrics.detection_summary` against
        those change points (its ``average_run_length`` is ``inf`` when there is no false alarm).

    Examples
    --------
    >>> r = evaluate_detector([52, 130], {"a": [50], "b": [48, 150]}, n=200)
    >>> r["precision"], r["recall"]  # P = 2/3 (0 and 52), R = (2/2 + 2/3) / 2
    (0.6666666666666666, 0.8333333333333333)
    >>> round(r["f1"], 4), r["change_points"], r["detection"]["delays"]
    (0.7407, [48, 150], [4, None])
    >>> evaluate_detector([], None, n=10)["detection"]["average_run_length"]
    inf
    """
    n = int(n)
    alarm_list = sorted({int(a) for a in alarms})
    out: dict[str, Any] = {
        "n": n,
        "alarms": alarm_list,
        "n_alarms": len(alarm_list),
        "f1": None,
        "precision": None,
        "recall": None,
        "covering": None,
        "margin": margin,
    }
    if annotations is not None and not isinstance(annotations, Mapping):
        annotations = {"0": list(annotations)}
    if annotations is not None and len(annotations) == 0:
        annotations = None
    if annotations is not None and n > 0:
        # Change points the series never reached (an interrupted or partial replay) cannot be
        # detected; every score leaves them out, as the detection summary below does.
        reached = {k: [int(c) for c in v if int(c) < n] for k, v in annotations.items()}
        f, p, r = f_measure(reached, alarm_list, margin=margin, return_PR=True)
        out.update(f1=f, precision=p, recall=r, covering=covering(reached, alarm_list, n))
    truth = [c for c in merge_change_points(annotations, margin) if c < n]
    out["change_points"] = truth
    out["detection"] = detection_summary(alarm_list, truth, n) if n > 0 else None
    return out


def evaluate_locations(
    located: Iterable[int],
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None,
    n: int,
    margin: int = 5,
) -> dict:
    """Score located change points: TCPD F1 and covering, and the location error.

    The same F1 and covering as :func:`evaluate_detector`, of the ``change_at`` positions
    instead of the alarm positions, plus ``mean_abs_error``: the mean over located points of
    the distance to the nearest true (merged) change point (None without annotations).

    Examples
    --------
    >>> r = evaluate_locations([49, 152], {"a": [50], "b": [48, 150]}, n=200)
    >>> round(r["f1"], 4), r["mean_abs_error"], r["errors"]
    (1.0, 1.5, [1, 2])
    """
    n = int(n)
    points = sorted({int(c) for c in located})
    det = evaluate_detector(points, annotations, n, margin=margin)
    out: dict[str, Any] = {
        "located": points,
        "n_located": len(points),
        "f1": det["f1"],
        "precision": det["precision"],
        "recall": det["recall"],
        "covering": det["covering"],
        "mean_abs_error": None,
        "errors": None,
    }
    truth = det["change_points"]
    if annotations is not None and truth:
        errors = [min(abs(p - c) for c in truth) for p in points]
        out["errors"] = errors
        out["mean_abs_error"] = sum(errors) / len(errors) if errors else None
    return out


def _located_positions(outputs: list[dict], positions: list[int | None]) -> tuple[list, int]:
    """The positions of the outputs' ``change_at`` values, and how many could not be mapped."""
    det_pos = [p for p, o in zip(positions, outputs, strict=True) if "alarm" in o]
    located, unmatched = [], 0
    for o in outputs:
        j = o.get("change_at")
        if not o.get("alarm") or not isinstance(j, numbers.Integral) or isinstance(j, bool):
            continue
        p = det_pos[j] if 0 <= j < len(det_pos) else None
        if p is None:
            unmatched += 1
        else:
            located.append(p)
    return sorted(set(located)), unmatched


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
            return [str(c) for c in self.channels]
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
    >>> sink = EvaluationSink(tempfile.mkdtemp(), annotations={"a": [50]}, plots=False)
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

        A failing plot is reported under ``plot_errors`` and does not stop the report. The
        collected records are released in ``finally``.
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
            path = os.path.join(self.out_dir, "report.json")
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.report, fh, indent=2, allow_nan=False)
                fh.write("\n")
            os.replace(tmp, path)
        finally:
            self._traces = {}
            self._plot_data = {}

    def _write_html(self, report: dict) -> str | None:
        """Write ``report.html``; return the error instead of raising (it must not cost the
        report)."""
        from shiftwatch.sinks.html_report import render_html_report

        path = os.path.join(self.out_dir, "report.html")
        try:
            page = render_html_report(report, list(self._plot_data.items()), key_text,
                                      parameters=jsonable(self.parameters or {}))
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                fh.write(page)
            os.replace(path + ".tmp", path)
        except Exception as exc:
            return f"report.html: {type(exc).__name__}: {exc}"
        return None

    def summary(self) -> dict:
        """The report path, the plots, and the report's ``summary`` block (after close)."""
        out: dict[str, Any] = {
            "report": os.path.join(os.fspath(self.out_dir), "report.json"),
            "plots": list(self._files),
        }
        if self.report:
            out.update(self.report["summary"])
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
        ann = self.annotations
        if ann is None or (isinstance(ann, (Mapping, Sequence)) and len(ann) == 0):
            return None
        if self._mode == "shared by all keys" and isinstance(ann, Mapping) and all(
                isinstance(v, Mapping) for v in ann.values()):
            return next(iter(ann.values()))  # one {name: {annotator: [...]}}, not a key
        if self._mode == "per key":
            found = ann[key] if key in ann else ann.get(key_text(key))
            if found is not None and not isinstance(found, Mapping):
                return {"labels": list(found)}  # {key: [positions]}
            return found
        return ann

    def _build_report(self) -> dict:
        keys: dict[str, dict] = {}
        plot_data: dict[Hashable, dict] = {}
        pooled_learner: list[tuple[dict, list]] = []  # (output, triples source) per key
        det_reports: list[dict] = []
        total_records = 0
        self._mode = self._annotation_mode()
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
                    located, lost = _located_positions(trace.outputs, positions)
                    det["location"] = evaluate_locations(located, ann, n, margin=self.margin)
                    if lost:
                        det["location"]["unmatched_locations"] = lost
                    data["located"] = located
                entry["detector"] = det
                det_reports.append(det)
                data["alarms"] = alarms
            learner_outputs = [o for o in trace.outputs if any(f.startswith("y_pred") for f in o)]
            if learner_outputs:
                entry["learner"] = _learner_metrics([learner_outputs])
                pooled_learner.append((key, learner_outputs))
            keys[key_text(key)] = entry
            plot_data[key] = data
        self._plot_data = plot_data

        aggregate: dict[str, Any] = {"n_keys": len(keys), "n_records": total_records}
        if det_reports:
            aggregate["detector"] = _pool_detectors(det_reports)
        if pooled_learner:
            aggregate["learner"] = _learner_metrics([outs for _, outs in pooled_learner])
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

    def _annotation_mode(self) -> str | None:
        ann = self.annotations
        if ann is None or len(ann) == 0:
            return None
        keys = {key_text(k) for k in self._traces}
        if isinstance(ann, Mapping) and all(isinstance(v, Mapping) for v in ann.values()):
            if len(ann) == 1 and keys and not keys & {key_text(n) for n in ann}:
                return "shared by all keys"  # e.g. a TCPD file: {data set: {annotator: [...]}}
            return "per key"
        if isinstance(ann, Mapping) and self._traces:
            # {name: [positions]}: per key when every name is a key of the stream, else the
            # names are annotators whose points apply to every key.
            if all(key_text(name) in keys for name in ann):
                return "per key"
        return "shared by all keys"

    # ---- plots --------------------------------------------------------------------------

    def _write_plots(self) -> list[str]:
        errors = []
        data = list(self._plot_data.items())
        for fname, draw in (
            ("series.png", _plot_series),
            ("statistic.png", _plot_statistic),
            ("accuracy.png", _plot_accuracy),
        ):
            try:
                fig = draw(data, self.max_panels, self.name)
                if fig is None:
                    continue
                path = os.path.join(self.out_dir, fname)
                fig.savefig(path, dpi=100)
                self._files.append(path)
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


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _headline(aggregate: dict) -> dict:
    """The flat ``summary`` block: the aggregate numbers a console line or a table needs."""
    out: dict[str, Any] = {"records": aggregate["n_records"], "keys": aggregate["n_keys"]}
    det = aggregate.get("detector")
    if det:
        d = det["detection"]
        out.update(
            alarms=det["alarms"],
            f1=det["f1"],
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


def _pool_detectors(reports: list[dict]) -> dict:
    annotated = [r for r in reports if r["annotated"]]
    dets = [r["detection"] for r in reports if r["detection"] is not None]
    delays = [d for s in dets for d in s["delays"] if d is not None]
    false_alarms = sum(s["n_false_alarms"] for s in dets)
    no_change = sum(s["no_change_samples"] for s in dets)
    located = [r["location"] for r in reports if r.get("location") is not None]
    location = None
    if located:
        ann_loc = [r["location"] for r in annotated if r.get("location") is not None]
        errors = [e for r in located for e in (r["errors"] or [])]
        location = {
            "n_located": sum(r["n_located"] for r in located),
            "f1": _mean([r["f1"] for r in ann_loc]),
            "precision": _mean([r["precision"] for r in ann_loc]),
            "recall": _mean([r["recall"] for r in ann_loc]),
            "covering": _mean([r["covering"] for r in ann_loc]),
            "mean_abs_error": sum(errors) / len(errors) if errors else None,
        }
    return {
        "location": location,
        "n_series": len(reports),
        "n_annotated": len(annotated),
        "alarms": sum(r["n_alarms"] for r in reports),
        "f1": _mean([r["f1"] for r in annotated]),
        "precision": _mean([r["precision"] for r in annotated]),
        "recall": _mean([r["recall"] for r in annotated]),
        "covering": _mean([r["covering"] for r in annotated]),
        "detection": {
            "n_changes": sum(len(s["change_points"]) for s in dets),
            "n_detected": sum(s["n_detected"] for s in dets),
            "n_missed": sum(s["n_missed"] for s in dets),
            "n_false_alarms": false_alarms,
            "mean_delay": sum(delays) / len(delays) if delays else None,
            "delays": delays,
            "no_change_samples": no_change,
            "average_run_length": no_change / false_alarms if false_alarms else math.inf,
        },
    }


def _learner_metrics(groups: list[list[dict]]) -> dict:
    """Learner scores over groups of outputs (one group per key, each in arrival order)."""
    outputs = [o for g in groups for o in g]
    fields = sorted(
        {f for o in outputs for f in o if f.startswith("y_pred")}, key=lambda f: (f != "y_pred", f)
    )
    labelled = [o for o in outputs if o.get("y") is not None]
    result: dict[str, Any] = {"n_predictions": len(outputs), "n_labelled": len(labelled)}
    has_tasks = any(o.get("task") is not None for o in outputs)
    for field in fields:
        pairs = [o for o in labelled if o.get(field) is not None]
        metrics: dict[str, Any] = {"n": len(pairs), "accuracy": None}
        if pairs:
            curve = prequential_accuracy([o["y"] for o in pairs], [o[field] for o in pairs])
            metrics["accuracy"] = float(curve[-1])
        if has_tasks:
            renamed = [[{**o, "y_pred": o.get(field)} for o in g] for g in groups]
            triples = [t for g in renamed for t in evaluation_triples(g)]
            by_task: dict[str, list[int]] = {}
            for _, task, correct in triples:
                hits = by_task.setdefault(key_text(task), [0, 0])
                hits[0] += correct
                hits[1] += 1
            metrics["accuracy_by_task"] = {t: h / c for t, (h, c) in by_task.items()}
            m = accuracy_matrix(triples)
            metrics["accuracy_matrix"] = {
                "tasks": [key_text(t) for t in m.tasks],
                "R": m.R,
                "counts": m.counts,
            }
            metrics["forgetting"] = forgetting(m.R)
            metrics["average_accuracy"] = average_accuracy(m.R)
        result[field] = metrics
    return result


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

    def __init__(self, trace: _KeyTrace):
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


def _key_title(key: Any) -> str:
    return "unkeyed stream" if key is None else f"key {key_text(key)}"


def _panel_title(fig: Any, name: str, what: str, shown: int, total: int) -> None:
    extra = f" (first {shown} of {total} keys)" if total > shown else ""
    fig.suptitle(f"{name}: {what}{extra}")


def _plot_series(data: list, max_panels: int, name: str) -> Any:
    with_inputs = [(k, d) for k, d in data if d["trace"].input_offsets]
    if not with_inputs:
        return None
    shown = with_inputs[:max_panels]
    fig, axes = _figure(len(shown), name)
    _panel_title(fig, name, "series", len(shown), len(with_inputs))
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
        ax.set_title(_key_title(key), fontsize=9, loc="left")
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


def _plot_statistic(data: list, max_panels: int, name: str) -> Any:
    panels = []
    for key, d in data:
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
    _panel_title(fig, name, "detector statistic", len(shown), len(panels))
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
        ax.set_title(_key_title(key), fontsize=9, loc="left")
        if to_x.is_time:
            to_x.style(ax, d["n"])
        ax.set_xlabel(to_x.label)
        ax.set_ylabel("statistic")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)  # beside the data
    return fig


def _plot_accuracy(data: list, max_panels: int, name: str) -> Any:
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
                idx, curve, linewidth=0.9, marker=".", markersize=2, label=f"task {key_text(task)}"
            )
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel(f"cumulative accuracy per task ({field})")
        ax2.legend(loc="lower right", fontsize=7, ncol=2)
    axes[-1].set_xlabel("labelled prediction")
    return fig
