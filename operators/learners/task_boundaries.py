"""Where a continual learner's tasks begin: a change of the record's ``task`` field, an alarm
(a record's ``alarm`` field or a change detector run inside), or the first sight of a label.

Examples
--------
>>> tb = TaskBoundaries("label", min_task_length=2)
>>> tb.start(None)
>>> tb.records = 2
>>> tb.is_boundary(y=5, task=None, alarm=None, known_labels=[0, 1])
True
>>> tb.is_boundary(y=1, task=None, alarm=None, known_labels=[0, 1])
False
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shiftwatch.operators.registry import create

__all__ = ["TaskBoundaries", "BOUNDARIES", "check_inner_detector"]

BOUNDARIES = ("auto", "task", "label", "alarm")


class TaskBoundaries:
    """The current task of a learner and the rule that says when the next one begins.

    ``mode`` is ``"task"`` (the ``task`` field changed), ``"alarm"`` (a truthy ``alarm``),
    ``"label"`` (a label not seen before) or ``"auto"`` (``task`` when the record has it, else
    ``alarm`` when it has that field, else new labels). Alarms and new labels within the first
    ``min_task_length`` training records of a task do not open another one. ``detector`` names
    a registered change detector run on every training record (:meth:`alarm_of`); its alarms
    count as the record's ``alarm``.

    State: ``index`` (1-based index of the current or last closed task), ``open``,
    ``task_id`` (the ``task`` value that opened it), ``records`` (training records in it) and
    the inner detector.
    """

    def __init__(self, mode: str, min_task_length: int, detector: str | None = None,
                 detector_params: Mapping[str, Any] | None = None) -> None:
        self.mode = mode
        self.min_task_length = min_task_length
        self.detector = (None if detector is None
                         else create(detector, **dict(detector_params or {})))
        self.index = 0
        self.open = False
        self.task_id: Any = None
        self.records = 0

    def alarm_of(self, record: Mapping, alarm: bool | None) -> bool | None:
        """The record's alarm, or-ed with the inner detector's (which sees this record)."""
        if self.detector is None:
            return alarm
        # The detector raises BadInput (its state unchanged) before anything else changes.
        found = any(o.get("alarm") for o in self.detector.process(record))
        return bool(alarm) or found

    def is_boundary(self, y: Any, task: Any, alarm: bool | None,
                    known_labels: Sequence) -> bool:
        """Whether a training record with label ``y``, ``task`` and ``alarm`` opens a task."""
        mode = self.mode
        if mode in ("auto", "task") and task is not None:
            return task != self.task_id
        if mode == "task":
            return False
        settled = self.records >= self.min_task_length
        if mode in ("auto", "alarm") and alarm is not None:
            return alarm and settled
        if mode == "alarm":
            return False
        return y not in known_labels and settled

    def start(self, task: Any) -> None:
        """Open the next task, ``task`` being the record's ``task`` field."""
        self.index += 1
        self.open = True
        self.task_id = task
        self.records = 0

    def close(self) -> None:
        self.open = False


def check_inner_detector(detector: str | None, detector_params: Any) -> None:
    """Validate a learner's inner detector: a registered name and a mapping of its
    parameters (constructed once, so a bad parameter is a ``ValueError`` at construction)."""
    if detector is None:
        if detector_params is not None:
            raise ValueError("detector_params needs a detector")
        return
    if detector_params is not None and not isinstance(detector_params, Mapping):
        raise ValueError("detector_params must be a mapping of the detector's parameters, "
                         f"got {detector_params!r}")
    try:
        create(detector, **dict(detector_params or {}))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"detector: {exc}") from None
