"""Records and dead letters: the values every package passes around.

This is the ground floor: it imports nothing else from shiftwatch, and sources and sinks import
nothing from :mod:`shiftwatch.operators` but this module.

A record is a small JSON-serialisable mapping::

    {"key": "sensor-17", "ts": 1712345678.25, "value": 0.3, "y": None, "task": None, "meta": {}}

The runtime adds ``offset`` (the position of the record in its source or partition); operators
copy ``key``, ``ts``, ``offset``, ``y`` and ``task`` into their outputs so that a downstream
sink can score them.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["PASSTHROUGH_FIELDS", "MAX_ABS", "MAX_RECORDS", "MAX_WINDOW", "MAX_DIM", "BadInput",
           "DeadLetter", "get_field", "as_scalar", "as_array", "numeric_ts", "reason_kind"]


#: Fields that travel from an input record to the outputs it produces.
PASSTHROUGH_FIELDS = ("key", "ts", "offset", "y", "task")

#: The largest magnitude of a number :func:`as_scalar` and :func:`as_array` accept (the
#: default of their ``max_abs``, and of every operator's, see
#: :attr:`~shiftwatch.operators.contract.Operator.max_abs`). Operators square and multiply
#: values (variances, distances, matrix products); the square of 1e150 is 1e300, near the
#: float64 limit of 1.8e308, so a larger value can make an operator's state infinite or NaN
#: (a detector that then never alarms) rather than a result. No measurement comes near it.
MAX_ABS = 1e150

#: The longest burn-in (records) an operator accepts: past it a run could not alarm on
#: anything a replay holds, and a window that long of one scalar already holds 80 MB.
MAX_RECORDS = 10_000_000
#: The longest window of vectors (records) kept whole (``window_covariance``, ...): with the
#: vectors' length d it holds 8 d bytes a record.
MAX_WINDOW = 1_000_000
#: The largest dimension an operator builds (an embedding's length, a vector's coordinates
#: of one feature): its covariance holds 8 d**2 bytes (4096: 128 MiB).
MAX_DIM = 4096


# --------------------------------------------------------------------------------------
# Bad input and dead letters
# --------------------------------------------------------------------------------------


class BadInput(ValueError):
    """Raised by a source or an operator for one record it cannot take.

    The operator's state is left exactly as it was before the record. The runner turns the
    exception into a :class:`DeadLetter` and goes on with the next record.
    """


@dataclass
class DeadLetter:
    """A record that could not be processed, with why and where it came from.

    Parameters
    ----------
    raw
        The original input: a line of text, the bytes of a Kafka message (decoded as UTF-8
        with replacement), or the record mapping.
    reason
        One line saying what was wrong.
    origin
        Where it came from, e.g. ``{"file": "x.csv", "line": 12}`` or
        ``{"operator": "river:ADWIN", "key": "s1", "offset": 7}``.

    Examples
    --------
    >>> DeadLetter(raw="1,abc", reason="value: 'abc' is not a number",
    ...            origin={"file": "x.csv", "line": 3}).to_record()["reason"]
    "value: 'abc' is not a number"
    """

    raw: Any
    reason: str
    origin: dict = field(default_factory=dict)

    def to_record(self) -> dict:
        """The one dead-letter schema, the same in a replay's file and on a Kafka topic.

        ``{"dead_letter": true, "reason", "operator", "key", "origin", "raw", "raw_base64"}``:
        ``operator`` and ``key`` (taken out of ``origin``) say which operator rejected which
        record key (None when the input was rejected before any operator); ``origin`` says
        where the input was (``{file, line}`` or ``{topic, partition, offset}``, plus the
        runner's ``offset``); ``raw`` is the input as text (or the record it became), and
        ``raw_base64`` its exact bytes when it was text or bytes.

        >>> DeadLetter(b"{x", "invalid JSON", {"topic": "t", "partition": 0, "offset": 5}
        ...            ).to_record()
        {'dead_letter': True, 'reason': 'invalid JSON', 'operator': None, 'key': None, \
'origin': {'topic': 't', 'partition': 0, 'offset': 5}, 'raw': '{x', 'raw_base64': 'e3g='}
        """
        import base64

        origin = dict(self.origin)
        operator = origin.pop("operator", None)
        key = origin.pop("key", None)
        raw = self.raw
        exact = None
        if isinstance(raw, str):
            exact = raw.encode("utf-8", errors="surrogatepass")
        elif isinstance(raw, (bytes, bytearray)):
            exact = bytes(raw)
            raw = exact.decode("utf-8", errors="replace")
        out = {"dead_letter": True, "reason": self.reason, "operator": operator, "key": key,
               "origin": origin, "raw": raw}
        for name in ("key", "raw"):
            try:
                json.dumps(out[name], allow_nan=False)
            except (TypeError, ValueError):
                out[name] = repr(out[name])
        if exact is not None:
            out["raw_base64"] = base64.b64encode(exact).decode("ascii")
        return out


# --------------------------------------------------------------------------------------
# Record helpers
# --------------------------------------------------------------------------------------

_MISSING = object()


def get_field(record: Mapping, path: str, default: Any = _MISSING) -> Any:
    """Read ``path`` (dotted for nested mappings: ``"meta.temp"``) from ``record``.

    Raises :class:`BadInput` when the field is missing and no default is given.

    >>> get_field({"value": 1.5, "meta": {"t": 2}}, "meta.t")
    2
    """
    if not isinstance(record, Mapping):
        raise BadInput(f"record is a {type(record).__name__}, not a mapping")
    cur: Any = record
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            if default is not _MISSING:
                return default
            raise BadInput(f"record has no field {path!r}")
    return cur


def _too_large(name: str, x: float, max_abs: float) -> BadInput:
    return BadInput(f"{name} {x:.3g} is beyond the magnitude limit max_abs={max_abs:.3g}")


def _not_a_number(name: str, value: Any) -> BadInput:
    if isinstance(value, (bool, np.bool_)):
        what = f"a boolean ({str(bool(value)).lower()})"
    else:
        try:
            float(value)
        except ValueError:  # not a number however it is read
            return BadInput(f"{name} {str(value)[:40]!r} is not a number")
        what = f"a string {str(value)[:40]!r}"
    return BadInput(f"{name} is {what}, expected a number (a JSON number; the source option "
                    f"loose=true reads numeric strings and booleans as numbers)")


def _has_text_or_bool(value: Any, depth: int = 0) -> bool:
    """Whether a (nested) list holds a string or a boolean (cheap: one set of types per list)."""
    types = set(map(type, value))
    if str in types or bool in types or np.bool_ in types or np.str_ in types:
        return True
    if (list in types or tuple in types) and depth < 64:
        return any(_has_text_or_bool(v, depth + 1) for v in value
                   if type(v) is list or type(v) is tuple)
    return False


def as_scalar(value: Any, name: str = "value", max_abs: float = MAX_ABS, *,
              loose: bool = False) -> float:
    """Return ``value`` as a finite float of magnitude at most ``max_abs`` (default
    :data:`MAX_ABS`) or raise :class:`BadInput`.

    A number is a number: a string (``"1e5"``) or a boolean (``true``) is refused unless
    ``loose`` (a CSV cell is text by nature: the CSV source reads it loosely).

    >>> as_scalar(2.5), as_scalar("2.5", loose=True)
    (2.5, 2.5)
    >>> as_scalar("1e5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: value is a string '1e5', expected a number (a JSON number; ...
    >>> as_scalar(float("nan"))
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: value is not finite: nan
    >>> try:
    ...     as_scalar(-1e300)
    ... except BadInput as exc:
    ...     print(exc)
    value -1e+300 is beyond the magnitude limit max_abs=1e+150
    """
    if isinstance(value, (bool, np.bool_)):
        if not loose:
            raise _not_a_number(name, value)
        return float(value)
    if isinstance(value, numbers.Real):
        try:
            x = float(value)
        except (OverflowError, TypeError, ValueError):  # e.g. an int beyond float range
            raise BadInput(f"{name} is too large for a float") from None
    elif isinstance(value, str):
        if not loose:
            raise _not_a_number(name, value)
        try:
            x = float(value)
        except ValueError:
            raise BadInput(f"{name} {value[:40]!r} is not a number") from None
    elif isinstance(value, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(value, dtype=object)
        except ValueError:  # ragged nesting
            raise BadInput(f"{name} is a ragged nested list, expected a number") from None
        if arr.size != 1:
            raise BadInput(f"{name} has shape {arr.shape}, expected a number")
        item = arr.reshape(-1)[0]
        if isinstance(item, (list, tuple, np.ndarray)):  # nested beyond NumPy's 64 dimensions
            raise BadInput(f"{name} is a nested list, expected a number")
        return as_scalar(item, name, max_abs, loose=loose)
    else:
        raise BadInput(f"{name} must be a number, got {type(value).__name__}")
    if -max_abs <= x <= max_abs:
        return x
    if not math.isfinite(x):
        raise BadInput(f"{name} is not finite: {x}")
    raise _too_large(name, x, max_abs)


def as_array(value: Any, ndim: int | None = None, shape: tuple | None = None,
             name: str = "value", max_abs: float = MAX_ABS, *, loose: bool = False
             ) -> np.ndarray:
    """Return ``value`` as a finite float64 array of the given rank/shape, every entry of
    magnitude at most ``max_abs`` (default :data:`MAX_ABS`), or raise BadInput.

    ``shape`` entries may be ``None`` for "any length". Strings and booleans among the
    entries are refused unless ``loose`` (see :func:`as_scalar`).

    >>> as_array([1, 2, 3], ndim=1).tolist()
    [1.0, 2.0, 3.0]
    >>> as_array([[1, 2]], shape=(2, 2))
    Traceback (most recent call last):
    ...
    shiftwatch.records.BadInput: value has shape (1, 2), expected (2, 2)
    """
    if not loose:
        if type(value) is list or type(value) is tuple:
            if _has_text_or_bool(value):
                raise BadInput(f"{name} holds a string or a boolean, expected numbers (the "
                               f"source option loose=true reads them as numbers)")
        elif isinstance(value, np.ndarray) and value.dtype.kind not in "fiu":
            if value.dtype.kind in "bUS" or (value.dtype.kind == "O" and _has_text_or_bool(
                    value.reshape(-1).tolist())):
                raise BadInput(f"{name} holds a string or a boolean, expected numbers (the "
                               f"source option loose=true reads them as numbers)")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{name} is not a numeric array") from None
    if ndim is not None and arr.ndim != ndim:
        raise BadInput(f"{name} has {arr.ndim} dimensions, expected {ndim}")
    if shape is not None:
        if arr.ndim != len(shape) or any(
                s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)):
            want = tuple("*" if s is None else s for s in shape)
            raise BadInput(f"{name} has shape {arr.shape}, expected {want}".replace("'", ""))
    if not (np.abs(arr) <= max_abs).all():
        if not np.isfinite(arr).all():
            raise BadInput(f"{name} contains NaN or infinite entries")
        raise _too_large(name, float(arr.flat[np.argmax(np.abs(arr))]), max_abs)
    return arr


def numeric_ts(record: Mapping) -> float | None:
    """The record's ``ts`` as a float if it is a number (not a bool) a float can hold, else
    None.

    Detectors keep it with each value so that an alarm can say ``change_ts``.

    >>> numeric_ts({"ts": 3}), numeric_ts({"ts": "2026-01-01"}), numeric_ts({"ts": True})
    (3.0, None, None)
    >>> numeric_ts({"ts": 10 ** 400}) is None
    True
    """
    ts = record.get("ts") if isinstance(record, Mapping) else None
    if isinstance(ts, (int, float, np.integer, np.floating)) and not isinstance(ts, bool):
        try:
            return float(ts)
        except OverflowError:  # an integer beyond float range
            return None
    return None


def reason_kind(reason: str, width: int = 80) -> str:
    """A dead letter's reason without the value that varies, for counting reasons by kind.

    Drops what follows ``", got "`` and quoted values, and cuts between words.

    >>> reason_kind("river:HDDMA takes 0/1 or booleans (1 = error), got 0.1257")
    'river:HDDMA takes 0/1 or booleans (1 = error)'
    >>> reason_kind("temp 'oops' is not a number")
    "temp '...' is not a number"
    """
    import re

    short = reason.split("\n")[0].split(", got ")[0]
    short = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", short).strip()
    if len(short) > width:
        short = short[:width].rsplit(" ", 1)[0] + " ..."
    return short
