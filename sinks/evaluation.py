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

**Scale.** A replay may hold a million keys. The sink keeps what it needs of each record in
typed columns (a few dozen bytes per record, not a dict), computes positions, alarms and
located changes for every key at once with NumPy at close, scores only the labelled keys one
by one (identical keys are scored once), and streams each key's detail to ``keys.jsonl``;
``report.json`` holds the run's aggregates. Learner outputs (records with ``y_pred``) are
kept whole, as the learner scores need them.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from array import array
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shiftwatch.operators.codec import encode_record, jsonable, key_text
from shiftwatch.operators.records import reason_kind
from shiftwatch.sinks.atomic_file import AtomicFile, WriteFailed
from shiftwatch.sinks.base import Sink
from shiftwatch.sinks.key_label import key_label
from shiftwatch.sinks.labels import LabelPlan, plan_labels
from shiftwatch.sinks.learner_scores import learner_metrics
from shiftwatch.sinks.plots import plot_accuracy, plot_series, plot_statistic
from shiftwatch.sinks.scoring import DetectorPool, evaluate_detector, evaluate_locations

__all__ = ["EvaluationSink"]

#: Output fields a learner output keeps (besides every ``y_pred*`` field).
_KEPT = ("offset", "alarm", "change_at", "change_ts", "statistic", "threshold", "lower",
         "upper", "y", "task", "train", "trained_through")
#: The detector fields the sink keeps of every output, as float columns.
_STAT_FIELDS = ("statistic", "threshold", "lower", "upper")
#: A vector input with more coordinates than this is plotted as its Euclidean norm.
_MAX_COORDS = 8
#: The offset of an output or input that has none: matches nothing.
_NO_OFFSET = -(2**62)
_BIG_OFFSET = 2**62
#: report.json lists this many of the alarmed keys, dead letters and labels past the end
#: (every key is in keys.jsonl).
_LISTED = 100
_FIRST_DEAD = 20
_SCALAR = ("scalar", 1)
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


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


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
    kind, d = kind_d or _SCALAR
    if kind == "coords" and channels is not None and len(channels) == d:
        return [key_label(str(c)) for c in channels]
    return {"scalar": ["value"], "trace": ["trace(value)"], "norm": ["|value|"]}.get(
        kind, [f"value[{i}]" for i in range(d)])


def _value_kind(arr: np.ndarray) -> tuple[str, int]:
    if arr.ndim == 0 or arr.size == 1:
        return _SCALAR
    if arr.ndim == 1 and arr.size <= _MAX_COORDS:
        return ("coords", arr.size)
    if arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
        return ("trace", 1)
    return ("norm", 1)


def _plot_value(kind_d: tuple[str, int], arr: np.ndarray) -> tuple[float, ...]:
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


def _groups(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by key (stable), and each key's first index and count in that order."""
    order = np.argsort(keys, kind="stable")
    count = np.bincount(keys, minlength=n_keys) if len(keys) else np.zeros(n_keys, np.int64)
    start = np.zeros(n_keys, dtype=np.int64)
    np.cumsum(count[:-1], out=start[1:])
    return order, start, count


def _pairs(keys: np.ndarray, values: np.ndarray, n_keys: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (key, value) pairs sorted, and each key's first index and count."""
    if len(keys) == 0:
        return values[:0], np.zeros(n_keys, np.int64), np.zeros(n_keys, np.int64)
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    keep = np.ones(len(k), dtype=bool)
    keep[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    k, v = k[keep], v[keep]
    count = np.bincount(k, minlength=n_keys)
    start = np.zeros(n_keys, dtype=np.int64)
    np.cumsum(count[:-1], out=start[1:])
    return v, start, count


class _Fleet:
    """Every key's positions, alarms and located changes, computed at once from the columns."""

    def __init__(self, sink: EvaluationSink):
        n_keys = len(sink._keys)
        self.n_keys = n_keys
        in_key = np.frombuffer(sink._in_key, dtype=np.int64) if sink._in_key else np.zeros(
            0, np.int64)
        in_off = np.frombuffer(sink._in_off, dtype=np.int64) if sink._in_off else in_key[:0]
        out_key = np.frombuffer(sink._out_key, dtype=np.int64) if sink._out_key else in_key[:0]
        out_off = np.frombuffer(sink._out_off, dtype=np.int64) if sink._out_off else in_key[:0]
        self.in_ts = np.frombuffer(sink._in_ts, dtype=np.float64) if sink._in_ts else np.zeros(0)
        self.in_val = np.frombuffer(sink._in_val, dtype=np.float64) if sink._in_val \
            else np.zeros(0)
        self.alarm = np.frombuffer(sink._out_alarm, dtype=np.int8) if sink._out_alarm \
            else np.zeros(0, np.int8)
        self.change_at = np.frombuffer(sink._out_change_at, dtype=np.int64) \
            if sink._out_change_at else in_key[:0]
        self.stats = {f: np.frombuffer(col, dtype=np.float64) if col else np.zeros(0)
                      for f, col in sink._out_stats.items()}
        self.out_key = out_key

        # Inputs: each one's position in its key's series.
        self.in_order, self.in_start, self.n_in = _groups(in_key, n_keys)
        in_pos = np.empty(len(in_key), dtype=np.int64)
        in_pos[self.in_order] = np.arange(len(in_key)) - np.repeat(self.in_start, self.n_in)
        # Outputs: the position of the first input of the same key and offset.
        out_pos = np.full(len(out_key), -1, dtype=np.int64)
        if len(in_key) and len(out_key):
            out_pos = self._match(in_key, in_off, in_pos, out_key, out_off, n_keys)
        # Keys without inputs: count their outputs (outputs sharing an offset share one).
        self.out_order, self.out_start, self.n_out = _groups(out_key, n_keys)
        self.n = self.n_in.copy()
        blind = self.n_in[out_key] == 0 if len(out_key) else np.zeros(0, bool)
        if blind.any():
            ko, oo = out_key[self.out_order], out_off[self.out_order]
            step = np.ones(len(ko), dtype=np.int64)
            step[1:] = (ko[1:] != ko[:-1]) | (oo[1:] != oo[:-1]) | (oo[1:] == _NO_OFFSET)
            first = np.ones(len(ko), dtype=bool)
            first[1:] = ko[1:] != ko[:-1]
            run = np.cumsum(step)
            base = np.repeat(run[first] - 1, self.n_out[self.n_out > 0])
            counted = run - base - 1
            sel = blind[self.out_order]
            out_pos[self.out_order[sel]] = counted[sel]
            last = np.zeros(n_keys, dtype=np.int64)
            np.maximum.at(last, ko[sel], counted[sel] + 1)
            self.n = np.where(self.n_in > 0, self.n_in, last)
        self.out_pos = out_pos
        has_in = self.n_in[out_key] > 0 if len(out_key) else np.zeros(0, bool)
        self.unmatched = np.bincount(out_key[has_in & (out_pos < 0)], minlength=n_keys) \
            if len(out_key) else np.zeros(n_keys, np.int64)

        # Detectors: alarms, and change_at mapped through the key's detector outputs.
        det = self.alarm >= 0
        self.has_detector = np.bincount(out_key[det], minlength=n_keys) > 0 if len(out_key) \
            else np.zeros(n_keys, bool)
        hit = (self.alarm == 1) & (out_pos >= 0)
        self.alarms, self.a_start, self.a_count = _pairs(out_key[hit], out_pos[hit], n_keys)
        det_rows = np.flatnonzero(det)  # arrival order; grouped by key below
        det_rows = det_rows[np.argsort(out_key[det_rows], kind="stable")]
        d_count = np.bincount(out_key[det_rows], minlength=n_keys)
        d_start = np.zeros(n_keys, dtype=np.int64)
        np.cumsum(d_count[:-1], out=d_start[1:])
        self.locates = np.bincount(out_key[det & (self.change_at != -1)],
                                   minlength=n_keys) > 0
        # change_at = j: the position of the key's j-th detector output.
        loc_rows = np.flatnonzero((self.alarm == 1) & (self.change_at >= 0))
        lk, j = out_key[loc_rows], self.change_at[loc_rows]
        ok = j < d_count[lk]
        p = np.full(len(loc_rows), -1, dtype=np.int64)
        if ok.any():
            p[ok] = out_pos[det_rows[d_start[lk[ok]] + j[ok]]]
        self.unmatched_locations = np.bincount(lk[p < 0], minlength=n_keys)
        self.located, self.l_start, self.l_count = _pairs(lk[p >= 0], p[p >= 0], n_keys)

    @staticmethod
    def _match(in_key, in_off, in_pos, out_key, out_off, n_keys) -> np.ndarray:
        valid_in = in_off != _NO_OFFSET
        offs = np.concatenate([in_off[valid_in], out_off[out_off != _NO_OFFSET]])
        lo, hi = (int(offs.min()), int(offs.max())) if len(offs) else (0, 0)
        span = hi - lo + 1
        out_pos = np.full(len(out_key), -1, dtype=np.int64)
        if span * max(n_keys, 1) < 2**62:
            code_in = in_key[valid_in] * span + (in_off[valid_in] - lo)
            pos_in = in_pos[valid_in]
            order = np.argsort(code_in, kind="stable")
            codes, first = np.unique(code_in[order], return_index=True)
            valid_out = out_off != _NO_OFFSET
            code_out = out_key[valid_out] * span + (out_off[valid_out] - lo)
            idx = np.searchsorted(codes, code_out)
            idx_c = np.minimum(idx, max(len(codes) - 1, 0))
            found = (idx < len(codes)) & (codes[idx_c] == code_out) if len(codes) else \
                np.zeros(len(code_out), bool)
            got = np.where(found, pos_in[order[first[idx_c]]] if len(codes) else -1, -1)
            out_pos[valid_out] = got
            return out_pos
        where: dict[tuple[int, int], int] = {}  # offsets too far apart for one int64 code
        for k, o, p in zip(in_key.tolist(), in_off.tolist(), in_pos.tolist(), strict=True):
            if o != _NO_OFFSET:
                where.setdefault((k, o), p)
        for i, (k, o) in enumerate(zip(out_key.tolist(), out_off.tolist(), strict=True)):
            out_pos[i] = where.get((k, o), -1)
        return out_pos

    # ---- one key ------------------------------------------------------------------------

    def input_rows(self, k: int) -> np.ndarray:
        s = self.in_start[k]
        return self.in_order[s:s + self.n_in[k]]

    def output_rows(self, k: int) -> np.ndarray:
        s = self.out_start[k]
        return self.out_order[s:s + self.n_out[k]]

    def alarms_of(self, k: int) -> np.ndarray:
        s = self.a_start[k]
        return self.alarms[s:s + self.a_count[k]]

    def located_of(self, k: int) -> np.ndarray:
        s = self.l_start[k]
        return self.located[s:s + self.l_count[k]]

    def ts_at(self, k: int, positions: Any) -> np.ndarray:
        """The input ``ts`` at ``positions`` of key ``k`` (NaN where there is none)."""
        pos = np.asarray(positions, dtype=np.int64)
        if not pos.size:
            return np.zeros(0)
        out = np.full(pos.shape, np.nan)
        ok = (pos >= 0) & (pos < self.n_in[k])
        if ok.any() and len(self.in_ts):
            out[ok] = self.in_ts[self.in_order[self.in_start[k] + pos[ok]]]
        return out


class EvaluationSink(Sink):
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
            return _NO_OFFSET
        try:
            found = self._off_id.get(off)
        except TypeError:
            off = repr(off)
            found = self._off_id.get(off)
        if found is None:  # interned below every real offset, above _NO_OFFSET
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
            j = record.get("change_at", _ABSENT)
            if j is _ABSENT:
                change_at.append(-1)
            elif type(j) is int and 0 <= j < _BIG_OFFSET:
                change_at.append(j)
            elif (isinstance(j, numbers.Integral) and not isinstance(j, bool)
                  and 0 <= j < _BIG_OFFSET):
                change_at.append(int(j))
            else:
                change_at.append(-2)  # present, but not a position: never located
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
            if (type(v) is float or type(v) is int) and (kind is None or kind is _SCALAR):
                if kind is None:
                    kinds[k] = _SCALAR
                vals.append(float(v))
            else:
                vals.append(self._slow_value(k, v))

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
                kind = self._kinds[k] = _value_kind(arr)
            point = _plot_value(kind, arr)
        if kind is not None and kind[0] == "coords":
            self._vectors.setdefault(k, []).append(point)
            return math.nan
        return point[0]

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

    # ---- scoring ------------------------------------------------------------------------

    def _build_report(self) -> dict:
        """Score every key, write ``keys.jsonl`` and return the report (without the files
        written after it)."""
        fleet = self._fleet = _Fleet(self)
        keys = self._keys
        texts = [key_text(k) for k in keys]
        plan: LabelPlan = plan_labels(self.annotations, set(texts))
        self._plan, self._mode = plan, plan.mode
        pool = DetectorPool()
        memo: dict[tuple, dict] = {}
        beyond: list[dict] = []
        n_beyond = 0
        learner_groups: list[list[dict]] = []
        entries: dict[int, dict] = {}  # the listed keys' scores, for report.html
        self._scores: dict[int, dict] = {}
        n_list = fleet.n.tolist()
        n_out = fleet.n_out.tolist()
        has_det = fleet.has_detector.tolist()
        locates = fleet.locates.tolist()
        unmatched = fleet.unmatched.tolist()
        unmatched_loc = fleet.unmatched_locations.tolist()
        a_start, a_count = fleet.a_start.tolist(), fleet.a_count.tolist()
        l_start, l_count = fleet.l_start.tolist(), fleet.l_count.tolist()
        alarms_all = fleet.alarms.tolist()
        located_all = fleet.located.tolist()
        has_ts = bool(len(fleet.in_ts)) and bool(np.isfinite(fleet.in_ts).any())
        alarm_ts = self._alarm_ts(fleet) if has_ts else None
        self._first_alarm_ts = alarm_ts
        total_records = int(fleet.n.sum()) if len(keys) else 0
        unlabelled = np.zeros(len(keys), dtype=bool)  # detector keys without labels
        path = self._path("keys.jsonl")

        def lines() -> Iterator[bytes]:
            nonlocal n_beyond
            for k, key in enumerate(keys):
                entry: dict[str, Any] = {"key": key, "n_records": n_list[k],
                                         "n_outputs": n_out[k]}
                if unmatched[k]:
                    entry["unmatched_outputs"] = unmatched[k]
                if has_det[k]:
                    al = alarms_all[a_start[k]:a_start[k] + a_count[k]]
                    entry["alarms"] = al
                    if alarm_ts is not None:
                        entry["alarm_ts"] = [None if math.isnan(t) else t for t in
                                             alarm_ts[a_start[k]:a_start[k] + a_count[k]]]
                    loc = located_all[l_start[k]:l_start[k] + l_count[k]] if locates[k] \
                        else None
                    if loc is not None:
                        entry["located"] = loc
                    if unmatched_loc[k]:
                        entry["unmatched_locations"] = unmatched_loc[k]
                    ann = plan.for_key(texts[k])
                    if ann is not None:
                        det = self._score(memo, pool, ann, al, loc, n_list[k],
                                          unmatched_loc[k])
                        entry["detector"] = det
                        self._scores[k] = det
                        if det["beyond_end"]:
                            n_beyond += len(det["beyond_end"])
                            if len(beyond) < _LISTED:
                                beyond.append({"key": key, "labels": det["beyond_end"],
                                               "n_records": n_list[k]})
                    else:
                        unlabelled[k] = True
                outs = self._learner.get(k)
                if outs:
                    entry["learner"] = learner_metrics([outs])
                    learner_groups.append(outs)
                    entries[k] = entry["learner"]
                try:
                    yield encode_record(entry)
                except Exception:  # e.g. NaN in a learner's numbers: the jsonable form
                    yield encode_record(jsonable(entry))

        ok = self._write_file("keys.jsonl", "wb", lambda fh: _write_lines(fh, lines()))
        if not ok:  # the disk is full: score the keys all the same for report.json
            for _ in lines():
                pass
        for det, weight in memo.values():  # keys alike, pooled at once
            pool.add(det, weight)
        pool.add_unlabelled(int(unlabelled.sum()), int(fleet.a_count[unlabelled].sum()),
                            int((fleet.a_count[unlabelled] > 0).sum()),
                            int(fleet.locates[unlabelled].sum()),
                            int(fleet.l_count[unlabelled & fleet.locates].sum()))
        self._learner_scores = entries
        aggregate: dict[str, Any] = {"n_keys": len(keys), "n_records": total_records}
        if fleet.has_detector.any():
            aggregate["detector"] = pool.result()
        if learner_groups:
            aggregate["learner"] = learner_metrics(learner_groups)
        operator = self.operator
        if operator is not None and not isinstance(operator, str):
            operator = repr(operator)
        report: dict[str, Any] = {
            "name": self.name,
            "operator": operator,
            "operators": self._describe_operators(),
            "margin": self.margin,
            "annotations": self._mode,
            "summary": _headline(aggregate),
            "aggregate": aggregate,
        }
        if ok:
            report["keys_file"] = path
        order = self._key_order(fleet)
        self._order = order
        if fleet.has_detector.any():
            report["alarmed_keys"] = self._alarmed(fleet, order)
        if n_beyond:
            report["labels_beyond_end"] = {"count": n_beyond, "keys": sum(
                1 for d in self._scores.values() if d["beyond_end"]), "first": beyond}
            report["summary"]["labels_beyond_end"] = n_beyond
        report["dead_letters"] = {"count": self._dead_count,
                                  "by_reason": dict(self._dead_reasons.most_common()),
                                  "first": list(self._dead_first)}
        self._plot_data = self._panels(fleet, order)
        return report

    def _score(self, memo: dict, pool: DetectorPool, ann: Any, alarms: list,
               located: list | None, n: int, lost: int) -> dict:
        """``evaluate_detector`` (and the located changes) of one key, pooled; keys alike
        (the same labels object, alarms, located changes and length: a fleet's quiet keys)
        are scored once and pooled at the end with their count."""
        memo_key = (id(ann), n, tuple(alarms), None if located is None else tuple(located),
                    lost)
        found = memo.get(memo_key)
        if found is not None:
            found[1] += 1
            return found[0]
        annotations = ann if isinstance(ann, Mapping) else {"labels": list(ann)}
        det = evaluate_detector(alarms, annotations, n, margin=self.margin)
        det["annotated"] = True
        if located is not None:
            det["location"] = evaluate_locations(located, annotations, n, margin=self.margin)
            if lost:
                det["location"]["unmatched_locations"] = lost
        det = jsonable(det)
        if len(memo) < 100_000:
            memo[memo_key] = [det, 1]
        else:
            pool.add(det)
        return det

    def _alarm_ts(self, fleet: _Fleet) -> list[float]:
        """The input ``ts`` at every alarm (in the order of ``fleet.alarms``)."""
        k = np.repeat(np.arange(fleet.n_keys), fleet.a_count)
        pos = fleet.alarms
        out = np.full(len(pos), np.nan)
        ok = pos < fleet.n_in[k]
        if ok.any():
            out[ok] = fleet.in_ts[fleet.in_order[fleet.in_start[k[ok]] + pos[ok]]]
        return out.tolist()

    def _key_order(self, fleet: _Fleet) -> np.ndarray:
        """Keys with alarms first (most alarms first, then the earliest first alarm), then
        the others in the order they were first seen."""
        first = np.zeros(fleet.n_keys, dtype=np.int64)
        has = fleet.a_count > 0
        first[has] = fleet.alarms[fleet.a_start[has]]
        return np.lexsort((np.arange(fleet.n_keys), first, -fleet.a_count))

    def _alarmed(self, fleet: _Fleet, order: np.ndarray) -> list[dict]:
        out = []
        ts = self._first_alarm_ts
        for k in order[:_LISTED].tolist():
            if not fleet.a_count[k]:
                break
            s = int(fleet.a_start[k])
            first_ts = ts[s] if ts is not None and not math.isnan(ts[s]) else None
            out.append({"key": self._keys[k], "alarms": int(fleet.a_count[k]),
                        "first_alarm": int(fleet.alarms[s]), "first_alarm_ts": first_ts})
        return out

    def _describe_operators(self) -> list[dict] | None:
        if self.operators is None:
            return None
        out = []
        for op in self.operators:
            if isinstance(op, Mapping):
                out.append({"name": op.get("name"), "params": jsonable(op.get("params"))})
                continue
            params = op.all_params() if hasattr(op, "all_params") else {}
            out.append({"name": getattr(op, "name", type(op).__name__),
                        "params": jsonable(params)})
        return out

    # ---- per-key views (report.html, plots) ----------------------------------------------

    def _key_values(self, fleet: _Fleet, k: int) -> tuple[np.ndarray, list[str]]:
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

    def _key_stats(self, fleet: _Fleet, k: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Key ``k``'s detector outputs: positions (sorted) and the finite fields there."""
        rows = fleet.output_rows(k)
        pos = fleet.out_pos[rows]
        ok = pos >= 0
        rows, pos = rows[ok], pos[ok]
        order = np.argsort(pos, kind="stable")
        rows, pos = rows[order], pos[order]
        fields = {}
        for f, col in fleet.stats.items():
            v = col[rows]
            if np.isfinite(v).any():
                fields[f] = v
        return pos, fields

    def _time_of(self, fleet: _Fleet, k: int) -> np.ndarray | None:
        from shiftwatch.sinks.time_axis import time_axis_array

        if not len(fleet.in_ts) or fleet.n_in[k] < 2:  # one record spans no time
            return None
        return time_axis_array(fleet.in_ts[fleet.input_rows(k)])

    def _view(self, fleet: _Fleet, k: int) -> dict:
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

    def _panels(self, fleet: _Fleet, order: np.ndarray) -> dict:
        """The plot data of the keys the PNGs draw: alarmed keys first, then the others."""
        data = {}
        for k in order.tolist():
            if len(data) >= self.max_panels:
                break
            data[self._keys[k]] = self._panel(fleet, k)
        self._panel_counts = (fleet.n_keys, int((fleet.a_count > 0).sum()),
                              int((fleet.n_in > 0).sum()))
        return data

    def _panel(self, fleet: _Fleet, k: int, learner_only: bool = False) -> dict:
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
            if fleet.locates[k]:
                data["located"] = fleet.located_of(k).tolist()
        return data

    # ---- plots --------------------------------------------------------------------------

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


def _write_lines(fh: Any, lines: Iterable[bytes], chunk: int = 4096) -> None:
    buf: list[bytes] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= chunk:
            fh.write(b"\n".join(buf) + b"\n")
            buf = []
    if buf:
        fh.write(b"\n".join(buf) + b"\n")


def _key_scores(det: Mapping) -> dict:
    """A labelled key's scores as report.html shows them."""
    detection = det.get("detection") or {}
    out = {k: det.get(k) for k in ("f1", "f1_1pct", "precision", "recall", "covering")}
    out.update(mean_delay=detection.get("mean_delay"),
               false_alarms=detection.get("n_false_alarms"),
               missed=detection.get("n_missed"),
               average_run_length=detection.get("average_run_length"))
    loc = det.get("location")
    if loc:
        out.update(located_f1=loc.get("f1"), location_error=loc.get("mean_abs_error"))
    if det.get("beyond_end"):
        out["labels_beyond_end"] = len(det["beyond_end"])
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


def _headline(aggregate: dict) -> dict:
    """The flat ``summary`` block: the aggregate numbers a console line or a table needs."""
    out: dict[str, Any] = {"records": aggregate["n_records"], "keys": aggregate["n_keys"]}
    det = aggregate.get("detector")
    if det:
        out.update(alarms=det["alarms"], keys_with_alarms=det["keys_with_alarms"],
                   labelled_keys=det["n_annotated"])
        d = det.get("detection")
        if det["n_annotated"] and d is not None:
            out.update(
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

