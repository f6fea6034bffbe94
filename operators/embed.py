"""``embed``: delay embedding of a scalar stream, y_t -> (y_t, y_{t-tau}, ..., y_{t-(d-1) tau}).

With ``d="auto"`` the period P is chosen once, on the burn-in
(:func:`~shiftwatch.operators.period.progressive_period`),
and ``(d, tau) = embed_params(P, span, dmax)``: the vector covers ``span`` periods with at most
``dmax`` coordinates (a lag tau > 1 decimates a long period, so that a covariance of the
vectors stays small: SPD(d) steps cost O(d^3)). The burn-in values are buffered and, once
the embedding is fixed, emitted as vectors (every position with a full history), so nothing
is lost; before that the operator emits nothing (a stream that ends inside the burn-in is
embedded by :meth:`DelayEmbed.flush` at its end, with the period its values show). With a
given ``d`` (and ``tau``, default 1) there is no burn-in: vectors are emitted from position
(d-1) tau on.

Outputs are the input record with ``value`` replaced by the vector (a list), so that
``window_covariance`` and ``karcher`` can follow. The vector at output ``i`` ends at input
position ``i + (d-1) tau``: add that lag to positions read downstream (``time_scale["lag"]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.period import (
    acf_period,
    checkpoints,
    embed_params,
    progressive_period,
)
from shiftwatch.operators.registry import register
from shiftwatch.records import MAX_DIM, MAX_RECORDS, as_scalar, get_field

__all__ = ["DelayEmbed"]


@register("embed")
class DelayEmbed(Operator):
    """Delay embedding: each number becomes the vector of its last d values (d: burn-in period).

    Parameters
    ----------
    d
        Number of coordinates, or ``"auto"`` (from the burn-in period).
    tau
        Lag between coordinates, or ``"auto"`` (1 when ``d`` is given).
    span, dmax
        With ``d="auto"``: the vector covers ``span`` periods with at most ``dmax`` coordinates.
    burn_in, burn_in_min, min_acf, p_min
        The progressive burn-in of the period rule.
    field
        The record field holding the number.

    Examples
    --------
    >>> out = DelayEmbed(d=3, tau=2).process_batch([{"value": float(i)} for i in range(7)])
    >>> [o["value"] for o in out]
    [[4.0, 2.0, 0.0], [5.0, 3.0, 1.0], [6.0, 4.0, 2.0]]
    """

    input_kind = "number"

    def __init__(self, d: int | str = "auto", tau: int | str = "auto", span: float = 1.0,
                 dmax: int = 16, burn_in: int = 384, burn_in_min: int = 64,
                 min_acf: float = 0.3, p_min: int = 4, field: str = "value"):
        self.d = d
        self.tau = tau
        self.span = span
        self.dmax = dmax
        self.burn_in = burn_in
        self.burn_in_min = burn_in_min
        self.min_acf = min_acf
        self.p_min = p_min
        self.field = field
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        def is_int(v: Any, lo: int) -> bool:
            return not isinstance(v, bool) and isinstance(v, (int, np.integer)) and v >= lo

        if not (self.d == "auto" or (is_int(self.d, 1) and self.d <= MAX_DIM)):
            raise ValueError(f"d must be 'auto' or an integer in [1, {MAX_DIM}], got {self.d!r}")
        if not (self.tau == "auto" or is_int(self.tau, 1)):
            raise ValueError(f"tau must be 'auto' or an integer >= 1, got {self.tau!r}")
        if self.d != "auto" and self.tau == "auto":
            pass  # tau = 1
        if not (isinstance(self.span, (int, float)) and not isinstance(self.span, bool)
                and self.span > 0):
            raise ValueError(f"span must be a positive number, got {self.span!r}")
        for name, lo in (("dmax", 2), ("burn_in_min", 16), ("p_min", 2)):
            if not is_int(getattr(self, name), lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got "
                                 f"{getattr(self, name)!r}")
        if not is_int(self.burn_in, self.burn_in_min) or self.burn_in > MAX_RECORDS:
            raise ValueError(f"burn_in must be an integer in [burn_in_min, {MAX_RECORDS:,}], "
                             f"got {self.burn_in!r}")
        if self.dmax > MAX_DIM or (self.tau != "auto" and self.tau > MAX_RECORDS):
            raise ValueError(f"dmax must be at most {MAX_DIM} and tau at most {MAX_RECORDS:,}, "
                             f"got dmax={self.dmax!r}, tau={self.tau!r}")
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")

    def _reset(self) -> None:
        self._period = 0
        self._d = 0 if self.d == "auto" else int(self.d)
        self._tau = 0 if self.d == "auto" else (1 if self.tau == "auto" else int(self.tau))
        self._burn = np.zeros(0)  # raw values while the embedding is not fixed
        self._burn_records: list[dict] = []  # their passthrough fields
        self._ring = np.zeros(0) if self.d == "auto" else np.zeros((self._d - 1) * self._tau + 1)
        self._count = 0  # values accepted

    @property
    def time_scale(self) -> dict | None:
        if not self._d:
            return None
        return {"period": self._period or None, "d": self._d, "tau": self._tau,
                "lag": (self._d - 1) * self._tau}

    def _vector(self) -> list[float]:
        L = len(self._ring)
        p = self._count - 1
        return [float(self._ring[(p - j * self._tau) % L]) for j in range(self._d)]

    def _push(self, record: Mapping, x: float) -> list[dict]:
        self._ring[self._count % len(self._ring)] = x
        self._count += 1
        if self._count < len(self._ring):
            return []
        return [{**record, "value": self._vector()}]

    def _fix(self, period: int | None = None) -> list[dict]:
        if period is None:
            r = progressive_period(self._burn, self.burn_in_min, self.burn_in, self.p_min,
                                   self.min_acf)
            if r is None:
                return []
            period = int(r[0])
        self._period = int(period)
        d, tau = embed_params(self._period, self.span, self.dmax)
        self._d = d
        self._tau = int(self.tau) if self.tau != "auto" else tau
        self._ring = np.zeros((self._d - 1) * self._tau + 1)
        burn, recs = self._burn, self._burn_records
        self._burn, self._burn_records, self._count = np.zeros(0), [], 0
        out: list[dict] = []
        for rec, x in zip(recs, burn, strict=True):
            out.extend(self._push(rec, float(x)))
        return out

    def process(self, record: Mapping) -> list[dict]:
        x = as_scalar(get_field(record, self.field), name=self.field)
        if self._d:
            return self._push(record, x)
        self._burn = np.append(self._burn, x)
        self._burn_records.append(dict(record))
        if len(self._burn) in checkpoints(self.burn_in_min, self.burn_in):
            return self._fix()
        return []

    def flush(self) -> list[dict]:
        """A stream that ended inside the burn-in: fix the period on what it held (the
        rule of :func:`~shiftwatch.operators.period.acf_period`, at most a quarter of the
        values, else ``p_min``) and emit its vectors, so a short stream still gets outputs."""
        if self._d or not len(self._burn):
            return []
        return self._fix(acf_period(self._burn, self.p_min, max(self.p_min,
                                                                len(self._burn) // 4)))

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {}
        yield {"d": 4, "tau": 3}
