"""Input transforms: operators that rewrite a record's value for the detectors after them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.registry import register
from shiftwatch.records import MAX_RECORDS, BadInput, as_array, get_field

__all__ = ["Standardize"]


@register("standardize")
class Standardize(Operator):
    """Standardise values with a location and scale learned on a burn-in, then frozen.

    Real sensor series come with unknown units and scales, while the default thresholds of
    many detectors (Page-Hinkley's 50, a sub-Gaussian ``sigma``) assume a known scale. This
    operator estimates the mean and standard deviation of each coordinate on the first
    ``burn_in`` values (Welford's recursion) and from then on emits
    ``(x - mean) / std`` with the estimates frozen, so that a change after the burn-in is
    not absorbed into the scale. During the burn-in it emits the value standardised with
    the running estimates (``burn_in=True`` in the output) or nothing, as ``emit_burn_in``
    says. Outputs are the input record with ``value`` replaced by the standardised value
    (whatever ``field`` was read), so that detectors after it read ``value``.

    Parameters
    ----------
    field
        The record field holding a number or a vector (dotted path allowed).
    burn_in
        Number of values the scale is estimated on (>= 2).
    emit_burn_in
        Emit records during the burn-in (standardised with the running estimates). With
        False, nothing is emitted until the scale is frozen.
    min_std
        Floor on the standard deviation, so that a constant burn-in does not divide by 0.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> op = Standardize(burn_in=100)
    >>> outs = op.process_batch([{"value": 10 + 5 * v} for v in rng.normal(size=200)])
    >>> z = np.array([o["value"] for o in outs[100:]])
    >>> bool(abs(z.mean()) < 0.3 and abs(z.std() - 1) < 0.2)
    True
    """

    input_kind = "number or vector"

    def __init__(self, field: str = "value", burn_in: int = 30, emit_burn_in: bool = True,
                 min_std: float = 1e-9):
        self.field = field
        self.burn_in = burn_in
        self.emit_burn_in = emit_burn_in
        self.min_std = min_std
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, int) or not \
                2 <= self.burn_in <= MAX_RECORDS:
            raise ValueError(f"burn_in must be an integer in [2, {MAX_RECORDS:,}] (records), "
                             f"got {self.burn_in!r}")
        if not isinstance(self.emit_burn_in, bool):
            raise ValueError(f"emit_burn_in must be true or false, got {self.emit_burn_in!r}")
        if not (isinstance(self.min_std, (int, float)) and self.min_std > 0):
            raise ValueError(f"min_std must be a positive number, got {self.min_std!r}")

    def _reset(self) -> None:
        self._n = 0
        self._mean: np.ndarray | None = None
        self._m2: np.ndarray | None = None
        self._shape: list[int] | None = None

    def process(self, record: Mapping) -> list[dict]:
        raw = get_field(record, self.field)
        x = as_array(raw, name=self.field, max_abs=self.max_abs)
        if x.ndim > 1:
            raise BadInput(f"{self.field} must be a number or a vector, got shape {x.shape}")
        if self._shape is not None and list(x.shape) != self._shape:
            raise BadInput(f"{self.field} has shape {tuple(x.shape)}, "
                           f"earlier values had {tuple(self._shape)}")
        if self._shape is None:
            self._shape = list(x.shape)
            self._mean = np.zeros_like(x)
            self._m2 = np.zeros_like(x)
        burning = self._n < self.burn_in
        if burning:
            self._n += 1
            delta = x - self._mean
            self._mean = self._mean + delta / self._n
            self._m2 = self._m2 + delta * (x - self._mean)
            if not self.emit_burn_in:
                return []
        var = self._m2 / max(self._n - 1, 1)
        z = (x - self._mean) / np.maximum(np.sqrt(var), self.min_std)
        value = float(z) if z.ndim == 0 else z.tolist()
        out = {**record, "value": value}
        if burning:
            out["burn_in"] = True
        return [out]

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {"burn_in": 20}
        yield {"burn_in": 5, "emit_burn_in": False}
