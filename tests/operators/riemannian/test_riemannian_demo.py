"""The sensor demo (deploy/demos/sensors.py) end to end: River's Occupancy through karcher."""

from __future__ import annotations

import io
import json

import pytest

from shiftwatch.deploy.demos.sensors import run_sensor_demo


@pytest.mark.slow
def test_sensor_demo_runs_and_karcher_beats_no_alarm(tmp_path):
    out = io.StringIO()
    assert run_sensor_demo(tmp_path, stream=out, plots=True) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    runs = report["runs"]
    assert "karcher (SPD, adaptive threshold)" in runs and "river:ADWIN" in runs
    karcher = runs["karcher (SPD, adaptive threshold)"]
    assert karcher["dead_letters"] == 0
    assert karcher["f1"] > runs["zero (no alarm)"]["f1"]
    assert (tmp_path / "sensor_demo.png").stat().st_size > 0
    assert "karcher" in out.getvalue()
