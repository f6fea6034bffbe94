"""The Kafka runtime: the stage runner and everything it needs on a broker.

:mod:`~shiftwatch.deploy.kafka.stage` (``StageRunner``: assignment, restore, poll -> executor
-> produce), :mod:`~shiftwatch.deploy.kafka.checkpoint` (checkpoints: changelog entries,
markers, offset commits) in the format of :mod:`~shiftwatch.deploy.kafka.changelog`,
:mod:`~shiftwatch.deploy.kafka.dedupe` (input coordinates), :mod:`~shiftwatch.deploy.kafka.connect`
(client settings and an unreachable broker), :mod:`~shiftwatch.deploy.kafka.broker` (the local
test broker) and :mod:`~shiftwatch.deploy.kafka.produce` (``shiftwatch produce``). Only
:mod:`shiftwatch.deploy` imports it; kafka-python loads when a function needs it.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "StageRunner": ".stage",
    "run_pipeline": ".stage",
    "dedupe": ".dedupe",
    "Deduper": ".dedupe",
    "produce_source": ".produce",
    "start_broker": ".broker",
    "stop_broker": ".broker",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
