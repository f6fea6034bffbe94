"""Scores a user chooses a detector by (issue 34): every labelled key counted in both views
(alarms and located changes), each figure named with the rule that matched it, and the
console, report.json and report.html saying the same."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from shiftwatch.deploy.cli import main


def pumps_csv(tmp_path: Path, n: int = 5000) -> Path:
    """Three pumps: a level shift at 3000 (pump-a), a change of vibration period at 2500
    that a level detector cannot see (pump-b), and a quiet pump (pump-c)."""
    rng = np.random.default_rng(7)
    t = np.arange(n)
    a = rng.normal(0, 1, n) + np.where(t >= 3000, 4.0, 0.0)
    b = np.where(t < 2500, np.sin(2 * np.pi * t / 20), np.sin(2 * np.pi * t / 35))
    b = b + rng.normal(0, 0.2, n)
    c = rng.normal(0, 1, n)
    rows = ["pump,ts,reading"]
    for i in range(n):
        for name, v in (("pump-a", a[i]), ("pump-b", b[i]), ("pump-c", c[i])):
            rows.append(f"{name},{1_700_000_000 + i},{v:.5f}")
    path = tmp_path / "pumps.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def replay(tmp_path: Path, capsys, labels: dict, *ops: str) -> tuple[dict, dict, str]:
    src = pumps_csv(tmp_path)
    lab = tmp_path / "labels.json"
    lab.write_text(json.dumps(labels))
    out = tmp_path / "run"
    rc = main(["replay", str(src), "--source-opt", "key=pump", "--source-opt", "value=reading",
               "--source-opt", "ts=ts", *ops, "--labels", str(lab), "--out", str(out),
               "--no-plots", "--no-progress", "--quiet"])
    stdout = capsys.readouterr().out
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    keys = {json.loads(line)["key"]: json.loads(line)
            for line in (out / "keys.jsonl").read_text().splitlines()}
    return report, keys, stdout


def test_a_labelled_key_without_alarms_counts_in_the_located_scores(tmp_path, capsys):
    labels = {"pump-a": [3000], "pump-b": [2500], "pump-c": []}
    report, keys, stdout = replay(tmp_path, capsys, labels, "--operator", "standardize",
                                  "--operator", "river:ADWIN")
    det = report["aggregate"]["detector"]
    assert det["n_annotated"] == 3
    # pump-b's change of period is invisible to ADWIN: no alarm, so nothing located either
    assert keys["pump-b"]["alarms"] == [] and keys["pump-b"]["located"] == []
    loc_b = keys["pump-b"]["detector"]["location"]
    assert loc_b["n_located"] == 0 and loc_b["recall"] == 0.5  # only position 0 matched
    assert det["location"]["n_keys"] == 3
    # the located scores are means over the same three keys as the alarm scores
    per_key = [keys[k]["detector"]["location"]["recall"] for k in labels]
    assert det["location"]["recall"] == sum(per_key) / 3 < 1.0
    summary = report["summary"]
    assert summary["located_f1"] < 1.0 and summary["changes"] == 2
    assert "mean over the 3 labelled keys" in det["taken_over"]["location"]
    assert "mean over the 3 labelled keys" in det["taken_over"]["scores"]
    assert "located changes (change_at), margin rule: f1 " in stdout


def test_quiet_keys_score_alike_in_both_views(tmp_path, capsys):
    # no key is labelled with a change: a key without alarms scores 1.0 in both views
    report, keys, _ = replay(tmp_path, capsys, {"*": []}, "--operator", "river:ADWIN")
    det = report["aggregate"]["detector"]
    assert det["n_annotated"] == 3 and det["location"]["n_keys"] == 3
    for k, entry in keys.items():
        d = entry["detector"]
        if not entry["alarms"]:
            assert d["f1"] == d["location"]["f1"] == 1.0, k


def test_every_figure_is_named_with_its_rule(tmp_path, capsys):
    labels = {"pump-a": [3000], "pump-b": [2500], "pump-c": []}
    report, keys, stdout = replay(tmp_path, capsys, labels, "--operator", "standardize",
                                  "--operator", "river:ADWIN")
    rules = report["rules"]
    assert "margin 5" in rules["f1"] and "any delay" in rules["detection"]
    assert "labelled [] with no alarm scores" in rules["f1"]
    assert "margin rule (an alarm within 5 records of a change matches it): f1 " in stdout
    assert "delay rule (the first alarm after a change detects it" in stdout
    assert "a key labelled [] without alarms scores 1.0, TCPD's convention" in stdout
    html = (tmp_path / "run" / "report.html").read_text()
    for words in ("margin rule, 5 records", "delay rule: the first alarm after a change",
                  '"rules":{"f1":"TCPD F1 at margin 5', '"rule: " + k', "TCPD's convention"):
        assert words in html, words


def test_a_late_detection_is_a_miss_by_the_margin_rule_and_a_detection_by_the_delay_rule(
        tmp_path, capsys):
    # The two rules disagree on a detection 50 records late: both figures are reported,
    # each under its own rule (the old single line said f1 0.5 beside "missed 0").
    from shiftwatch.sinks.evaluation import EvaluationSink

    sink = EvaluationSink(tmp_path / "r", annotations=[100], plots=False, html=False)
    sink.open()
    sink.write_inputs([{"key": "s", "offset": i, "value": 0.0} for i in range(300)])
    sink.write([{"key": "s", "offset": i, "alarm": i == 150} for i in range(300)])
    sink.close()
    s = sink.report["summary"]
    assert s["recall"] == 0.5 and s["missed"] == 0 and s["detected"] == 1
    from shiftwatch.deploy.console import score_lines

    text = "\n".join(score_lines(s, 5))
    assert "margin rule (an alarm within 5 records" in text and "recall 0.500" in text
    assert "delay rule" in text and "1 of 1 changes detected, 0 missed" in text


def test_a_shape_alarm_carries_the_statistic_that_crossed(tmp_path, capsys):
    # The alarm is decided a block after the crossing; the record and the console table
    # showed the later scan's Z (3.14 > threshold 6).
    rng = np.random.default_rng(3)
    rows = ["key,value"]
    for key, change in (("p1", 3000), ("p2", 2500)):
        t = np.arange(5000)
        y = np.where(t < change, np.sin(2 * np.pi * t / 20), np.sin(2 * np.pi * t / 35))
        rows += [f"{key},{v:.5f}" for v in y + rng.normal(0, 0.2, 5000)]
    src = tmp_path / "s.csv"
    src.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    rc = main(["replay", str(src), "--source-opt", "key=key", "--operator", "shape",
               "--param", "confirm=2", "--out", str(out), "--no-plots", "--no-progress"])
    stdout = capsys.readouterr().out
    assert rc == 0
    alarms = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    alarms = [o for o in alarms if o["alarm"]]
    assert alarms
    for o in alarms:
        assert o["statistic"] > o["threshold"], o
    import re

    shown = [float(v) for v in re.findall(r"([0-9.]+) > threshold", stdout)]
    assert shown and all(v > 6.0 for v in shown), shown


def _vectors_jsonl(tmp_path: Path, n: int = 400, d: int = 40) -> Path:
    rng = np.random.default_rng(0)
    rows = [json.dumps({"key": f"k{i % 2}", "y": i % 3,
                        "value": [round(float(v), 4) for v in rng.normal(size=d)]})
            for i in range(n)]
    path = tmp_path / "vectors.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_an_operator_that_rejects_every_record_stops_the_run_with_exit_2(tmp_path, capsys):
    # window_covariance needs vectors: on scalars every record is a dead letter
    src = pumps_csv(tmp_path, n=200)
    rc = main(["replay", str(src), "--source-opt", "key=pump", "--source-opt", "value=reading",
               "--operator", "window_covariance", "--out", str(tmp_path / "run"),
               "--no-plots", "--no-progress", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    line = [ln for ln in err.splitlines() if ln.startswith("shiftwatch: error")]
    assert len(line) == 1
    assert "rejected by operator window_covariance" in line[0]
    assert "nothing was processed" in line[0] and "line 2" in line[0]


def test_rejections_stop_even_when_the_file_is_shorter_than_the_rule(tmp_path, capsys):
    src = _vectors_jsonl(tmp_path, n=60)
    rc = main(["replay", str(src), "--source-opt", "key=key", "--source-opt", "y=y",
               "--operator", "hare-tortoise", "--param", "in_dim=30", "--param", "n_classes=3",
               "--out", str(tmp_path / "run"), "--no-plots", "--no-progress", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "all 60 records" in err and "rejected by operator hare-tortoise" in err


def test_a_few_rejections_do_not_stop_a_run(tmp_path, capsys):
    src = pumps_csv(tmp_path, n=300)
    text = src.read_text().splitlines()
    text[5] = "pump-a,1700000001,NaN"
    src.write_text("\n".join(text) + "\n")
    rc = main(["replay", str(src), "--source-opt", "key=pump", "--source-opt", "value=reading",
               "--operator", "river:ADWIN", "--out", str(tmp_path / "run"), "--no-plots",
               "--no-progress", "--quiet"])
    assert rc == 0, capsys.readouterr().err


def test_a_labels_file_naming_an_unknown_key_fails_before_the_operators_run(tmp_path, capsys,
                                                                             monkeypatch):
    from shiftwatch.deploy import local

    ran = []
    monkeypatch.setattr(local.Pipeline, "run", lambda self: ran.append(1))
    src = pumps_csv(tmp_path, n=100)
    lab = tmp_path / "labels.json"
    lab.write_text(json.dumps({"pumpa": [30], "pump-b": []}))
    rc = main(["replay", str(src), "--source-opt", "key=pump", "--source-opt", "value=reading",
               "--operator", "river:ADWIN", "--labels", str(lab), "--out", str(tmp_path / "r"),
               "--no-plots", "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 2 and not ran
    assert "'pumpa' is not a key of the stream" in captured.err
    assert "did you mean pump-a?" in captured.err
    assert "alarms" not in captured.out  # no alarm table printed before the error


def test_a_chain_reports_every_detector_stages_alarms(tmp_path, capsys):
    # ADWIN's alarms drive the learner's resets: the run's line, report.json and report.html
    # say how many ADWIN raised, not only the last operator's (a learner's: none)
    src = _vectors_jsonl(tmp_path, n=1500, d=4)
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    for i, r in enumerate(rows):
        if i >= 800:
            r["value"] = [v + 4.0 for v in r["value"]]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "run"
    rc = main(["replay", str(src), "--source-opt", "key=key", "--source-opt", "y=y",
               "--operator", "river:ADWIN", "--param", "keep_input=true",
               "--operator", "hare-tortoise", "--param", "in_dim=4", "--param", "n_classes=3",
               "--param", "reset_on=alarm", "--out", str(out), "--no-plots", "--no-progress",
               "--quiet"])
    stdout = capsys.readouterr().out
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    (adwin,) = report["alarms_by_operator"]
    assert adwin["operator"] == "river:ADWIN" and adwin["position"] == 0 and adwin["alarms"] > 0
    assert f"(alarms by operator: river:ADWIN {adwin['alarms']})" in stdout
    html = (out / "report.html").read_text()
    assert '"by_op":[{"operator":"river:ADWIN"' in html


def test_a_run_stopped_early_says_so_in_report_json_and_html(tmp_path, capsys, monkeypatch):
    # a write that fails midway (a full disk) stops the replay: the report says it is partial
    from shiftwatch.sinks import files as files_mod
    from shiftwatch.sinks.atomic_file import WriteFailed

    src = pumps_csv(tmp_path, n=3000)
    real_write = files_mod.JsonlSink.write
    calls = []

    def failing_write(self, records):
        calls.append(1)
        if len(calls) == 3:
            raise WriteFailed({str(self.path): "No space left on device"})
        return real_write(self, records)

    monkeypatch.setattr(files_mod.JsonlSink, "write", failing_write)
    real_columns = files_mod.JsonlSink.write_columns  # the replay's columnar path

    def failing_columns(self, columns):
        calls.append(1)
        if len(calls) == 3:
            raise WriteFailed({str(self.path): "No space left on device"})
        return real_columns(self, columns)

    monkeypatch.setattr(files_mod.JsonlSink, "write_columns", failing_columns)
    out = tmp_path / "run"
    rc = main(["replay", str(src), "--source-opt", "key=pump", "--source-opt", "value=reading",
               "--operator", "river:ADWIN", "--out", str(out), "--no-plots", "--no-progress",
               "--quiet"])
    assert rc == 2
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False and "No space left" in report["incomplete"]["why"]
    assert report["incomplete"]["records_read"] < 9000
    html = (out / "report.html").read_text()
    assert "Partial results: the run stopped before its source ended" in html
    assert '"incomplete":{"why":' in html


def test_a_complete_run_says_so(tmp_path, capsys):
    report, _, _ = replay(tmp_path, capsys, {"*": []}, "--operator", "river:ADWIN")
    assert report["complete"] is True and "incomplete" not in report


def test_change_at_counts_the_labels_positions_after_a_stage_that_drops_records(tmp_path,
                                                                                  capsys):
    """Issue 34 (4): window_covariance window=50 emits nothing for a key's first 49 records;
    karcher after it counts its own records. The table, outputs.jsonl and keys.jsonl must all
    say the position among the key's inputs, the numbering the labels use."""
    rng = np.random.default_rng(3)
    lines = []
    for i in range(3000):
        for key, at in (("m1", 2000), ("m2", 1500)):
            scale = np.array([1.0, 1.0]) if i < at else np.array([4.0, 0.3])
            v = rng.normal(0, 1, 2) * scale
            lines.append(json.dumps({"key": key, "value": v.round(4).tolist()}))
    src = tmp_path / "m.jsonl"
    src.write_text("\n".join(lines) + "\n")
    lab = tmp_path / "labels.json"
    lab.write_text(json.dumps({"m1": [2000], "m2": [1500]}))
    out = tmp_path / "run"
    rc = main(["replay", str(src), "--source-opt", "key=key",
               "--operator", "window_covariance", "--param", "window=50",
               # (the threshold without its margin: a few false alarms per key to map)
               "--operator", "karcher", "--param", "calibration_margin=0",
               "--labels", str(lab), "--out", str(out),
               "--no-plots", "--no-progress"])
    stdout = capsys.readouterr().out
    assert rc == 0
    outs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    keys = {json.loads(x)["key"]: json.loads(x)
            for x in (out / "keys.jsonl").read_text().splitlines()}
    # the same chain through the Python API, change_at left as the detector counted it
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.operators import create

    class Keep:
        def __init__(self):
            self.records = []
        open = flush = close = lambda self: None  # noqa: E731
        def write(self, records):
            self.records.extend(records)
        def summary(self):
            return {}

    keep = Keep()
    Pipeline([json.loads(x) for x in lines], [create("window_covariance", window=50),
                                             create("karcher", calibration_margin=0)],
             [keep], progress=False,
             change_positions=False).run()
    for key in ("m1", "m2"):
        located = [o["change_at"] for o in outs if o["key"] == key and o.get("alarm")]
        assert len(located) >= 3, key
        assert keys[key]["located"] == sorted(set(located))
    # karcher counts only the records window_covariance emitted: 49 fewer per key
    assert [o["change_at"] for o in outs if o.get("alarm")] == [
        o["change_at"] + 49 for o in keep.records if o.get("alarm")]
    # the console's alarm table says the same numbers as outputs.jsonl
    rows = [line.split() for line in stdout.splitlines() if line.startswith(("m1 ", "m2 "))]
    assert rows
    by_offset = {o["offset"]: o["change_at"] for o in outs if o.get("alarm")}
    for row in rows:
        assert int(row[3]) == by_offset[int(row[1])], row
    assert min(abs(p - 2000) for p in keys["m1"]["located"]) < 25
