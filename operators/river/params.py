"""Checks of River detectors' parameters before River sees them (``river:NAME``'s ``params``).

Some bad values make River's compiled code panic, others are accepted and never alarm; these
checks turn them into one clear ``ValueError`` naming the parameter.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping
from typing import Any

from shiftwatch.records import MAX_RECORDS, MAX_WINDOW

__all__ = ["PARAM_RANGES", "check_param_ranges", "check_param_type"]


def check_param_type(op_name: str, name: str, value: Any, default: Any) -> None:
    """Reject values River would only trip over later, in ``update``."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{op_name}: {name} must be true or false, got {value!r}")
    elif isinstance(default, numbers.Real):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{op_name}: {name} must be a number, got {value!r}")
        if isinstance(default, int) and not float(value).is_integer():
            raise ValueError(f"{op_name}: {name} must be an integer, got {value!r}")
        if math.isnan(value):
            raise ValueError(f"{op_name}: {name} must be a number, got nan")
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"{op_name}: {name} must be a string, got {value!r}")
    elif name == "seed" and value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        raise ValueError(f"{op_name}: seed must be an integer or None, got {value!r}")


#: Allowed ranges of River's detector parameters, checked before River sees them (some bad
#: values make River's compiled code panic, others are accepted and never alarm). Read from
#: River 0.26's docstrings and code: name -> param -> (low, high, low_closed, high_closed),
#: either bound None for unbounded. Significance levels and confidences are probabilities.
_UNIT_OPEN = (0.0, 1.0, False, False)
_POSITIVE = (0.0, None, False, False)
_NONNEGATIVE = (0.0, None, True, False)
_AT_LEAST_1 = (1, None, True, False)
#: Parameters that size memory or time get an upper bound from their meaning: a window or
#: a wait of records at most MAX_RECORDS (MAX_WINDOW for windows River keeps whole), ADWIN's
#: buckets per level at most 1,000 (River's default is 5; each of its ~log2(n) levels holds
#: max_buckets + 1 of them: 1e9 asked 8 GB of a compiled helper, which aborted the process).
_RECORDS = (0, MAX_RECORDS, True, True)
_RECORDS_1 = (1, MAX_RECORDS, True, True)
PARAM_RANGES: dict[str, dict[str, tuple]] = {
    "ADWIN": {"delta": _UNIT_OPEN, "clock": _RECORDS_1, "max_buckets": (1, 1000, True, True),
              "min_window_length": _RECORDS_1, "grace_period": _RECORDS},
    "PageHinkley": {"min_instances": _RECORDS, "delta": _NONNEGATIVE,
                    "threshold": _POSITIVE, "alpha": (0.0, 1.0, False, True)},
    "KSWIN": {"alpha": _UNIT_OPEN, "window_size": (2, MAX_WINDOW, True, True),
              "stat_size": (1, MAX_WINDOW, True, True)},
    "DummyDriftDetector": {"t_0": _NONNEGATIVE, "w": _NONNEGATIVE},
    "DDM": {"warm_start": _RECORDS, "warning_threshold": _POSITIVE,
            "drift_threshold": _POSITIVE},
    "EDDM": {"warm_start": _RECORDS, "alpha": (0.0, 1.0, False, True),
             "beta": (0.0, 1.0, False, True)},
    "FHDDM": {"sliding_window_size": (1, MAX_WINDOW, True, True),
              "confidence_level": _UNIT_OPEN, "short_window_size": (1, MAX_WINDOW, True, True)},
    "HDDMA": {"drift_confidence": _UNIT_OPEN, "warning_confidence": _UNIT_OPEN},
    "HDDMW": {"drift_confidence": _UNIT_OPEN, "warning_confidence": _UNIT_OPEN,
              "lambda_val": (0.0, 1.0, False, True)},
}


def check_param_ranges(op_name: str, detector: str, values: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the parameter when a value is outside River's range.

    >>> check_param_ranges("river:ADWIN", "ADWIN", {"delta": 5})
    Traceback (most recent call last):
    ...
    ValueError: river:ADWIN: delta must be in (0, 1), got 5
    """
    for name, (lo, hi, lo_closed, hi_closed) in PARAM_RANGES.get(detector, {}).items():
        v = values.get(name)
        if v is None or v is inspect.Parameter.empty or isinstance(v, bool) or not isinstance(
                v, numbers.Real):
            continue  # absent, or wrong type (reported by check_param_type)
        too_low = lo is not None and (v < lo if lo_closed else v <= lo)
        too_high = hi is not None and (v > hi if hi_closed else v >= hi)
        if too_low or too_high or math.isinf(v):
            def g(x: float) -> str:  # 10,000,000 rather than 1e+07
                return f"{int(x):,}" if float(x).is_integer() and abs(x) >= 1000 else f"{x:g}"

            if hi is None:
                rng = f">= {g(lo)}" if lo_closed else f"> {g(lo)}"
            else:
                rng = f"{'[' if lo_closed else '('}{g(lo)}, {g(hi)}{']' if hi_closed else ')'}"
                rng = f"in {rng}"
            raise ValueError(f"{op_name}: {name} must be {rng}, got {v!r}")
    if detector == "KSWIN":
        ws, ss = values.get("window_size"), values.get("stat_size")
        if isinstance(ws, numbers.Real) and isinstance(ss, numbers.Real) and ss >= ws:
            raise ValueError(f"{op_name}: stat_size must be smaller than window_size "
                             f"({ws!r}), got {ss!r}")
    if detector == "EDDM":
        a, b = values.get("alpha"), values.get("beta")
        if isinstance(a, numbers.Real) and isinstance(b, numbers.Real) and a < b:
            raise ValueError(f"{op_name}: alpha (warning) must be >= beta (drift), "
                             f"got alpha={a!r}, beta={b!r}")
