"""A JSON Lines file on the replay's columnar path writes what the record path writes, byte
for byte: seeded ``.jsonl`` / ``.jsonl.gz`` streams with bad lines in them (see
``tests/streams/test_jsonl_columns.py``) are replayed twice, once with
``SHIFTWATCH_RECORD_PATH=1``, for ``cs``, ``river:ADWIN`` and ``standardize -> river:ADWIN``:
``outputs.jsonl``, ``dead_letters.jsonl``, ``keys.jsonl``, ``report.json`` (and for the chain
``report.html``) and the summary line must be the same, and the columnar path must have been
taken."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from test_columnar_chain import _same as _chain_same
from test_columnar_replay import _files, _replay, _same

from shiftwatch.deploy import Pipeline, columnar
from shiftwatch.deploy.columnar import columnar_run
from shiftwatch.operators import create
from shiftwatch.sinks import DeadLetterSink, EvaluationSink, JsonlSink
from shiftwatch.streams.files import JsonlSource

_STREAMS = Path(__file__).parents[1] / "streams"
if str(_STREAMS) not in sys.path:  # (its own imports: the helpers beside it)
    sys.path.append(str(_STREAMS))
_spec = importlib.util.spec_from_file_location("_jsonl_streams",
                                               _STREAMS / "test_jsonl_columns.py")
_streams = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_streams)
messy_jsonl = _streams.messy_jsonl

KEYED = ["--source-opt", "key=key", "--source-opt", "ts=ts"]
OPS = {"cs": ["--operator", "cs"], "adwin": ["--operator", "river:ADWIN"],
       "chain": ["--operator", "standardize", "--operator", "river:ADWIN"]}


def _both(monkeypatch, capsys, tmp_path, path, op, args, emit="all", extra=(), expect=True):
    same = _chain_same if op == "chain" else _same
    return same(monkeypatch, capsys, tmp_path, path, OPS[op] + args, emit, extra,
                expect=expect)


@pytest.mark.parametrize("emit", ["all", "alarms"])
@pytest.mark.parametrize("op", ["cs", "adwin", "chain"])
def test_same_files_as_the_record_path(monkeypatch, capsys, tmp_path, op, emit):
    path = messy_jsonl(tmp_path / "s.jsonl", seed=1)
    got = _both(monkeypatch, capsys, tmp_path, path, op, KEYED, emit)
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    assert b"invalid JSON" in got["dead_letters.jsonl"]
    if emit == "all":
        assert got["outputs.jsonl"].count(b"\n") > 1500


@pytest.mark.parametrize("case", [
    dict(seed=2, batch="7"), dict(seed=3, batch="1"), dict(seed=4, ts=False, batch="64"),
    dict(seed=5, key=False), dict(seed=6, crlf=True), dict(seed=7, gz=True, batch="333"),
    dict(seed=9, key_kind="int", keys=40), dict(seed=10, key_kind="list", batch="50"),
    dict(seed=11, key_kind="float", bad=0.25),
])
@pytest.mark.parametrize("op", ["cs", "adwin", "chain"])
def test_same_files_for_other_layouts_and_batch_sizes(monkeypatch, capsys, tmp_path, case,
                                                      op):
    case = dict(case)
    batch = case.pop("batch", None)
    path = messy_jsonl(tmp_path / ("s.jsonl.gz" if case.get("gz") else "s.jsonl"), n=1200,
                       **case)
    opts = (["--source-opt", "key=key"] if case.get("key", True) else []) + (
        ["--source-opt", "ts=ts"] if case.get("ts", True) else [])
    fallback = op == "cs" and not case.get("key", True)  # cs locating by a split: no fleet
    args = opts + (["--param", "locate=meanvar"] if fallback else [])
    _both(monkeypatch, capsys, tmp_path, path, op, args, "all",
          ["--batch-size", batch] if batch else [], expect=not fallback)


def test_operator_dead_letters_keep_their_origin(monkeypatch, capsys, tmp_path):
    """Values ``cs`` refuses (outside its bounds): the operator's dead letters name the
    file, line and offset as the record path's do."""
    path = messy_jsonl(tmp_path / "s.jsonl", seed=12)
    got = _same(monkeypatch, capsys, tmp_path, path,
                ["--operator", "cs", "--param", "cs=hoeffding", "--param", "lower=-2",
                 "--param", "upper=4"] + KEYED)
    text = got["dead_letters.jsonl"]
    assert b'"operator":"cs"' in text
    assert b'"origin":{"file":"' in text and b'"line":' in text


def test_a_damaged_gz_file(monkeypatch, capsys, tmp_path):
    path = messy_jsonl(tmp_path / "s.jsonl.gz", n=3000, seed=8, gz=True)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    for op in ("adwin", "chain"):
        got = _both(monkeypatch, capsys, tmp_path / op, cut, op, KEYED)
        assert b"file is truncated after line" in got["dead_letters.jsonl"]


@pytest.mark.parametrize("op", ["cs", "adwin", "chain"])
def test_many_super_batches(monkeypatch, capsys, tmp_path, op):
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 64)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 1)
    path = messy_jsonl(tmp_path / "s.jsonl", n=1500, seed=13)
    for batch in ("7", "1000"):
        _both(monkeypatch, capsys, tmp_path / batch, path, op, KEYED, "all",
              ["--batch-size", batch])


def test_a_file_of_dead_letters_stops_the_same_way(monkeypatch, capsys, tmp_path):
    rows = [f'{{"key": "k", "ts": {i}, "value": "oops"}}' if i % 9 else "" for i in range(160)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(rows + ['{"key": "k", "ts": 1, "value": 2.0}']) + "\n")
    a = _replay(monkeypatch, capsys, path, tmp_path / "rec", OPS["cs"] + KEYED, "all", True)
    b = _replay(monkeypatch, capsys, path, tmp_path / "col", OPS["cs"] + KEYED, "all", False)
    assert a == b
    assert a[0] == 2  # stopped after the first 100 dead letters
    assert _files(tmp_path / "rec") == _files(tmp_path / "col")


@pytest.mark.parametrize("lines", [
    ['{"key": "a", "ts": 1, "value": 1}', '{"key": "a", "ts": 2, "value": [1, 2]}'],
    ['{"key": 1, "ts": 1, "value": 1}', '{"key": 1.0, "ts": 2, "value": 2}'],
    ['{"key": NaN, "ts": 1, "value": 1}'],
])
def test_what_columns_cannot_hold_takes_the_record_path(monkeypatch, capsys, tmp_path, lines):
    """A vector value, keys equal but written differently, a NaN key, anywhere in the file:
    the whole file takes the record path (found by reading it once), with the same files."""
    path = tmp_path / "v.jsonl"
    ok = [f'{{"key": "b", "ts": {i}, "value": {i % 7}}}' for i in range(3000)]
    path.write_text("\n".join(ok + lines) + "\n")
    _both(monkeypatch, capsys, tmp_path, path, "cs", KEYED, "all", expect=False)


def _pipeline(path, op, out, columnar, **opts):
    src = JsonlSource(path, **opts)
    sinks = [JsonlSink(out / "outputs.jsonl"), EvaluationSink(out, plots=False, html=False)]
    return Pipeline(src, [op], sinks, dead_letters=DeadLetterSink(out / "dead_letters.jsonl"),
                    batch_size=50, progress=False, columnar=columnar)


def test_what_takes_the_columnar_path(tmp_path):
    path = messy_jsonl(tmp_path / "s.jsonl", n=100, seed=14)
    out = tmp_path / "o"
    keyed = {"key": "key", "ts": "ts"}
    assert columnar_run(_pipeline(path, create("cs"), out, None, **keyed)) is not None
    assert columnar_run(_pipeline(path, create("river:ADWIN"), out, None, **keyed)) is not None
    assert columnar_run(_pipeline(path, create("cs"), out, None, value="value")) is not None
    assert columnar_run(_pipeline(path, create("cs"), out, False, **keyed)) is None
    assert columnar_run(_pipeline(path, create("cs"), out, None, y="ts")) is None
    assert columnar_run(_pipeline(path, create("cs"), out, None, extra=["z"])) is None
    assert columnar_run(_pipeline(path, create("cs"), out, None, value=["value"])) is None
    assert columnar_run(_pipeline(path, create("cs"), out, None, ts="ts",
                                  ts_format="iso")) is None
    assert columnar_run(_pipeline(path, create("river:DDM"), out, None, **keyed)) is None
