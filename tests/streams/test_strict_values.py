"""Strict value coercion (issue 38, 6): a value is a JSON number (or a list of them); a JSON
string or boolean where a number is expected is a dead letter saying so, in a file replay, a
Kafka message and the operators' Python API alike; ``loose`` reads them as numbers."""

from __future__ import annotations

import json

import pytest

from shiftwatch.codec import decode_record
from shiftwatch.deploy.cli import main
from shiftwatch.operators import create
from shiftwatch.records import BadInput, DeadLetter, as_array, as_scalar
from shiftwatch.streams.files import JsonlSource

BAD = ["1e5", True, False, "NaN", [1.0, "2"], [1.0, True], [[1.0], [False]]]


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_string_or_boolean_is_not_a_number(value):
    with pytest.raises(BadInput, match="string|boolean"):
        (as_array if isinstance(value, list) else as_scalar)(value)
    with pytest.raises(BadInput, match="string|boolean"):
        decode_record(json.dumps({"value": value}).encode())


def test_loose_reads_numeric_strings_and_booleans():
    assert as_scalar("1e5", loose=True) == 1e5 and as_scalar(True, loose=True) == 1.0
    assert as_array([1, "2", True], loose=True).tolist() == [1.0, 2.0, 1.0]
    assert decode_record(b'{"value": "2.5"}', loose=True)["value"] == 2.5
    assert decode_record(b'{"value": [1, "2"]}', loose=True)["value"] == [1.0, 2.0]
    with pytest.raises(BadInput, match="not a number"):
        as_scalar("abc", loose=True)


def test_numbers_pass_as_before():
    assert as_scalar(3) == 3.0 and as_array([[1, 2], [3, 4.5]]).shape == (2, 2)
    assert decode_record(b'{"value": [1, 2.5]}')["value"] == [1.0, 2.5]


def test_jsonl_source_dead_letters_and_loose(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps({"value": v}) for v in [1.0, "1e5", True, 2.0]) + "\n")
    items = list(JsonlSource(path))
    dead = [i for i in items if isinstance(i, DeadLetter)]
    assert [i["value"] for i in items if not isinstance(i, DeadLetter)] == [1.0, 2.0]
    assert len(dead) == 2 and "string '1e5'" in dead[0].reason
    assert "boolean (true)" in dead[1].reason and "loose=true" in dead[1].reason
    loose = [i["value"] for i in JsonlSource(path, loose=True)]
    assert loose == [1.0, 1e5, 1.0, 2.0]


def test_operators_refuse_strings_through_the_python_api():
    out = create("cs").process_batch([{"value": "1e5"}, {"value": 1.0}])
    assert isinstance(out[0], DeadLetter) and "string" in out[0].reason
    # River's binary detectors take booleans as error indicators, as before
    outs = create("river:DDM").process_batch([{"value": bool(i % 7 == 0)} for i in range(50)])
    assert not any(isinstance(o, DeadLetter) for o in outs)


def test_replay_reports_them_and_loose_option(tmp_path, capsys):
    path = tmp_path / "v.jsonl"
    vals = [float(i % 5) for i in range(200)]
    vals[10], vals[20] = "1e5", True
    path.write_text("\n".join(json.dumps({"value": v}) for v in vals) + "\n")
    for opts, dead in (([], 2), (["--source-opt", "loose=true"], 0)):
        out = tmp_path / f"run{dead}"
        assert main(["replay", str(path), *opts, "--operator", "standardize", "--out",
                     str(out), "--no-plots", "--no-progress", "--quiet"]) == 0
        report = json.loads((out / "report.json").read_text())
        assert report["summary"]["records"] == 200 - dead


def test_pipeline_stage_takes_loose(tmp_path):
    from shiftwatch.deploy.pipeline import load_pipeline

    text = ("pipeline: p\nkafka: {bootstrap_servers: 'localhost:1'}\nstages:\n"
            "  - {name: a, input: i, output: o, operator: standardize, loose: true}\n"
            "  - {name: b, input: o, output: o2, operator: standardize}\n")
    (tmp_path / "p.yaml").write_text(text)
    cfg = load_pipeline(tmp_path / "p.yaml")
    assert [s.loose for s in cfg.stages] == [True, False]
    (tmp_path / "q.yaml").write_text(text.replace("loose: true", "loose: 1"))
    with pytest.raises(Exception, match="'loose' must be true or false"):
        load_pipeline(tmp_path / "q.yaml")
