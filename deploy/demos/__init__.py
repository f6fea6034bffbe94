"""The demos ``shiftwatch demo`` runs: :mod:`~shiftwatch.deploy.demos.tcpd` (River's TCPD series
through several detectors), :mod:`~shiftwatch.deploy.demos.sensors` (Occupancy's four sensors
through ``window_covariance -> karcher``) and :mod:`~shiftwatch.deploy.demos.kafka`
(``shiftwatch demo --kafka``: a local broker and a two-stage pipeline). Only the CLI imports them.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "run_demo": ".tcpd",
    "run_sensor_demo": ".sensors",
    "run_kafka_demo": ".kafka",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
