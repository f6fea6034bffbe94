"""A bound on consecutive blank lines (issue 51): a file of nothing but blank lines (a small
``.gz`` of gigabytes of them) ends at once with a reason, the same line on every read path."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import time

import pytest

from shiftwatch.streams.columns import csv_columns
from shiftwatch.streams.files import CsvSource, JsonlSource
from shiftwatch.streams.jsonl_columns import jsonl_columns
from shiftwatch.streams.lines import MAX_BLANK_LINES

_CLI = [sys.executable, "-c",
        "import sys; from shiftwatch.deploy.cli import main; sys.exit(main(sys.argv[1:]))"]


def _record_path(src):
    out = []
    for item in src:
        out.append(item["value"] if isinstance(item, dict) else (item.origin["line"], item.reason))
    return out, src.blank_lines, src.unread


def _column_path(src, read, chunk_chars):
    out = []
    for chunk in read(src, chunk_chars=chunk_chars):
        rows = [float(v) for v in chunk.values]
        at = 0
        for before, dead in chunk.dead:  # dead letters in place, among the rows
            out += rows[at:before]
            at = before
            out.append((dead.origin["line"], dead.reason))
        out += rows[at:]
    return out, src.blank_lines, src.unread


def _blank(rng):
    return rng.choice(["", " ", "\t", "  \t "])


def _file(rng, tmp_path, kind, limit):
    """Records among runs of blank lines, some just at the limit, some over it; line ends of
    every kind."""
    lines = ["ts,value"] if kind == "csv" else []
    for i in range(rng.randint(3, 12)):
        lines.append(f"{i},{i}.5" if kind == "csv" else json.dumps({"ts": i, "value": i + 0.5}))
        n = rng.choice([0, 1, limit - 1, limit, limit, limit + 1, limit + rng.randint(1, 5)])
        lines += [_blank(rng) for _ in range(max(n, 0))]
    eol = rng.choice(["\n", "\r\n", "\r"])
    path = tmp_path / f"f{rng.random():.9f}.{kind}"
    path.write_bytes(eol.join(lines).encode() + eol.encode() * rng.randint(0, 1))
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_the_record_and_the_column_path_end_at_the_same_line(tmp_path, kind):
    rng = random.Random(51)
    source = CsvSource if kind == "csv" else JsonlSource
    read = csv_columns if kind == "csv" else jsonl_columns
    over = 0
    for _ in range(60):
        limit = rng.randint(1, 6)
        path = _file(rng, tmp_path, kind, limit)
        want, blanks, unread = _record_path(source(path, value="value", ts="ts",
                                                   max_blank_lines=limit))
        # a run of exactly `limit` blank lines is read through; one more ends the reading
        text = path.read_bytes().decode().replace("\r\n", "\n").replace("\r", "\n")
        rows = text.split("\n")
        runs, run = [], 0
        for row in rows[:-1] if text.endswith("\n") else rows:
            if row.strip():
                runs.append(run)
                run = 0
            else:
                run += 1
        if max(runs + [run]) > limit:
            over += 1
            assert unread is not None and unread.startswith(f"blank: more than {limit:,} ")
            assert isinstance(want[-1], tuple) and want[-1][1] == unread
        else:
            assert unread is None and not any(isinstance(w, tuple) for w in want)
            assert blanks == sum(runs) + run
        for chunk_chars in (1, 2, 3, 7, 64, 1 << 16):
            got = _column_path(source(path, value="value", ts="ts", max_blank_lines=limit),
                               read, chunk_chars)
            assert got == (want, blanks, unread), (path.read_bytes(), chunk_chars)
    assert 10 < over < 60  # both kinds of file were made


def test_the_reason_says_where_the_run_began_and_the_line_after_it_is_the_dead_letter(
        tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("v\n1\n2\n" + "\n" * 10 + "3\n")
    items, blanks, unread = _record_path(CsvSource(path, value="v", max_blank_lines=3))
    assert items == [1.0, 2.0, (8, "blank: more than 3 consecutive blank lines from line 4 on "
                                   "(max_blank_lines=3): the rest of the file is not read")]
    assert blanks == 4 and unread == items[-1][1]
    # no bound, or a bound the run stays within: every record
    for limit in (None, 10):
        assert _record_path(CsvSource(path, value="v", max_blank_lines=limit))[0] == [1, 2, 3]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "many"])
def test_a_bad_bound_is_refused(tmp_path, bad):
    path = tmp_path / "a.jsonl"
    path.write_text('{"value": 1}\n')
    with pytest.raises(ValueError, match="max_blank_lines must be an integer >= 1 or null"):
        JsonlSource(path, max_blank_lines=bad)


def test_the_default_bound_is_a_million():
    assert MAX_BLANK_LINES == 1_000_000
    import inspect
    for cls in (CsvSource, JsonlSource):
        assert inspect.signature(cls).parameters["max_blank_lines"].default == MAX_BLANK_LINES


@pytest.fixture(scope="module")
def two_gib_of_blank_lines(tmp_path_factory):
    """The probe's file: 2 GiB of blank lines after one record, one record after them
    (9 MB compressed)."""
    path = tmp_path_factory.mktemp("blank") / "blank.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"value": 1}\n')
        block = b"\n" * (1 << 24)
        for _ in range(128):
            f.write(block)
        f.write(b'{"value": 2}\n')
    return path


@pytest.mark.parametrize("path_kind", ["columns", "records"])
def test_a_gz_of_two_gib_of_blank_lines_ends_at_once_with_a_reason(
        two_gib_of_blank_lines, tmp_path, path_kind):
    # `y` takes the record path (a label is not read in columns); without it, the columns
    opts = ["--source-opt", "y=value"] if path_kind == "records" else []
    t0 = time.monotonic()
    run = subprocess.run([*_CLI, "replay",
                          str(two_gib_of_blank_lines), "--operator", "river:ADWIN",
                          *opts, "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stderr
    assert took < 60, took  # (skipping all 2 GiB took more than 5 minutes)
    assert "was not read to its end (partial results): blank: more than 1,000,000 " \
        "consecutive blank lines from line 2 on" in run.stdout
    dead = [json.loads(line) for line in
            (tmp_path / "out" / "dead_letters.jsonl").read_text().splitlines()]
    assert [d["reason"].split(" (")[0] for d in dead] == [
        "blank: more than 1,000,000 consecutive blank lines from line 2 on"]
    assert dead[0]["origin"]["line"] == 1_000_003


def test_a_bad_bound_on_the_command_line_is_one_line_and_status_2(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("value\n1\n")
    run = subprocess.run([*_CLI, "replay", str(path),
                          "--operator", "river:ADWIN", "--source-opt", "max_blank_lines=0",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "max_blank_lines must be" in run.stderr
