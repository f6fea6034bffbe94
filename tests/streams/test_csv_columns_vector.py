"""The CSV column reader with a vector value (``csv_columns(..., vectors=True)``): chunks of
``values`` shaped ``(rows, columns)`` that are the record path's items, item for item, on
messy files, scanned or not, in any chunk size."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest
from test_columnar_replay_helpers import chunk_items as _walk

from shiftwatch.records import DeadLetter
from shiftwatch.streams import columns
from shiftwatch.streams.columns import columns_eligible, csv_columns
from shiftwatch.streams.files import CsvSource, JsonlSource

_BAD = ["abc", "", " ", "nan", "inf", "-inf", "1e400", "1e200", "1_000", ".5", "007", "5.",
        "1" * 120, " 2.5 ", "+3", '"4"', '"5', "0x10", "NaN", "1e-400", "-0", "1e1234567890",
        "0.5e-05", "12345678901234567890123", "9007199254740993", '"6""', "7\x008"]


def messy_vector_csv(path, n=1500, seed=0, d=3, key=True, ts=True, bad=0.08, delim=",",
                     crlf=False, lone_cr=False, utf8=False, undecodable=False, gz=False):
    """A CSV of ``n`` rows with value columns ``v0 .. v{d-1}`` (column ``j``'s numbers near
    ``10 * j``, so two columns never agree), optional ``key`` and ``ts`` and an unused
    ``note`` column, the header in a seeded random order; about ``bad`` of the rows broken
    (a bad or empty cell in a random value column, a bad ts or key, a line of the wrong
    field count, a blank line, a NUL, quotes). Returns the path and the header."""
    rng = random.Random(seed)
    header = [f"v{j}" for j in range(d)] + ["note"] + (["key"] if key else []) + (
        ["ts"] if ts else [])
    rng.shuffle(header)
    names = ["k0", "Zürich", "東京", "k3", "São Paulo"] if utf8 else [f"k{i}" for i in range(7)]
    out = [delim.join(header)]
    for i in range(n):
        cell = {"key": rng.choice(names), "ts": str(i // 2), "note": rng.choice(["", "x", "7"])}
        for j in range(d):
            v = round(rng.gauss(10.0 * j, 1.0), rng.randrange(1, 17))
            big = v * 10 ** rng.randrange(-30, 30)
            cell[f"v{j}"] = repr(v) if rng.random() > 0.03 else \
                f"{big:.{rng.randrange(1, 20)}e}"
        if rng.random() < bad:
            which = rng.randrange(6)
            if which <= 1:  # in a value column (the reason names the first bad one)
                for j in rng.sample(range(d), min(d, rng.choice([1, 1, 2]))):
                    cell[f"v{j}"] = rng.choice(_BAD)
            elif which == 2 and ts:
                cell["ts"] = rng.choice(_BAD)
            elif which == 3 and key:
                cell["key"] = rng.choice(["", "a\x00b", 'a"b', '"q"', " sp", "k" + delim + "1"])
            elif which == 4:
                cell[rng.choice(header)] = rng.choice(['"1.5"', '"a""b"', "2.5\x00"])
            else:
                out.append(rng.choice(["", "   ", "x", delim.join("abcd"), "k1" + delim + "1",
                                       delim * len(header), delim * (len(header) - 1),
                                       delim * (len(header) - 2)]))
                continue
        out.append(delim.join(cell[c] for c in header))
    if lone_cr:
        out[len(out) // 2] += "\r" + out[len(out) // 2]
    data = (("\r\n" if crlf else "\n").join(out) + ("\n" if seed % 2 else "")).encode()
    if undecodable:
        data = data.replace(b"k3", b"k\xff3", 3)
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path, header


def _bits(v) -> bytes:
    return np.asarray(v, dtype=np.float64).tobytes()


def record_items(src):
    return [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", it["key"], it.get("ts"), _bits(it["value"])) for it in src]


def chunk_items(chunks, d):
    """The items the chunks stand for (each chunk's ``values`` checked: float64,
    C-contiguous, ``(rows, d)``)."""
    chunks = list(chunks)
    for c in chunks:
        assert c.values.dtype == np.float64 and c.values.flags.c_contiguous
        assert c.values.shape == (len(c), d)
        assert c.ts is None or c.ts.shape == (len(c),)
    return _walk(chunks, lambda c, i: (
        "rec", c.keys[i], None if c.ts is None else float(c.ts[i]), _bits(c.values[i])))


def _compare(path, opts, chunk, scan, monkeypatch):
    """The chunks' items against the record path's (and the blank lines counted); the
    items."""
    monkeypatch.setattr(columns, "SCAN", scan)
    want_src = CsvSource(path, **opts)
    want = record_items(want_src)
    src = CsvSource(path, **opts)
    got = chunk_items(csv_columns(src, chunk, vectors=True), len(src.columns))
    assert got == want
    assert src.blank_lines == want_src.blank_lines
    return want


_CASES = [dict(), dict(ts=False), dict(key=False), dict(key=False, ts=False), dict(d=1),
          dict(d=5, bad=0.25), dict(delim=";"), dict(delim="\t", utf8=True),
          dict(crlf=True, utf8=True), dict(gz=True), dict(crlf=True, gz=True, bad=0.2),
          dict(crlf=True, lone_cr=True), dict(undecodable=True), dict(bad=0.0)]


@pytest.mark.parametrize("seed", range(len(_CASES)))
@pytest.mark.parametrize("chunk", [64, 257, 1 << 16])
@pytest.mark.parametrize("scan", [True, False])
def test_vector_chunks_are_the_record_path(tmp_path, monkeypatch, seed, chunk, scan):
    kw = _CASES[seed]
    path, header = messy_vector_csv(tmp_path / ("s.csv.gz" if kw.get("gz") else "s.csv"),
                                    n=700, seed=seed, **kw)
    d = kw.get("d", 3)
    rng = random.Random(seed)
    cols = [f"v{j}" for j in range(d)]
    rng.shuffle(cols)  # the value's order is not the header's
    opts = {"value": cols, "delimiter": kw.get("delim", ",")}
    if "key" in header:
        opts["key"] = "key"
    if "ts" in header:
        opts["ts"] = "ts"
    want = _compare(path, opts, chunk, scan, monkeypatch)
    assert sum(w[0] == "rec" for w in want) > 300
    if kw.get("bad", 0.08) and not kw.get("undecodable"):
        reasons = [w[1]["reason"] for w in want if w[0] == "dead"]
        assert any(r.startswith(tuple(cols)) for r in reasons)


@pytest.mark.parametrize("value", [["v1", "v1", "v0"], ["ts", "v2"], ["v0", "key"],
                                   ["note", "v1"], ["v2"]])
@pytest.mark.parametrize("scan", [True, False])
def test_a_column_named_twice_or_also_the_key_or_ts(tmp_path, monkeypatch, value, scan):
    """CsvSource lets a value column come twice, or be the ts or the key column too (a key
    cell then is a value that is mostly not a number): the record path's items still."""
    path, _ = messy_vector_csv(tmp_path / "s.csv", n=600, seed=5)
    for chunk in (64, 1 << 16):
        _compare(path, {"value": value, "key": "key", "ts": "ts"}, chunk, scan, monkeypatch)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk", [50, 333, 1 << 16])
def test_scanned_blocks_are_the_python_blocks(tmp_path, monkeypatch, seed, chunk):
    """Chunk by chunk, bit for bit, the compiled scan of several value cells a line
    (:func:`~shiftwatch.streams.csv_kernel.scan_vector_lines`) and the Python blocks."""
    kw = [dict(), dict(utf8=True, crlf=True), dict(key=False, d=6), dict(bad=0.3)][seed]
    path, _ = messy_vector_csv(tmp_path / "s.csv", n=1200, seed=seed, **kw)
    used = []
    real = columns._scanned_vector
    monkeypatch.setattr(columns, "_scanned_vector",
                        lambda *a: used.append(1) or real(*a))
    cols = ["v2", "v0", "v1"] if kw.get("d", 3) == 3 else ["v5", "v0", "v3"]
    opts = {"value": cols, "ts": "ts", **({} if kw.get("key") is False else {"key": "key"})}

    def chunks(scan):
        monkeypatch.setattr(columns, "SCAN", scan)
        src = CsvSource(path, **opts)
        return [(list(c.keys), c.ts.tobytes(), c.values.shape, c.values.tobytes(),
                 c.lines.tolist(), [(b, x.to_record()) for b, x in c.dead], list(c.blanks))
                for c in csv_columns(src, chunk, vectors=True)], src.blank_lines

    plain = chunks(False)
    assert not used
    assert chunks(True) == plain
    assert used


def test_swapped_columns_are_seen(tmp_path, monkeypatch):
    """Each row's cells in the order of ``value``, not the header's: ``["b", "a"]`` gives
    the columns of ``["a", "b"]`` swapped, on both paths, and the items differ."""
    path = tmp_path / "ab.csv"
    path.write_text("a,key,b\n" + "".join(f"{i}.5,k{i % 3},{-i}.25\n" for i in range(400)))
    for scan in (True, False):
        monkeypatch.setattr(columns, "SCAN", scan)
        ab = np.concatenate([c.values for c in csv_columns(
            CsvSource(path, value=["a", "b"], key="key"), 257, vectors=True)])
        ba = np.concatenate([c.values for c in csv_columns(
            CsvSource(path, value=["b", "a"], key="key"), 257, vectors=True)])
        assert ab.shape == (400, 2)
        assert ab[7].tolist() == [7.5, -7.25]
        assert np.array_equal(ba, ab[:, ::-1]) and not np.array_equal(ba, ab)
        want = record_items(CsvSource(path, value=["a", "b"], key="key"))
        got = chunk_items(csv_columns(CsvSource(path, value=["b", "a"], key="key"), 257,
                                      vectors=True), 2)
        assert got != want


def test_a_damaged_gz_file(tmp_path, monkeypatch):
    path, _ = messy_vector_csv(tmp_path / "s.csv.gz", n=3000, seed=8, gz=True)
    data = path.read_bytes()
    opts = {"value": ["v1", "v0", "v2"], "key": "key", "ts": "ts"}
    for cut in (len(data) * 2 // 3, len(data) - 9, 200):
        bad = tmp_path / f"cut{cut}.csv.gz"
        bad.write_bytes(data[:cut])
        for chunk in (1 << 16, 333):
            for scan in (True, False):
                want = _compare(bad, opts, chunk, scan, monkeypatch)
                assert "file is truncated after line" in want[-1][1]["reason"]
    last = list(csv_columns(CsvSource(bad, **opts), vectors=True))[-1]
    assert len(last) == 0 and last.values.shape == (0, 3) and len(last.dead) == 1


@pytest.mark.parametrize("chunk", [16, 64, 1 << 16])
def test_a_line_too_long_and_lone_carriage_returns(tmp_path, monkeypatch, chunk):
    from shiftwatch.streams import lines

    monkeypatch.setattr(lines, "MAX_LINE_CHARS", 40)
    monkeypatch.setattr(lines, "_LONG_HEAD", 12)
    rng = random.Random(chunk)
    rows = []
    for i in range(300):
        pad = "7" * rng.choice([0, 0, 0, rng.randrange(30, 45), rng.randrange(45, 200)])
        rows.append(f"{i / 7:.3f},k{i % 3},{i},{pad or i}" + rng.choice(["\n", "\r\n", "\r"]))
    path = tmp_path / "long.csv"
    path.write_bytes(("a,key,ts,b\n" + "".join(rows)).encode())
    opts = {"value": ["b", "a"], "key": "key", "ts": "ts"}
    want = _compare(path, opts, chunk, True, monkeypatch)
    assert any(w[0] == "dead" and "characters or more" in w[1]["reason"] for w in want)
    monkeypatch.setattr(columns, "SCAN", True)
    assert any(len(c) == 0 and c.values.shape == (0, 2)
               for c in csv_columns(CsvSource(path, **opts), chunk, vectors=True))


def test_a_hash_collision_falls_back(tmp_path, monkeypatch):
    from shiftwatch.streams import csv_kernel

    path, _ = messy_vector_csv(tmp_path / "s.csv", n=500, seed=9)
    opts = {"value": ["v0", "v2"], "key": "key", "ts": "ts"}
    want = _compare(path, opts, 1 << 16, False, monkeypatch)
    monkeypatch.setattr(csv_kernel, "same_key_bytes", lambda *a: False)
    assert _compare(path, opts, 1 << 16, True, monkeypatch) == want


def test_numbers_for_float_and_beyond_the_limit(tmp_path, monkeypatch):
    """Cells the scan leaves to ``float`` (long mantissas, big exponents) in every value
    column, some beyond the magnitude limit: read as the record path reads them."""
    rng = random.Random(4)
    cells = ["1e23", "123456789012345678", "3.14159265358979323846", "1e300", "-1e300",
             "1e308", "9" * 40, "0.1", "-0", "4.9e-324"]
    path = tmp_path / "f.csv"
    path.write_text("x,y,z\n" + "".join(
        ",".join(rng.choice(cells) for _ in range(3)) + "\n" for _ in range(500)))
    for scan in (True, False):
        want = _compare(path, {"value": ["z", "x", "y"]}, 1 << 16, scan, monkeypatch)
        assert {w[0] for w in want} == {"rec", "dead"}


def test_eligibility(tmp_path):
    path, _ = messy_vector_csv(tmp_path / "s.csv", n=10, seed=0)
    vec = CsvSource(path, value=["v0", "v1"], key="key", ts="ts")
    scalar = CsvSource(path, value="v0", key="key", ts="ts")
    assert not columns_eligible(vec) and columns_eligible(vec, vectors=True)
    assert columns_eligible(scalar) and columns_eligible(scalar, vectors=True)
    assert columns_eligible(CsvSource(path, value=["v0"]), vectors=True)
    for bad in (dict(y="note"), dict(task="note"), dict(extra=["note"]),
                dict(ts="ts", ts_format="iso")):
        assert not columns_eligible(CsvSource(path, value=["v0", "v1"], **bad), vectors=True)
    with pytest.raises(ValueError, match="cannot be read in columns"):
        csv_columns(vec)
    assert {c.values.shape[1:] for c in csv_columns(scalar, vectors=True)} == {()}
    jl = tmp_path / "s.jsonl"
    jl.write_text('{"a": 1, "b": 2}\n')
    assert columns_eligible(JsonlSource(jl, value="a"), vectors=True)
    assert not columns_eligible(JsonlSource(jl, value=["a", "b"]), vectors=True)
    with pytest.raises(ValueError, match="cannot be read in columns"):
        csv_columns(JsonlSource(jl, value="a"), vectors=True)


@pytest.mark.parametrize("value", ["v0", ["v0", "v1"]])
def test_crlf_lines_whose_last_cell_is_the_key(tmp_path, monkeypatch, value):
    """The compiled scan ends a CRLF line's last cell before its ``\\r`` (the key of a
    scalar value too: once it kept the ``\\r``)."""
    path = tmp_path / "k.csv"
    path.write_bytes(b"ts,v0,v1,key\r\n" + b"".join(
        f"{i},{i / 4},{-i},k{i % 5}\r\n".encode() for i in range(300)))
    opts = {"value": value, "key": "key", "ts": "ts"}
    monkeypatch.setattr(columns, "SCAN", True)
    want = [(it["key"], it["ts"]) for it in CsvSource(path, **opts)]
    got = [(k, float(t)) for c in csv_columns(CsvSource(path, **opts), 257,
                                              vectors=not isinstance(value, str))
           for k, t in zip(c.keys, c.ts, strict=True)]
    assert got == want and want[3] == ("k3", 3.0)
