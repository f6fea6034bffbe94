"""Sources: where records come from.

Files (CSV, JSON Lines), River's bundled datasets, seeded synthetic generators, and
:func:`open_source` to pick one from a spec string such as ``"data/log.csv.gz"``,
``"river:Occupancy"`` or ``"synth:wishart"``. See :mod:`shiftwatch.streams.base` for the contract.
"""

from __future__ import annotations

from shiftwatch.streams.base import Source
from shiftwatch.streams.files import CsvSource, JsonlSource
from shiftwatch.streams.kafka import KafkaSource
from shiftwatch.streams.replay import SourceInfo, list_sources, open_source, paced
from shiftwatch.streams.river_data import (
    RiverDatasetSource,
    RiverDriftSource,
    drift_dataset_names,
    river_dataset_names,
)
from shiftwatch.streams.synthetic import (
    BetaStream,
    GaussianShift,
    GrassmannStream,
    WishartSPDStream,
    random_spd_scale,
)

__all__ = [
    "KafkaSource",
    "Source",
    "CsvSource",
    "JsonlSource",
    "RiverDriftSource",
    "RiverDatasetSource",
    "drift_dataset_names",
    "river_dataset_names",
    "GaussianShift",
    "BetaStream",
    "WishartSPDStream",
    "GrassmannStream",
    "random_spd_scale",
    "paced",
    "open_source",
    "list_sources",
    "SourceInfo",
]
