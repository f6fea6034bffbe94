"""What shiftwatch's detectors share as River drift detectors, so River treats them as its own.

:class:`RiverDriftDetector` is the base class of ``ConfSeqDetector``, ``KarcherDetector`` and
``ShapeDetector``: River's :class:`river.base.DriftDetector` plus

* ``clone(include_attributes=True)`` carries the learned state, as River's own detectors
  (ADWIN, PageHinkley, ...) do and River's models rely on: they clone detectors internally.
  River's generic clone copies each attribute by itself, which breaks a detector whose
  state arrays are views of one buffer; here the clone gets a copy of the state through
  ``state_dict`` / ``load_state_dict`` (the round trip the operators' checks test).
* ``_tags`` and ``_unit_test_skips``, which River's generic checks (``river.checks``) read
  and River's drift detectors lack, so ``river.checks.check_estimator(detector)`` runs.
* :func:`real_number`: ``update`` takes what River's ADWIN takes (a real number: anything
  with ``__float__`` or ``__index__``) and refuses the rest with a ``TypeError`` as ADWIN
  does (``"1.0"``, ``None``, ``b"1"``, a complex number): :class:`NotANumber` is both that
  ``TypeError`` and shiftwatch's :class:`~shiftwatch.records.BadInput`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from river import base as river_base

from shiftwatch.records import BadInput

__all__ = ["RiverDriftDetector", "NotANumber", "real_number", "refuse_text"]


class NotANumber(BadInput, TypeError):
    """A value that is not a real number, given to a detector's ``update``: a ``TypeError``
    for River's users (as River's ADWIN raises) and a ``BadInput`` (a dead letter) for
    shiftwatch's runtime."""


def real_number(x: Any, who: str) -> Any:
    """``x`` as a float when River's detectors would take it as a number (a NumPy array
    unchanged, for the caller's shape checks), else :class:`NotANumber` naming ``who``.

    A real number is what Python's C API takes as a float (``__float__`` or ``__index__``:
    ``int``, ``float``, NumPy scalars and one-element arrays, ``Decimal``, ``Fraction``,
    ``bool``); text, bytes, ``None`` and complex numbers are not, even ``"1.0"``.

    >>> real_number(2, "cs"), real_number(True, "cs")
    (2.0, 1.0)
    >>> real_number("1.0", "cs")
    Traceback (most recent call last):
    ...
    shiftwatch.operators.drift_detector.NotANumber: cs: update takes a real number, not str \
('1.0'), as River's detectors do
    """
    if type(x) is float:
        return x
    kind = type(x)
    if isinstance(x, (str, bytes, bytearray, numbers.Complex)) and not isinstance(
            x, numbers.Real) or not (hasattr(kind, "__float__") or hasattr(kind, "__index__")):
        shown = repr(x) if isinstance(x, (str, bytes, bytearray)) else None
        raise NotANumber(f"{who}: update takes a real number, not {kind.__name__}"
                         + (f" ({shown[:40]})" if shown else "") + ", as River's detectors do")
    if hasattr(x, "shape"):  # an array (a one-element one is a number, as for River)
        return x
    try:
        return float(x)
    except OverflowError:
        raise BadInput(f"{who}: value is too large for a float") from None


def refuse_text(x: Any, who: str) -> None:
    """:class:`NotANumber` for text, bytes, ``None`` or an array of text given to a detector
    that takes vectors or matrices (NumPy would read ``["1.0", "2"]`` as numbers; River's
    detectors do not)."""
    if x is None or isinstance(x, (str, bytes, bytearray)):
        what = type(x).__name__
    else:
        try:
            kind = np.asarray(x).dtype.kind
        except (TypeError, ValueError):  # ragged and the like: the caller's checks say so
            return
        if kind not in "USV":
            return
        what = "an array of text"
    raise NotANumber(f"{who}: update takes numbers, not {what}, as River's detectors do")


class RiverDriftDetector(river_base.DriftDetector):
    """River's drift detector with the learned state carried by ``clone(include_attributes=
    True)`` and what River's generic checks read (see the module docstring). Subclasses
    define ``state_dict()`` and ``load_state_dict(state)``."""

    def clone(self, new_params: dict | None = None, include_attributes: bool = False):
        """A fresh detector with the same parameters (``new_params`` replaced); with
        ``include_attributes`` it also has this one's learned state (a copy)."""
        twin = super().clone(new_params)
        if include_attributes:
            twin.load_state_dict(self.state_dict())
        return twin

    @property
    def _tags(self) -> set[str]:
        return set()

    def _unit_test_skips(self) -> set[str]:
        return set()
