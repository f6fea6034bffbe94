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
A replay (:class:`~shiftwatch.deploy.local.Pipeline`) maps ``change_at`` to that position
itself before any sink sees it (:mod:`~shiftwatch.deploy.positions`), so that every output
file and the console say the same number, and sets :attr:`EvaluationSink.change_at_positions`;
the sink then takes ``change_at`` as the position.

**Scale.** A replay may hold a million keys. The sink keeps what it needs of each record in
typed columns (a few dozen bytes per record, not a dict), computes positions, alarms and
located changes for every key at once with NumPy at close, scores only the labelled keys one
by one (identical keys are scored once), and streams each key's detail to ``keys.jsonl``;
``report.json`` holds the run's aggregates. Learner outputs (records with ``y_pred``) are
kept whole, as the learner scores need them.

This module is the sink itself (what it keeps of each record, its files);
:mod:`~shiftwatch.sinks.fleet` computes every key's positions, alarms and located changes,
:mod:`~shiftwatch.sinks.report` scores the keys and builds the report, and
:mod:`~shiftwatch.sinks.panels` draws the per-key views of ``report.html`` and the plots.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from array import array
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.codec import jsonable, key_text
from shiftwatch.records import reason_kind
from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed
from shiftwatch.sinks.base import Sink, per_key_number
from shiftwatch.sinks.fleet import NO_OFFSET
from shiftwatch.sinks.panels import SCALAR, KeyViews, plot_value, value_kind
from shiftwatch.sinks.report import ReportBuilder

__all__ = ["EvaluationSink"]

#: Output fields a learner output keeps (besides every ``y_pred*`` field).
_KEPT = ("offset", "alarm", "change_at", "change_ts", "statistic", "threshold", "lower",
         "upper", "y", "task", "train", "trained_through")
#: The detector fields the sink keeps of every output, as float columns.
_STAT_FIELDS = ("statistic", "threshold", "lower", "upper")
_BIG_OFFSET = 2**62
#: report.json keeps this many dead letters whole (all are counted by reason).
_FIRST_DEAD = 20
_ABSENT = object()


def _num(v: Any) -> float:
    """A plottable number, NaN for anything else (None, text, booleans)."""
    if type(v) is float:
        return v
    if isinstance(v, (int, np.integer, np.floating)) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            return math.nan
    return math.nan


def _change_at(record: Mapping) -> int:
    """The kept ``change_at`` of an output: -1 absent, -2 present but not a position."""
    j = record.get("change_at", _ABSENT)
    if j is _ABSENT:
        return -1
    if type(j) is int and 0 <= j < _BIG_OFFSET:
        return j
    if isinstance(j, numbers.Integral) and not isinstance(j, bool) and 0 <= j < _BIG_OFFSET:
        return int(j)
    return -2  # present, but not a position: never located


def _offsets(offsets: np.ndarray) -> np.ndarray:
    """A batch's offsets as the sink keeps them (:meth:`EvaluationSink._off`: runner
    offsets are ints in [0, 2**62))."""
    offs = np.ascontiguousarray(offsets, dtype=np.int64)
    if offs.shape[0] and not (0 <= int(offs.min()) and int(offs.max()) < _BIG_OFFSET):
        raise ValueError("offsets out of range for a column batch")
    return offs


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


class EvaluationSink(ReportBuilder, KeyViews, Sink):
    """Score a run at close: write ``report.json``, ``keys.jsonl``, ``report.html`` and plots.

    Detector outputs (records with an ``alarm`` field) are scored per key with
    :func:`~shiftwatch.sinks.scoring.evaluate_detector` against the labels; learner outputs
    (records with a ``y_pred`` field, and their ``y_pred_*`` variants) get prequential
    accuracy, accuracy per task, the task accuracy matrix
    (:func:`~shiftwatch.sinks.metrics.accuracy_matrix`), forgetting and average accuracy.

    Parameters
    ----------
    out_dir
        The directory for ``report.json``, ``keys.jsonl``, ``report.html``, ``series.png``,
        ``statistic.png`` and ``accuracy.png`` (created).
    annotations
        True change points, as positions (0-based) in each key's own series, by the rule of
        :func:`shiftwatch.sinks.labels.plan_labels`: a list for every key; a mapping whose
        names are keys of the stream (``{key: [positions]}`` or
        ``{key: {annotator: [positions]}}``; ``[]`` says the key never changed, a key left
        out is not scored, ``"*"`` stands for every key not named); in an unkeyed stream
        ``{annotator: [positions]}``; or None. A name that is not a key of a keyed stream
        raises :class:`~shiftwatch.sinks.labels.LabelsError` at close.
    name
        The run's name, written in the report.
    operator
        The operator (or its description), written in the report as text.
    plots
        Write the PNG files.
    margin
        The TCPD F1 margin.
    max_panels
        At most this many keys are drawn in each PNG: the keys with alarms first.
    html
        Also write ``report.html`` (:mod:`shiftwatch.sinks.html_report`).
    parameters
        The run's parameters (source, operators, options), shown in ``report.html`` and
        written in ``report.json`` under ``parameters``.
    channels
        Names of a vector value's coordinates (e.g. the CSV columns), for legends; default
        ``value[0]``, ``value[1]``, ...
    operators
        The run's operators (objects, or ``{"name", "params"}`` mappings): written in
        ``report.json`` under ``operators`` with every parameter, defaults included
        (:meth:`~shiftwatch.operators.contract.Operator.all_params`).
    max_table_keys
        ``report.html`` lists at most this many keys (the keys with alarms first); every key
        is in ``keys.jsonl``.

    Notes
    -----
    ``keys.jsonl`` holds one line per key, in the order the keys were first seen: ``key``
    (the key itself), ``n_records``, ``n_outputs``, ``unmatched_outputs`` (when any) and, for
    detectors, ``alarms`` (positions), ``alarm_ts`` (the inputs' ``ts`` there, when records
    carry a numeric ``ts``), ``located`` (when the detector locates its changes),
    ``unmatched_locations`` (when any) and, for labelled keys only, ``detector``: the output
    of :func:`~shiftwatch.sinks.scoring.evaluate_detector` (with ``location``, the located
    changes scored). A learner key has ``learner``: per prediction field ``accuracy``,
    ``accuracy_by_task``, ``accuracy_matrix`` (``tasks``, ``R``, ``counts``), ``forgetting``
    and ``average_accuracy``. :meth:`key_reports` reads it back.

    The report (``report.json``, ``self.report`` after :meth:`close`) holds the run's
    aggregates: ``aggregate`` (``n_keys``, ``n_records``, ``detector`` pooled by
    :class:`~shiftwatch.sinks.scoring.DetectorPool`, ``learner`` pooled over the keys'
    outputs), ``summary``, ``alarmed_keys`` (the first keys with alarms, with their counts
    and first alarm), ``labels_beyond_end`` (labels at or past the end of their key's
    stream: they count as missed), ``dead_letters`` (count by reason, the first few with
    where they came from; when the runner passes them, see :meth:`write_dead_letters`),
    ``operators``, ``parameters`` and the files written (``keys_file``, ``html``, ``plots``).

    ``summary`` is a flat block of the headline numbers: ``records``, ``keys``; for
    detectors ``alarms``, ``keys_with_alarms``, ``labelled_keys`` and, when some key is
    labelled, ``f1``, ``f1_1pct``, ``precision``, ``recall``, ``covering``, ``mean_delay``,
    ``false_alarms``, ``missed``, ``average_run_length`` (and the located scores). Without
    labels there are no false alarms or missed changes to count: only alarms. For learners
    ``accuracy``, ``forgetting``, ``average_accuracy`` (of ``y_pred``).

    Missing or undefined numbers (an infinite run length, no labels) are ``null``: the files
    are strict JSON.

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
    >>> sink.key_reports()["s"]["alarms"]
    [53]
    """

    wants_inputs = True
    wants_dead_letters = True
    #: ``change_at`` is already a position among the key's inputs (set by the replay runner,
    #: :mod:`~shiftwatch.deploy.positions`); False: the detector's count of its records.
    change_at_positions = False

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
        operators: Sequence | None = None,
        max_table_keys: int = 20_000,
    ):
        if not isinstance(margin, int) or margin < 0:
            raise ValueError(f"margin must be an integer >= 0, got {margin!r}")
        if not isinstance(max_panels, int) or max_panels < 1:
            raise ValueError(f"max_panels must be an integer >= 1, got {max_panels!r}")
        if not isinstance(max_table_keys, int) or max_table_keys < 1:
            raise ValueError(f"max_table_keys must be an integer >= 1, got {max_table_keys!r}")
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
        self.operators = operators
        self.max_table_keys = max_table_keys
        self.report: dict | None = None
        self._files: list[str] = []
        self.written: list[str] = []
        self.failed: dict[str, str] = {}
        self._closed = False
        self._plot_data: dict = {}
        self._mode: str | None = None
        self._reset_columns()
        self._alarms_by_operator: list[dict] | None = None
        self._incomplete: dict | None = None
        self._keys_evicted = 0  # keys the run's expiry rule forgot (deploy/expiry.py)
        self._dead_count = 0
        self._dead_reasons: Counter[str] = Counter()
        self._dead_first: list[dict] = []

    def _reset_columns(self) -> None:
        self._key_id: dict[Hashable, int] = {}
        self._keys: list[Any] = []
        self._off_id: dict[Any, int] = {}
        self._in_key, self._in_off = array("q"), array("q")
        self._in_ts, self._in_val = array("d"), array("d")
        self._kinds: dict[int, tuple[str, int]] = {}
        self._kinds_not_scalar = 0  # how many of _kinds are not SCALAR
        self._vectors: dict[int, list[tuple]] = {}  # key -> values of a vector-valued key
        self._out_key, self._out_off = array("q"), array("q")
        self._out_alarm, self._out_change_at = array("b"), array("q")
        self._out_stats = {f: array("d") for f in _STAT_FIELDS}
        self._learner: dict[int, list[dict]] = {}

    # ---- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        """Create ``out_dir``. May raise ``OSError``."""
        os.makedirs(self.out_dir, exist_ok=True)

    def _kid(self, key: Any) -> int:
        ids = self._key_id
        try:
            i = ids.get(key)
        except TypeError:  # a JSON list (or something unhashable)
            key = _hashable(key)
            try:
                i = ids.get(key)
            except TypeError:
                key = key_text(key)
                i = ids.get(key)
        if i is None:
            i = ids[key] = len(self._keys)
            self._keys.append(key)
        return i

    def _off(self, off: Any) -> int:
        if type(off) is int and 0 <= off < _BIG_OFFSET:
            return off
        if off is None:
            return NO_OFFSET
        try:
            found = self._off_id.get(off)
        except TypeError:
            off = repr(off)
            found = self._off_id.get(off)
        if found is None:  # interned below every real offset, above NO_OFFSET
            found = self._off_id[off] = -1 - len(self._off_id)
        return found

    def write(self, records: Sequence[dict]) -> None:
        """Keep the scored fields of each output record (non-mappings are ignored)."""
        kid, off = self._kid, self._off
        keys, offs = self._out_key, self._out_off
        alarms, change_at = self._out_alarm, self._out_change_at
        stat, thr, lo, hi = (self._out_stats[f] for f in _STAT_FIELDS)
        for record in records:
            if type(record) is not dict and not isinstance(record, Mapping):
                continue
            k = kid(record.get("key"))
            row = len(keys)
            keys.append(k)
            offs.append(off(record.get("offset")))
            alarms.append((1 if record["alarm"] else 0) if "alarm" in record else -1)
            change_at.append(_change_at(record))
            stat.append(_num(record.get("statistic")))
            thr.append(_num(record.get("threshold")))
            lo.append(_num(record.get("lower")))
            hi.append(_num(record.get("upper")))
            if "y_pred" in record:
                kept = {f: record[f] for f in _KEPT if f in record}
                kept.update({f: v for f, v in record.items()
                             if isinstance(f, str) and f.startswith("y_pred")})
                kept["_seq"] = row  # arrival order across keys, for the accuracy plot
                self._learner.setdefault(k, []).append(kept)

    def write_inputs(self, records: Sequence[dict]) -> None:
        """Keep each input's key, offset, ``ts`` and a plottable form of its value."""
        kid, off = self._kid, self._off
        keys, offs, tss, vals = self._in_key, self._in_off, self._in_ts, self._in_val
        kinds = self._kinds
        for record in records:
            if type(record) is not dict and not isinstance(record, Mapping):
                continue
            k = kid(record.get("key"))
            keys.append(k)
            offs.append(off(record.get("offset")))
            tss.append(_num(record.get("ts")))
            v = record.get("value")
            kind = kinds.get(k)
            if (type(v) is float or type(v) is int) and (kind is None or kind is SCALAR):
                if kind is None:
                    kinds[k] = SCALAR
                vals.append(float(v))
            else:
                vals.append(self._slow_value(k, v))

    def write_input_columns(self, columns: Any) -> None:
        """:meth:`write_inputs` of a column batch of scalar inputs (the replay's columnar
        path, :class:`~shiftwatch.deploy.columnar.InputColumns`): the same columns kept."""
        if columns.values.ndim != 1:
            self._write_vector_columns(columns)
            return
        kinds = self._kinds
        ids = self._kids(columns.keys, columns)
        if len(kinds) < len(self._keys) or self._kinds_not_scalar:
            # (a key without a kind, or one of vectors: key by key)
            if any(kinds.get(k, SCALAR) is not SCALAR for k in ids):
                self.write_inputs(columns.records())  # (a key of vectors: not expected)
                return
            for k in ids:
                if k not in kinds:
                    kinds[k] = SCALAR
        self._keep_inputs(columns, ids, columns.values)

    def _keep_inputs(self, columns: Any, ids: list[int], plot: np.ndarray) -> None:
        """A column batch's key ids, offsets, ``ts`` and plot values (one per row) kept."""
        n = len(columns)
        self._in_key.frombytes(np.asarray(ids, dtype=np.int64)[columns.inv].tobytes())
        self._in_off.frombytes(_offsets(columns.offsets).tobytes())
        ts = columns.ts if columns.ts is not None else np.full(n, math.nan)
        self._in_ts.frombytes(np.ascontiguousarray(ts, dtype=np.float64).tobytes())
        self._in_val.frombytes(np.ascontiguousarray(plot, dtype=np.float64).tobytes())

    def _write_vector_columns(self, columns: Any) -> None:
        """:meth:`write_input_columns` of vectors (``values`` (n, d)): each key's
        coordinates kept as :meth:`_slow_value` keeps them, key by key; vectors that are
        not plotted as coordinates (one or many coordinates), or a key whose earlier values
        were of another kind: record by record."""
        vals = columns.values
        n, d = vals.shape[0], vals.shape[1] if vals.ndim == 2 else 0
        kind = value_kind(vals[0]) if n and vals.ndim == 2 else None
        ids = self._kids(columns.keys, columns)
        kinds = self._kinds
        if (kind is None or kind != ("coords", d)
                or any(kinds.get(k, kind) != kind for k in ids)):
            self.write_inputs(columns.records())
            return
        for k in ids:
            if k not in kinds:
                kinds[k] = kind
                self._kinds_not_scalar += 1
        order = np.argsort(columns.inv, kind="stable")
        counts = np.bincount(columns.inv, minlength=len(ids))
        starts = np.cumsum(counts) - counts
        rows = vals[order].tolist()
        for u, k in enumerate(ids):
            self._vectors.setdefault(k, []).extend(
                map(tuple, rows[starts[u]:starts[u] + counts[u]]))
        self._keep_inputs(columns, ids, np.full(n, math.nan))  # (plotted from _vectors)

    def _kids(self, keys: list, columns: Any = None) -> list[int]:
        """:meth:`_kid` of each of ``keys`` (a column batch's distinct keys; the outputs of a
        batch share the inputs' list). With the keys' numbers in the run (``columns.gids``),
        a key already met is found by its number (no lookup per key and batch); the keys met
        for the first time take :meth:`_kid`, in order."""
        last = self.__dict__.get("_last_kids")
        if last is not None and last[0] is keys:
            return last[1]
        if getattr(columns, "gids", None) is None:
            ids = [self._kid(k) for k in keys]
        else:
            ids = per_key_number(self, "_kid_table", columns, self._kid)
        self._last_kids = (keys, ids)
        return ids

    def write_output_columns(self, columns: Any) -> None:
        """:meth:`write` of a column batch of detector outputs (the replay's columnar path,
        :class:`~shiftwatch.deploy.columnar.OutputColumns`): the same columns kept."""
        n = len(columns)
        ids = np.asarray(self._kids(columns.keys, columns), dtype=np.int64)
        alarm = columns.alarm.astype(np.int8)
        change_at = np.full(n, -1, dtype=np.int64)
        stats = {}
        for f in _STAT_FIELDS:
            col = columns.fields.get(f)
            stats[f] = (np.full(n, math.nan) if col is None or col.dtype != np.float64
                        else col.copy())
        for i, o in columns.special.items():  # as write() reads them
            alarm[i] = (1 if o["alarm"] else 0) if "alarm" in o else -1
            change_at[i] = _change_at(o)
            for f in _STAT_FIELDS:
                stats[f][i] = _num(o.get(f))
        self._out_key.frombytes(ids[columns.inv].tobytes())
        self._out_off.frombytes(_offsets(columns.offsets).tobytes())
        self._out_alarm.frombytes(alarm.tobytes())
        self._out_change_at.frombytes(change_at.tobytes())
        for f in _STAT_FIELDS:
            self._out_stats[f].frombytes(stats[f].tobytes())

    def _slow_value(self, k: int, value: Any) -> float:
        """The plot value of a value that is not a plain number (vectors, matrices, junk);
        a vector key keeps its coordinates in ``_vectors``."""
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            arr = None
        kind = self._kinds.get(k)
        if arr is None or arr.size == 0:
            point = (math.nan,) * (kind[1] if kind else 1)
        else:
            if kind is None:
                kind = self._kinds[k] = value_kind(arr)
                self._kinds_not_scalar += kind is not SCALAR
            point = plot_value(kind, arr)
        if kind is not None and kind[0] == "coords":
            self._vectors.setdefault(k, []).append(point)
            return math.nan
        return point[0]

    def note_run(self, summary: Any) -> None:
        """The runner's counters, before :meth:`close` (a run summary: its
        ``alarms_by_operator`` goes into the report, so a detector inside a chain, whose
        alarms the sink never sees as outputs, is reported too)."""
        why = ("interrupted (Ctrl-C or SIGTERM)" if getattr(summary, "interrupted", False)
               else getattr(summary, "stopped", None))
        if why:
            self._incomplete = {"why": why, "records_read": getattr(summary, "records_in", None)}
        self._keys_evicted = int(getattr(summary, "keys_evicted", 0) or 0)
        by_op = getattr(summary, "alarms_by_operator", None)
        if by_op:
            self._alarms_by_operator = [{"operator": k.split(":", 1)[1],
                                         "position": int(k.split(":", 1)[0]), "alarms": v}
                                        for k, v in by_op.items()]

    def write_dead_letters(self, records: Sequence[dict]) -> None:
        """Count the run's dead letters (dead-letter records) by reason and keep the first few
        (the runner calls it when ``wants_dead_letters``)."""
        for r in records:
            if not isinstance(r, Mapping):
                continue
            self._dead_count += 1
            reason = str(r.get("reason"))
            self._dead_reasons[reason_kind(reason)] += 1
            if len(self._dead_first) < _FIRST_DEAD:
                raw = r.get("raw")
                raw = raw if isinstance(raw, str) else json.dumps(jsonable(raw))
                self._dead_first.append({
                    "reason": reason[:500], "origin": jsonable(r.get("origin")),
                    "operator": r.get("operator"), "key": jsonable(r.get("key")),
                    "raw": raw[:200] + ("..." if len(raw) > 200 else "")})

    def close(self) -> None:
        """Compute the report, write ``keys.jsonl``, ``report.json``, ``report.html`` and the
        plots (once).

        A failing plot is reported under ``plot_errors`` and does not stop the report. Each
        file is written whole or not at all (:class:`~shiftwatch.sinks.atomic_file.AtomicFile`):
        ``written`` lists the files written, ``failed`` maps each file that could not be
        (a full disk) to the reason; close never raises for those. A labels mapping that
        names what is not a key raises :class:`~shiftwatch.sinks.labels.LabelsError` and
        writes nothing. The collected records are released in ``finally``.
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
                    report["html"] = self._path("report.html")
            report["plots"] = list(self._files)
            self.report = jsonable(report)
            text = json.dumps(self.report, indent=2, allow_nan=False) + "\n"
            self._write_file("report.json", "w", lambda fh: fh.write(text))
        finally:
            self._reset_columns()
            self._last_kids = None
            self._plot_data = {}
            self._fleet = None
            self._entries = None

    def key_reports(self) -> dict[str, dict]:
        """Each key's line of ``keys.jsonl`` (after :meth:`close`), by key text: the per-key
        detail, read back from the file (for small runs and tests; a fleet's file is large)."""
        path = self._path("keys.jsonl")
        out = {}
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                entry = json.loads(line)
                out[key_text(entry["key"])] = entry
        return out

    def _write_html(self, report: dict) -> str | None:
        """Write ``report.html``; return the error instead of raising (it must not cost the
        report)."""
        from shiftwatch.sinks.html_report import render_html_report

        listed = self._order[:self.max_table_keys].tolist()
        try:
            page = render_html_report(report, (self._view(self._fleet, k) for k in listed),
                                      parameters=jsonable(self.parameters or {}),
                                      n_listed=len(listed))
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
        out: dict[str, Any] = {"report": self._path("report.json"), "plots": list(self._files)}
        if self.report:
            out.update(self.report["summary"])
        if self.failed:
            out["failed"] = dict(self.failed)
        return out


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

