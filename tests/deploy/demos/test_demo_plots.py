"""demo.png and sensor_demo.png read at a glance: units, channel names, detector lanes, a
legend below the panels (checked on the matplotlib objects, not the pixels)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from shiftwatch.deploy.demos import sensors as demo_sensors
from shiftwatch.deploy.demos import tcpd as demo


@pytest.fixture
def saved(monkeypatch):
    """The figures the demos save (they close them afterwards)."""
    figures: list[Figure] = []
    real = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _records(n, width, t0=1423072260.0, step=960.0):
    rng = np.random.default_rng(0)
    vals = rng.normal(size=(n, width)) * [1, 10, 100, 1000][:width] + [20, 30, 300, 800][:width]
    return [{"key": None, "ts": t0 + step * i,
             "value": vals[i].tolist() if width > 1 else float(vals[i, 0])} for i in range(n)]


def _labels(ax):
    return [t.get_text() for t in ax.get_yticklabels()]


def test_demo_png_has_a_panel_per_channel_with_units_and_detector_lanes(tmp_path, saved):
    series = {"Occupancy": (_records(120, 4), {"6": [40], "8": [41, 90]}),
              "Bitcoin": (_records(80, 1, t0=1360540800.0, step=3 * 86400.0), {"6": [30]})}
    detectors = ["river:ADWIN", "cs"]
    runs = {"river:ADWIN": {"alarms": [45], "located": [41]},
            "cs": {"alarms": [44, 95], "located": [40, 91]}}
    results = {"Occupancy": {"runs": runs},
               "Bitcoin": {"runs": {"river:ADWIN": {"alarms": [], "located": []},
                                    "cs": {"alarms": [33], "located": [31]}}}}
    demo._plot(series, results, detectors, tmp_path / "demo.png")
    assert (tmp_path / "demo.png").stat().st_size > 0
    (fig,) = saved
    axes = fig.axes
    assert len(axes) == 4 + 1 + 1 + 1  # Occupancy's 4 channels + lanes, Bitcoin's 1 + lanes
    assert [ax.get_ylabel() for ax in axes[:4]] == [
        "temperature\n(°C)", "relative humidity\n(%)", "light\n(lux)", "CO2\n(ppm)"]
    assert axes[5].get_ylabel() == "market price\n(USD)"
    assert axes[0].get_title(loc="left") == "Occupancy (120 samples, 2015-02-04 17:51 to "\
        "2015-02-06 01:35 UTC)"
    for lanes in (axes[4], axes[6]):
        assert _labels(lanes) == ["cs", "river:ADWIN"]  # bottom to top: first detector on top
        assert lanes.get_xlabel().startswith("position in series")
    # cs lane (y = 0): alarms as v, located changes as |, at the given positions
    marks = {}
    for coll in axes[4].collections:
        offsets = coll.get_offsets()
        for x, y in offsets:
            marks.setdefault(int(y), set()).add(int(x))
    assert marks == {0: {44, 95, 40, 91}, 1: {45, 41}}
    # true change points dashed on every panel of the block
    for ax in axes[:5]:
        assert {int(line.get_xdata()[0]) for line in ax.get_lines()
                if line.get_linestyle() == "--"} == {40, 41, 90}
    # one legend, below the panels, saying what the marks mean
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "annotated change point", "alarm (where raised)",
        "located change (the alarm's change_at)"]
    assert all(ax.get_legend() is None for ax in axes)


def test_sensor_demo_png_names_channels_and_keeps_the_statistic_legend_beside(tmp_path, saved):
    records = _records(100, 4)
    runs = {"zero (no alarm)": {}, "karcher (SPD, adaptive threshold)":
            {"alarms": [52], "located": [50]}, "river:ADWIN": {"alarms": [60], "located": []}}
    stats = {"karcher (SPD, adaptive threshold)": [(i, 0.01 * i, 0.8) for i in range(100)]}
    demo_sensors._plot(records, {"6": [50]}, runs, stats, tmp_path / "s.png")
    (fig,) = saved
    axes = fig.axes
    assert [ax.get_ylabel().split("\n")[0] for ax in axes[:4]] == [
        "temperature", "relative humidity", "light", "CO2"]
    assert _labels(axes[4]) == ["river:ADWIN", "karcher (SPD, adaptive threshold)"]
    stat = axes[5]
    assert stat.get_ylabel().startswith("geodesic distance")
    legend = stat.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "affine-invariant d(P0, P1)", "affine-invariant threshold"]
    # anchored outside the axes, to the right: it cannot cover the data
    fig.canvas.draw()
    assert legend.get_window_extent().x0 >= stat.get_window_extent().x1 - 1


def test_channel_names_fall_back_to_positions():
    assert demo.channel_names("RunLog", 2) == [("pace", "min/mile"), ("distance", "m")]
    assert demo.channel_names("Unknown", 2) == [("value[0]", ""), ("value[1]", "")]
