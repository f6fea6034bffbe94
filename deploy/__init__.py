"""How a pipeline runs: the local runner, the Kafka stage runner, pipeline files, the CLI."""

from __future__ import annotations

from shiftwatch.deploy.kafka_dedupe import Deduper, dedupe
from shiftwatch.deploy.kafka_stage import StageRunner, StageStats, run_pipeline
from shiftwatch.deploy.local import Pipeline, RunSummary
from shiftwatch.deploy.pipeline import PipelineConfig, PipelineError, StageConfig, load_pipeline

__all__ = ["Pipeline", "RunSummary", "main", "load_pipeline", "PipelineConfig", "StageConfig",
           "PipelineError", "StageRunner", "StageStats", "run_pipeline", "dedupe", "Deduper"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shiftwatch`` console script."""
    from shiftwatch.deploy.cli import main as _main

    return _main(argv)
