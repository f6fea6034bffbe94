"""The ``class`` operator: classification-score change detection on records
(:class:`ClassDetector`).

One detector per key (``Keyed``); a scalar or vector ``value`` per record (a vector is a
multichannel series: the k-NN sums the channels' distances); alarms carry ``change_at`` (and
``change_ts``) like every detector's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.clasp.detector import ClassDetector
from shiftwatch.operators.contract import Operator, params_of
from shiftwatch.operators.registry import register
from shiftwatch.operators.sensitivity import Sensitivity
from shiftwatch.records import MAX_ABS, BadInput, DeadLetter, as_array, get_field

__all__ = ["ClassOperator"]


def _ts_of(rec: Any) -> float:
    ts = rec.get("ts") if isinstance(rec, Mapping) else None
    if type(ts) is float:
        return ts
    if isinstance(ts, (int, float, np.integer, np.floating)) and not isinstance(ts, bool):
        try:  # an integer too large for a float is no time
            return float(ts)
        except OverflowError:
            return float("nan")
    return float("nan")


@register("class")
class ClassOperator(Operator):
    """ClaSS change detection: alarms when a k-NN classifier can tell the recent part of the
    window from the part before it (a change of shape, period, phase or correlation).

    Outputs carry ``alarm``; an alarm carries ``change_at`` (the position of the first
    changed record in the key's stream, the operator's count of accepted records),
    ``change_ts`` when that record had a numeric ``ts``, and ``changes_at`` when the record
    that ended the warm-up found several. Parameters are those of :class:`ClassDetector`
    plus ``field``.

    Parameters
    ----------
    field
        Dotted path of the value in each record (``value``; ``reading.temp`` for a nested
        field).
    """

    input_kind = "number or vector (channels)"
    # threshold is the significance test's p-value: larger gives more alarms
    sensitivity = Sensitivity("threshold", more_alarms="larger", low=1e-200, high=1e-3)

    #: The operator takes :class:`ClassDetector`'s parameters (defined there once) and
    #: ``field`` (see :func:`~shiftwatch.operators.contract.params_of`).
    params_from = "shiftwatch.operators.clasp.detector.ClassDetector"

    def _init(self, *args: Any, field: str = "value", **params: Any) -> None:
        self._validate_params()
        self._reset()

    __init__ = params_of(ClassDetector, _init)
    del _init

    def _detector_params(self) -> dict:
        p = self._get_params()
        p.pop("field")
        return p

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        ClassDetector(**self._detector_params())

    def _reset(self) -> None:
        self._detector = ClassDetector(**self._detector_params())
        self._count = 0
        # ts of the last ``window`` records: a located change is always inside the window
        self._ts = np.full(int(self.window), np.nan)

    def warm_up(self) -> int | None:
        """Records before the first possible alarm: the warm-up, and two smallest segments
        of the smallest width."""
        w = self.width if isinstance(self.width, int) else max(3, int(self.suss_lbound))
        return max(int(self.n_warmup), 2 * int(self.excl_radius) * w)

    def state_dict(self) -> dict:
        from shiftwatch.operators.state_codec import decode_state, encode_state

        st = decode_state(encode_state(self._detector.state_dict()))
        st["count"] = self._count
        st["record_ts"] = self._ts.copy()
        return {"operator": self.name or type(self).__name__, "state": st}

    def load_state_dict(self, state: Mapping) -> None:
        payload = dict(self._state_payload(state))
        count = int(payload.pop("count", 0))
        ts = payload.pop("record_ts", None)
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

    def _emit(self, run: list[tuple[Mapping, Any]], out: list) -> None:
        if not run:
            return
        xs = np.array([x for _, x in run], dtype=np.float64).reshape(len(run), -1)
        t = np.array([_ts_of(rec) for rec, _ in run])
        alarm, change, extra = self._detector.update_many(xs)
        ring, L, start = self._ts, self._ts.shape[0], self._count
        T = len(run)
        for i, (rec, _) in enumerate(run):
            o = self._output(rec, alarm=bool(alarm[i]))
            if alarm[i]:
                at = int(change[i])
                o["change_at"] = at
                if 0 <= at and start + i - at < L:
                    cts = t[at - start] if at >= start else ring[at % L]
                    if cts == cts:
                        o["change_ts"] = float(cts)
                if extra[i]:
                    o["changes_at"] = list(extra[i])
            out.append(o)
        keep = t[-L:]
        ring[(start + T - keep.shape[0] + np.arange(keep.shape[0])) % L] = keep
        self._count = start + T

    def process(self, record: Mapping) -> list[dict]:
        x = self._read(record)  # BadInput leaves the state untouched
        out: list[dict] = []
        self._emit([(record, x)], out)
        return out

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop; valid runs go through the kernel."""
        out: list[dict | DeadLetter] = []
        run: list[tuple[Mapping, Any]] = []
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

    # ---- hooks for the shared check suite --------------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {"window": 400, "n_warmup": 100}
        yield {"window": 300, "n_warmup": 64, "width": 8, "excl_radius": 3, "jump": 1}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 600, seed: int = 0) -> list[dict]:
        # a period-10 sine whose period changes to 17 at n // 2 (level and variance unchanged)
        rng = np.random.default_rng(seed)
        t = np.arange(n)
        y = np.where(t < n // 2, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
        y = y + 0.1 * rng.normal(size=n)
        return [{"key": "k", "ts": float(i), "offset": i, "value": float(v)}
                for i, v in enumerate(y)]
