"""The ``cs`` operator: confidence-sequence change detection on records.

:class:`ConfSeqOperator` wraps :class:`~shiftwatch.operators.confseq.detector.ConfSeqDetector`
(the mathematics) for records: one detector per coordinate of a value, located alarms
(``change_at``), and a fleet (:mod:`~shiftwatch.operators.confseq.fleet`) when
``Keyed`` holds many keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from shiftwatch.operators.confseq.detector import HULL_CS, NO_TS, ConfSeqDetector
from shiftwatch.operators.confseq.fleet import ConfSeqFleet, fleet_eligible
from shiftwatch.operators.contract import Operator
from shiftwatch.operators.locate import LOCATE_KINDS, ValueWindow, locate_change
from shiftwatch.operators.registry import register
from shiftwatch.operators.sensitivity import Sensitivity
from shiftwatch.records import (
    BadInput,
    DeadLetter,
    as_array,
    as_scalar,
    get_field,
    numeric_ts,
)

__all__ = ["ConfSeqOperator"]

#: What ``locate=True`` means for the linear-boundary CSs (see ConfSeqOperator, Locating).
LOCATE_DEFAULT = "cs"



def _cs_start(position: int, columns: list[np.ndarray]) -> tuple[int, float | None]:
    """``(change_at, change_ts)`` of an alarm at ``position`` from the kernels' output columns
    of the coordinates that alarmed there: the earliest located CS start, with its ts."""
    at, t = min((position - int(col[3]), float(col[4])) for col in columns)
    return at, None if t != t else t


def _ts_array(ts: list) -> np.ndarray:
    """The ``ts`` of a batch as float64, NaN for none (empty when no record had one)."""
    if not ts or all(t is None for t in ts):
        return NO_TS
    return np.array([np.nan if t is None else t for t in ts], dtype=np.float64)


@register("cs")
class ConfSeqOperator(Operator):
    """Confidence-sequence change detection (Shekhar & Ramdas 2024) as a stream operator.

    Reads ``field`` (a number, or a vector of numbers) and runs a :class:`ConfSeqDetector` on
    it; every input gives one output with ``alarm``, ``lower`` and ``upper`` (the current
    intersection of the CSs, ``None`` while unbounded, e.g. during a burn-in). A vector value
    of length ``d`` runs one detector per coordinate, each at level ``alpha / d`` (a union
    bound, so the vector detector keeps the ``1/alpha`` run length and ``pfa`` guarantees);
    ``alarm`` is then true when any coordinate alarms, ``lower``/``upper`` are lists and
    ``coordinates`` lists the coordinates that alarmed. The first record fixes the shape.
    Bad values (NaN, non-numbers, outside ``[lower, upper]`` for the bounded CSs, another
    shape) raise :class:`~shiftwatch.records.BadInput` and become dead letters.

    Parameters are those of :class:`ConfSeqDetector` plus ``field`` (dotted path),
    ``locate``, ``locate_window`` and ``restart`` (below). The default is the scale-free
    sub-Gaussian CS (``sigma=None``, the long-run scale learned on a burn-in that lasts
    until it holds ``burn_in_effective=60`` effective values, at most ``burn_in_max=1000``;
    ``scale="marginal"`` is the 30-value marginal burn-in of earlier releases).

    **Locating.** An alarm output carries ``change_at``, the position of the first changed
    record (the operator's own 0-based count of accepted records; dead letters are not
    counted, as in the River adapter) and ``change_ts``, that record's ``ts`` (with
    ``"cs"``: kept with each stored start, so always there when the record had a ``ts``;
    with ``"mean"``/``"meanvar"``: when it is still in the window; ``locate_window`` is not
    used by ``"cs"``). ``locate=True`` (or ``"cs"``) derives it from the confidence
    sequences themselves: when the intersection becomes empty, the starts whose CSs attain
    the max lower bound and the min upper bound bracket the change, and the *later* of the
    two is taken (the kernels record it in the hull query, at no extra cost). Reason: the
    CS started after the change holds only post-change data, so it is the one that moved
    away; the earlier start's CS spans the change. The estimate is mostly from above (on
    40 seeded streams with a 1-sd shift after 3000 values, 6 of 40 more than 2 records
    before the change, at most 18) and is not limited by a window.
    ``"mean"``/``"meanvar"`` instead split the values since the previous located change (at
    most ``locate_window``) with :mod:`~shiftwatch.operators.locate`; the betting and
    quantile CSs share their capitals across starts, so they cannot say which start
    excluded and ``locate=True`` means ``"mean"`` for them. Measured on synthetic data
    only (``benchmarks/location.py`` section 5; one change at 3000, 30 seeds), mean
    absolute error CS start vs mean split: 135 vs 390 at a 0.25 sd shift, 25 vs 26 at 0.5,
    2.3 vs 2.0 at 1, 0.5 vs 0.7 at 2; on the multi-change streams F1 located 0.949 vs 0.959
    (error 19.5 vs 19.3). Equal where the shift is large, much better where it is small
    (the mean split is capped by the window): the CS start is the default. For a vector,
    ``change_at`` is the earliest estimate among the coordinates that alarmed.

    **Restart** (``restart``, default off). After an alarm the detector restarts on the
    next value, learning its scale on a new burn-in. ``restart=True`` instead re-feeds it
    the kept values from the located change to the alarm (the burn-in then starts at the
    change; alarms while re-feeding are not reported). On two changes 150 records apart
    (section 6, 30 seeds) it changed the alarm times but not the located F1 nor how often
    the second change was found (measured with the 30-value marginal burn-in, which ends
    long before the second change either way), so it is off: it costs a window and a re-run
    per alarm. With the long-run burn-in (60 effective values or more) it starts that
    burn-in at the change instead of after the alarm.

    Parameters
    ----------
    field
        Dotted path of the value in each record (``value``; ``reading.temp`` for a nested
        field).
    locate
        ``True`` or ``"cs"`` (the later of the two starts that bracket the change), ``"mean"``
        or ``"meanvar"`` (a split of the values since the previous located change), or
        ``False`` (no ``change_at``). See Locating above.
    locate_window
        The most values kept for ``"mean"``/``"meanvar"`` (records).
    restart
        After an alarm, re-feed the values from the located change (see Restart above).

    Examples
    --------
    >>> import numpy as np
    >>> from shiftwatch.operators import create
    >>> rng = np.random.default_rng(3)
    >>> x = np.r_[rng.normal(5, 2, 300), rng.normal(9, 2, 300)]
    >>> outs = create("cs", alpha=0.01).process_batch(
    ...     [{"ts": i, "value": float(v)} for i, v in enumerate(x)])
    >>> [o["ts"] for o in outs if o["alarm"]]
    [310]
    >>> [o["change_at"] for o in outs if o["alarm"]]
    [307]
    """

    #: where the meanings of the detector's parameters are written (``shiftwatch operators``)
    params_doc_from = "shiftwatch.operators.confseq.detector.ConfSeqDetector"
    input_kind: ClassVar[str] = "scalar or vector (one detector per coordinate, alpha split)"
    sensitivity = Sensitivity("alpha", more_alarms="larger", low=1e-100, high=0.2,
                              guarantee="arl>=1/value", guarantee_when={"pfa": False})

    def __init__(self, field: str = "value", cs: str = "subgaussian", alpha: float = 0.001,
                 sigma: float | None = None, lower: float = 0.0, upper: float = 1.0,
                 quantile: float = 0.5, pfa: bool = False, prune: int | None = None,
                 burn_in: int = 30, scale: str = "long-run", burn_in_effective: int = 60,
                 burn_in_max: int = 1000, locate: bool | str = True, locate_window: int = 1000,
                 restart: bool = False):
        self.field = field
        self.cs = cs
        self.alpha = alpha
        self.sigma = sigma
        self.lower = lower
        self.upper = upper
        self.quantile = quantile
        self.pfa = pfa
        self.prune = prune
        self.burn_in = burn_in
        self.scale = scale
        self.burn_in_effective = burn_in_effective
        self.burn_in_max = burn_in_max
        self.locate = locate
        self.locate_window = locate_window
        self.restart = restart
        self._validate_params()
        self._reset()

    def _detector_params(self) -> dict:
        return {k: v for k, v in self._get_params().items()
                if k not in ("field", "locate", "locate_window", "restart")}

    def _keyed_store(self) -> Any:
        """``Keyed(self)`` keeps its keys in a :class:`~shiftwatch.operators.confseq.fleet.
        ConfSeqFleet` (arrays, one compiled call per micro-batch) when the parameters allow."""
        return ConfSeqFleet(self) if fleet_eligible(self) else None

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field or "" in self.field.split("."):
            raise ValueError(f"field must be a dotted path such as 'value', got {self.field!r}")
        ConfSeqDetector(**self._detector_params())
        kinds = ("cs", *LOCATE_KINDS)
        if not (isinstance(self.locate, bool) or self.locate in kinds):
            raise ValueError(f"locate must be true, false or one of {', '.join(kinds)}, "
                             f"got {self.locate!r}")
        if self.locate == "cs" and self.cs not in HULL_CS:
            raise ValueError(f"locate='cs' needs a linear-boundary CS ({', '.join(HULL_CS)}); "
                             f"cs={self.cs!r} does not locate: use locate='mean'")
        if (isinstance(self.locate_window, bool) or not isinstance(self.locate_window, int)
                or self.locate_window < 2):
            raise ValueError(f"locate_window must be an integer >= 2, got {self.locate_window!r}")
        if not isinstance(self.restart, bool):
            raise ValueError(f"restart must be true or false, got {self.restart!r}")

    @property
    def locate_kind(self) -> str | None:
        """The locator in use: ``"cs"``, ``"mean"``, ``"meanvar"`` or None (off)."""
        if self.locate is False:
            return None
        if self.locate is True:
            return LOCATE_DEFAULT if self.cs in HULL_CS else "mean"
        return self.locate

    def _reset(self) -> None:
        self._shape: list | None = None
        self._detectors: list[ConfSeqDetector] = []
        self._count = 0  # records accepted so far = the position of the next one
        # The values since the previous located change, bounded (None when neither locating
        # nor restarting needs them).
        self._window: ValueWindow | None = None

    def _make(self, shape: tuple) -> None:
        d = shape[0] if shape else 1
        params = self._detector_params()
        params["alpha"] = float(self.alpha) / d
        self._detectors = [ConfSeqDetector(**params) for _ in range(d)]
        self._shape = list(shape)
        if self._needs_window():
            self._window = self._new_window(d if shape else 0)

    def _needs_window(self) -> bool:
        # The CS start is located (with its ts) by the kernels: no window, unless restarting.
        return self.restart or self.locate_kind not in ("cs", None)

    def _new_window(self, dim: int) -> ValueWindow:
        # Locating from the CS start needs only positions and the located record's ts; the
        # values are kept for the generic split and for restarting.
        keep = self.locate_kind not in ("cs", None) or bool(self.restart)
        return ValueWindow(self.locate_window, dim, keep_values=keep)

    def state_dict(self) -> dict:
        window = self._window
        return {"operator": self.name,
                "state": {"shape": None if self._shape is None else list(self._shape),
                          "detectors": [d.state_dict() for d in self._detectors],
                          "count": self._count,
                          "window": None if window is None else window.state_dict()}}

    def load_state_dict(self, state: Mapping) -> None:
        inner = self._state_payload(state)
        self._reset()
        if inner.get("shape") is None:
            return
        shape = tuple(int(s) for s in inner["shape"])
        self._make(shape)
        docs = inner.get("detectors") or []
        if len(docs) != len(self._detectors):
            raise ValueError("state_dict holds the wrong number of detectors")
        for det, doc in zip(self._detectors, docs, strict=True):
            det.load_state_dict(doc)
        self._count = int(inner.get("count", 0))
        window = inner.get("window")
        if window is not None and any(isinstance(doc, Mapping) and "_hull_x" in doc
                                      and "_hull_t" not in doc for doc in docs):
            # An earlier release kept the ts in the window: give the hull points theirs.
            held = ValueWindow.from_state_dict(window)
            for det in self._detectors:
                det._fill_ts(held.ts_at, self._count)
        if window is not None and self._window is not None:
            window = ValueWindow.from_state_dict(window)
            if window.dim != (shape[0] if shape else 0):
                raise ValueError("state_dict's locate window does not match the value shape")
            self._window = window
        elif self._window is not None:
            # Written with locate and restart off: positions of the window start here.
            self._window = self._new_window(shape[0] if shape else 0)
            self._window._count = self._count

    # ---- processing -----------------------------------------------------------------

    def _read(self, record: Mapping) -> tuple[tuple, np.ndarray]:
        raw = get_field(record, self.field)
        if isinstance(raw, (list, tuple, np.ndarray)):
            value = as_array(raw, ndim=1, name=self.field, max_abs=self.max_abs)
            if value.size == 0:
                raise BadInput(f"{self.field} is an empty vector")
            shape: tuple = value.shape
        else:
            value = np.array([as_scalar(raw, self.field, self.max_abs)])
            shape = ()
        if self._shape is not None and tuple(self._shape) != shape:
            raise BadInput(f"{self.field} has shape {shape}, expected {tuple(self._shape)} "
                           "(fixed by the first record)")
        probe = ConfSeqDetector.__new__(ConfSeqDetector)
        probe.cs, probe.lower, probe.upper = self.cs, self.lower, self.upper
        if probe.bounded and np.any((value < self.lower) | (value > self.upper)):
            raise BadInput(f"{self.field} {value.tolist() if shape else value[0]} is outside "
                           f"[lower, upper] = [{self.lower}, {self.upper}]")
        return shape, value

    @staticmethod
    def _edge(v: float) -> float | None:
        return v if math.isfinite(v) else None

    def _outputs(self, records: list[Mapping], outs: list[np.ndarray], vector: bool,
                 located: dict[int, tuple[int, float | None]]) -> list:
        result = []
        edge = self._edge
        for i, record in enumerate(records):
            if not vector:
                o = outs[0]
                out = self._output(record, alarm=bool(o[0, i] != 0.0),
                                   lower=edge(float(o[1, i])), upper=edge(float(o[2, i])))
            else:
                coords = [c for c, o in enumerate(outs) if o[0, i] != 0.0]
                out = self._output(
                    record, alarm=bool(coords),
                    lower=[edge(float(o[1, i])) for o in outs],
                    upper=[edge(float(o[2, i])) for o in outs], coordinates=coords)
            if i in located:
                at, ts = located[i]
                out["change_at"] = at
                if ts is not None:
                    out["change_ts"] = ts
            result.append(out)
        return result

    def _feed(self, matrix: np.ndarray, ts: list) -> tuple[list[np.ndarray], dict]:
        """Run the detectors over ``matrix`` (one row per record, one column per coordinate).

        Returns each coordinate's kernel output and ``{row: (change_at, change_ts)}`` for the
        rows that alarmed (empty when locating is off). Each coordinate's detector runs up to
        its next alarm on its own (they are independent); the shared window then takes the
        values up to the earliest pending alarm, which is located (and the alarmed detectors
        restarted) before any later one.
        """
        m, d = matrix.shape
        base = self._count
        self._count += m
        window = self._window
        cols = [np.ascontiguousarray(matrix[:, c]) for c in range(d)]
        kind = self.locate_kind
        if window is None:
            if kind != "cs":
                return [det._run(cols[c]) for c, det in enumerate(self._detectors)], {}
            tarr = _ts_array(ts)
            outs = [det._run(cols[c], ts=tarr) for c, det in enumerate(self._detectors)]
            located = {}
            hit = outs[0][0] != 0.0 if d == 1 else np.any([o[0] != 0.0 for o in outs], axis=0)
            for i in np.flatnonzero(hit).tolist():
                located[i] = _cs_start(base + i, [o[:, i] for o in outs if o[0, i] != 0.0])
            return outs, located
        tarr = _ts_array(ts) if kind == "cs" else NO_TS
        pieces: list[list[np.ndarray]] = [[] for _ in range(d)]
        ptr = [0] * d
        pending: list[int | None] = [None] * d
        located: dict[int, tuple[int, float | None]] = {}
        pushed = 0
        while True:
            for c, det in enumerate(self._detectors):
                if pending[c] is None and ptr[c] < m:
                    o = det._run(cols[c][ptr[c]:], stop_at_alarm=True,
                                 ts=tarr[ptr[c]:] if tarr.shape[0] else tarr)
                    pieces[c].append(o)
                    ptr[c] += o.shape[1]
                    if o[0, -1] != 0.0:
                        pending[c] = ptr[c] - 1
            due = [p for p in pending if p is not None]
            if not due:
                break
            e = min(due)
            alarmed = [c for c in range(d) if pending[c] == e]
            window.push_many(matrix[pushed:e + 1] if self._shape else matrix[pushed:e + 1, 0],
                             ts[pushed:e + 1])
            pushed = e + 1
            if kind == "cs":
                # Each alarmed detector's last value consumed is its alarm.
                located[e] = _cs_start(base + e, [pieces[c][-1][:, -1] for c in alarmed])
                window.drop_before(located[e][0])
            elif kind is not None:
                at = self._locate_at(window, base + e, alarmed, pieces, kind)
                located[e] = (at, window.ts_at(at))
                window.drop_before(at)
            if self.restart:
                kept = window.values()
                kept_ts = _ts_array([window.ts_at(p) for p in range(window.start, window.count)])
                for c in alarmed:
                    self._detectors[c]._run(np.ascontiguousarray(
                        kept if not self._shape else kept[:, c]), ts=kept_ts)
            for c in alarmed:
                pending[c] = None
        if pushed < m:
            window.push_many(matrix[pushed:] if self._shape else matrix[pushed:, 0],
                             ts[pushed:])
        outs = [np.concatenate(p, axis=1) if len(p) > 1 else p[0] for p in pieces]
        return outs, located

    def _locate_at(self, window: ValueWindow, position: int, alarmed: list[int],
                   pieces: list[list[np.ndarray]], kind: str) -> int:
        """The located change of an alarm at ``position`` (the window ends with it)."""
        values = window.values()
        if self._shape:
            values = values[:, alarmed]
        return window.start + locate_change(values, kind)

    def process(self, record: Mapping) -> list[dict]:
        shape, value = self._read(record)
        if self._shape is None:
            self._make(shape)
        outs, located = self._feed(value[None, :], [numeric_ts(record)])
        return self._outputs([record], outs, bool(shape), located)

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop; the detectors run once over the batch."""
        records = list(records)
        good: list[Mapping] = []
        values: list[np.ndarray] = []
        slots: list[Any] = []  # a DeadLetter, or None for the next good record
        for record in records:
            try:
                shape, value = self._read(record)
            except BadInput as exc:
                slots.append(self._dead_letter(record, exc))
                continue
            if self._shape is None:
                self._make(shape)
            good.append(record)
            values.append(value)
            slots.append(None)
        if good:
            matrix = np.vstack(values)
            ts = [numeric_ts(r) for r in good] if self._window is not None \
                or self.locate_kind == "cs" else []
            outs, located = self._feed(matrix, ts)
            produced = iter(self._outputs(good, outs, bool(self._shape), located))
        else:
            produced = iter(())
        return [next(produced) if s is None else s for s in slots]

    # ---- hooks for the check suite ----------------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {}
        yield {"cs": "subgaussian", "sigma": 1.0, "pfa": True, "field": "meta.x"}
        yield {"cs": "hoeffding", "lower": -4.0, "upper": 8.0, "prune": 50}
        yield {"cs": "empirical-bernstein", "lower": -4.0, "upper": 8.0}
        yield {"cs": "betting", "lower": -4.0, "upper": 8.0, "alpha": 0.05}
        yield {"cs": "quantile", "quantile": 0.5, "burn_in": 20}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 300, seed: int = 0) -> list[dict]:
        rng = np.random.default_rng(seed)
        vector = params.get("field") == "meta.x"
        x = rng.normal(0.0, 1.0, (n, 3) if vector else n)
        x[n // 2:] += 3.0
        x = np.clip(x, -3.9, 7.9)
        records = []
        for i in range(n):
            rec: dict = {"key": "k", "ts": float(i), "offset": i}
            if vector:
                rec["meta"] = {"x": x[i].tolist()}
            else:
                rec["value"] = float(x[i])
            records.append(rec)
        return records

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        vector = params.get("field") == "meta.x"

        def rec(v: Any) -> dict:
            return {"key": "k", "meta": {"x": v}} if vector else {"key": "k", "value": v}

        bad = [rec(float("nan")), rec("abc"), {"key": "k"}, rec([[1.0, 2.0], [3.0]]),
               rec(None), rec({"a": 1}), "not a record"]
        bad += [rec([1.0, 0.0])] if vector else [rec([1.0, 0.0]), rec(float("inf"))]
        if "upper" in params:
            bad.append(rec(params["upper"] + 1.0))
        return bad
