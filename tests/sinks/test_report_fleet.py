"""Issue 24: the report shows the keys that matter, scales with the fleet, and says what it
cannot score (labels past the end, no labels) instead of scoring it."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from shiftwatch.deploy import cli
from shiftwatch.sinks import EvaluationSink

ALARMED = ("d20", "d25", "d28")


def _run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _data(page: str) -> dict:
    m = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def _keys(out) -> dict:
    return {json.loads(line)["key"]: json.loads(line)
            for line in (out / "keys.jsonl").read_text().splitlines()}


def _fleet_csv(tmp_path, n=400, broken=()):
    """30 sensors d00..d29, one reading a minute each from 2026-01-01; d20, d25 and d28 shift
    by 8 at their 250th reading; ``broken`` lines (1-based, the header is line 1) are cut."""
    rng = np.random.default_rng(24)
    rows = ["time,sensor,temp"]
    for i in range(n):
        stamp = f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z"
        for j in range(30):
            key = f"d{j:02d}"
            shift = 8.0 if key in ALARMED and i >= 250 else 0.0
            rows.append(f"{stamp},{key},{rng.normal(20 + shift, 0.5):.3f}")
    for line in broken:
        rows[line - 1] = rows[line - 1].rsplit(",", 1)[0]
    path = tmp_path / "fleet.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _replay(capsys, tmp_path, *extra, broken=()):
    out = tmp_path / "out"
    rc, stdout, stderr = _run(
        capsys, "replay", _fleet_csv(tmp_path, broken=broken), "--source-opt", "value=temp",
        "--source-opt", "key=sensor", "--source-opt", "ts=time", "--source-opt", "ts_format=iso",
        "--operator", "standardize", "--operator", "river:PageHinkley", "--param",
        "threshold=200", "--out", out, "--no-progress", "--quiet", *extra)
    assert rc == 0, stderr
    return out, stdout, stderr


def test_the_alarmed_keys_come_first_in_report_html_and_the_pngs(tmp_path, capsys,
                                                                  monkeypatch):
    import shiftwatch.sinks.panels as evaluation

    figures = {}
    for name in ("plot_series", "plot_statistic"):
        draw = getattr(evaluation, name)

        def keep(*args, _draw=draw, _name=name, **kwargs):
            figures[_name] = fig = _draw(*args, **kwargs)
            return fig

        monkeypatch.setattr(evaluation, name, keep)
    out, _, _ = _replay(capsys, tmp_path)
    report = json.loads((out / "report.json").read_text())
    alarmed = [k["key"] for k in report["alarmed_keys"]]  # the earliest first alarm first
    assert sorted(alarmed) == list(ALARMED)
    assert [k["first_alarm"] for k in report["alarmed_keys"]] == sorted(
        k["first_alarm"] for k in report["alarmed_keys"])
    assert report["summary"]["keys_with_alarms"] == 3
    assert "keys" not in report and len(_keys(out)) == 30  # every key, one line each
    data = _data((out / "report.html").read_text())
    listed = [k["key"] for k in data["keys"]]
    assert len(listed) == 30 and listed[:3] == alarmed
    assert sorted(listed[3:]) == sorted(f"d{j:02d}" for j in range(30) if f"d{j:02d}"
                                        not in ALARMED)
    for name, what in (("plot_series", "series"), ("plot_statistic", "detector statistic")):
        fig = figures[name]
        assert fig._suptitle.get_text() == (
            f"fleet: {what} (6 of 30 keys: the 3 with alarms, then the first 3 without)")
        titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
        assert [t.split(":")[0] for t in titles[:3]] == [f"key {k}" for k in alarmed]
        # the first alarm as a position in the key's series and as a time
        first = report["alarmed_keys"][0]
        hh, mm = divmod(first["first_alarm"], 60)
        assert titles[0] == (f"key {alarmed[0]}: 1 alarm, the first at position "
                             f"{first['first_alarm']}, 2026-01-01T{hh:02d}:{mm:02d}:00Z")
        assert 250 <= first["first_alarm"] < 270
        assert titles[3].endswith(": no alarm")


def test_labels_past_the_end_warn_and_count_as_missed(tmp_path, capsys):
    # Issue 24, 2b: --labels 500,1200 on 400 records per key gave recall 1.000, no warning.
    out, stdout, stderr = _replay(capsys, tmp_path, "--labels", "250,500,1200")
    warnings = [line for line in stderr.splitlines() if "warning" in line]
    assert warnings == [
        "shiftwatch: warning: 60 labels past the end of their key's stream count as missed: "
        "key d00 label 500, 1200 (400 records) and 58 more; labels are positions in each "
        "key's own stream (report.json: labels_beyond_end)"]
    report = json.loads((out / "report.json").read_text())
    beyond = report["labels_beyond_end"]
    assert beyond["count"] == 60 and beyond["keys"] == 30
    assert beyond["first"][0] == {"key": "d00", "labels": [500, 1200], "n_records": 400}
    s = report["summary"]
    assert s["labels_beyond_end"] == 60
    assert s["recall"] < 0.5  # at most 1 of 3 changes per key (with 0) is reachable
    assert s["missed"] >= 60
    d20 = _keys(out)["d20"]["detector"]
    assert d20["change_points"] == [250] and d20["beyond_end"] == [500, 1200]
    assert d20["detection"]["n_missed"] == 2 and d20["detection"]["n_detected"] == 1
    assert "recall" in stdout and "recall 1.000" not in stdout


def test_without_labels_nothing_is_scored_as_false_or_missed(tmp_path, capsys):
    # Issue 24, 2d: without labels the summary said "false_alarms 3, missed 0".
    out, stdout, _ = _replay(capsys, tmp_path)
    assert "scores: none (no labels): 3 alarms on 3 of 30 keys" in stdout
    assert "false_alarms" not in stdout and "missed" not in stdout.replace(
        "missed changes", "")
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary == {"records": 12000, "keys": 30, "alarms": 3, "keys_with_alarms": 3,
                       "labelled_keys": 0}
    agg = json.loads((out / "report.json").read_text())["aggregate"]["detector"]
    assert agg["detection"] is None and agg["f1"] is None
    assert all("detector" not in k for k in _keys(out).values())


def test_dead_letters_and_every_operator_parameter_are_in_the_report(tmp_path, capsys):
    out, _, _ = _replay(capsys, tmp_path, broken=(5, 900, 901))
    report = json.loads((out / "report.json").read_text())
    dead = report["dead_letters"]
    assert dead["count"] == 3 and dead["by_reason"] == {"expected 3 fields": 3}
    assert [d["origin"]["line"] for d in dead["first"]] == [5, 900, 901]
    assert dead["first"][0]["origin"]["file"].endswith("fleet.csv")
    ops = report["operators"]
    assert [o["name"] for o in ops] == ["standardize", "river:PageHinkley"]
    assert ops[0]["params"] == {"field": "value", "burn_in": 30, "emit_burn_in": True,
                                "min_std": 1e-09}
    # the given threshold and River's own defaults, every one of them
    assert ops[1]["params"]["threshold"] == 200
    assert {"min_instances": 30, "delta": 0.005, "alpha": 0.9999, "mode": "both"}.items() \
        <= ops[1]["params"].items()
    data = _data((out / "report.html").read_text())
    assert data["dead_letters"] == dead and data["operators"] == ops


def test_a_fleet_report_is_small_and_its_detail_is_in_keys_jsonl(tmp_path):
    # 100,000 keys of 3 records each: report.json stays a few KB (it was the whole per-key
    # detail, 713 MB for a million keys); report.html lists 20,000 keys, alarmed first.
    n_keys = 100_000
    sink = EvaluationSink(tmp_path, plots=False)
    sink.open()
    for i in range(3):
        recs = [{"key": f"k{k}", "offset": i * n_keys + k, "ts": float(i), "value": float(k)}
                for k in range(n_keys)]
        sink.write_inputs(recs)
        sink.write([{**r, "alarm": i == 2 and r["key"] in ("k99999", "k5")} for r in recs])
    sink.close()
    report_size = (tmp_path / "report.json").stat().st_size
    assert report_size < 10_000
    lines = (tmp_path / "keys.jsonl").read_text().splitlines()
    assert len(lines) == n_keys
    assert json.loads(lines[5]) == {"key": "k5", "n_records": 3, "n_outputs": 3,
                                    "alarms": [2], "alarm_ts": [2.0]}
    assert sink.report["summary"]["keys_with_alarms"] == 2
    page = (tmp_path / "report.html").read_text()
    assert len(page) < 5_000_000
    data = _data(page)
    assert len(data["keys"]) == 20_000 and [k["key"] for k in data["keys"][:2]] == ["k5",
                                                                                  "k99999"]
    assert data["run"]["keys"] == n_keys


@pytest.mark.parametrize("labels", [{"s1": [50]}, {"*": [50], "s2": []}])
def test_per_key_labels_score_only_the_labelled_keys(tmp_path, labels):
    sink = EvaluationSink(tmp_path, annotations=labels, plots=False, html=False)
    for key in ("s1", "s2"):
        sink.write_inputs([{"key": key, "offset": i, "value": 0.0} for i in range(100)])
        sink.write([{"key": key, "offset": i, "alarm": i in (53, 80)} for i in range(100)])
    sink.close()
    keys = sink.key_reports()
    assert keys["s1"]["detector"]["detection"]["delays"] == [3]
    det = sink.report["aggregate"]["detector"]
    labelled = 1 if "*" not in labels else 2
    assert det["n_annotated"] == labelled and det["alarms"] == 4
    # s2 unlabelled: its alarms are not false alarms; labelled "[]": both are
    assert det["detection"]["n_false_alarms"] == (1 if labelled == 1 else 3)
