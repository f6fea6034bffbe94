"""Issue 12, part 2: clear one-line errors (exit 2) for the user's mistakes, tracebacks for bugs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.deploy import cli
from shiftwatch.operators import create
from shiftwatch.operators.registry import resolve, suggest


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("detector,param,value", [
    ("river:ADWIN", "clock", 0), ("river:ADWIN", "delta", -1), ("river:ADWIN", "delta", 5),
    ("river:ADWIN", "max_buckets", 0), ("river:PageHinkley", "threshold", -1),
    ("river:PageHinkley", "alpha", 1.5), ("river:KSWIN", "alpha", 0),
    ("river:KSWIN", "stat_size", 100), ("river:DDM", "drift_threshold", 0),
    ("river:EDDM", "beta", 2), ("river:FHDDM", "confidence_level", 1),
    ("river:HDDMA", "drift_confidence", 0), ("river:HDDMW", "lambda_val", 0),
    ("river:DummyDriftDetector", "t_0", -1),
])
def test_river_parameters_out_of_range_are_refused_before_river(detector, param, value):
    with pytest.raises(ValueError, match=f"{param} must be"):
        create(detector, **{param: value})


def test_river_parameters_in_range_still_build():
    for detector, params in [("river:ADWIN", {"delta": 0.5, "clock": 1}),
                             ("river:PageHinkley", {"threshold": 0.1, "alpha": 1.0}),
                             ("river:KSWIN", {"alpha": 0.01, "window_size": 50, "stat_size": 20,
                                              "seed": 1}),
                             ("river:HDDMW", {"lambda_val": 1.0})]:
        create(detector, **params)


def test_bad_river_param_on_the_command_line_is_one_line_exit_2(capsys, tmp_path):
    rc, _, err = _run(capsys, "replay", "synth:gaussian", "--operator", "river:ADWIN",
                      "--param", "clock=0", "--out", str(tmp_path))
    assert rc == 2
    assert err == "shiftwatch: error: river:ADWIN: clock must be in [1, 10,000,000], got 0\n"


@pytest.mark.parametrize("name,expected", [
    ("adwin", "river:ADWIN"), ("ADWIN", "river:ADWIN"), ("river:pagehinkly", "river:PageHinkley"),
    ("page_hinkley", "river:PageHinkley"), ("Standardise", "standardize"), ("CS", "cs"),
    ("hddm_w", "river:HDDMW"),
])
def test_unknown_operator_names_get_a_suggestion(name, expected):
    assert suggest(name)[0] == expected
    with pytest.raises(ValueError, match=f"did you mean {expected}"):
        resolve(name)


def test_hddm_underscore_names_are_aliases():
    assert create("river:HDDM_A").name == "river:HDDMA"
    assert create("river:HDDM_W", lambda_val=0.1).name == "river:HDDMW"


def test_unknown_operator_cli(capsys, tmp_path):
    rc, _, err = _run(capsys, "replay", "synth:gaussian", "--operator", "adwin",
                      "--out", str(tmp_path))
    assert rc == 2 and err.count("\n") == 1 and "did you mean river:ADWIN?" in err


def test_a_valueerror_from_a_bug_is_a_traceback_and_exit_1(capsys, tmp_path, monkeypatch):
    from shiftwatch.sinks.evaluation import EvaluationSink

    def broken(self):
        raise ValueError("a bug, not the user's input")

    monkeypatch.setattr(EvaluationSink, "_build_report", broken)
    rc, _, err = _run(capsys, "replay", "synth:gaussian", "--operator", "river:ADWIN",
                      "--out", str(tmp_path), "--no-plots", "--no-progress")
    assert rc == 1
    assert "Traceback (most recent call last)" in err
    assert "internal error: ValueError: a bug" in err


def test_unknown_dataset_lists_each_name_once(capsys, tmp_path):
    rc, _, err = _run(capsys, "replay", "river:Nope", "--operator", "cs", "--out", str(tmp_path))
    assert rc == 2
    names = err.split("allowed: ")[1].strip().split(", ")
    assert len(names) == len(set(names)) and "datasets.AirlinePassengers" in names


def test_operator_dead_letters_carry_file_and_line_and_blank_lines_are_counted(capsys,
                                                                              tmp_path):
    src = tmp_path / "v.jsonl"
    src.write_text('{"key": "s1", "value": [1, 2]}\n\n\n{"key": "s1", "value": [1, 2, 3]}\n'
                   '{"key": "s1", "value": [1, 2]}\n  \n{"key": "s1", "value": "x"}\n')
    out = tmp_path / "out"
    rc, stdout, _ = _run(capsys, "replay", str(src), "--operator", "river:ADWIN",
                         "--source-opt", "key=key", "--out", str(out), "--no-plots",
                         "--no-progress")
    assert rc == 0
    dead = [json.loads(line) for line in (out / "dead_letters.jsonl").read_text().splitlines()]
    by_line = {d["origin"]["line"]: d for d in dead}
    assert set(by_line) == {4, 7}
    assert by_line[4]["operator"] == "river:ADWIN"  # rejected by the operator, not the source
    assert by_line[4]["origin"]["file"] == str(src)
    assert by_line[7]["operator"] is None
    assert "skipped 3 blank lines" in stdout


def test_dead_letter_summary_keeps_whole_words():
    from shiftwatch.deploy.executor import reason_kind

    long = "value " + "abcdefghij " * 12 + ", got 3"
    short = reason_kind(long)
    assert short.endswith(" ...") and all(w in long.split() for w in short[:-4].split())
    assert reason_kind("river:HDDMA takes 0/1 or booleans (1 = error), got 0.5") == \
        "river:HDDMA takes 0/1 or booleans (1 = error)"


def _keys(out) -> dict:
    """keys.jsonl by key."""
    return {json.loads(line)["key"]: json.loads(line)
            for line in (out / "keys.jsonl").read_text().splitlines()}


def test_labels_per_key(tmp_path, capsys):
    # s1 changes at 300; s2 never changes: per-key labels score s2 with no change points.
    import numpy as np

    rng = np.random.default_rng(3)
    rows = []
    for i in range(600):
        rows.append({"key": "s1", "value": float(rng.normal(4.0 if i >= 300 else 0.0, 1))})
        rows.append({"key": "s2", "value": float(rng.normal(0.0, 1))})
    src = tmp_path / "k.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"s1": [300], "s2": []}))
    out = tmp_path / "out"
    rc, _, _ = _run(capsys, "replay", str(src), "--operator", "river:ADWIN", "--source-opt",
                    "key=key", "--labels", str(labels), "--out", str(out), "--no-plots",
                    "--no-progress")
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["annotations"] == "per key"
    keys = _keys(out)
    assert keys["s1"]["detector"]["change_points"] == [300]
    assert keys["s2"]["detector"]["change_points"] == []
    assert keys["s2"]["detector"]["detection"]["n_missed"] == 0
    # the same positions as a shared list: s2 is then scored against 300 and misses it
    rc, _, _ = _run(capsys, "replay", str(src), "--operator", "river:ADWIN", "--source-opt",
                    "key=key", "--labels", "300", "--out", str(out), "--no-plots",
                    "--no-progress")
    assert _keys(out)["s2"]["detector"]["detection"]["n_missed"] == 1


def test_labels_json_formats(tmp_path):
    f = tmp_path / "l.json"
    f.write_text(json.dumps({"s1": {"a": [5, 3]}, "s2": {"a": []}}))
    assert cli.load_labels(str(f)) == {"s1": {"a": [3, 5]}, "s2": {"a": []}}
    f.write_text(json.dumps({"s1": [1.0, 2]}))
    assert cli.load_labels(str(f)) == {"s1": [1, 2]}
    f.write_text(json.dumps([-1]))
    with pytest.raises(cli.UserError, match="positions must be integers >= 0"):
        cli.load_labels(str(f))


def test_help_texts_for_every_replay_option():
    parser = cli.build_parser()
    replay = parser._subparsers._group_actions[0].choices["replay"]
    for action in replay._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help text"


def _pumps(tmp_path, n=400):
    rng = np.random.default_rng(4)
    rows = ["pump,temp"]
    for i in range(n):
        for k in ("pump-a", "pump-b", "pump-c"):
            rows.append(f"{k},{rng.normal(3.0 if k == 'pump-b' and i >= 300 else 0.0, 1):.4f}")
    src = tmp_path / "pumps.csv"
    src.write_text("\n".join(rows) + "\n")
    return src


def _replay_pumps(capsys, tmp_path, *extra):
    return _run(capsys, "replay", str(_pumps(tmp_path)), "--source-opt", "key=pump",
                "--source-opt", "value=temp", "--operator", "river:PageHinkley",
                "--out", str(tmp_path / "out"), "--no-plots", "--no-progress", "--quiet",
                *extra)


def test_a_label_name_that_is_not_a_key_is_an_error_naming_it_and_known_keys(tmp_path,
                                                                           capsys):
    # Issue 24, 2a: {"pumpb": [...]} was taken as an annotator whose labels every key got.
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"pumpb": [300]}))
    rc, _, err = _replay_pumps(capsys, tmp_path, "--labels", str(labels))
    assert rc == 2
    assert err.count("\n") == 1
    assert err.startswith(f"shiftwatch: error: --labels {labels}: 'pumpb' is not a key of "
                          "the stream (3 keys: pump-a, pump-b, pump-c; did you mean pump-b?)")
    labels.write_text(json.dumps({"pump-b": [300], "pump-x": [], "pump-y": [1]}))
    rc, _, err = _replay_pumps(capsys, tmp_path, "--labels", str(labels))
    assert rc == 2 and "2 names are not keys ('pump-x', 'pump-y')" in err


def test_annotators_for_every_key_are_written_under_a_star(tmp_path, capsys):
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"*": {"ann1": [300], "ann2": [302]}, "pump-c": []}))
    rc, _, _ = _replay_pumps(capsys, tmp_path, "--labels", str(labels))
    assert rc == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["annotations"] == "per key"


def _dated(tmp_path, n):
    rows = ["time,temp"] + [f"2026-01-01 {i // 60:02d}:{i % 60:02d},{20 + i % 7}"
                            for i in range(n)]
    src = tmp_path / "dated.csv"
    src.write_text("\n".join(rows) + "\n")
    return src


@pytest.mark.parametrize("command", ["replay", "calibrate"])
@pytest.mark.parametrize("n", [4500, 30])
def test_a_source_whose_first_records_are_all_dead_letters_stops_with_the_reason(
        tmp_path, capsys, command, n):
    # Issue 24, 2c: a wrong ts_format dead-lettered all 4,500 records and the replay exited 0.
    src = _dated(tmp_path, n)
    rc, _, err = _run(capsys, command, str(src), "--source-opt", "value=temp",
                      "--source-opt", "ts=time", "--source-opt", "ts_format=%d/%m/%Y",
                      "--operator", "river:PageHinkley", "--out", str(tmp_path / "out"),
                      *(["--no-plots", "--no-progress", "--quiet"] if command == "replay"
                        else []))
    assert rc == 2
    assert err.count("\n") == 1
    first = "the first 100" if n > 100 else f"all {n}"
    assert err.startswith(f"shiftwatch: error: {first} records of {src} are dead letters: "
                          "ts '2026-01-01 00:00' does not match format '%d/%m/%Y' (line 2)")


def test_a_few_dead_letters_at_the_start_do_not_stop_a_replay(tmp_path, capsys):
    src = _dated(tmp_path, 300)
    text = src.read_text().splitlines()
    text[1:4] = ["2026-01-01 00:00,abc"] * 3  # 3 bad values, then good records
    src.write_text("\n".join(text) + "\n")
    rc, out, _ = _run(capsys, "replay", str(src), "--source-opt", "value=temp",
                      "--source-opt", "ts=time", "--source-opt", "ts_format=%Y-%m-%d %H:%M",
                      "--operator", "river:PageHinkley", "--out", str(tmp_path / "out"),
                      "--no-plots", "--no-progress", "--quiet")
    assert rc == 0 and "3 dead letters" in out
