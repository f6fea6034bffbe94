"""How a pipeline runs: the local runner, the Kafka stage runner, pipeline files, the CLI.

Every name is imported on first use, so ``shiftwatch --help`` loads neither the Kafka client
nor any operator.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

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
    "StageRunner": "shiftwatch.deploy.kafka.stage",
    "run_pipeline": "shiftwatch.deploy.kafka.run",
    "dedupe": "shiftwatch.deploy.deduper",
    "Deduper": "shiftwatch.deploy.deduper",
}

__all__ = [*_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
