"""Sinks: where results go (files, the console, memory, dead letters, the evaluation report).

The metric functions live in :mod:`shiftwatch.sinks.metrics`; the lifecycle every sink follows is in
:mod:`shiftwatch.sinks.base`.

Every name is imported on first use; matplotlib loads only when a plot is drawn.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access, PEP 562)
_LAZY = {
    "Sink": "shiftwatch.sinks.base",
    "AtomicFile": "shiftwatch.sinks.atomic_file",
    "WriteFailed": "shiftwatch.sinks.atomic_file",
    "JsonlSink": "shiftwatch.sinks.files",
    "CsvSink": "shiftwatch.sinks.files",
    "ConsoleAlarmSink": "shiftwatch.sinks.files",
    "MemorySink": "shiftwatch.sinks.files",
    "DeadLetterSink": "shiftwatch.sinks.files",
    "ParquetSink": "shiftwatch.sinks.parquet",  # needs pyarrow (when it opens)
    "EvaluationSink": "shiftwatch.sinks.evaluation",
    "evaluate_detector": "shiftwatch.sinks.scoring",
    "merge_change_points": "shiftwatch.sinks.scoring",
    "jsonable": "shiftwatch.sinks.files",
    "key_label": "shiftwatch.sinks.key_names",
    "true_positives": "shiftwatch.sinks.metrics",
    "f_measure": "shiftwatch.sinks.metrics",
    "covering": "shiftwatch.sinks.metrics",
    "detection_summary": "shiftwatch.sinks.metrics",
    "prequential_accuracy": "shiftwatch.sinks.metrics",
    "AccuracyMatrix": "shiftwatch.sinks.metrics",
    "accuracy_matrix": "shiftwatch.sinks.metrics",
    "evaluation_triples": "shiftwatch.sinks.metrics",
    "forgetting": "shiftwatch.sinks.metrics",
    "average_accuracy": "shiftwatch.sinks.metrics",
}

__all__ = [*_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
