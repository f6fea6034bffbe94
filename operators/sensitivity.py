"""What a detector's parameters promise: the one that trades false alarms for detection
delay (its sensitivity), and the records a key needs before it can alarm at all (its warm-up).

Each detector operator declares it as a class attribute, ``sensitivity = Sensitivity(...)``;
River's detectors get theirs from :data:`RIVER_SENSITIVITY` through the adapter.
``shiftwatch calibrate`` (:mod:`shiftwatch.deploy.calibrate`) reads the declaration with
:func:`sensitivity_of` and searches the range for a false-alarm budget.

This module imports nothing heavy (no NumPy), so the registry may import it freely.

**Warm-ups** (:func:`warm_up_of`; ``Operator.warm_up()``). A replay's report counts the
keys with fewer records than the scoring detector's warm-up (``short_keys`` in
``report.json``, a line in ``report.html`` and on the console): on those keys the detector
could not alarm, whatever the data, so "no alarm" there says nothing.

Each number is a lower bound read from the detector's parameters (its own documented rule),
never a guess at the detection delay:

* ``cs``: ``burn_in`` (no alarm during the burn-in).
* ``shape``: ``burn_in_min`` records (the first period checkpoint; alarms of the burn-in
  are reported on the record that completes it) and at least ``2 * min_blocks`` blocks of
  ``block`` periods of the smallest period (``p_min``, or the given ``period``).
* ``karcher``: the detector's burn-in (``burn_in_length``) plus ``calibration`` when the
  threshold is ``"calibrated"`` (575 records at the defaults).
* River's ADWIN: ``max(clock, grace_period)`` (it checks for a change every ``clock``
  records, after ``grace_period``); PageHinkley: ``min_instances``; KSWIN: ``window_size``
  (a full window). Other River detectors: no bound known (None).
* ``auto``: the smaller of its two routes' (the level detector runs from the first record).

In a chain, the last detector's warm-up counts the records it receives; every shipped
transform emits at most one output per record, so it stays a lower bound on the key's records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Sensitivity", "RIVER_SENSITIVITY", "sensitivity_of", "warm_up_of", "RIVER_WARM_UP"]

_DIRECTIONS = ("larger", "smaller")
_GUARANTEES = (None, "arl>=1/value")


@dataclass(frozen=True)
class Sensitivity:
    """A detector's sensitivity parameter: its name, direction and search range.

    Parameters
    ----------
    param
        The constructor parameter, e.g. ``"alpha"``.
    more_alarms
        ``"larger"`` if larger values give more alarms (a level ``alpha``, ADWIN's
        ``delta``), ``"smaller"`` if smaller values do (a threshold).
    low, high
        The search range, ``low < high``.
    log
        Search on a log scale (for levels spanning decades); needs ``low > 0``.
    integer
        The parameter takes integers.
    guarantee
        The detector's own promise where it has one: ``"arl>=1/value"`` means that without
        change the average run length is at least ``1 / value`` records (``cs``), i.e. at
        most ``value`` false alarms per record in the long run.
    guarantee_when
        Parameter values under which the guarantee holds (e.g. ``{"pfa": False}``).

    Examples
    --------
    >>> s = Sensitivity("threshold", more_alarms="smaller", low=1.0, high=100.0)
    >>> s.grid(3)
    [100.0, 10.0, 1.0]
    >>> s.more_sensitive(5.0, 20.0)
    True
    """

    param: str
    more_alarms: str
    low: float
    high: float
    log: bool = True
    integer: bool = False
    guarantee: str | None = None
    guarantee_when: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.param, str) or not self.param:
            raise ValueError(f"param must be a non-empty string, got {self.param!r}")
        if self.more_alarms not in _DIRECTIONS:
            raise ValueError(f"more_alarms must be 'larger' or 'smaller', got "
                             f"{self.more_alarms!r}")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"low < high must be finite numbers, got {self.low!r}, "
                             f"{self.high!r}")
        if self.log and self.low <= 0:
            raise ValueError(f"low must be > 0 on a log scale, got {self.low!r}")
        if self.guarantee not in _GUARANTEES:
            raise ValueError(f"guarantee must be one of {_GUARANTEES}, got {self.guarantee!r}")

    # ---- the search space, from the least to the most sensitive value ---------------

    def _to_unit(self, v: float) -> float:
        """Position of ``v`` in [0, 1]: 0 the least, 1 the most sensitive end."""
        lo, hi, x = ((math.log(self.low), math.log(self.high), math.log(v)) if self.log
                     else (self.low, self.high, v))
        u = (x - lo) / (hi - lo)
        return u if self.more_alarms == "larger" else 1.0 - u

    def _from_unit(self, u: float) -> float:
        if self.more_alarms == "smaller":
            u = 1.0 - u
        if self.log:
            v = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            v = self.low + u * (self.high - self.low)
        v = min(max(v, self.low), self.high)
        # Six significant digits: readable in tables and configs, far finer than the search.
        return float(round(v)) if self.integer else float(f"{v:.6g}")

    def grid(self, n: int) -> list[float]:
        """``n >= 2`` values spanning the range, from the least to the most sensitive."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"n must be an integer >= 2, got {n!r}")
        return [self._from_unit(i / (n - 1)) for i in range(n)]

    def between(self, a: float, b: float) -> float:
        """The midpoint of ``a`` and ``b`` on the search scale (geometric if ``log``)."""
        return self._from_unit(0.5 * (self._to_unit(a) + self._to_unit(b)))

    def more_sensitive(self, a: float, b: float) -> bool:
        """Whether value ``a`` gives more alarms than ``b``."""
        return a > b if self.more_alarms == "larger" else a < b

    def guaranteed_rate(self, value: float, params: Mapping[str, Any]) -> float | None:
        """False alarms per record the detector promises at ``value``, or None."""
        if self.guarantee is None:
            return None
        if any(params.get(k, v) != v for k, v in self.guarantee_when.items()):
            return None
        return float(value)  # "arl>=1/value": at most one false alarm per 1/value records

    def to_dict(self) -> dict:
        return {"param": self.param, "more_alarms": self.more_alarms, "low": self.low,
                "high": self.high, "log": self.log, "integer": self.integer,
                "guarantee": self.guarantee, "guarantee_when": dict(self.guarantee_when)}


#: River's detectors, from River's parameter documentation. The binary detectors (DDM, ...)
#: take 0/1 error indicators; their levels are in the same direction as the others.
RIVER_SENSITIVITY: dict[str, Sensitivity] = {
    # delta: confidence value; a larger delta cuts the window more readily.
    "ADWIN": Sensitivity("delta", more_alarms="larger", low=1e-100, high=0.99),
    # threshold: the cumulative-sum level that triggers a change.
    "PageHinkley": Sensitivity("threshold", more_alarms="smaller", low=1.0, high=1000.0),
    # alpha: probability for the Kolmogorov-Smirnov test (p-value below alpha -> drift).
    "KSWIN": Sensitivity("alpha", more_alarms="larger", low=1e-100, high=0.2),
    "DDM": Sensitivity("drift_threshold", more_alarms="smaller", low=1.0, high=10.0,
                       log=False),
    "EDDM": Sensitivity("alpha", more_alarms="larger", low=0.5, high=0.999, log=False),
    "FHDDM": Sensitivity("confidence_level", more_alarms="larger", low=1e-12, high=0.1),
    "HDDMA": Sensitivity("drift_confidence", more_alarms="larger", low=1e-10, high=0.1),
    "HDDMW": Sensitivity("drift_confidence", more_alarms="larger", low=1e-10, high=0.1),
}


def sensitivity_of(name: str) -> Sensitivity | None:
    """The sensitivity parameter the operator registered as ``name`` declares, or None.

    >>> sensitivity_of("river:ADWIN").param, sensitivity_of("cs").param
    ('delta', 'alpha')
    >>> sensitivity_of("standardize") is None
    True
    """
    from shiftwatch.operators import resolve

    ctor = resolve(name)
    sens = getattr(ctor, "sensitivity", None)
    return sens if isinstance(sens, Sensitivity) else None


#: River detectors whose parameters bound their first alarm: name -> f(parameters).
RIVER_WARM_UP = {
    "ADWIN": lambda p: max(int(p["clock"]), int(p["grace_period"])),
    "PageHinkley": lambda p: int(p["min_instances"]),
    "KSWIN": lambda p: int(p["window_size"]),
}


def _shape(p: dict) -> int:
    smallest = p["period"] if isinstance(p["period"], int) else p["p_min"]
    return max(int(p["burn_in_min"]), math.ceil(2 * p["min_blocks"] * p["block"] * smallest))


def warm_up_of(op: Any) -> int | None:
    """The records a key needs before ``op`` can alarm, or None (not a detector, or no
    bound known). ``op`` is an operator, or a ``Keyed`` one.

    >>> from shiftwatch.operators import create
    >>> warm_up_of(create("river:ADWIN")), warm_up_of(create("cs")), warm_up_of(create("shape"))
    (32, 30, 64)
    >>> warm_up_of(create("karcher")), warm_up_of(create("auto"))
    (575, 32)
    >>> warm_up_of(create("standardize")) is None
    True
    """
    op = getattr(op, "operator", op)  # Keyed holds its template operator
    name = getattr(op, "name", "") or ""
    if not hasattr(op, "all_params"):
        return None
    p = op.all_params()
    if name == "cs":
        return int(p["burn_in"])
    if name == "shape":
        return _shape(p)
    if name == "karcher":
        det = getattr(op, "_detector", None)  # KarcherDetector: its burn-in, derived or given
        burn = det.burn_in_length if det is not None else (p.get("burn_in") or 0)
        return int(burn) + (int(p["calibration"]) if p.get("threshold") == "calibrated" else 0)
    own = getattr(op, "_own_warm_up", None)  # a composite says itself (auto)
    if callable(own):
        return own()
    if name.startswith("river:"):
        rule = RIVER_WARM_UP.get(name.partition(":")[2])
        return rule(p) if rule is not None else None
    return None
