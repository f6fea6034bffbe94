"""The Kafka runtime: the stage runner and everything it needs on a broker.

:mod:`~shiftwatch.deploy.kafka.stage` (``StageRunner``: the poll -> executor -> produce loop),
:mod:`~shiftwatch.deploy.kafka.assignment` (assignment, restore, revocation),
:mod:`~shiftwatch.deploy.kafka.session` (topics, clients, reconnecting),
:mod:`~shiftwatch.deploy.kafka.run` (``run_pipeline``: a pipeline's stages in threads, the
metrics server), :mod:`~shiftwatch.deploy.kafka.checkpoint` (checkpoints: changelog entries,
markers, offset commits) in the format of :mod:`~shiftwatch.deploy.kafka.changelog`,
:mod:`~shiftwatch.deploy.kafka.connect` (an unreachable broker),
:mod:`~shiftwatch.deploy.kafka.clients` (kafka-python or confluent-kafka),
:mod:`~shiftwatch.deploy.kafka.broker` (the local
test broker) and :mod:`~shiftwatch.deploy.kafka.produce` (``shiftwatch produce``). Only
:mod:`shiftwatch.deploy` imports it; kafka-python loads when a function needs it.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "StageRunner": ".stage",
    "run_pipeline": ".run",
    "dedupe": "shiftwatch.deploy.deduper",
    "Deduper": "shiftwatch.deploy.deduper",
    "produce_source": ".produce",
    "start_broker": ".broker",
    "stop_broker": ".broker",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
