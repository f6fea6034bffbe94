"""Sources: where records come from.

Files (CSV, JSON Lines), River's bundled datasets, seeded synthetic generators, and
:func:`open_source` to pick one from a spec string such as ``"data/log.csv.gz"``,
``"river:Occupancy"`` or ``"synth:wishart"``. See :mod:`shiftwatch.streams.base` for the contract.

Every name is imported on first use, so ``import shiftwatch.streams`` loads no source's
dependencies (River, SciPy, kafka-python) until a source needs them.
"""

from __future__ import annotations

from shiftwatch._lazy import lazy_exports

#: public name -> module that defines it (imported on first attribute access, PEP 562)
_LAZY = {
    "KafkaSource": "shiftwatch.streams.kafka",
    "Source": "shiftwatch.streams.base",
    "CsvSource": "shiftwatch.streams.files",
    "JsonlSource": "shiftwatch.streams.files",
    "RiverDriftSource": "shiftwatch.streams.river_data",
    "RiverDatasetSource": "shiftwatch.streams.river_data",
    "drift_dataset_names": "shiftwatch.streams.river_data",
    "river_dataset_names": "shiftwatch.streams.river_data",
    "GaussianShift": "shiftwatch.streams.synthetic",
    "BetaStream": "shiftwatch.streams.synthetic",
    "WishartSPDStream": "shiftwatch.streams.synthetic",
    "GrassmannStream": "shiftwatch.streams.synthetic",
    "random_spd_scale": "shiftwatch.streams.synthetic",
    "paced": "shiftwatch.streams.replay",
    "open_source": "shiftwatch.streams.replay",
    "list_sources": "shiftwatch.streams.replay",
    "SourceInfo": "shiftwatch.streams.replay",
}

__all__ = [*_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
