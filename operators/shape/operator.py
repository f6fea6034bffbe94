"""The ``shape`` operator: shape-change detection on records (:class:`ShapeDetector`).

One detector per key (``Keyed``); a scalar or vector ``value`` per record; alarms carry
``change_at`` (and ``change_ts``) like every detector's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator, params_of
from shiftwatch.operators.registry import register
from shiftwatch.operators.sensitivity import Sensitivity
from shiftwatch.operators.shape.detector import ShapeDetector, _num
from shiftwatch.records import MAX_ABS, BadInput, DeadLetter, as_array, get_field

__all__ = ["ShapeOperator"]


@register("shape")
class ShapeOperator(Operator):
    """Shape-change detection: alarms when the shape, period or correlation of a stream changes.

    Outputs carry ``alarm``, ``statistic`` (the last scan Z; at an alarm, the Z that crossed
    ``threshold``, decided up to ``confirm`` blocks after the crossing) and ``threshold`` (the
    one that Z was compared with: with ``threshold="null"`` it depends on the blocks since the
    last change, None before the first scan); an
    alarm carries ``change_at`` (position of the first changed record in the key's stream, the
    operator's count of accepted records) and ``change_ts`` when the record at that position
    had a numeric ``ts`` and is among the last ``TS_MEMORY`` records. Parameters are those of
    :class:`ShapeDetector` plus ``field``.

    Parameters
    ----------
    field
        Dotted path of the value in each record (``value``; ``reading.temp`` for a nested
        field).
    """

    input_kind = "number or vector (channels)"
    sensitivity = Sensitivity("threshold", more_alarms="smaller", low=1.0, high=100.0)

    #: The operator takes :class:`ShapeDetector`'s parameters (defined there once) and
    #: ``field`` (see :func:`~shiftwatch.operators.contract.params_of`).
    params_from = "shiftwatch.operators.shape.detector.ShapeDetector"

    def _init(self, *args: Any, field: str = "value", **params: Any) -> None:
        self._validate_params()
        self._reset()

    __init__ = params_of(ShapeDetector, _init)
    del _init

    def _detector_params(self) -> dict:
        p = self._get_params()
        p.pop("field")
        return p

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        ShapeDetector(**self._detector_params())

    #: ``ts`` of the last records kept for ``change_ts`` (a ring; NaN where there was none)
    TS_MEMORY = 4096

    def _reset(self) -> None:
        self._detector = ShapeDetector(**self._detector_params())
        self._count = 0
        self._ts = np.full(self.TS_MEMORY, np.nan)

    def state_dict(self) -> dict:
        from shiftwatch.operators.state_codec import decode_state, encode_state

        st = decode_state(encode_state(self._detector.state_dict()))
        st["count"] = self._count
        st["ts"] = self._ts.copy()
        return {"operator": self.name or type(self).__name__, "state": st}

    def load_state_dict(self, state: Mapping) -> None:
        payload = dict(self._state_payload(state))
        count = int(payload.pop("count", 0))
        ts = payload.pop("ts", None)
        self._reset()
        self._detector.load_state_dict(payload)
        self._count = count
        if ts is not None:
            self._ts = np.array(ts, dtype=np.float64)

    def _read(self, record: Mapping) -> np.ndarray:
        x = as_array(get_field(record, self.field), name=self.field)
        if x.ndim > 1:
            raise BadInput(f"{self.field} must be a number or a vector, got shape {x.shape}")
        x = x.reshape(-1)
        c = self._detector._c
        if c is not None and x.size != c:
            raise BadInput(f"{self.field} has {x.size} channels, earlier values had {c}")
        return x

    def _emit(self, run: list[tuple[Mapping, np.ndarray]], out: list) -> None:
        if not run:
            return
        # one channel: floats (see process_batch); several: arrays of one length
        xs = np.array([x for _, x in run], dtype=np.float64).reshape(len(run), -1)
        t = np.full(len(run), np.nan)
        for i, (rec, _) in enumerate(run):
            ts = rec.get("ts") if type(rec) is dict or isinstance(rec, Mapping) else None
            if type(ts) is float:
                t[i] = ts
            elif _num(ts):
                try:  # an integer too large for a float (10**300 and up) is no time
                    t[i] = float(ts)
                except OverflowError:
                    pass
        alarm, change, stat, thr, extra, change_ts = self._step(xs, t)
        thr = self._reported(thr)
        for i, (rec, _) in enumerate(run):
            h = None if thr[i] != thr[i] else float(thr[i])
            o = self._output(rec, alarm=bool(alarm[i]), statistic=float(stat[i]), threshold=h)
            if alarm[i]:
                o["change_at"] = int(change[i])
                if np.isfinite(change_ts[i]):
                    o["change_ts"] = float(change_ts[i])
                if extra[i]:
                    o["changes_at"] = list(extra[i])
            out.append(o)

    def _reported(self, thr: np.ndarray) -> np.ndarray:
        """The threshold each output reports (NaN: None): the fixed ``threshold``; the one
        its scan used with ``"null"`` (NaN before the first scan) or with ``asymmetry``
        (``threshold`` before the first scan)."""
        if self.threshold == "null":
            return thr
        fixed = float(self.threshold)
        if self.asymmetry:
            return np.where(np.isfinite(thr), thr, fixed)
        return np.full(len(thr), fixed)

    def _step(self, xs: np.ndarray, t: np.ndarray) -> tuple:
        """Values ``xs`` (T, c) with their ``ts`` ``t`` (NaN: none) through the detector:
        ``(alarm, change_at, statistic, threshold, extra, change_ts)`` per row, as
        :meth:`ShapeDetector.update_many` gives them plus ``change_ts``, the ``ts`` of the
        record at ``change_at`` when it is among the last ``TS_MEMORY`` records at the
        alarm (else NaN). Nothing depends on where runs of records end (a replay's
        micro-batches, a Kafka stage's polls, the replay's columnar path)."""
        T = xs.shape[0]
        t = np.where(np.isfinite(t), t, np.nan)
        alarm, change, stat, extra = self._detector.update_many(xs)
        thr = self._detector.thresholds
        ring, L, start = self._ts, self.TS_MEMORY, self._count
        change_ts = np.full(T, np.nan)
        for i in np.flatnonzero(alarm).tolist():
            at = int(change[i])
            if 0 <= at and start + i - at < L:  # among the last L records at the alarm
                change_ts[i] = t[at - start] if at >= start else ring[at % L]
        keep = t[-L:]  # (the ring is read above, before this run overwrites it)
        ring[(start + T - keep.shape[0] + np.arange(keep.shape[0])) % L] = keep
        self._count = start + T
        return alarm, change, stat, thr, extra, change_ts

    def process(self, record: Mapping) -> list[dict]:
        x = self._read(record)  # BadInput leaves the state untouched
        out: list[dict] = []
        self._emit([(record, x)], out)
        return out

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop; valid runs go through the kernel."""
        out: list[dict | DeadLetter] = []
        run: list[tuple[Mapping, Any]] = []  # one channel: floats; several: arrays
        size = 0  # channels of the run's values
        field = self.field
        plain = "." not in field
        lo, hi = -MAX_ABS, MAX_ABS
        for record in records:
            if plain and type(record) is dict:  # the hot path: a plain number, in range
                v = record.get(field)
                if (type(v) is float or type(v) is int) and lo <= v <= hi:
                    c = self._detector._c
                    if c == 1 or (c is None and (not run or size == 1)):
                        run.append((record, float(v)))
                        size = 1
                        continue
            try:
                x = self._read(record)
                if self._detector._c is None and run and x.size != size:
                    raise BadInput(f"{self.field} has {x.size} channels, earlier values had "
                                   f"{size}")
                run.append((record, float(x[0]) if x.size == 1 else x))
                size = x.size
            except BadInput as exc:
                self._emit(run, out)
                run = []
                out.append(self._dead_letter(record, exc))
        self._emit(run, out)
        return out

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {}
        yield {"period": 8, "threshold": 4.0}
        yield {"asymmetry": True}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 600, seed: int = 0) -> list[dict]:
        # a period-10 sine whose period changes to 17 at n // 2 (level and variance unchanged)
        rng = np.random.default_rng(seed)
        t = np.arange(n)
        y = np.where(t < n // 2, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
        y = y + 0.1 * rng.normal(size=n)
        return [{"key": "k", "ts": float(i), "offset": i, "value": float(v)}
                for i, v in enumerate(y)]
