"""paced() timing and open_source() dispatch and errors."""

from __future__ import annotations

import gzip
import time
import warnings

import pytest

from shiftwatch import streams
from shiftwatch.records import DeadLetter
from shiftwatch.streams import (
    BetaStream,
    CsvSource,
    GaussianShift,
    GrassmannStream,
    JsonlSource,
    RiverDatasetSource,
    RiverDriftSource,
    WishartSPDStream,
    list_sources,
    open_source,
    paced,
)


def test_every_all_entry_imports():
    for name in streams.__all__:
        assert getattr(streams, name) is not None
    assert streams.Source.__module__ == "shiftwatch.streams.base"


def test_paced_unpaced_is_passthrough():
    items = [{"ts": 0.0}, DeadLetter("x", "bad"), {"ts": 1000.0}]
    t0 = time.monotonic()
    assert list(paced(items, None)) == items
    assert list(paced(iter(items), 0)) == items
    assert time.monotonic() - t0 < 0.05


def test_paced_follows_event_time_scaled_by_speed():
    recs = [{"ts": 100.0 + i} for i in range(5)]  # 4 s of event time
    t0 = time.monotonic()
    seen = []
    for _ in paced(recs, speed=40):               # -> 0.1 s of wall time
        seen.append(time.monotonic() - t0)
    assert 0.09 <= seen[-1] < 0.4
    assert seen[0] < 0.02
    assert seen == sorted(seen)


def test_paced_dead_letters_and_untimed_records_do_not_wait():
    slept = []
    clock = iter([0.0, 0.0, 0.0, 0.0]).__next__
    items = [{"ts": 0.0}, DeadLetter("x", "bad"), {"value": 1}, {"ts": None}, {"ts": 2.0},
             {"ts": 1.0}]
    out = list(paced(items, 2.0, clock=clock, sleep=slept.append))
    assert out == items
    assert slept == [1.0, 0.5]  # only the timed records after the first wait


def test_paced_rejects_negative_speed():
    with pytest.raises(ValueError, match="speed"):
        list(paced([{"ts": 0}], -1))


def test_open_source_files(tmp_path):
    (tmp_path / "a.csv").write_text("value\n1\n")
    (tmp_path / "a.tsv").write_text("k\tvalue\nx\t2\n")
    with gzip.open(tmp_path / "a.csv.gz", "wt") as f:
        f.write("v\n3\n")
    (tmp_path / "a.jsonl").write_text('{"value": 4}\n')
    (tmp_path / "a.ndjson").write_text('{"value": 5}\n')
    (tmp_path / "a.JSON").write_text('{"value": 6}\n')
    assert isinstance(open_source(str(tmp_path / "a.csv")), CsvSource)
    tsv = open_source(str(tmp_path / "a.tsv"), key="k")
    assert list(tsv) == [{"key": "x", "value": 2.0}]
    assert next(iter(open_source(str(tmp_path / "a.csv.gz"), value="v")))["value"] == 3.0
    for ext, v in (("jsonl", 4.0), ("ndjson", 5.0), ("JSON", 6.0)):
        src = open_source(str(tmp_path / f"a.{ext}"))
        assert isinstance(src, JsonlSource) and next(iter(src))["value"] == v
    with pytest.raises(FileNotFoundError):
        open_source(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="has no option 'colour'; options: value, key"):
        open_source(str(tmp_path / "a.csv"), colour="red")


def test_open_source_river_and_synth():
    assert isinstance(open_source("river:RunLog"), RiverDriftSource)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert open_source("river:apple", align="tcpd").length == 622
    assert isinstance(open_source("river:Phishing"), RiverDatasetSource)
    airline = open_source("river:datasets.AirlinePassengers")
    assert isinstance(airline, RiverDatasetSource) and airline.length == 144
    assert isinstance(open_source("synth:gaussian"), GaussianShift)
    mean = open_source("synth:gaussian-mean", n=20, change_points=(10,))
    assert mean.means == (0.0, 1.0) and mean.length == 20
    assert open_source("synth:gaussian-variance").sigmas == (1.0, 2.0)
    assert isinstance(open_source("synth:beta", seed=3), BetaStream)
    assert isinstance(open_source("synth:wishart", dim=3, df=4), WishartSPDStream)
    assert isinstance(open_source("synth:grassmann"), GrassmannStream)


@pytest.mark.parametrize("spec, options, match", [
    ("synth:nope", {}, "unknown synthetic stream 'nope'; allowed: gaussian, gaussian-mean"),
    ("synth:beta", {"mu": 1}, "has no option 'mu'; options: n, change_point, pre, post, seed"),
    ("synth:beta", {"n": 0}, "n must be a positive integer"),
    ("river:Nope", {}, "unknown river dataset 'Nope'; allowed: AirlinePassengers"),
    ("river:RunLog", {"align": "x"}, "align"),
    ("river:Phishing", {"value": "x"}, "has no option 'value'; options: (none)"),
    ("kafka:", {}, "source 'kafka:': give a topic"),  # kafka:TOPIC is the Kafka source (issue 5)
    ("kafka:t?bootstrap=x&nope=1", {}, "has no option 'nope'"),
    ("data.parquet", {}, "cannot open source 'data.parquet'"),
    ("", {}, "non-empty string"),
])
def test_open_source_errors(spec, options, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        open_source(spec, **options)


def test_list_sources_covers_every_kind():
    specs = {s.spec: s for s in list_sources()}
    assert {"FILE.csv", "FILE.jsonl", "river:Occupancy", "river:Phishing",
            "river:datasets.AirlinePassengers", "synth:gaussian", "synth:gaussian-mean",
            "synth:gaussian-variance", "synth:beta", "synth:wishart",
            "synth:grassmann"} <= set(specs)
    assert specs["synth:wishart"].params["df"] == 11
    assert specs["river:RunLog"].params == {"value": None, "align": "river"}
    assert all(s.summary for s in specs.values())


def test_a_paced_replay_caps_a_single_wait_and_paces_on_from_there():
    from shiftwatch.streams.replay import paced

    now = [0.0]
    waits = []

    def sleep(s):
        waits.append(s)
        now[0] += s

    recs = [{"ts": 0.0}, {"ts": 1.0}, {"ts": 1e9}, {"ts": 1e9 + 2.0}]
    list(paced(recs, speed=1.0, clock=lambda: now[0], sleep=sleep, max_wait_s=5.0))
    assert waits == [1.0, 5.0, 2.0]  # one far-future ts costs 5 s, not 31 years
