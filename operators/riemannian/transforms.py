"""Input transforms that turn plain sensor vectors into manifold-valued records.

* ``window_covariance`` (:class:`WindowCovariance`): the covariance of the last ``window``
  vectors, shrunk towards a scaled identity so that it is always SPD;
* ``window_subspace`` (:class:`WindowSubspace`): the ``rank`` leading principal directions
  of the last ``window`` vectors, a point of the Grassmannian (n x rank orthonormal basis);
* ``normalize_sphere`` (:class:`NormalizeSphere`): the vector divided by its norm.

Each emits the input record with ``value`` replaced by the manifold point (nested lists), so
``karcher`` placed after it reads ``value``. The window transforms emit nothing until the
window is full, then one point per input (a sliding window; ``stride`` thins them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.registry import register
from shiftwatch.records import MAX_WINDOW, BadInput, as_array, get_field

__all__ = ["WindowCovariance", "WindowSubspace", "NormalizeSphere"]


def _check_window(window: object, minimum: int = 2) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or not \
            minimum <= window <= MAX_WINDOW:
        raise ValueError(f"window must be an integer in [{minimum}, {MAX_WINDOW:,}] (records "
                         f"kept whole), got {window!r}")


def _check_stride(stride: object) -> None:
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")


def _check_field(field: object) -> None:
    if not isinstance(field, str) or not field:
        raise ValueError(f"field must be a non-empty string, got {field!r}")


class _Window(Operator):
    """A sliding window of vectors of fixed length (the length is set by the first one)."""

    input_kind = "vector"

    def _reset(self) -> None:
        self._buffer = np.zeros((0, 0))
        self._seen = 0

    def process(self, record: Mapping) -> list[dict]:
        x = as_array(get_field(record, self.field), ndim=1, name=self.field,
                     max_abs=self.max_abs)
        if x.size < 2:
            raise BadInput(f"{self.field} must be a vector of length >= 2, got {x.size}")
        if self._buffer.shape[1] and x.size != self._buffer.shape[1]:
            raise BadInput(f"{self.field} has length {x.size}, earlier vectors had "
                           f"{self._buffer.shape[1]}")
        self._validate_vector(x)
        buf = self._buffer if self._buffer.shape[1] else np.zeros((0, x.size))
        buf = np.vstack([buf, x[None]])[-self.window:]
        seen = self._seen + 1
        out = []
        if len(buf) == self.window and not (seen - self.window) % self.stride:
            # The point first, the window after: should its computation fail, the state is
            # untouched.
            out = [{**record, "value": self._point(buf)}]
        self._buffer, self._seen = buf, seen
        return out

    def _point(self, buf: np.ndarray) -> list:
        """The manifold point of a full window, as nested lists (BadInput if none)."""
        raise NotImplementedError

    def _validate_vector(self, x: np.ndarray) -> None:
        pass

    @classmethod
    def _test_stream(cls, params: dict, n: int = 120, seed: int = 0) -> list[dict]:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, 4))
        x[n // 2:, 1] += 2.0 * x[n // 2:, 0]
        return [{"key": "k", "ts": float(i), "offset": i, "value": v.tolist()}
                for i, v in enumerate(x)]

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        return [{"key": "k", "value": v} for v in
                ([1.0, float("nan"), 0.0, 0.0], [1.0, 2.0], 3.0, "abc", [[1.0, 2.0]])] + [
                    {"key": "k"}]


@register("window_covariance")
class WindowCovariance(_Window):
    """Sliding-window covariance of a vector stream, shrunk so that it is always SPD.

    The sample covariance ``S`` of the last ``window`` vectors becomes
    ``(1 - shrinkage) S + shrinkage (tr S / d) I + min_eig I``: Ledoit-Wolf style shrinkage
    towards the scaled identity keeps it well conditioned when ``window`` is short, and
    ``min_eig`` keeps it positive definite on constant stretches.

    Parameters
    ----------
    window
        Number of vectors per covariance (>= 2).
    shrinkage
        Weight of the scaled identity, in [0, 1].
    min_eig
        Added to the diagonal (> 0).
    stride
        Emit every ``stride``-th window.
    field
        The record field holding the vector.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> op = WindowCovariance(window=50)
    >>> outs = op.process_batch([{"value": v.tolist()} for v in rng.normal(size=(60, 3))])
    >>> len(outs), np.round(np.array(outs[-1]["value"]).diagonal(), 2).tolist()
    (11, [1.18, 0.76, 0.97])
    """

    def __init__(self, window: int = 50, shrinkage: float = 0.1, min_eig: float = 1e-6,
                 stride: int = 1, field: str = "value"):
        self.window = window
        self.shrinkage = shrinkage
        self.min_eig = min_eig
        self.stride = stride
        self.field = field
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        _check_window(self.window)
        _check_stride(self.stride)
        _check_field(self.field)
        if isinstance(self.shrinkage, bool) or not isinstance(self.shrinkage, (int, float)) \
                or not 0 <= self.shrinkage <= 1:
            raise ValueError(f"shrinkage must be a number in [0, 1], got {self.shrinkage!r}")
        if isinstance(self.min_eig, bool) or not isinstance(self.min_eig, (int, float)) \
                or not self.min_eig > 0:
            raise ValueError(f"min_eig must be a positive number, got {self.min_eig!r}")

    def _point(self, buf: np.ndarray) -> list:
        # (compiled, shared with the replay's columnar path: the same bits either way)
        from shiftwatch.operators.riemannian.window_kernel import cov_windows

        n = buf.shape[0]
        return cov_windows(np.ascontiguousarray(buf, dtype=np.float64),
                           np.array([n], dtype=np.int64), n, float(self.shrinkage),
                           float(self.min_eig))[0].tolist()

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {"window": 20}
        yield {"window": 5, "shrinkage": 0.0, "stride": 3}


@register("window_subspace")
class WindowSubspace(_Window):
    """The ``rank`` leading principal directions of a sliding window, a Grassmann point.

    The window is centred (``center=True``) and its ``rank`` leading right singular vectors
    form a ``d x rank`` orthonormal basis. Signs are fixed (largest-magnitude entry of each
    column positive) so that equal windows give equal bases; the Grassmann geometry does
    not depend on them.

    Parameters
    ----------
    window
        Number of vectors per subspace (>= rank).
    rank
        Subspace dimension (>= 1, < the vector length).
    center
        Subtract the window mean first.
    stride
        Emit every ``stride``-th window.
    field
        The record field holding the vector.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(40, 3)) * np.array([5.0, 1.0, 0.1])
    >>> out = WindowSubspace(window=40, rank=1).process_batch([{"value": v.tolist()} for v in x])
    >>> np.round(np.array(out[0]["value"]).ravel(), 2).tolist()
    [1.0, 0.01, 0.0]
    """

    def __init__(self, window: int = 50, rank: int = 1, center: bool = True, stride: int = 1,
                 field: str = "value"):
        self.window = window
        self.rank = rank
        self.center = center
        self.stride = stride
        self.field = field
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {self.rank!r}")
        _check_window(self.window, max(2, self.rank))
        _check_stride(self.stride)
        _check_field(self.field)
        if not isinstance(self.center, bool):
            raise ValueError(f"center must be true or false, got {self.center!r}")

    def _validate_vector(self, x: np.ndarray) -> None:
        if x.size <= self.rank:
            raise BadInput(f"{self.field} has length {x.size}, must exceed rank={self.rank}")

    def _point(self, buf: np.ndarray) -> list:
        c = buf - buf.mean(axis=0) if self.center else buf
        try:
            _, _, vt = np.linalg.svd(c, full_matrices=False)
        except np.linalg.LinAlgError:  # "SVD did not converge" (not seen on finite input)
            raise BadInput(f"{self.field}: the window's SVD did not converge") from None
        basis = vt[: self.rank].T.copy()
        idx = np.argmax(np.abs(basis), axis=0)
        basis *= np.sign(basis[idx, np.arange(self.rank)])
        return basis.tolist()

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict]:
        yield {"window": 20, "rank": 2}


@register("normalize_sphere")
class NormalizeSphere(Operator):
    """A vector divided by its Euclidean norm: a point of the unit sphere.

    Vectors with norm below ``min_norm`` have no direction and are rejected as bad input.

    Parameters
    ----------
    min_norm
        Smallest norm accepted (> 0).
    field
        The record field holding the vector.

    Examples
    --------
    >>> NormalizeSphere().process({"value": [3.0, 4.0]})[0]["value"]
    [0.6, 0.8]
    """

    input_kind = "vector"

    def __init__(self, min_norm: float = 1e-12, field: str = "value"):
        self.min_norm = min_norm
        self.field = field
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        _check_field(self.field)
        if isinstance(self.min_norm, bool) or not isinstance(self.min_norm, (int, float)) \
                or not self.min_norm > 0:
            raise ValueError(f"min_norm must be a positive number, got {self.min_norm!r}")

    def process(self, record: Mapping) -> list[dict]:
        x = as_array(get_field(record, self.field), ndim=1, name=self.field,
                     max_abs=self.max_abs)
        if x.size < 2:
            raise BadInput(f"{self.field} must be a vector of length >= 2, got {x.size}")
        norm = float(np.linalg.norm(x))
        if norm < self.min_norm:
            raise BadInput(f"{self.field} has norm {norm:.3g} < min_norm, no direction")
        return [{**record, "value": (x / norm).tolist()}]

    _test_stream = _Window._test_stream

    @classmethod
    def _bad_records(cls, params: dict) -> list[dict]:
        return [{"key": "k", "value": v} for v in
                ([0.0, 0.0, 0.0, 0.0], [1.0, float("nan")], 3.0, "abc")] + [{"key": "k"}]
