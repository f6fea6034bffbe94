"""When a record's ``ts`` is a time, and how to show it.

``ts`` is event time in epoch seconds when a source read it from a date column, and the
record's index (0, 1, 2, ...) when there is none (see :mod:`shiftwatch.streams`). Plots, the
HTML report and the console table show ``ts`` as a UTC date and time only when every value
looks like epoch seconds of a plausible date; otherwise they keep positions or the raw number.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["EARLIEST", "LATEST", "is_epoch_seconds", "iso_utc", "time_axis_ts",
           "time_axis_array"]

#: The plausible range for epoch-second timestamps: 1900-01-01 to 2100-01-01 (UTC).
EARLIEST = -2208988800.0
LATEST = 4102444800.0
#: Values below this magnitude (about 3.2 years from 1970-01-01) look like a counter or an
#: index (``ts = 0, 1, 2, ...`` must stay positions). A real time series may cross 1970
#: (yearly data since 1913 does), but spends only a few of its points that close to it.
_INDEX_LIKE = 1e8
_MAX_NEAR_EPOCH = 0.1


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def is_epoch_seconds(values: Iterable[Any]) -> bool:
    """Whether ``values`` (at least one) are all epoch seconds of a plausible date.

    Every value must be a finite number between 1900 and 2100 (so milliseconds are not
    taken for seconds), and at most a tenth of them within about three years of 1970-01-01
    (so an index or a counter, or a mix of indices and dates, is not taken for dates).

    Examples
    --------
    >>> is_epoch_seconds([1767225600.0, 1767225660.0])   # 2026-01-01 00:00 and 00:01
    True
    >>> is_epoch_seconds([0.0, 1.0, 2.0]), is_epoch_seconds([1767225600000])   # index; ms
    (False, False)
    >>> years = [-1798761600.0 + 31557600.0 * i for i in range(105)]   # 1913 .. 2017, yearly
    >>> is_epoch_seconds(years), is_epoch_seconds([12.0, 1712345678.25]), is_epoch_seconds([])
    (True, False, False)
    """
    seen = near = 0
    for v in values:
        f = _number(v)
        if f is None or not EARLIEST <= f < LATEST:
            return False
        seen += 1
        near += abs(f) < _INDEX_LIKE
    return seen > 0 and near <= _MAX_NEAR_EPOCH * seen


def time_axis_ts(values: Iterable[Any]) -> list[float] | None:
    """``values`` as floats when a plot can use them as its time axis, else None.

    They must be epoch seconds (:func:`is_epoch_seconds`), non-decreasing (a key's stream in
    event-time order) and span more than zero seconds.

    >>> time_axis_ts([1767225600, 1767225660.0])
    [1767225600.0, 1767225660.0]
    >>> time_axis_ts([1767225660.0, 1767225600.0]) is None   # out of order: keep positions
    True
    """
    vals = list(values)
    if not is_epoch_seconds(vals):
        return None
    ts = [float(v) for v in vals]
    if any(b < a for a, b in zip(ts[:-1], ts[1:], strict=True)) or ts[-1] <= ts[0]:
        return None
    return ts


def time_axis_array(ts: Any) -> Any:
    """:func:`time_axis_ts` for a NumPy array of floats (NaN for a missing ``ts``), at NumPy
    speed: the array when it can be a time axis, else None.

    >>> import numpy as np
    >>> time_axis_array(np.array([1767225600.0, 1767225660.0])).tolist()
    [1767225600.0, 1767225660.0]
    >>> time_axis_array(np.array([0.0, 1.0, 2.0])) is None   # an index
    True
    """
    import numpy as np

    a = np.asarray(ts, dtype=np.float64)
    if a.size == 0 or not np.isfinite(a).all() or a.min() < EARLIEST or a.max() >= LATEST:
        return None
    if np.count_nonzero(np.abs(a) < _INDEX_LIKE) > _MAX_NEAR_EPOCH * a.size:
        return None
    if (np.diff(a) < 0).any() or a[-1] <= a[0]:
        return None
    return a


def iso_utc(ts: float) -> str:
    """Epoch seconds as ISO-8601 UTC, to the second (milliseconds when there are any).

    >>> iso_utc(1767225600.0), iso_utc(1767225600.25), iso_utc(-1798761600.0)
    ('2026-01-01T00:00:00Z', '2026-01-01T00:00:00.250Z', '1913-01-01T00:00:00Z')
    """
    # From the epoch by timedelta: works before 1970 on every platform (fromtimestamp
    # rejects negative values on Windows).
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=round(ts * 1000))
    if dt.microsecond // 1000:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")

