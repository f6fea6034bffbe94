"""River's drift detectors as shiftwatch operators: ``river:ADWIN``, ``river:PageHinkley``, ...

Every detector of :mod:`river.drift` and :mod:`river.drift.binary` is registered under the
prefix ``river``, so ``create("river:ADWIN", delta=0.01)`` and a pipeline config saying
``operator: river:ADWIN`` both work, and ``shiftwatch operators`` lists each one with its
parameters. The state of a detector is written with the restricted object-graph codec of
:mod:`shiftwatch.operators.object_state`: plain JSON, no pickle.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.locate import LOCATE_KINDS, ValueWindow, locate_change
from shiftwatch.operators.object_state import decode_object, encode_object
from shiftwatch.operators.registry import OperatorInfo, register_prefix
from shiftwatch.operators.river import lazy_import
from shiftwatch.operators.river.adwin_state import (
    adwin_doc,
    adwin_from_doc,
    adwin_parts,
    adwin_patch,
    fast_path_ok,
)
from shiftwatch.operators.river.params import check_param_ranges, check_param_type
from shiftwatch.operators.sensitivity import RIVER_SENSITIVITY
from shiftwatch.operators.state_codec import diff_state
from shiftwatch.records import (
    PASSTHROUGH_FIELDS,
    BadInput,
    DeadLetter,
    as_array,
    as_scalar,
    get_field,
    numeric_ts,
)

__all__ = ["RiverDetector", "river_detector_names"]


def _fast_parts(dets: list) -> list | None:
    """The fast writer's parts of each detector (River's ADWIN, once its self-check passed),
    or None: encode them with the generic codec."""
    if not fast_path_ok():
        return None
    parts = []
    for d in dets:
        p = adwin_parts(d)
        if p is None:
            return None
        parts.append(p)
    return parts


def _statistic_adwin(det: Any) -> float:
    return float(det.estimation)


def _statistic_page_hinkley(det: Any) -> float:
    # The Page-Hinkley test statistic, the quantity compared with ``threshold``.
    up = det._sum_increase - det._min_increase
    down = det._max_decrease - det._sum_decrease
    if det.mode == "up":
        return float(up)
    if det.mode == "down":
        return float(down)
    return float(max(up, down))


def _statistic_kswin(det: Any) -> float | None:
    # The p-value of the last Kolmogorov-Smirnov test; None until the window first fills.
    if det.drift_detected or len(det.window) >= det.window_size:
        return float(det.p_value)
    return None


def _statistic_ddm(det: Any) -> float:
    # p_i + s_i: the error rate plus its standard deviation, which DDM compares with its minimum.
    p = det._p.get()
    return float(p + math.sqrt(p * (1.0 - p) / det._p.n))


def _statistic_eddm(det: Any) -> float | None:
    # p'_i + 2 s'_i: mean distance between errors plus two standard deviations.
    dist = det._error_distances
    if dist.mean.n < 1:
        return None
    return float(dist.mean.get() + 2.0 * dist.get() ** 0.5)


def _statistic_hddm_a(det: Any) -> float:
    return float(det._z.get())


def _statistic_hddm_w(det: Any) -> float:
    return float(det._total.ewma)


#: What ``statistic`` means for each detector (None when a detector exposes no statistic).
_STATISTICS: dict[str, Callable[[Any], float | None]] = {
    "ADWIN": _statistic_adwin,
    "PageHinkley": _statistic_page_hinkley,
    "KSWIN": _statistic_kswin,
    "DDM": _statistic_ddm,
    "EDDM": _statistic_eddm,
    "HDDMA": _statistic_hddm_a,
    "HDDMW": _statistic_hddm_w,
}

_CLASSES: dict[str, type[RiverDetector]] = {}


def river_detector_names() -> list[str]:
    """The River detectors the adapter runs, e.g. ``['ADWIN', 'DDM', ...]``.

    Examples
    --------
    >>> river_detector_names()[:4]
    ['ADWIN', 'DDM', 'DummyDriftDetector', 'EDDM']
    """
    return lazy_import.detector_names() or sorted(lazy_import.imported_detectors())


def _detector_class(detector: Any) -> type[RiverDetector]:
    """The RiverDetector subclass bound to one River detector (the ``river:NAME`` factory);
    it imports only the River module that defines it (:mod:`.lazy_import`)."""
    cls = _CLASSES.get(detector) if isinstance(detector, str) else None
    if cls is not None:
        return cls
    river_cls = lazy_import.detector_class(detector) if isinstance(detector, str) else None
    if river_cls is None:
        known = lazy_import.imported_detectors()
        if not isinstance(detector, str) or detector not in known:
            raise ValueError(f"unknown River detector {detector!r}; River detectors: "
                             f"{', '.join(sorted(known))}")
        river_cls = known[detector]
    from river import base as river_base

    sig = inspect.signature(river_cls.__init__)
    defaults = {p.name: p.default for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    attrs = {
        "name": f"river:{detector}",
        "detector_name": detector,
        "river_class": river_cls,
        "river_defaults": defaults,
        "accepted_params": ["field", "locate", "locate_window", "restart", *defaults],
        "binary": issubclass(river_cls, river_base.BinaryDriftDetector),
        "has_warning": hasattr(river_cls, "warning_detected"),
        "sensitivity": RIVER_SENSITIVITY.get(detector),  # for `shiftwatch calibrate`
        "_statistic": staticmethod(_STATISTICS.get(detector, lambda det: None)),
        "__module__": __name__,
        "__slots__": (),
        "__doc__": f"River's ``{detector}`` as a shiftwatch operator (see RiverDetector).",
    }
    cls = type(f"River{detector}", (RiverDetector,), attrs)
    cls.input_kind = ("0/1 or bool (1 = error), scalar or vector" if cls.binary
                      else "scalar or vector (one detector per coordinate)")
    _CLASSES[detector] = cls
    return cls


class RiverDetector(Operator):
    """Any River drift detector as a stream operator.

    ``RiverDetector(detector="ADWIN", delta=0.01)`` and ``create("river:ADWIN", delta=0.01)``
    build the same operator. It reads ``field`` from each record, updates the detector and
    emits one output per input with ``alarm`` (the detector's ``drift_detected``),
    ``statistic`` and, for detectors with a warning zone (DDM, EDDM, HDDMA, HDDMW, ...),
    ``warning``.

    An alarm also says where the change began (see Locating below): ``change_at``, the
    position of the first changed record in the key's stream, and ``change_ts``, that record's
    ``ts`` when records carry one. Outputs without an alarm carry neither.

    ``statistic`` is the detector's own summary where it has one: ADWIN's window mean
    (``estimation``), the Page-Hinkley test statistic (the cumulative sum compared with
    ``threshold``), KSWIN's last p-value, DDM's ``p + s``, EDDM's ``p' + 2 s'``, HDDMA's
    running mean and HDDMW's EWMA; ``None`` for the others.

    Parameters
    ----------
    detector
        The River detector's class name: one of :func:`river_detector_names`.
    field
        Dotted path of the value in the record.
    locate
        Locate each alarm's change: ``True`` or ``"mean"`` (the two-segment mean-shift split,
        :func:`~shiftwatch.operators.locate.mean_change_split`), ``"meanvar"`` (the Gaussian
        mean-and-variance split, :func:`~shiftwatch.operators.locate.variance_change_split`)
        or ``False`` (no ``change_at``, no window kept).
    locate_window
        The most values kept for locating (the values since the previous located change).
    restart
        Vectors, with ``locate``: at an alarm every coordinate's detector is made afresh and
        re-fed the kept values from the located change on, so that all of them describe only
        what came after the key's change (``False``, default: only the coordinates that
        alarmed forget, as River's detector does). ``auto(multichannel_restart=...)``.
    **params
        The River detector's own keyword parameters, e.g. ``delta`` for ADWIN. Unknown names
        raise ``ValueError`` listing the allowed ones.

    Notes
    -----
    Values are numbers; the binary detectors (``river.drift.binary``: DDM, EDDM, FHDDM, HDDMA,
    HDDMW) take only 0/1 or booleans, 1 meaning an error. A vector value runs one detector
    per coordinate and ``alarm`` is true when any coordinate alarms; ``statistic`` is then the
    list of per-coordinate statistics and ``coordinates`` lists the coordinates that alarmed.
    The first record fixes whether values are scalars or vectors of a given length; a later
    record of another shape is rejected with :class:`~shiftwatch.records.BadInput`, as are
    NaN, non-numbers and missing fields, leaving the state unchanged.

    Detectors with a ``seed`` (KSWIN, DummyDriftDetector) are reproducible only when it is
    given; every coordinate of a vector gets a detector with the same parameters.

    **Locating.** The operator keeps the values since the previous located change, at most
    ``locate_window`` of them (a :class:`~shiftwatch.operators.locate.ValueWindow`, part of
    :meth:`state_dict`). At an alarm it splits them in two with the ``locate`` statistic (for a
    vector, over the coordinates that alarmed, each scaled by its variance) and reports the
    first index of the second segment as ``change_at``; the values before it are then
    dropped, so the next search starts at this change. Positions count the records this
    operator accepted for the key (0-based; rejected records are not counted), which is the
    evaluation's per-key position when nothing was dead-lettered
    (:mod:`shiftwatch.sinks.evaluation` maps it back when something was). The default window
    of 1000 values holds the detection delay of shifts down to about a quarter of a standard
    deviation with room for a pre-change segment; on synthetic single-change streams
    (``benchmarks/location.py``, table 2) it had the smallest error for a 0.25 sd shift and
    the same average error over 0.25-2 sd shifts as 250 or 500, while 2000 and 4000 were
    worse. A change older than the window is placed at its oldest value. Cost (measured by
    the same script on a shared 2-core machine, two runs): 2.5-10 microseconds per record to
    keep the value (noisy; 1.5-2.5x River's own update), 0.1-0.4 ms per alarm for the split.

    The River detector itself is not restarted from the located change: River's detectors
    already forget the past at an alarm (ADWIN keeps only the window after its cut,
    Page-Hinkley and the binary detectors reset). ``benchmarks/location.py`` measured what
    re-feeding the kept post-change values to a fresh detector would change on two changes
    150 records apart (30 seeds): nothing within the confidence intervals (located F1
    Page-Hinkley 0.915 +- 0.045 without, 0.910 +- 0.050 with; ADWIN 0.933 both; the second
    change found in every run either way), so the adapter does not offer it.

    Examples
    --------
    >>> import numpy as np
    >>> from shiftwatch.operators import create
    >>> rng = np.random.default_rng(7)
    >>> x = np.r_[rng.normal(0, 1, 500), rng.normal(3, 1, 500)]
    >>> op = create("river:ADWIN", delta=0.002)
    >>> outs = op.process_batch([{"ts": i, "value": float(v)} for i, v in enumerate(x)])
    >>> [o["ts"] for o in outs if o["alarm"]]
    [511]
    >>> [o["change_at"] for o in outs if o["alarm"]]
    [500]
    >>> round(outs[-1]["statistic"], 3)
    2.992
    """

    # Slots: Keyed holds one of these per key, so every byte counts (see benchmarks/keyed.py).
    __slots__ = ("detector", "field", "locate", "locate_window", "params", "restart", "_shape",
                 "_detector", "_detectors", "_window")

    input_kind: ClassVar[str] = "scalar or vector (one detector per coordinate)"
    detector_name: ClassVar[str | None] = None
    river_class: ClassVar[type | None] = None
    river_defaults: ClassVar[dict] = {}
    accepted_params: ClassVar[list[str]] = []
    binary: ClassVar[bool] = False
    has_warning: ClassVar[bool] = False

    def __new__(cls, detector: str | None = None, field: str = "value",
                locate: bool | str = True, locate_window: int = 1000, restart: bool = False,
                **params: Any):
        if cls is RiverDetector:
            if detector is None:
                raise ValueError("RiverDetector needs detector=NAME, one of: "
                                 f"{', '.join(river_detector_names())}")
            cls = _detector_class(detector)
        return super().__new__(cls)

    def __init__(self, detector: str | None = None, field: str = "value",
                 locate: bool | str = True, locate_window: int = 1000, restart: bool = False,
                 **params: Any):
        self.detector = type(self).detector_name if detector is None else detector
        self.field = field
        self.locate = locate
        self.locate_window = locate_window
        self.restart = restart
        self.params = params
        self._validate_params()
        self._reset()

    # ---- parameters -----------------------------------------------------------------

    def _validate_params(self) -> None:
        if self.detector != type(self).detector_name:
            raise ValueError(f"detector must be {type(self).detector_name!r} for {self.name}, "
                             f"got {self.detector!r}")
        if not isinstance(self.field, str) or not self.field or "" in self.field.split("."):
            raise ValueError(f"field must be a dotted path such as 'value', got {self.field!r}")
        if not (isinstance(self.locate, bool) or self.locate in LOCATE_KINDS):
            raise ValueError(f"locate must be true, false or one of {', '.join(LOCATE_KINDS)}, "
                             f"got {self.locate!r}")
        if (isinstance(self.locate_window, bool) or not isinstance(self.locate_window, int)
                or self.locate_window < 2):
            raise ValueError(f"locate_window must be an integer >= 2, got {self.locate_window!r}")
        if not isinstance(self.restart, bool) or (self.restart and self.locate is False):
            raise ValueError(f"restart must be true or false, and needs locate; got "
                             f"restart={self.restart!r}, locate={self.locate!r}")
        unknown = sorted(set(self.params) - set(self.river_defaults))
        if unknown:
            raise ValueError(f"{self.name} has no parameter {', '.join(map(repr, unknown))}; "
                             f"parameters: {', '.join(self.accepted_params)}")
        for k, v in self.params.items():
            check_param_type(self.name, k, v, self.river_defaults[k])
        check_param_ranges(self.name, self.detector, {**self.river_defaults, **self.params})
        try:
            self.river_class(**self.params)
        except (ValueError, TypeError, OverflowError) as exc:
            msg = " ".join(str(exc).split())
            raise ValueError(f"{self.name}: {msg}") from None

    def clone(self, **new_params: Any) -> RiverDetector:
        """A fresh operator with the same parameters (overridden by ``new_params``).

        Without ``new_params`` the parameters, validated when this one was made, are copied
        rather than checked again (``Keyed`` clones one detector per key: about 50 us a key
        saved on a restore of 100,000 keys)."""
        if new_params:
            return super().clone(**new_params)
        new = object.__new__(type(self))
        new.detector, new.field, new.locate = self.detector, self.field, self.locate
        new.locate_window, new.params = self.locate_window, dict(self.params)
        new.restart = self.restart
        new._reset()
        return new

    def _get_params(self) -> dict:
        return {"detector": self.detector, "field": self.field, "locate": self.locate,
                "locate_window": self.locate_window, "restart": self.restart, **self.params}

    def all_params(self) -> dict:
        """The adapter's parameters and every parameter of River's detector, River's
        defaults included."""
        return {"detector": self.detector, "field": self.field, "locate": self.locate,
                "locate_window": self.locate_window, "restart": self.restart,
                **self.river_defaults, **self.params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._get_params().items())
        return f"RiverDetector({args})"

    @classmethod
    def info(cls) -> OperatorInfo:
        """Name, summary, parameters with defaults and accepted input (for ``list_operators``)."""
        doc = inspect.getdoc(cls.river_class) or ""
        summary = doc.split("\n")[0].replace("[^1]", "").strip()
        params: dict[str, Any] = {"field": "value", "locate": True, "locate_window": 1000,
                                  "restart": False}
        params.update({k: ("required" if v is inspect.Parameter.empty else v)
                       for k, v in cls.river_defaults.items()})
        return OperatorInfo(name=cls.name, summary=f"River: {summary}", params=params,
                            input_kind=cls.input_kind)

    # ---- state ----------------------------------------------------------------------

    def _reset(self) -> None:
        # Detectors are created on the first record, which also fixes the value shape:
        # () for scalars (one detector in _detector), (d,) for vectors (d in _detectors).
        # Until then a key costs no River object.
        self._shape: tuple | None = None
        self._detector: Any = None
        self._detectors: list | None = None
        # The values since the previous located change (None until the first record, or
        # when locate is off).
        self._window: ValueWindow | None = None

    def _all_detectors(self) -> list | None:
        if self._shape is None:
            return None
        return [self._detector] if self._shape == () else self._detectors

    def state_dict(self) -> dict:
        """The shape and the full state of every River detector, as plain JSON values."""
        return self.state_with_token()[0]

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a state from :meth:`state_dict` (decoding only allowlisted classes)."""
        inner = self._state_payload(state)
        shape, docs = inner.get("shape"), inner.get("detectors")
        if shape is None or docs is None:
            self._reset()
            return
        shape = tuple(int(s) for s in shape)
        if not isinstance(docs, list):
            raise ValueError("state_dict's detectors are not a list")
        detectors = []
        for d in docs:
            det = adwin_from_doc(d)  # River's ADWIN without the graph walk, else None
            detectors.append(decode_object(d) if det is None else det)
        n = shape[0] if shape else 1
        if len(shape) > 1 or len(detectors) != n or not all(
                type(d) is self.river_class for d in detectors):
            raise ValueError(f"state_dict does not hold {n} {self.detector} detector(s)")
        window = inner.get("window")
        if window is not None:
            window = ValueWindow.from_state_dict(window)
            if window.dim != (shape[0] if shape else 0):
                raise ValueError("state_dict's locate window does not match the value shape")
        elif self.locate:
            # A state written with locate off (or before locating existed): positions start
            # again from this record.
            window = ValueWindow(self.locate_window, shape[0] if shape else 0)
        self._reset()
        self._shape = shape
        if self.locate:
            self._window = window
        if shape:
            self._detectors = detectors
        else:
            self._detector = detectors[0]

    def state_with_token(self) -> tuple[dict, tuple | None]:
        """:meth:`state_dict` and the token a later :meth:`state_patch` of it needs (None
        before the first record), computed together (the detectors are encoded once)."""
        docs = parts = None
        if self._shape is not None:
            dets = self._all_detectors()
            parts = _fast_parts(dets)
            docs = [encode_object(d) for d in dets] if parts is None else \
                [adwin_doc(p) for p in parts]
        window = self._window
        state = {"operator": self.name,
                 "state": {"shape": None if self._shape is None else list(self._shape),
                           "detectors": docs,
                           "window": None if window is None else window.state_dict()}}
        return state, self._token(docs, parts)

    def _token(self, docs: list | None, parts: list | None) -> tuple | None:
        if docs is None and parts is None:
            return None
        window = self._window
        # the window object too: a patch applies only to the same window's later version.
        # The detectors' versions: their encoded documents (for diff_state), or for River's
        # ADWIN the parts the fast writer diffs (adwin_state), which hold less.
        return (self._shape, window, None if window is None else window.patch_token(),
                None if parts is not None else docs, parts)

    def state_patch(self, token: tuple | None) -> tuple[list | None, tuple | None]:
        """Patch operations that turn :meth:`state_dict` as of ``token`` (from
        :meth:`state_with_token` or an earlier :meth:`state_patch`) into the current one,
        or None (write the whole state); and the token of the current state.

        The detectors' encoded object graphs are diffed part by part
        (:func:`~shiftwatch.operators.state_codec.diff_state`: for River's ADWIN mostly its
        compiled helper's bytes, of which a few change, written as an XOR); the locate
        window, up to ``locate_window`` values and their ``ts``, gets the values pushed since
        (:meth:`~shiftwatch.operators.locate.ValueWindow.state_patch`).
        :func:`~shiftwatch.operators.state_codec.apply_state_patch` of the patch on the old
        state_dict (decoded) gives this state_dict exactly; the Kafka changelog uses it to
        write what changed (see :mod:`shiftwatch.deploy.kafka.changelog`). The token holds
        the encoded detectors until the next version; for River's ADWIN, its scalars and
        its helper's bytes (about 800 bytes), read and diffed directly by
        :mod:`~shiftwatch.operators.river.adwin_state` (the same patch, without the
        generic graph encode and diff).
        """
        if self._shape is None:
            return None, None
        dets = self._all_detectors()
        parts = _fast_parts(dets)
        window = self._window
        docs = None
        if parts is None or token is None or token[4] is None:
            docs = [encode_object(d) for d in dets]
        new_token = self._token(docs, parts)
        if token is None or token[0] != self._shape or window is not token[1]:
            return None, new_token
        if parts is not None and token[4] is not None and len(token[4]) == len(parts):
            ops = []
            for j, (a, b) in enumerate(zip(token[4], parts, strict=True)):
                ops.extend(adwin_patch(a, b, ["state", "detectors", j]))
        elif docs is not None and token[3] is not None and len(token[3]) == len(docs):
            ops = diff_state(token[3], docs, ["state", "detectors"])
        else:
            return None, new_token
        if window is not None:
            w_ops = window.state_patch(token[2], ["state", "window"])
            if w_ops is None:
                return None, new_token
            ops.extend(w_ops)
        return ops, new_token

    # ---- processing -----------------------------------------------------------------

    def _read(self, record: Mapping) -> tuple[tuple, Any]:
        """The record's value as (shape, float or float array); BadInput if unusable."""
        field = self.field
        raw = get_field(record, field)
        if isinstance(raw, (list, tuple, np.ndarray)):
            value: Any = as_array(raw, ndim=1, name=field, max_abs=self.max_abs,
                                  loose=self.binary)
            if value.size == 0:
                raise BadInput(f"{field} is an empty vector")
            shape: tuple = value.shape
        else:
            # An error indicator may be a boolean (River's binary detectors take them).
            value = as_scalar(raw, field, self.max_abs, loose=self.binary and (
                type(raw) is bool or type(raw) is np.bool_))
            shape = ()
        if self.binary and not np.all((np.asarray(value) == 0.0) | (np.asarray(value) == 1.0)):
            raise BadInput(f"{self.name} takes 0/1 or booleans (1 = error), got "
                           f"{str(raw)[:40]}")
        return shape, value

    def process(self, record: Mapping) -> list[dict]:
        det = self._detector
        if det is not None and type(record) is dict and "." not in self.field:
            # The hot path (a scalar detector already running, a float within max_abs, 0.0 or
            # 1.0 for a binary one) skips the general checks; anything else takes the slow
            # path below.
            raw = record.get(self.field)
            hi = self.max_abs
            if type(raw) is float and -hi <= raw <= hi and (
                    not self.binary or raw == 0.0 or raw == 1.0):
                det.update(int(raw) if self.binary else raw)
                window = self._window
                if window is not None:
                    window.push(raw, numeric_ts(record))
                out = {f: record[f] for f in PASSTHROUGH_FIELDS if f in record}
                out["alarm"] = alarm = det.drift_detected
                out["statistic"] = self._statistic(det)
                if self.has_warning:
                    out["warning"] = det.warning_detected
                if alarm and window is not None:
                    self._locate(out, None)
                return [out]
        shape, value = self._read(record)
        if self._shape is None:
            if shape:
                self._detectors = [self.river_class(**self.params) for _ in range(shape[0])]
            else:
                self._detector = self.river_class(**self.params)
            self._shape = shape
            if self.locate:
                self._window = ValueWindow(self.locate_window, shape[0] if shape else 0)
        elif shape != self._shape:
            raise BadInput(f"{self.field} has shape {shape}, expected {self._shape} "
                           "(fixed by the first record)")
        window = self._window
        if window is not None:
            window.push(value, numeric_ts(record))
        if not shape:
            det = self._detector
            det.update(int(value) if self.binary else value)
            if self.has_warning:
                out = self._output(record, alarm=det.drift_detected,
                                   statistic=self._statistic(det), warning=det.warning_detected)
            else:
                out = self._output(record, alarm=det.drift_detected,
                                   statistic=self._statistic(det))
            if out["alarm"] and window is not None:
                self._locate(out, None)
            return [out]
        dets = self._detectors
        xs = value.astype(np.int64).tolist() if self.binary else value.tolist()
        alarmed, stats = [], []
        for i, (det, x) in enumerate(zip(dets, xs, strict=True)):
            det.update(x)
            if det.drift_detected:
                alarmed.append(i)
            stats.append(self._statistic(det))
        fields: dict[str, Any] = {"alarm": bool(alarmed), "statistic": stats,
                                  "coordinates": alarmed}
        if self.has_warning:
            fields["warning"] = any(d.warning_detected for d in dets)
        out = self._output(record, **fields)
        if alarmed and window is not None:
            self._locate(out, alarmed)
        return [out]

    def _locate(self, out: dict, coordinates: list[int] | None) -> None:
        """Add ``change_at``/``change_ts`` to an alarm output; keep only post-change values."""
        window = self._window
        values = window.values()
        if coordinates is not None:
            values = values[:, coordinates]
        kind = "mean" if self.locate is True else self.locate
        at = window.start + locate_change(values, kind)
        out["change_at"] = at
        ts = window.ts_at(at)
        if ts is not None:
            out["change_ts"] = ts
        window.drop_before(at)
        if self.restart and coordinates is not None:  # every coordinate from the change on
            rest = window.values()
            if self.binary:
                rest = rest.astype(np.int64)
            self._detectors = dets = [self.river_class(**self.params) for _ in self._detectors]
            for j, det in enumerate(dets):
                for x in rest[:, j].tolist():
                    det.update(x)

    def process_batch(self, records: Iterable[Mapping]) -> list[dict | DeadLetter]:
        """Same outputs as :meth:`process` in a loop, with the hot path inlined."""
        det = self._detector
        if det is None or self.binary or "." in self.field:
            return super().process_batch(records)
        field, statistic, warning = self.field, self._statistic, self.has_warning
        hi = self.max_abs
        lo = -hi
        update = det.update
        window = self._window
        push = None if window is None else window.push
        out: list[dict | DeadLetter] = []
        append = out.append
        for record in records:
            if type(record) is dict:
                raw = record.get(field)
                if type(raw) is float and lo <= raw <= hi:
                    update(raw)
                    if push is not None:
                        ts = record.get("ts")
                        # (an int ts goes through numeric_ts: it may be beyond float range)
                        push(raw, ts if type(ts) is float else numeric_ts(record))
                    o = {}
                    for f in PASSTHROUGH_FIELDS:
                        if f in record:
                            o[f] = record[f]
                    o["alarm"] = alarm = det.drift_detected
                    o["statistic"] = statistic(det)
                    if warning:
                        o["warning"] = det.warning_detected
                    if alarm and push is not None:
                        self._locate(o, None)
                    append(o)
                    continue
            try:
                out.extend(self.process(record))
            except BadInput as exc:
                append(self._dead_letter(record, exc))
        return out

    @staticmethod
    def _statistic(det: Any) -> float | None:  # replaced per detector by _detector_class
        return None

    # ---- hooks for the check suite ----------------------------------------------------

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        seeded = {"seed": 3} if "seed" in cls.river_defaults else {}
        yield dict(seeded)
        yield {**seeded, "field": "meta.x"}  # vectors of length 3 (see _test_stream)
        yield {**seeded, "field": "meta.x", "restart": True}
        extra = _EXTRA_TEST_PARAMS.get(cls.detector_name or "")
        if extra:
            yield {**seeded, **extra}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 300, seed: int = 0) -> list[dict]:
        rng = np.random.default_rng(seed)
        field = params.get("field", "value")
        dim = 3 if field == "meta.x" else None
        size = (n,) if dim is None else (n, dim)
        if cls.binary:
            p = np.where(np.arange(n) < n // 2, 0.1, 0.6)
            x = (rng.random(size) < (p if dim is None else p[:, None])).astype(int)
        else:
            x = rng.normal(0.0, 1.0, size)
            x[n // 2:] += 3.0
        records = []
        for i in range(n):
            v = int(x[i]) if dim is None and cls.binary else (
                float(x[i]) if dim is None else x[i].tolist())
            rec: dict = {"key": "k", "ts": float(i), "offset": i}
            if field == "meta.x":
                rec["meta"] = {"x": v, "note": "sensor"}
            else:
                rec[field] = v
            records.append(rec)
        return records

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        field = params.get("field", "value")
        vector = field == "meta.x"

        def rec(v: Any) -> dict:
            return {"key": "k", "meta": {"x": v}} if vector else {"key": "k", field: v}

        bad = [rec(float("nan")), rec("abc"), {"key": "k"}, rec([[1.0, 2.0], [3.0]]),
               rec([[1.0, 0.0], [0.0, 1.0]]), rec({"a": 1}), rec(None), "not a record"]
        bad += [rec([1, 0]), rec(1)] if vector else [rec([1.0, 0.0]), rec(float("inf"))]
        if cls.binary:
            bad += [rec([0.5, 1, 0]) if vector else rec(0.5), rec([2, 0, 1]) if vector
                    else rec(2)]
        return bad


_EXTRA_TEST_PARAMS: dict[str, dict] = {
    "ADWIN": {"delta": 0.01, "clock": 8},
    "KSWIN": {"alpha": 0.01, "window_size": 60, "stat_size": 20},
    "PageHinkley": {"threshold": 10.0, "mode": "up", "min_instances": 10},
    "DummyDriftDetector": {"trigger_method": "random", "t_0": 50, "w": 20},
    "DDM": {"warm_start": 10},
    "EDDM": {"warm_start": 10},
    "FHDDM": {"sliding_window_size": 40, "short_window_size": 10},
    "HDDMA": {"two_sided_test": True},
    "HDDMW": {"two_sided_test": True, "lambda_val": 0.1},
}


register_prefix("river", _detector_class, river_detector_names)
