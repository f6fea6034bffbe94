"""The evaluating sink on small hand-made runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shiftwatch.sinks import EvaluationSink, evaluate_detector, f_measure, merge_change_points

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _strict_json(path):
    def reject(name):
        raise ValueError(f"{name} in report")

    return json.loads(path.read_text(), parse_constant=reject)


def _detector_run(n=120, cp=60, alarms_a=(30, 63), alarms_b=(64,)):
    """Two keys interleaved: key a holds even offsets, key b odd ones."""
    rng = np.random.default_rng(0)
    inputs, outputs = [], []
    for i in range(n):
        for j, key in enumerate(("a", "b")):
            offset = 2 * i + j
            shift = 3.0 if i >= cp else 0.0
            value = float(rng.normal() + shift) if key == "a" else (rng.normal(size=2) + shift)
            inputs.append({"key": key, "ts": float(offset), "offset": offset, "value": value})
            alarm = i in (alarms_a if key == "a" else alarms_b)
            outputs.append(
                {
                    "key": key,
                    "ts": float(offset),
                    "offset": offset,
                    "alarm": alarm,
                    "statistic": float(i % 7),
                    "threshold": 5.0,
                }
            )
    return inputs, outputs


def test_detector_report_and_plots(tmp_path):
    inputs, outputs = _detector_run()
    sink = EvaluationSink(
        tmp_path / "ev", annotations={"*": {"u1": [60], "u2": [58]}}, name="t",
        operator="cs(alpha=0.01)",
    )
    sink.open()
    for start in range(0, len(outputs), 50):  # micro-batches, outputs before their inputs
        sink.write(outputs[start : start + 50])
        sink.write_inputs(inputs[start : start + 50])
    sink.flush()
    sink.close()
    report = _strict_json(tmp_path / "ev" / "report.json")
    assert report == sink.report
    assert report["name"] == "t" and report["operator"] == "cs(alpha=0.01)"
    assert report["annotations"] == "shared by all keys"
    assert "keys" not in report  # per-key detail is in keys.jsonl
    assert report["keys_file"] == str(tmp_path / "ev" / "keys.jsonl")
    keys = sink.key_reports()
    assert list(keys) == ["a", "b"] and keys["a"]["key"] == "a"

    a = keys["a"]
    assert a["n_records"] == 120
    det = a["detector"]
    # positions in the key's own series, not the global offsets
    assert det["alarms"] == [30, 63]
    assert det["change_points"] == [58]  # 60 merged into 58 (within the margin)
    expected = f_measure({"u1": [60], "u2": [58]}, [30, 63], return_PR=True)
    assert (det["f1"], det["precision"], det["recall"]) == pytest.approx(expected)
    assert det["detection"]["delays"] == [5]
    assert det["detection"]["false_alarms"] == [30]
    # 120 samples minus 58..63 (6 pending samples), one false alarm
    assert det["detection"]["average_run_length"] == 114.0

    b = keys["b"]["detector"]
    assert b["alarms"] == [64] and b["detection"]["average_run_length"] is None  # infinite

    agg = report["aggregate"]["detector"]
    assert agg["alarms"] == 3 and agg["n_series"] == 2
    assert agg["f1"] == pytest.approx((det["f1"] + b["f1"]) / 2)
    assert agg["detection"]["delays"] == [5, 6]
    assert agg["detection"]["n_false_alarms"] == 1
    assert agg["detection"]["average_run_length"] == pytest.approx(114 + 113)

    assert sorted(p.rsplit("/", 1)[-1] for p in report["plots"]) == ["series.png", "statistic.png"]
    for name in ("series.png", "statistic.png"):
        assert (tmp_path / "ev" / name).read_bytes()[:8] == PNG_MAGIC
    assert "plot_errors" not in report
    assert keys["a"]["alarms"] == [30, 63]
    assert keys["a"]["alarm_ts"] == [60.0, 126.0]  # the inputs' ts at those positions
    assert report["alarmed_keys"] == [
        {"key": "a", "alarms": 2, "first_alarm": 30, "first_alarm_ts": 60.0},
        {"key": "b", "alarms": 1, "first_alarm": 64, "first_alarm_ts": 129.0}]
    assert report["summary"] == {
        "records": 240,
        "keys": 2,
        "alarms": 3,
        "keys_with_alarms": 2,
        "labelled_keys": 2,
        "f1": agg["f1"],
        "f1_1pct": agg["f1_1pct"],
        "precision": agg["precision"],
        "recall": agg["recall"],
        "covering": agg["covering"],
        "changes": 2,
        "detected": 2,
        "mean_delay": 5.5,
        "false_alarms": 1,
        "missed": 0,
        "average_run_length": 227.0,
    }
    assert sink.summary()["f1"] == agg["f1"]


def test_annotations_per_key_and_missing(tmp_path):
    inputs, outputs = _detector_run()
    sink = EvaluationSink(tmp_path, annotations={"a": {"u": [60]}}, plots=False)
    sink.write_inputs(inputs)
    sink.write(outputs)
    sink.close()
    report = sink.report
    assert report["annotations"] == "per key"
    keys = sink.key_reports()
    assert keys["a"]["detector"]["f1"] is not None
    assert "detector" not in keys["b"]  # key b has no annotations: not scored
    assert keys["b"]["alarms"] == [64]
    assert report["aggregate"]["detector"]["n_annotated"] == 1
    # b's alarm is no false alarm: without labels an alarm is neither false nor true
    assert report["aggregate"]["detector"]["detection"]["n_false_alarms"] == \
        keys["a"]["detector"]["detection"]["n_false_alarms"]
    assert report["plots"] == []
    assert not list(tmp_path.glob("*.png"))


def test_without_inputs_positions_count_outputs(tmp_path):
    outputs = [{"key": 7, "offset": 100 + 3 * i, "alarm": i == 12} for i in range(20)]
    # a detector may emit two outputs for one input: they share a position
    outputs.insert(5, {"key": 7, "offset": outputs[4]["offset"], "alarm": False})
    sink = EvaluationSink(tmp_path, annotations=[10])
    sink.write(outputs)
    sink.close()
    det = sink.key_reports()["7"]["detector"]
    assert det["n"] == 20 and det["alarms"] == [12]
    assert det["detection"]["delays"] == [2]
    assert [p.rsplit("/", 1)[-1] for p in sink.report["plots"]] == []  # no series, no statistic


def test_matrix_inputs_and_unplottable_values(tmp_path):
    inputs = [{"key": "m", "offset": i, "value": (np.eye(2) * (1 + i)).tolist()} for i in range(30)]
    inputs[3]["value"] = "garbage"
    inputs[4]["value"] = [1.0, 2.0]  # wrong shape for this key
    outputs = [{"key": "m", "offset": i, "alarm": i == 20, "statistic": None} for i in range(30)]
    outputs.append({"key": "m", "offset": 999, "alarm": True})  # no matching input
    sink = EvaluationSink(tmp_path)
    sink.write(outputs)
    sink.write_inputs(inputs)
    sink.close()
    entry = sink.key_reports()["m"]
    assert entry["unmatched_outputs"] == 1
    assert entry["alarms"] == [20] and "detector" not in entry  # no labels: not scored
    assert (tmp_path / "series.png").exists() and not (tmp_path / "statistic.png").exists()


def test_learner_report(tmp_path):
    outputs = []
    for i in range(40):
        task = i // 20
        y = i % 2
        correct = i < 20 or i % 4 != 0  # task 0: all right; task 1: 3 of 4 right
        outputs.append(
            {
                "key": "L",
                "offset": i,
                "task": task,
                "y": y,
                "y_pred": y if correct else 1 - y,
                "y_pred_hare": y,
            }
        )
    outputs.append({"key": "L", "offset": 40, "task": 0, "y": 1, "y_pred": 0, "train": False})
    outputs.append({"key": "L", "offset": 41, "task": 0, "y": 1, "y_pred": 1, "train": False})
    outputs.append({"key": "L", "offset": 42, "y_pred": 1})  # unlabelled
    sink = EvaluationSink(tmp_path, name="learn")
    sink.write(outputs)
    sink.close()
    report = _strict_json(tmp_path / "report.json")
    learner = report["aggregate"]["learner"]
    assert learner["n_predictions"] == 43 and learner["n_labelled"] == 42
    main = learner["y_pred"]
    assert main["accuracy"] == pytest.approx((20 + 15 + 1) / 42)
    assert main["accuracy_by_task"] == pytest.approx({"0": 21 / 22, "1": 15 / 20})
    assert main["accuracy_matrix"]["tasks"] == ["0", "1"]
    assert main["accuracy_matrix"]["R"] == [[1.0, None], [0.5, 0.75]]
    assert main["accuracy_matrix"]["counts"] == [[20, 0], [2, 20]]
    assert main["forgetting"] == pytest.approx(0.5)
    assert main["average_accuracy"] == pytest.approx((0.5 + 0.75) / 2)
    assert learner["y_pred_hare"]["accuracy"] == 1.0
    assert learner["y_pred_hare"]["forgetting"] is None  # no evaluation after task 1
    assert sink.key_reports()["L"]["learner"]["y_pred"]["accuracy"] == main["accuracy"]
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == PNG_MAGIC
    assert sink.summary()["accuracy"] == main["accuracy"]
    assert report["summary"]["forgetting"] == pytest.approx(0.5)


def test_empty_run_and_double_close(tmp_path):
    sink = EvaluationSink(tmp_path / "new")
    sink.close()
    sink.close()
    report = _strict_json(tmp_path / "new" / "report.json")
    assert report["aggregate"] == {"n_keys": 0, "n_records": 0}
    assert report["summary"] == {"records": 0, "keys": 0}
    assert report["plots"] == []


def test_evaluate_detector_and_merge():
    r = evaluate_detector([52, 130], {"a": [50], "b": [48, 150]}, n=200)
    assert r["f1"] == pytest.approx(20 / 27)
    assert r["covering"] is not None and r["n_alarms"] == 2
    assert evaluate_detector([3], [5, 500], n=10)["change_points"] == [5]
    # Unknown labels (None, {}): nothing is scored, no alarm is a false alarm (issue 24, 2d).
    none = evaluate_detector([3], None, n=10)
    assert none["f1"] is None and none["detection"] is None
    assert evaluate_detector([], {}, n=10)["detection"] is None
    # No change at all ([]): every alarm is false; none means an infinite run length.
    assert evaluate_detector([3], [], n=10)["detection"]["average_run_length"] == 10.0
    assert math.isinf(evaluate_detector([], [], n=10)["detection"]["average_run_length"])
    assert merge_change_points({"a": [10, 20], "b": [15, 21, 40]}, margin=5) == [10, 20, 40]
    assert merge_change_points(None) == []


def test_parameters_are_validated(tmp_path):
    with pytest.raises(ValueError, match="margin"):
        EvaluationSink(tmp_path, margin=-1)
    with pytest.raises(ValueError, match="max_panels"):
        EvaluationSink(tmp_path, max_panels=0)
    for bad in ({"u": [-1]}, {"k": {"u": [2.5]}}, [None], {"u": 5}):
        with pytest.raises(ValueError, match="annotations"):
            EvaluationSink(tmp_path, annotations=bad)
    EvaluationSink(tmp_path, annotations={"k": {"u": [np.int64(3), 4.0]}, "j": {}})


# ---- "located at": change_at scored next to the alarms -----------------------------------


def test_located_changes_are_scored_next_to_alarms(tmp_path):
    from shiftwatch.sinks.evaluation import EvaluationSink as Sink

    sink = Sink(tmp_path, annotations={"s": [50, 120]}, plots=True)
    sink.open()
    inputs = [{"key": "s", "offset": i, "value": float(i >= 50)} for i in range(200)]
    # A dead-lettered input at offset 10 has no output: the detector counts 199 records, so
    # its change_at 119 is position 120 in the key's series.
    sink.write_inputs(inputs)
    outs = []
    for i in range(200):
        if i == 10:
            continue
        o = {"key": "s", "offset": i, "alarm": i in (60, 140)}
        if i == 60:
            o["change_at"] = 50 - 1  # detector's 49th accepted record = position 50
        if i == 140:
            o["change_at"] = 119
        outs.append(o)
    sink.write(outs)
    sink.close()
    det = sink.key_reports()["s"]["detector"]
    assert det["f1"] < 1.0  # detected 10 and 20 records late: outside the margin
    loc = det["location"]
    assert loc["located"] == [50, 120] and loc["f1"] == 1.0 and loc["mean_abs_error"] == 0.0
    summary = sink.report["summary"]
    assert summary["located_f1"] == 1.0 and summary["location_error"] == 0.0
    assert summary["f1"] == det["f1"]
    assert any(p.endswith("series.png") for p in sink.report["plots"])


def test_location_error_and_unmatched_locations(tmp_path):
    from shiftwatch.sinks.evaluation import EvaluationSink as Sink
    from shiftwatch.sinks.scoring import evaluate_locations

    r = evaluate_locations([40, 300], {"a": [50, 310]}, n=400)
    assert r["errors"] == [10, 10] and r["mean_abs_error"] == 10.0 and r["f1"] < 1.0
    assert evaluate_locations([40], None, n=100)["mean_abs_error"] is None
    sink = Sink(tmp_path, annotations=[30], plots=False)
    sink.open()
    sink.write([{"key": 1, "offset": i, "alarm": i == 35, **({"change_at": 500} if i == 35
                                                            else {})} for i in range(50)])
    sink.close()
    loc = sink.key_reports()["1"]["detector"]["location"]
    assert loc["located"] == [] and loc["unmatched_locations"] == 1
    no_loc = Sink(tmp_path / "b", annotations=[30], plots=False)
    no_loc.open()
    no_loc.write([{"key": 1, "offset": i, "alarm": i == 35} for i in range(50)])
    no_loc.close()
    assert "location" not in no_loc.key_reports()["1"]["detector"]
    assert "located_f1" not in no_loc.report["summary"]


def _plots_of(tmp_path, ts_of):
    """series.png and statistic.png figures of a one-key run whose input i has ts_of(i)."""
    from shiftwatch.sinks.plots import (
        plot_series as _plot_series,
    )
    from shiftwatch.sinks.plots import (
        plot_statistic as _plot_statistic,
    )

    sink = EvaluationSink(tmp_path / "ev", annotations=[50], plots=False, html=False)
    rng = np.random.default_rng(0)
    recs = [{"key": None, "offset": i, "ts": ts_of(i), "value": float(rng.normal() + (i >= 50))}
            for i in range(100)]
    sink.write_inputs(recs)
    sink.write([{**r, "alarm": r["offset"] == 60, "statistic": 0.1 * r["offset"]}
                for r in recs])
    sink._build_report()
    data = list(sink._plot_data.items())
    return _plot_series(data, 4, "t"), _plot_statistic(data, 4, "t")


def test_plots_show_epoch_ts_as_utc_time(tmp_path):
    from matplotlib import dates as mdates

    t0 = 1767225600.0  # 2026-01-01T00:00:00Z, one record a minute
    for fig in _plots_of(tmp_path, lambda i: t0 + 60.0 * i):
        ax = fig.axes[0]
        assert ax.get_xlabel() == "time (UTC)"
        assert isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
        lo, hi = (mdates.num2date(x) for x in ax.get_xlim())
        assert (lo.isoformat(), hi.isoformat()) == ("2026-01-01T00:00:00+00:00",
                                                    "2026-01-01T01:39:00+00:00")
        marks = {line.get_label(): line.get_xdata()[0] for line in ax.get_lines()
                 if line.get_label() in ("alarm", "true change")}
        # alarms and labels stay positions, drawn at the time of that position's record
        assert mdates.num2date(marks["alarm"]).isoformat() == "2026-01-01T01:00:00+00:00"
        assert mdates.num2date(marks["true change"]).isoformat() == "2026-01-01T00:50:00+00:00"


@pytest.mark.parametrize("ts_of", [float, lambda i: None, lambda i: 1767225600.0 - 60.0 * i],
                         ids=["index", "no ts", "out of order"])
def test_plots_keep_positions_when_ts_is_not_an_ordered_time(tmp_path, ts_of):
    from matplotlib import dates as mdates

    for fig in _plots_of(tmp_path, ts_of):
        ax = fig.axes[0]
        assert ax.get_xlabel() == "position in series"
        assert not isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
        alarm = [line.get_xdata()[0] for line in ax.get_lines() if line.get_label() == "alarm"]
        assert alarm == [60]


# A 1 MB key once took a replay 249 s and 867 MB: matplotlib laid out every glyph of it.
_HUGE = "k" * 1_000_000


def _long_key_sink(tmp_path, **kwargs):
    sink = EvaluationSink(tmp_path / "run", **kwargs)
    sink.open()
    for j, key in enumerate((_HUGE + "a", _HUGE + "b", "short")):
        sink.write_inputs([{"key": key, "offset": 3 * i + j, "value": float(i)}
                           for i in range(50)])
        sink.write([{"key": key, "offset": 3 * i + j, "alarm": i == 40, "statistic": float(i)}
                    for i in range(50)])
    return sink


def test_long_keys_are_cut_in_the_plot_titles(tmp_path):
    from shiftwatch.sinks.plots import plot_series, plot_statistic

    sink = _long_key_sink(tmp_path, plots=False, html=False)
    sink._build_report()
    data = list(sink._plot_data.items())
    for draw in (plot_series, plot_statistic):
        full = [ax.get_title(loc="left") for ax in draw(data, 6, "run").axes]
        assert all(t.endswith(": 1 alarm, the first at position 40") for t in full)
        titles = [t.split(": ")[0] for t in full]
        assert max(len(t) for t in titles) <= len("key ") + 60
        assert len(set(titles)) == 3 and titles[2] == "key short"  # the long two stay apart
        assert titles[0].startswith("key kkk") and "\u2026#" in titles[0]
    sink.close()
    keys = [json.loads(line)["key"] for line in
            (tmp_path / "run" / "keys.jsonl").read_text().splitlines()]
    assert sorted(map(len, keys)) == [5, 1_000_001, 1_000_001]  # data keep the keys


def test_long_keys_are_cut_in_report_html(tmp_path):
    sink = _long_key_sink(tmp_path, plots=False)
    sink.close()
    page = (tmp_path / "run" / "report.html").read_text()
    assert len(page) < 200_000  # the keys themselves would be 2 MB
    assert page.count("kkkk\u2026#") == 2 or page.count("kkkk\\u2026#") == 2
