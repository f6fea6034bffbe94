"""shiftwatch: change detectors and continual learners as stateful stream operators.

The main API in one import; each name is loaded on first use, so ``import shiftwatch`` (and
the CLI) stays instant and NumPy, Numba or PyTorch load only when something needs them.

>>> import shiftwatch
>>> detector = shiftwatch.ConfSeqDetector(alpha=0.01, sigma=1.0)
>>> [i for i, x in enumerate([0.0] * 50 + [3.0] * 20) if detector.update(x) or
...  detector.drift_detected][:1]
[52]

The packages are :mod:`shiftwatch.streams` (sources), :mod:`shiftwatch.operators` (the
methods and the operator contract), :mod:`shiftwatch.sinks` (outputs and evaluation) and
:mod:`shiftwatch.deploy` (the local runner, the Kafka stage runner, the CLI).
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

__version__ = "0.1.0"

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "create": "shiftwatch.operators",
    "resolve": "shiftwatch.operators",
    "list_operators": "shiftwatch.operators",
    "registered_names": "shiftwatch.operators",
    "register": "shiftwatch.operators",
    "Operator": "shiftwatch.operators",
    "Keyed": "shiftwatch.operators",
    "BadInput": "shiftwatch.operators",
    "DeadLetter": "shiftwatch.operators",
    "ConfSeqDetector": "shiftwatch.operators",
    "KarcherDetector": "shiftwatch.operators",
    "ShapeDetector": "shiftwatch.operators",
    "RiverDetector": "shiftwatch.operators",
    "HareTortoise": "shiftwatch.operators",
    "CILA": "shiftwatch.operators",
    "open_source": "shiftwatch.streams",
    "list_sources": "shiftwatch.streams",
    "Pipeline": "shiftwatch.deploy",
    "RunSummary": "shiftwatch.deploy",
    "load_pipeline": "shiftwatch.deploy",
    "EvaluationSink": "shiftwatch.sinks",
    "JsonlSink": "shiftwatch.sinks",
    "MemorySink": "shiftwatch.sinks",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
