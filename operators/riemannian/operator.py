"""The ``karcher`` operator: Riemannian change detection on manifold-valued records.

:class:`KarcherOperator` wraps :class:`~shiftwatch.operators.riemannian.karcher.KarcherDetector`
(the mathematics) for records: points read from a field, checked against the manifold,
alarms located (``change_at``) on a window of the latest points.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.locate import ValueWindow, mean_change_split
from shiftwatch.operators.registry import register
from shiftwatch.operators.riemannian.karcher import (
    OVERFLOW_REASON,
    KarcherDetector,
    point_distances,
)
from shiftwatch.operators.sensitivity import Sensitivity
from shiftwatch.records import BadInput, DeadLetter, get_field, numeric_ts

__all__ = ["KarcherOperator"]



@register("karcher")
class KarcherOperator(Operator):
    """Riemannian change detection on manifold-valued records (``KarcherDetector``).

    Each record's ``field`` holds a point of the manifold (an SPD matrix, an n x p
    orthonormal basis, a unit vector) as nested lists; outputs carry ``alarm``,
    ``statistic`` (``g_t``) and ``threshold`` (None before one exists). Values off the
    manifold (wrong shape, NaN, not symmetric, not positive definite, not orthonormal) are
    rejected as dead letters with the state untouched. Parameters are those of
    :class:`KarcherDetector` plus ``field``. The default burn-in is derived from the steps
    (75 samples at the default steps; ``burn_in=400`` is the paper's), and the estimates
    start warm (``warm_start``). The default threshold is ``"calibrated"`` (average run length
    ``target_arl=1000`` on change-free input, fitted on the ``calibration=500`` records after
    the burn-in, which cannot alarm, and raised by ``calibration_margin=1`` standard errors of
    its own estimate so that it holds in long runs on most streams): a stream needs more than
    575 records before its first alarm. For shorter streams pass ``threshold="adaptive"``
    (the authors' rule, alarms from the 76th record, with no stated false-alarm rate), a
    smaller ``calibration``, or a number.

    **Locating** (``locate=True``). The operator keeps the last ``locate_window`` points
    since the previous located change (a :class:`~shiftwatch.operators.locate.ValueWindow`
    of flattened points, part of :meth:`state_dict`: bounded, ``locate_window * size``
    floats). At an alarm each kept point gets the score ``d(X, P0) - d(X, P1)`` (how much
    nearer it is to the fast estimate than to the slow one, at the alarm) and the scores are
    split in two with Hinkley's mean-shift statistic
    (:func:`~shiftwatch.operators.locate.mean_change_split`); ``change_at`` is the first
    point of the second segment (the operator's 0-based count of accepted points; rejected
    records are not counted) and ``change_ts`` its ``ts``. Distances to ``P0`` alone were
    worse than the alarm position itself on seeded SPD(3) Wishart streams (mean abs error
    184 vs delay 49 over 13 alarms after a change at 800, ``burn_in=100``); the difference
    gave 43 (median 5). Cost: two distances per kept point at an alarm, nothing per point
    but a copy into the window (``benchmarks/location.py`` section 4).

    **Restart** (``restart``, default off). With ``reset_on_alarm``, ``restart=True`` starts
    the new estimates (and the burn-in) at the located change by re-feeding the kept
    post-change points, instead of at the next point. On two changes 150 points apart
    (``benchmarks/location.py`` section 6) it found the second change no more often and
    added alarms, with overlapping CIs: off by default.

    Parameters
    ----------
    field
        Dotted path of the value in each record (``value``; ``reading.temp`` for a nested
        field).
    locate
        Give alarms a ``change_at`` (see Locating above).
    locate_window
        The most points kept for locating (points since the previous located change).
    restart
        With ``reset_on_alarm``, restart the estimates at the located change (see Restart).

    Examples
    --------
    >>> from shiftwatch.streams.synthetic import WishartSPDStream
    >>> op = KarcherOperator(manifold="spd", threshold=0.35, update="retraction")
    >>> outs = op.process_batch(list(WishartSPDStream(n=2000, change_point=1500, seed=1)))
    >>> [o["ts"] for o in outs if o["alarm"]]
    [1518.0]
    """

    #: where the meanings of the detector's parameters are written (``shiftwatch operators``)
    params_doc_from = "shiftwatch.operators.riemannian.karcher.KarcherDetector"
    input_kind = "manifold point (SPD matrix, n x p orthonormal basis, unit vector)"
    sensitivity = Sensitivity("threshold", more_alarms="smaller", low=1e-4, high=100.0)

    def __init__(self, manifold: str = "spd", step_slow: float = 0.01, step_fast: float = 0.02,
                 threshold: float | str = "calibrated", burn_in: int | None = None,
                 update: str = "exp", adapt_rate: float = 0.005, adapt_k: float = 1.64,
                 target_arl: float = 1000.0, calibration: int = 500,
                 reset_on_alarm: bool = True, warm_start: bool = True, field: str = "value",
                 locate: bool = True, locate_window: int = 500, restart: bool = False,
                 calibration_margin: float = 1.0):
        self.manifold = manifold
        self.step_slow = step_slow
        self.step_fast = step_fast
        self.threshold = threshold
        self.burn_in = burn_in
        self.update = update
        self.adapt_rate = adapt_rate
        self.adapt_k = adapt_k
        self.target_arl = target_arl
        self.calibration = calibration
        self.reset_on_alarm = reset_on_alarm
        self.warm_start = warm_start
        self.field = field
        self.locate = locate
        self.locate_window = locate_window
        self.restart = restart
        self.calibration_margin = calibration_margin
        self._validate_params()
        self._reset()

    def _detector_params(self) -> dict:
        params = self._get_params()
        for k in ("field", "locate", "locate_window", "restart"):
            params.pop(k)
        return params

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        KarcherDetector(**self._detector_params())
        if not isinstance(self.locate, bool):
            raise ValueError(f"locate must be true or false, got {self.locate!r}")
        if (isinstance(self.locate_window, bool) or not isinstance(self.locate_window, int)
                or self.locate_window < 2):
            raise ValueError(f"locate_window must be an integer >= 2, got {self.locate_window!r}")
        if not isinstance(self.restart, bool):
            raise ValueError(f"restart must be true or false, got {self.restart!r}")

    def _reset(self) -> None:
        self._detector = KarcherDetector(**self._detector_params())
        self._count = 0  # points accepted so far = the position of the next one
        # The recent points (flattened) since the previous located change, bounded; made at
        # the first point when locating or restarting.
        self._window: ValueWindow | None = None

    def state_dict(self) -> dict:
        from shiftwatch.operators.state_codec import decode_state, encode_state

        state = decode_state(encode_state(self._detector.state_dict()))
        state["count"] = self._count
        state["window"] = None if self._window is None else self._window.state_dict()
        return {"operator": self.name, "state": state}

    def load_state_dict(self, state: Mapping) -> None:
        payload = dict(self._state_payload(state))
        count = int(payload.pop("count", 0))
        window = payload.pop("window", None)
        self._reset()
        self._detector.load_state_dict(payload)
        self._count = count
        shape = self._detector._shape
        if (self.locate or self.restart) and shape is not None:
            size = int(np.prod(shape))
            if window is not None:
                window = ValueWindow.from_state_dict(window)
                if window.dim != size:
                    raise ValueError("state_dict's locate window does not match the points")
            else:
                window = ValueWindow(self.locate_window, size)
                window._count = count
            self._window = window

    def _accept(self, points: np.ndarray, records: list[Mapping]) -> None:
        """Count accepted points and keep them (and their ts) in the window."""
        self._accept_ts(points, [numeric_ts(r) for r in records])

    def _accept_ts(self, points: np.ndarray, ts: Any) -> None:
        """:meth:`_accept` given the points' ts (None or NaN: none)."""
        self._count += len(points)
        if not (self.locate or self.restart):
            return
        if self._window is None:
            self._window = ValueWindow(self.locate_window, int(points[0].size))
        self._window.push_many(points.reshape(len(points), -1), ts)

    def _after_alarm(self, out: dict) -> None:
        """Locate the alarm just raised (the window ends with it); restart if asked."""
        window, det = self._window, self._detector
        if window is None:
            return
        pts = window.values().reshape((len(window), *det._shape))
        if self.locate and len(pts):
            kind = det.geometry.kind
            # How much closer each point is to the fast estimate than to the slow one: pre-
            # change points sit about equally near both, post-change ones nearer the fast one.
            score = point_distances(kind, det._p0, pts) - point_distances(kind, det._p1, pts)
            at = window.start + mean_change_split(score)[0]
            out["change_at"] = at
            ts = window.ts_at(at)
            if ts is not None:
                out["change_ts"] = ts
            window.drop_before(at)
            pts = window.values().reshape((len(window), *det._shape))
        if self.restart and self.reset_on_alarm and len(pts):
            # Start the estimates (and the burn-in) at the located change, not at the next
            # point; alarms while re-feeding are not reported (nor possible before burn_in).
            # (Points already taken once; should one overflow the new estimates, re-feeding
            # stops there.)
            det._start_over_if_needed()
            det.update_many(pts, stop_at_overflow=True)

    def _emit(self, record: Mapping, g: float, alarm: bool) -> dict:
        h = self._detector.threshold_value
        return self._output(record, alarm=bool(alarm), statistic=float(g),
                            threshold=None if h is None else float(h))

    def process(self, record: Mapping) -> list[dict]:
        det = self._detector
        point = det.validate(get_field(record, self.field))
        det.update(point)
        self._accept(point[None], [record])
        out = self._emit(record, det.statistic, det.drift_detected)
        if out["alarm"]:
            self._after_alarm(out)
        return [out]

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop; valid runs go through the kernel."""
        det = self._detector
        out: list[dict | DeadLetter] = []
        run: list[tuple[Mapping, np.ndarray]] = []

        def flush() -> None:
            if not run:
                return
            pts = np.stack([p for _, p in run])
            recs = [r for r, _ in run]
            i = 0
            while i < len(pts):
                g, alarms, hs = det.update_many(pts[i:], stop_at_alarm=True,
                                                stop_at_overflow=True)
                self._accept(pts[i:i + len(g)], recs[i:i + len(g)])
                for rec, gi, ai, hi in zip(recs[i:i + len(g)], g, alarms, hs, strict=True):
                    out.append(self._output(rec, alarm=bool(ai), statistic=float(gi),
                                            threshold=None if math.isnan(hi) else float(hi)))
                if len(g) and alarms[-1]:
                    self._after_alarm(out[-1])
                elif i + len(g) < len(pts):  # the next point would overflow the estimates
                    out.append(self._dead_letter(recs[i + len(g)], BadInput(OVERFLOW_REASON)))
                    i += 1
                i += len(g)
            run.clear()

        for record in records:
            try:
                if det._shape is None and not run:
                    # The first point fixes the geometry: take it the slow way.
                    flush()
                    out.extend(self.process(record))
                    continue
                point = det.validate(get_field(record, self.field))
                run.append((record, point))
            except BadInput as exc:
                flush()
                out.append(self._dead_letter(record, exc))
        flush()
        return out

    # ---- hooks for the check suite ----------------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {"manifold": "spd", "burn_in": 30, "threshold": 0.3, "update": "retraction"}
        yield {"manifold": "spd-log-euclidean", "burn_in": 30, "step_slow": 0.05,
               "step_fast": 0.1}
        yield {"manifold": "spd-bures-wasserstein", "burn_in": 30, "threshold": "calibrated",
               "calibration": 40, "target_arl": 50.0}
        yield {"manifold": "grassmann", "burn_in": 30, "update": "retraction"}
        yield {"manifold": "sphere", "burn_in": 30, "threshold": 0.2}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 200, seed: int = 0) -> list[dict]:
        # A small seeded stream with a change at n // 2 for the shared checks (the paper's
        # generators are shiftwatch.streams.synthetic's; operators do not import streams).
        rng = np.random.default_rng(seed + 1)
        m = params.get("manifold", "spd")
        half = np.arange(n) >= n // 2
        if m.startswith("spd"):
            df = 6  # X = L G G^T L^T / df, G ~ N(0, 1)^(3 x df): Wishart(df, L L^T) / df
            scales = [np.eye(3), np.diag([4.0, 1.0, 0.5])]
            g = rng.standard_normal((n, 3, df))
            x = np.stack([np.linalg.cholesky(scales[int(h)]) for h in half]) @ g
            x = x @ x.transpose(0, 2, 1) / df
            values = ((x + x.transpose(0, 2, 1)) / 2).tolist()
        elif m == "grassmann":  # leading 2 left singular vectors of M + noise, M changes
            means = [rng.standard_normal((6, 6)), rng.standard_normal((6, 6))]
            z = np.stack([means[int(h)] for h in half]) + rng.standard_normal((n, 6, 6))
            values = np.linalg.svd(z)[0][:, :, :2].tolist()
        else:
            x = rng.normal(size=(n, 3)) + np.array([3.0, 0.0, 0.0])
            x[n // 2:] += np.array([-3.0, 3.0, 0.0])
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            values = x.tolist()
        return [{"key": "k", "ts": float(i), "offset": i, "value": v}
                for i, v in enumerate(values)]

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        m = params.get("manifold", "spd")
        bad: list[Any] = [float("nan"), "abc", [[1.0, 2.0], [3.0]]]
        if m.startswith("spd"):
            bad += [np.eye(4).tolist(), [[1.0, 0.0, 0.0], [0.0, float("nan"), 0.0], [0, 0, 1.0]],
                    [[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                    [[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]
        elif m == "grassmann":
            bad += [np.ones((6, 2)).tolist(), np.eye(5)[:, :2].tolist()]
        else:
            bad += [[1.0, 1.0, 0.0], [1.0, 0.0]]
        return [{"key": "k", "value": v} for v in bad] + [{"key": "k"}]
