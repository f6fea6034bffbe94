"""What a user needs to know that only the source said (issue 34, 9-10): each operator's
parameters with their meanings, and a missing parameter named with what it means."""

from __future__ import annotations

import json

import pytest

from shiftwatch.deploy.cli import main
from shiftwatch.operators import create, list_operators
from shiftwatch.operators.registry import param_help
from shiftwatch.operators.source_info import param_docs


@pytest.mark.parametrize("name", [i.name for i in list_operators()])
def test_every_parameter_of_every_operator_has_a_meaning(name):
    info = next(i for i in list_operators() if i.name == name)
    docs = param_help(name)
    missing = [k for k in info.params if not docs.get(k)]
    assert not missing, f"{name}: no description of {missing}"


def test_shiftwatch_operators_name_prints_each_parameter_with_its_meaning(capsys):
    assert main(["operators", "karcher"]) == 0
    out = capsys.readouterr().out
    assert "target_arl = 1000.0" in out
    # the documented caveat a user could not see in the one-line listing
    assert "calibrated" in out.split("target_arl = 1000.0")[1].split("\n  ")[1]
    assert main(["operators", "cs", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["params"]["alpha"]["default"] == 0.001 and doc["params"]["alpha"]["help"]


def test_an_unknown_operator_name_is_one_line_with_a_suggestion(capsys):
    assert main(["operators", "kercher"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean karcher?" in err[0]


def test_a_missing_required_parameter_is_named_with_its_meaning():
    with pytest.raises(ValueError) as exc:
        create("hare-tortoise")
    msg = str(exc.value)
    assert "needs in_dim (Length of the feature vector) and n_classes" in msg
    assert "--param in_dim=..." in msg and "__init__" not in msg


def test_param_docs_reads_grouped_names_and_stops_at_the_next_section():
    doc = ("S.\n\nParameters\n----------\nstep_slow, step_fast\n    Steps.\nfield : str\n"
           "    Path.\n\nNotes\n-----\nnot a parameter\n    text\n")
    assert param_docs(doc) == {"step_slow": "Steps.", "step_fast": "Steps.", "field": "Path."}


def test_labels_given_inline_as_json_and_no_alarm_table_before_a_fatal_error(tmp_path,
                                                                              capsys):
    src = tmp_path / "s.csv"
    src.write_text("key,value\n" + "".join(f"a,{i % 5}\n" for i in range(300)))
    out = tmp_path / "r"
    assert main(["replay", str(src), "--source-opt", "key=key", "--operator", "river:ADWIN",
                 "--labels", "[]", "--out", str(out), "--no-plots", "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["labelled_keys"] == 1
    capsys.readouterr()
    # every record rejected: the error is the last word, no "0 alarms" table before it
    assert main(["replay", str(src), "--source-opt", "key=key", "--operator",
                 "window_covariance", "--out", str(out), "--no-plots", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "alarms" not in captured.out and "rejected by operator" in captured.err


def test_a_semicolon_csv_suggests_its_delimiter(tmp_path, capsys):
    src = tmp_path / "s.csv"
    src.write_text("pump;reading\na;1\n")
    assert main(["replay", str(src), "--source-opt", "value=reading", "--operator", "cs",
                 "--out", str(tmp_path / "r")]) == 2
    assert "try --source-opt delimiter=;" in capsys.readouterr().err
