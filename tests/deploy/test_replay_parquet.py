"""``shiftwatch replay --outputs-format parquet``: outputs.parquet holds outputs.jsonl's rows.

A small CSV with bad rows is replayed through ``cs`` on both paths (the columnar path, and the
record path with ``SHIFTWATCH_RECORD_PATH=1``), once per format; each Parquet file is compared
row by row with the same run's outputs.jsonl, and the two paths' Parquet files with each other.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

try:
    import pyarrow.parquet as pq
except ImportError:  # the dev extra has it: CI must not skip these
    if os.environ.get("CI"):
        raise
    pytest.skip("needs pyarrow (pip install -c constraints.txt -e '.[dev]')",
                allow_module_level=True)

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.columnar import RECORD_PATH_ENV


def bad_csv(path, n=3000, seed=3):
    """``key,ts,value`` rows, three keys whose level shifts half way; some rows broken."""
    rng = random.Random(seed)
    lines = ["key,ts,value"]
    for i in range(n):
        k, t, v = f"s{rng.randrange(3)}", str(i), repr(rng.gauss(0.0 if i < n // 2 else 3, 1))
        if rng.random() < 0.04:
            which = rng.randrange(4)
            if which == 0:
                v = rng.choice(["abc", "", "nan", "inf", "1e400"])
            elif which == 1:
                t = "yesterday"
            elif which == 2:
                lines.append(rng.choice(["x", "a,b,c,d", ""]))
                continue
            else:
                k = ""
        lines.append(f"{k},{t},{v}")
    path.write_text("\n".join(lines) + "\n")
    return path


def replay(monkeypatch, capsys, csv, out, fmt, record, emit="all"):
    if record:
        monkeypatch.setenv(RECORD_PATH_ENV, "1")
    else:
        monkeypatch.delenv(RECORD_PATH_ENV, raising=False)
    rc = main(["replay", str(csv), "--source-opt", "key=key", "--source-opt", "ts=ts",
               "--source-opt", "value=value", "--operator", "cs", "--out", str(out),
               "--no-plots", "--no-progress", "--quiet", "--emit", emit,
               "--outputs-format", fmt])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    return printed


def same_rows(parquet_path, jsonl_path):
    table = pq.read_table(parquet_path)
    lines = [json.loads(line) for line in open(jsonl_path, encoding="utf-8")]
    names = list(dict.fromkeys(k for d in lines for k in d))
    assert table.schema.names == names
    rows = table.to_pylist()
    assert len(rows) == len(lines) > 0
    for i, (row, line) in enumerate(zip(rows, lines, strict=True)):
        for name in names:
            got, want = row[name], line.get(name)  # an absent field is null
            assert got == want and type(got) is type(want) or (
                type(got) is float and type(want) is int and got == want), (i, name, got, want)
    return table


@pytest.mark.parametrize("emit", ["all", "alarms"])
def test_parquet_outputs_are_the_jsonl_outputs_on_both_paths(tmp_path, monkeypatch, capsys,
                                                             emit):
    csv = bad_csv(tmp_path / "in.csv")
    tables = {}
    for record in (False, True):
        name = "record" if record else "columnar"
        j, p = tmp_path / f"{name}-jsonl", tmp_path / f"{name}-parquet"
        replay(monkeypatch, capsys, csv, j, "jsonl", record, emit)
        printed = replay(monkeypatch, capsys, csv, p, "parquet", record, emit)
        assert f"wrote {p / 'outputs.parquet'}, " in printed
        assert not (p / "outputs.jsonl").exists() and not (j / "outputs.parquet").exists()
        assert sorted(os.listdir(p)) == sorted(
            x.replace("outputs.jsonl", "outputs.parquet") for x in os.listdir(j))
        assert (p / "dead_letters.jsonl").read_text() == (j / "dead_letters.jsonl").read_text()
        assert (j / "dead_letters.jsonl").read_text()  # the bad rows are there
        tables[name] = table = same_rows(p / "outputs.parquet", j / "outputs.jsonl")
        types = {f.name: str(f.type) for f in table.schema}
        assert types["key"] == "string" and types["offset"] == "int64"
        assert types["alarm"] == "bool" and types["change_at"] == "int64"
        assert types["lower"] == types["upper"] == "double"
        alarms = table.column("alarm").to_pylist()
        assert sum(alarms) >= 2 and (all(alarms) if emit == "alarms" else not all(alarms))
    # the two paths write the same file
    assert tables["columnar"].equals(tables["record"])


def test_without_pyarrow_the_option_is_a_one_line_error(tmp_path):
    csv = bad_csv(tmp_path / "in.csv", n=50)
    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "from shiftwatch.deploy.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, "replay", str(csv), "--source-opt",
                           "key=key", "--operator", "cs", "--out", str(tmp_path / "out"),
                           "--no-progress", "--outputs-format", "parquet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shiftwatch: error: ")
    assert "pip install 'shiftwatch[parquet]'" in lines[0]
    assert not (tmp_path / "out").exists()  # checked before anything is written
