"""How a pipeline runs: the local runner, the Kafka stage runner, pipeline files, the CLI.

Every name is imported on first use, so ``shiftwatch --help`` loads neither the Kafka client
nor any operator.
"""

from __future__ import annotations

import importlib

#: public name -> module that defines it (imported on first attribute access, PEP 562)
_LAZY = {
    "Pipeline": "shiftwatch.deploy.local",
    "RunSummary": "shiftwatch.deploy.executor",
    "StageExecutor": "shiftwatch.deploy.executor",
    "main": "shiftwatch.deploy.cli",
    "load_pipeline": "shiftwatch.deploy.pipeline",
    "PipelineConfig": "shiftwatch.deploy.pipeline",
    "StageConfig": "shiftwatch.deploy.pipeline",
    "PipelineError": "shiftwatch.deploy.pipeline",
    "StageRunner": "shiftwatch.deploy.kafka_stage",
    "run_pipeline": "shiftwatch.deploy.kafka_stage",
    "dedupe": "shiftwatch.deploy.kafka_dedupe",
    "Deduper": "shiftwatch.deploy.kafka_dedupe",
}

__all__ = [*_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
