"""The base class of the manifolds (:class:`Manifold`) and shared argument helpers.
"""

from __future__ import annotations

import numpy as np

from shiftwatch.records import BadInput

__all__ = ["Manifold"]



class Manifold:
    """Base class: the kernels of one geometry plus point validation.

    Subclasses set ``kind`` (the key of the Karcher step kernels) and implement
    :meth:`validate`, :meth:`point_shape` and the five geometric methods.
    """

    kind: str = ""
    #: Relative tolerance of the membership tests (symmetry, orthonormality, unit norm).
    atol: float = 1e-6

    def _params(self) -> dict:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._params() == self._params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self._params().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def point_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def belongs(self, x: object) -> bool:
        """True when ``x`` is a point of the manifold (within ``atol``)."""
        try:
            self.validate(x)
        except BadInput:
            return False
        return True

    def validate(self, x: object, name: str = "value") -> np.ndarray:
        """Return ``x`` as a C-contiguous float64 point or raise BadInput saying why not."""
        raise NotImplementedError

    def retract(self, tangent_vec: np.ndarray, base_point: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def step(self, x: np.ndarray, base_point: np.ndarray, fraction: float,
             retraction: bool = False) -> np.ndarray:
        """``R_P(fraction * Log_P(X))``: the Karcher-mean stochastic gradient step."""
        tangent = fraction * self.log(x, base_point)
        if retraction:
            return self.retract(tangent, base_point)
        return self.exp(tangent, base_point)


def as_f64(a: object) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def check_int(name: str, v: object, low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
