"""The chain ``standardize -> river:NAME`` on the columnar path writes what the record path
writes, byte for byte (``outputs.jsonl``, ``dead_letters.jsonl``, ``keys.jsonl``,
``report.json``, ``report.html`` and the summary line), on streams with bad rows."""

from __future__ import annotations

import os
import random

import pytest
from test_columnar_replay import _files, _pipeline, layout, messy_csv
from test_columnar_replay import _same as _replay_same

from shiftwatch.deploy import columnar
from shiftwatch.deploy.columnar import columnar_run
from shiftwatch.operators import create

KEYED = ["--source-opt", "key=key", "--source-opt", "ts=ts"]
CHAIN = ["--operator", "standardize", "--operator", "river:ADWIN"]


def _all_files(out):
    got = _files(out)
    p = os.path.join(out, "report.html")
    got["report.html"] = (open(p, "rb").read().replace(str(out).encode(), b"OUT")
                          if os.path.exists(p) else None)
    return got


def _same(*args, **kwargs):
    return _replay_same(*args, files=_all_files, **kwargs)


@pytest.mark.parametrize("emit", ["all", "alarms"])
@pytest.mark.parametrize("params", [[], ["--param", "burn_in=5"],
                                    ["--param", "burn_in=200", "--param", "min_std=0.5"]])
def test_same_files_as_the_record_path(monkeypatch, capsys, tmp_path, params, emit):
    path = messy_csv(tmp_path / "s.csv", seed=1)
    args = ["--operator", "standardize", *params, "--operator", "river:ADWIN"]
    got = _same(monkeypatch, capsys, tmp_path, path, args + KEYED, emit)
    assert got["dead_letters.jsonl"].count(b"\n") > 50
    if emit == "all":
        assert got["outputs.jsonl"].count(b"\n") > 1500
    assert got["report.html"] is not None


@pytest.mark.parametrize("case", [
    dict(seed=2, batch="7"), dict(seed=3, batch="1"), dict(seed=4, ts=False, batch="64"),
    dict(seed=5, key=False), dict(seed=6, crlf=True), dict(seed=7, gz=True, batch="333"),
    dict(seed=14, keys=40, batch="50"),
])
@pytest.mark.parametrize("det", ["river:ADWIN", "river:PageHinkley", "river:KSWIN"])
@pytest.mark.parametrize("emit", ["all", "alarms"])
def test_same_files_for_other_layouts_and_batch_sizes(monkeypatch, capsys, tmp_path, case,
                                                      det, emit):
    path, opts, extra = layout(tmp_path, case)
    args = ["--operator", "standardize", "--param", "burn_in=20", "--operator", det]
    if det == "river:KSWIN":  # (random without a seed)
        args += ["--param", "seed=1"]
    _same(monkeypatch, capsys, tmp_path, path, args + opts, emit, extra)


@pytest.mark.parametrize("batch", ["1", "9", "1000"])
def test_values_the_detector_refuses(monkeypatch, capsys, tmp_path, batch):
    """A key whose burn-in is constant (its scale is ``min_std``) and then a huge value:
    standardised beyond ``MAX_ABS``, the detector makes it a dead letter (its ``raw`` the
    standardised record)."""
    rng = random.Random(3)
    rows = ["key,ts,value"]
    for i in range(900):
        k = f"k{rng.randrange(4)}"
        v = 1.0 if k == "k0" else rng.gauss(0.0, 1.0)
        if k == "k0" and rng.random() < 0.05:
            v = 1e145 if i > 300 else 1.0
        rows.append(f"{k},{i},{v!r}")
    path = tmp_path / "s.csv"
    path.write_text("\n".join(rows) + "\n")
    got = _same(monkeypatch, capsys, tmp_path / "a", path,
                ["--operator", "standardize", "--param", "burn_in=10", "--operator",
                 "river:ADWIN"] + KEYED, "all", ["--batch-size", batch])
    assert got["dead_letters.jsonl"].count(b"\n") > 5
    assert b'"operator":"river:ADWIN"' in got["dead_letters.jsonl"]


def test_many_super_batches(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(columnar._ColumnarRun, "SUPER_ROWS", 64)
    monkeypatch.setattr(columnar._ColumnarRun, "KEY_ROWS", 1)
    path = messy_csv(tmp_path / "s.csv", n=1500, seed=12)
    for batch in ("7", "1000"):
        _same(monkeypatch, capsys, tmp_path / batch, path, CHAIN + KEYED, "all",
              ["--batch-size", batch])


@pytest.mark.parametrize("args", [
    ["--operator", "standardize", "--param", "emit_burn_in=false", "--operator",
     "river:ADWIN"],
    ["--operator", "standardize", "--operator", "cs"],
    ["--operator", "standardize", "--operator", "standardize", "--operator", "river:ADWIN"],
    ["--operator", "river:ADWIN", "--operator", "standardize"],
])
def test_other_chains_take_the_record_path(monkeypatch, capsys, tmp_path, args):
    path = messy_csv(tmp_path / "s.csv", n=700, seed=13)
    _same(monkeypatch, capsys, tmp_path, path, args + KEYED, "all", expect=False)


def test_what_takes_the_columnar_path(tmp_path):
    path = messy_csv(tmp_path / "s.csv", n=100, seed=10)
    out = tmp_path / "o"

    def run(*ops, **kw):
        p = _pipeline(path, ops[0], out, kw.get("columnar"))
        p.operators = [p.operators[0], *(_pipeline(path, o, out, None).operators[0]
                                         for o in ops[1:])]
        return columnar_run(p)

    assert run(create("standardize"), create("river:ADWIN")) is not None
    assert run(create("standardize", burn_in=5, min_std=0.1),
               create("river:PageHinkley")) is not None
    assert run(create("standardize"), create("river:ADWIN"), columnar=False) is None
    assert run(create("standardize", emit_burn_in=False), create("river:ADWIN")) is None
    assert run(create("standardize", field="x"), create("river:ADWIN")) is None
    assert run(create("standardize"), create("river:DDM")) is None  # binary
    assert run(create("standardize"), create("cs")) is None
    assert run(create("river:ADWIN"), create("standardize")) is None
    assert run(create("standardize"), create("standardize"), create("river:ADWIN")) is None


@pytest.mark.parametrize("batch", [1, 13, 500])
def test_values_the_standardiser_refuses(monkeypatch, tmp_path, batch):
    """A standardiser with a small ``max_abs`` (patched on the class) rejects values
    (stage 0) and the detector values standardised beyond ``MAX_ABS`` (stage 1): both
    stages' dead letters, in the record path's order, and the same outputs and report."""
    from shiftwatch.deploy import Pipeline
    from shiftwatch.operators.transforms import Standardize
    from shiftwatch.sinks import DeadLetterSink, EvaluationSink, JsonlSink
    from shiftwatch.streams.files import CsvSource

    monkeypatch.setattr(Standardize, "max_abs", 2.5)
    rng = random.Random(5)
    rows = ["key,ts,value"]
    for i in range(1500):
        k = f"k{rng.randrange(5)}"
        v = 1.0 if k == "k0" and i < 600 else rng.gauss(0.0, 1.0)
        if k == "k0" and i > 600 and rng.random() < 0.1:
            v = 1.0 + rng.random() * 1e-8  # k0's scale is min_std: z beyond MAX_ABS
        rows.append(f"{k},{i},{v!r}")
    path = tmp_path / "s.csv"
    path.write_text("\n".join(rows) + "\n")
    outs = {}
    for mode in (False, None):
        out = tmp_path / f"o{mode}"
        src = CsvSource(path, key="key", ts="ts")
        sinks = [JsonlSink(out / "outputs.jsonl"), EvaluationSink(out, plots=False, html=False)]
        p = Pipeline(src, [create("standardize", burn_in=10, min_std=1e-160),
                           create("river:ADWIN")], sinks,
                     dead_letters=DeadLetterSink(out / "dead_letters.jsonl"),
                     batch_size=batch, progress=False, columnar=mode)
        assert (columnar_run(p) is None) == (mode is False)
        summary = p.run()
        outs[mode] = (_files(out), summary.dead_letters, summary.alarms,
                      summary.alarms_by_operator, summary.n_operators)
    assert outs[False] == outs[None]
    text = outs[None][0]["dead_letters.jsonl"]
    assert b'"operator":"standardize"' in text
    assert b'"operator":"river:ADWIN"' in text
