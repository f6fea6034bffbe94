"""River's bundled datasets: lengths, columns, annotations and the TCPD alignment."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from shiftwatch.records import DeadLetter
from shiftwatch.streams.river_data import (
    RiverDatasetSource,
    RiverDriftSource,
    drift_dataset_names,
    river_dataset_names,
)

LENGTHS = {"AirlinePassengers": 468, "Apple": 1867, "Bitcoin": 822, "BrentSpotPrice": 8195,
           "Occupancy": 509, "RunLog": 376, "UKCoalEmploy": 105}
COLUMNS = {"Apple": ["Open", "High", "Low", "Close", "Adj Close", "Volume"],
           "Occupancy": ["V1", "V2", "V3", "V4"], "RunLog": ["Pace", "Distance"]}
UNRELIABLE = {"Apple", "BrentSpotPrice"}


def quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RiverDriftSource(*args, **kwargs)


def test_all_seven_drift_datasets_listed():
    assert drift_dataset_names() == sorted(LENGTHS)


@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_drift_dataset_length_values_and_annotations(name):
    src = quiet(name)
    records = list(src)
    assert len(records) == src.length == LENGTHS[name]
    assert src.columns == COLUMNS.get(name, src.columns) and len(src.columns) >= 1
    values = np.array([r["value"] for r in records], dtype=float)
    assert values.shape == ((src.length,) if len(src.columns) == 1
                            else (src.length, len(src.columns)))
    assert np.all(np.isfinite(values))
    ts = [r["ts"] for r in records]
    assert ts == sorted(ts) and all(isinstance(t, float) for t in ts)
    assert all(r["key"] is None for r in records)
    assert len(src.annotations) == 5
    for points in src.annotations.values():
        assert all(0 <= i < src.length for i in points)
        assert points == sorted(points)
    assert src.annotations_reliable is (name not in UNRELIABLE)


@pytest.mark.parametrize("name", sorted(UNRELIABLE))
def test_apple_and_brent_flagged_and_tcpd_alignment_fixes_them(name):
    with pytest.warns(UserWarning, match="align='tcpd'"):
        raw = RiverDriftSource(name)
    assert raw.annotations_reliable is False
    aligned = RiverDriftSource(name, align="tcpd")
    assert aligned.annotations_reliable is True
    assert aligned.length == {"Apple": 622, "BrentSpotPrice": 500}[name]
    assert max(max(v) for v in aligned.annotations.values()) < aligned.length


def test_brent_tcpd_alignment_reproduces_tcpd_series():
    # First and last points of TCPD's brent_spot.json (500 points, 2000-01-04..2019-08-20).
    recs = list(RiverDriftSource("brent_spot_price", align="tcpd"))
    assert recs[0]["value"] == 23.95 and recs[1]["value"] == 26.31
    assert recs[0]["ts"] == 947030400.0 - 86400  # 2000-01-04 UTC
    assert recs[-1]["ts"] == 1566259200.0  # 2019-08-20 UTC


def test_drift_value_selection_and_errors():
    src = RiverDriftSource("occupancy", value="V3")
    rec = next(iter(src))
    assert rec["value"] == 426.0
    assert next(iter(RiverDriftSource("RunLog", value=["Distance", "Pace"])))["value"] == [
        0.0, 30.88072]
    with pytest.raises(ValueError, match="columns: V1, V2, V3, V4"):
        RiverDriftSource("Occupancy", value="CO2")
    with pytest.raises(ValueError, match="allowed: AirlinePassengers, Apple"):
        RiverDriftSource("Nope")
    with pytest.raises(ValueError, match="align"):
        RiverDriftSource("RunLog", align="x")


def test_river_dataset_source_local_only():
    names = river_dataset_names()
    assert "Phishing" in names and "Bananas" in names
    assert "Elec2" not in names and "BETH" not in names
    with pytest.raises(ValueError, match="allowed"):
        RiverDatasetSource("Elec2")


def test_river_dataset_features_sorted_and_label():
    src = RiverDatasetSource("TrumpApproval")
    assert src.columns == sorted(src.columns) and len(src.columns) == 6
    recs = list(src)
    assert len(recs) == src.length == 1001
    assert not any(isinstance(r, DeadLetter) for r in recs)
    assert all(len(r["value"]) == 6 and isinstance(r["y"], float) for r in recs)


def test_river_dataset_without_numeric_features_is_a_series():
    src = RiverDatasetSource("WaterFlow")
    rec = next(iter(src))
    assert src.columns == [] and isinstance(rec["value"], float) and "y" not in rec
    assert rec["ts"] > 1e9


def test_dataset_names_read_from_river_source_equal_the_imported_ones():
    # Listing names reads River's package files (importing river.datasets costs seconds);
    # it must give exactly what importing the packages gives.
    from river import datasets
    from river.datasets import base
    from river.drift import datasets as drift_datasets

    from shiftwatch.streams import river_data

    assert list(river_data._drift_names_from_source()) == sorted(drift_datasets.__all__)
    local = sorted(n for n in datasets.__all__
                   if isinstance(getattr(datasets, n, None), type)
                   and issubclass(getattr(datasets, n), base.FileDataset)
                   and not issubclass(getattr(datasets, n), base.RemoteDataset))
    assert list(river_data._dataset_names_from_source()) == local
