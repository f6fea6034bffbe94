"""report.html: one self-contained page per replay (issue 12, part 3)."""

from __future__ import annotations

import json
import re

import numpy as np

from shiftwatch.deploy import cli


def _replay(tmp_path, capsys, n=3000, extra=()):
    rng = np.random.default_rng(5)
    src = tmp_path / "m.csv"
    lines = ["k,temp,hum"]
    for i in range(n):
        for k in ("s1", "s2"):
            shift = 3.0 if k == "s1" and i >= n // 2 else 0.0
            lines.append(f"{k},{rng.normal(shift, 1):.4f},{rng.normal(50, 5):.4f}")
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    rc = cli.main(["replay", str(src), "--operator", "river:ADWIN", "--source-opt", "key=k",
                   "--source-opt", "value=[temp, hum]", "--labels", str(n // 2),
                   "--out", str(out), "--no-progress", "--quiet", *extra])
    capsys.readouterr()
    assert rc == 0
    return out


def _data(page: str) -> dict:
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _decode(part: dict) -> list[list[float]]:
    """The page's decodeValues in Python: each channel's values (None when missing)."""
    out = []
    for e in part["y"]:
        codes = [_ALPHABET.index(a) * 64 + _ALPHABET.index(b)
                 for a, b in zip(e["q"][0::2], e["q"][1::2], strict=True)]
        out.append([None if c == 4095 else e["lo"] + (e["hi"] - e["lo"]) * c / 4094
                    for c in codes])
    return out


def test_every_replay_writes_a_self_contained_report_html(tmp_path, capsys):
    out = _replay(tmp_path, capsys, extra=("--no-plots",))
    page = (out / "report.html").read_text()
    assert not re.search(r"(src|href)=\"?(https?:)?//", page)  # nothing fetched
    assert "http://" not in page and "https://" not in page
    data = _data(page)
    assert [k["key"] for k in data["keys"]] == ["s1", "s2"]
    s1 = data["keys"][0]
    assert s1["n"] == 3000 and s1["truth"] == [1500]
    assert s1["alarms"] and all(1500 <= a < 1600 for a in s1["alarms"])
    assert s1["series"]["labels"] == ["temp", "hum"]  # channel names, not value[0]
    assert s1["series"]["n"] == 3000 and s1["series"]["w"] == 1  # not reduced
    temp = _decode(s1["series"])[0]
    assert len(temp) == 3000
    rows = [line.split(",") for line in (tmp_path / "m.csv").read_text().splitlines()[1:]]
    exact = [float(r[1]) for r in rows if r[0] == "s1"]
    span = max(exact) - min(exact)
    assert max(abs(a - b) for a, b in zip(temp, exact, strict=True)) <= span / 4094
    assert data["parameters"]["operator 1"] == "river:ADWIN"
    report = json.loads((out / "report.json").read_text())
    assert report["html"].endswith("report.html")
    keys = {json.loads(line)["key"]: json.loads(line)
            for line in (out / "keys.jsonl").read_text().splitlines()}
    assert data["keys"][1]["scores"]["f1"] == keys["s2"]["detector"]["f1"]


def test_long_series_are_reduced_to_a_few_mb(tmp_path, capsys):
    out = _replay(tmp_path, capsys, n=25000, extra=("--no-plots",))
    page = (out / "report.html").read_text()
    assert len(page) < 3_000_000
    s1 = _data(page)["keys"][0]
    temp = _decode(s1["series"])[0]
    assert s1["series"]["w"] > 1 and len(temp) <= 20000 // 2  # two channels share the budget
    # min/max per bucket: the extremes of the series survive the reduction
    assert max(temp) > 6.5


def _ts_replay(tmp_path, capsys, ts_of, n=600):
    src = tmp_path / "t.csv"
    rng = np.random.default_rng(1)
    src.write_text("time,v\n" + "".join(f"{ts_of(i)},{rng.normal(i >= n // 2, 1):.4f}\n"
                                        for i in range(n)))
    out = tmp_path / "out"
    rc = cli.main(["replay", str(src), "--operator", "river:PageHinkley", "--source-opt",
                   "value=v", "--source-opt", "ts=time", "--out", str(out), "--no-plots",
                   "--no-progress", "--quiet"])
    capsys.readouterr()
    assert rc == 0
    return _data((out / "report.html").read_text())["keys"][0]


def test_report_html_maps_positions_to_utc_time_when_ts_are_dates(tmp_path, capsys):
    key = _ts_replay(tmp_path, capsys, lambda i: 1767225600 + 3600 * i)
    # Evenly spaced: the two ends are all the page needs to interpolate every position.
    time = key["time"]
    assert time == {"x": [0, 599], "t": [1767225600.0, 1767225600.0 + 3600 * 599]}
    # Unevenly spaced: knots, each at its record's exact time.
    key = _ts_replay(tmp_path, capsys, lambda i: 1767225600 + 60 * i * i)
    time = key["time"]
    assert 2 < len(time["x"]) <= 400 and time["x"][0] == 0 and time["x"][-1] == 599
    assert all(t == 1767225600 + 60 * x * x for x, t in zip(time["x"], time["t"], strict=True))


def test_report_html_keeps_positions_for_an_index_ts(tmp_path, capsys):
    assert "time" not in _ts_replay(tmp_path, capsys, lambda i: i)
