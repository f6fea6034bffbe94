"""Sources: where records come from.

Files (CSV, JSON Lines), River's bundled datasets, seeded synthetic generators, and
:func:`open_source` to pick one from a spec string such as ``"data/log.csv.gz"``,
``"river:Occupancy"`` or ``"synth:wishart"``. See :mod:`streams.base` for the contract.
"""

from __future__ import annotations

from streams.base import Source
from streams.files import CsvSource, JsonlSource
from streams.kafka import KafkaSource
from streams.replay import SourceInfo, list_sources, open_source, paced
from streams.river_data import (
    RiverDatasetSource,
    RiverDriftSource,
    drift_dataset_names,
    river_dataset_names,
)
from streams.synthetic import (
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
