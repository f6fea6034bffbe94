"""Sinks: where results go (files, the console, memory, dead letters, the evaluation report).

The metric functions live in :mod:`shiftwatch.sinks.metrics`; the lifecycle every sink follows is in
:mod:`shiftwatch.sinks.base`.
"""

from __future__ import annotations

from shiftwatch.sinks.base import Sink
from shiftwatch.sinks.evaluation import EvaluationSink, evaluate_detector, merge_change_points
from shiftwatch.sinks.files import (
    ConsoleAlarmSink,
    CsvSink,
    DeadLetterSink,
    JsonlSink,
    MemorySink,
    jsonable,
)
from shiftwatch.sinks.metrics import (
    AccuracyMatrix,
    accuracy_matrix,
    average_accuracy,
    covering,
    detection_summary,
    evaluation_triples,
    f_measure,
    forgetting,
    prequential_accuracy,
    true_positives,
)

__all__ = [
    "Sink",
    "JsonlSink",
    "CsvSink",
    "ConsoleAlarmSink",
    "MemorySink",
    "DeadLetterSink",
    "EvaluationSink",
    "evaluate_detector",
    "merge_change_points",
    "jsonable",
    "true_positives",
    "f_measure",
    "covering",
    "detection_summary",
    "prequential_accuracy",
    "AccuracyMatrix",
    "accuracy_matrix",
    "evaluation_triples",
    "forgetting",
    "average_accuracy",
]
