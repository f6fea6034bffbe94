"""``shiftwatch compare`` (issue 39, item 3): several chains over one log, read once; each
chain's outputs, dead letters and report are those of ``shiftwatch replay`` with that chain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shiftwatch.deploy.cli import main

CHAINS = ["cs", "standardize burn_in=20 -> river:ADWIN delta=0.01", "standardize -> cs"]
#: The chains replay runs on its columnar path (they read the file in column batches).
COLUMNS = CHAINS[:2]


@pytest.fixture
def log(tmp_path):
    rng = np.random.default_rng(3)
    rows = ["key,ts,value"]
    for i in range(1200):
        key = "ab"[i % 2]
        rows.append(f"{key},{i},{rng.normal() + (3 if i >= 700 else 0):.4f}")
        if i in (5, 400):
            rows.append(f"{key},{i},not-a-number")  # bad rows: dead letters in every chain
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"a": [350], "b": [350]}))
    return path, labels


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("cache,chains", [(None, CHAINS), ("10", CHAINS), (None, COLUMNS),
                                          (None, CHAINS[::-1])],
                         ids=["read once", "read again", "columns", "records first"])
def test_each_chain_gives_what_replay_gives(tmp_path, log, capsys, cache, chains,
                                            monkeypatch):
    from shiftwatch.deploy import columnar

    runs = []
    real = columnar._ColumnarRun.run
    monkeypatch.setattr(columnar._ColumnarRun, "run",
                        lambda self, *a: runs.append(1) or real(self, *a))
    path, labels = log
    opts = ["--source-opt", "key=key", "--source-opt", "ts=ts", "--labels", str(labels),
            "--no-plots"]
    argv = ["compare", str(path), *[a for c in chains for a in ("--chain", c)],
            "--out", str(tmp_path / "cmp"), "--emit", "all", *opts]
    if cache:
        argv += ["--cache-records", cache]
    assert main(argv) == 0
    assert len(runs) == sum(c in COLUMNS for c in chains)  # those read in column batches
    printed = capsys.readouterr().out
    table = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    want = ("read in column batches" if chains == COLUMNS else
            "read once for 1 chain (the other 2 read" if cache is None else "read again")
    assert table["read"].startswith(want)
    assert [r["chain"] for r in table["chains"]] == chains
    for i, chain in enumerate(chains, 1):
        stages = []
        for part in chain.split("->"):
            name, *params = part.split()
            stages += ["--operator", name, *[a for p in params for a in ("--param", p)]]
        rep = tmp_path / f"replay{i}"
        assert main(["replay", str(path), *stages, "--out", str(rep), "--quiet",
                     "--no-progress", *opts]) == 0
        got = tmp_path / "cmp" / table["chains"][i - 1]["dir"].rsplit("/", 1)[-1]
        assert _lines(got / "outputs.jsonl") == _lines(rep / "outputs.jsonl")
        assert _lines(got / "dead_letters.jsonl") == _lines(rep / "dead_letters.jsonl")
        assert len(_lines(got / "dead_letters.jsonl")) == 2
        a = json.loads((got / "report.json").read_text())["summary"]
        b = json.loads((rep / "report.json").read_text())["summary"]
        assert a == b and table["chains"][i - 1]["f1"] == a["f1"]
    assert "| chain | records/s |" in printed


def test_alarms_only_by_default_and_bad_chains_fail_before_reading(tmp_path, log, capsys):
    path, labels = log
    assert main(["compare", str(path), "--chain", "cs", "--out", str(tmp_path / "c"),
                 "--source-opt", "key=key", "--no-plots"]) == 0
    outs = _lines(next((tmp_path / "c").glob("1-*")) / "outputs.jsonl")
    assert outs and all(o["alarm"] for o in outs)
    capsys.readouterr()
    rc = main(["compare", str(tmp_path / "missing.csv"), "--chain", "cs -> nope",
               "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 2 and "nope" in err and len(err.strip().splitlines()) == 1
