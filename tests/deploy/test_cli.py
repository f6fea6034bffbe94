from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shiftwatch.deploy.cli import load_labels, main, parse_params

ROOT = Path(__file__).resolve().parents[2]


def _csv_with_bad_lines(tmp_path: Path) -> Path:
    lines = ["ts,sensor,temp"]
    for i in range(300):
        temp = 20.0 + (5.0 if i >= 150 else 0.0) + 0.1 * ((i * 7) % 5)
        lines.append(f"{i},s1,{temp}")
    lines[20] = "19,s1,abc"          # not a number
    lines[40] = "39,s1"              # missing column
    lines[60] = "59,s1,nan"          # not finite
    lines[80] = "79,s1,1,2,3"        # too many columns
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_csv_with_malformed_lines_finishes_and_dead_letters_them(tmp_path, capsys):
    path = _csv_with_bad_lines(tmp_path)
    out = tmp_path / "run"
    rc = main(["replay", str(path), "--source-opt", "value=temp", "--source-opt", "key=sensor",
               "--source-opt", "ts=ts", "--operator", "river:PageHinkley",
               "--param", "threshold=10", "--labels", "150", "--out", str(out),
               "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "4 dead letters" in text
    dead = [json.loads(line) for line in (out / "dead_letters.jsonl").read_text().splitlines()]
    assert sorted(d["origin"]["line"] for d in dead) == [21, 41, 61, 81]
    assert all(d["reason"] and d["origin"]["file"].endswith("readings.csv") for d in dead)
    outputs = (out / "outputs.jsonl").read_text().splitlines()
    assert len(outputs) == 296
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["f1"] is not None
    assert list(out.glob("*.png"))


def test_operators_lists_river_and_builtin(capsys):
    assert main(["operators"]) == 0
    text = capsys.readouterr().out
    for name in ("river:ADWIN", "river:PageHinkley", "river:DDM", "standardize"):
        assert name in text
    assert main(["operators", "--json"]) == 0
    names = {o["name"] for o in json.loads(capsys.readouterr().out)}
    assert "river:KSWIN" in names


@pytest.mark.parametrize("argv, fragment", [
    (["replay", "nope.csv", "--operator", "river:ADWIN", "--out", "x"], "nope.csv"),
    (["replay", "synth:gaussian", "--operator", "nope", "--out", "x"], "unknown operator"),
    (["replay", "synth:gaussian", "--operator", "river:ADWIN", "--param", "deltaa=1",
      "--out", "x"], "deltaa"),
    (["replay", "synth:gaussian", "--operator", "standardize", "--param", "burn_in=1",
      "--out", "x"], "burn_in"),
    (["replay", "synth:gaussian", "--operator", "river:ADWIN", "--param", "oops",
      "--out", "x"], "key=value"),
    (["replay", "synth:gaussian", "--out", "x"], "--operator"),
])
def test_user_errors_are_one_line_exit_2(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shiftwatch: error:") and "\n" not in err and fragment in err
    assert "Traceback" not in err


def test_console_script_error_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "shiftwatch.deploy.cli", "replay", "missing.jsonl",
                           "--operator", "river:ADWIN", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_demo_writes_report_and_png(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path), "--dataset", "UKCoalEmploy",
               "--dataset", "RunLog", "--no-sensors"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "river:ADWIN" in text and "zero (no alarm)" in text
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["datasets"]) == {"UKCoalEmploy", "RunLog"}
    run = report["datasets"]["RunLog"]["runs"]["river:PageHinkley"]
    assert 0.0 <= run["f1"] <= 1.0 and 0.0 <= run["covering"] <= 1.0
    assert (tmp_path / "demo.png").stat().st_size > 10_000


def test_parse_params_and_labels(tmp_path):
    assert parse_params(["a=1", "b=x y", "c=true"]) == {"a": 1, "b": "x y", "c": True}
    f = tmp_path / "ann.json"
    f.write_text(json.dumps({"ukcoal": {"1": [3, 1], "2": []}}))
    # the data set named like the source: its annotators, for every key
    assert load_labels(str(f), "ukcoal") == {"*": {"1": [1, 3], "2": []}}
    f.write_text(json.dumps([5, 2]))
    assert load_labels(str(f)) == {"*": [2, 5]}


def test_readme_commands_are_what_ci_runs():
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    cmds = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(cmds) == 2 and "shiftwatch demo" in cmds[0] and "pytest" in cmds[1]
    # a paragraph saying what shiftwatch is comes first; the first fenced block (what
    # .ci/run reads) is the bash block of the two commands
    assert text.lstrip().startswith("# shiftwatch\n")
    assert text.split("```", 1)[1].startswith("bash\n")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "ruff check" in ci and "mkdocs build --strict" in ci


def test_readme_python_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "out" / "outputs.jsonl").exists()
    assert (tmp_path / "out" / "report.json").exists()


def test_replay_emit_alarms_writes_only_alarms_and_scores_the_same(tmp_path):
    """--emit alarms: outputs.jsonl holds the alarm outputs only (issue 39), the report is the
    one of a run that wrote every output."""
    runs = {}
    for emit in ("all", "alarms"):
        out = tmp_path / emit
        assert main(["replay", "synth:gaussian-mean", "--operator", "cs", "--out", str(out),
                     "--no-plots", "--no-progress", "--quiet", "--emit", emit]) == 0
        lines = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
        report = json.loads((out / "report.json").read_text())
        runs[emit] = (lines, report["summary"])
    every, alarms = runs["all"][0], runs["alarms"][0]
    assert len(every) == 1000 and alarms == [o for o in every if o.get("alarm")]
    assert alarms and runs["all"][1] == runs["alarms"][1]
