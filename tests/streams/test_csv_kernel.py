"""The compiled CSV scan (``streams/csv_kernel.py``) reads numbers as ``float`` does and
lines as the column reader's Python rule does."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
from test_columnar_replay_helpers import chunk_items, messy_ascii_csv

from shiftwatch.records import MAX_ABS
from shiftwatch.streams import columns
from shiftwatch.streams.csv_kernel import _POW10, _number
from shiftwatch.streams.files import _SHORT_NUMBER, CsvSource

EDGES = ["0", "-0", "+0", "0.0", "-0.0", "0e5", "-0e-5", "1", "-1", "0.1", "0.3", "1.5e-3",
         "9007199254740991", "9007199254740992", "9007199254740993", "1e22", "1e23", "1e-22",
         "1e-23", "123456789012345678", "1234567890123456789", "12345678901234567890",
         "4.9e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1e308", "1e309",
         "0.000000000000000000000000001", "7.0e-10", "3.14159265358979323846",
         "00", "007", ".5", "5.", "+.5", "-", "", "1e", "1e+", "1e1234567890", "1e123456789",
         "1_0", "0x10", "nan", "inf", " 1", "1 ", "1.2.3", "--1", "1e5.5", "1" * 100,
         "1" * 101, "1." + "1" * 99, "1." + "1" * 100, "0." + "0" * 30 + "17"]


def _cell(rng: random.Random) -> str:
    sign = rng.choice(["", "", "-", "+"])
    whole = rng.choice(["0", str(rng.randrange(1, 10)) + "".join(
        rng.choice("0123456789") for _ in range(rng.randrange(0, 22)))])
    frac = "" if rng.random() < 0.3 else "." + "".join(
        rng.choice("0123456789") for _ in range(rng.randrange(1, 24)))
    exp = "" if rng.random() < 0.6 else rng.choice("eE") + rng.choice(["", "-", "+"]) + str(
        rng.randrange(0, 40))
    text = sign + whole + frac + exp
    if rng.random() < 0.05:  # a broken one
        k = rng.randrange(len(text) + 1)
        text = text[:k] + rng.choice(".e+-0x ") + text[k:]
    return text


@pytest.mark.parametrize("seed", range(4))
def test_numbers_are_what_float_gives(seed):
    rng = random.Random(seed)
    cells = EDGES + [_cell(rng) for _ in range(20000)]
    computed = 0
    for text in cells:
        buf = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        got, x = _number(buf, 0, buf.shape[0], _POW10)
        if _SHORT_NUMBER(text) is None:
            assert got == 0, text
            continue
        assert got in (1, 2), text
        if got == 1:
            want = float(text)
            assert x == want and np.signbit(x) == np.signbit(want), (text, x, want)
            computed += 1
    assert computed > 5000  # (half the cells have more than 15 digits: float reads them)


def _chunks(path, opts, chunk, scan, monkeypatch):
    monkeypatch.setattr(columns, "SCAN", scan)
    src = CsvSource(path, **opts)
    got = []
    for c in columns.csv_columns(src, chunk):
        got.append((list(c.keys), None if c.ts is None else c.ts.tobytes(),
                    c.values.tobytes(), c.lines.tolist(),
                    [(b, d.to_record()) for b, d in c.dead], list(c.blanks)))
    return got, src.blank_lines


@pytest.mark.parametrize("seed", range(9))
@pytest.mark.parametrize("chunk", [1 << 16, 333, 50])
def test_scanned_blocks_are_the_python_blocks(tmp_path, monkeypatch, seed, chunk):
    """Chunk by chunk, bit for bit (values' and ts' bytes), dead letters and blank lines
    included, on files with bad lines of every kind: ASCII, UTF-8 keys, CRLF line ends, a
    lone carriage return, bytes that are not UTF-8."""
    kw = [dict(), dict(ts=False), dict(key=False), dict(bad=0.3), dict(delim=";"),
          dict(utf8=True), dict(crlf=True, utf8=True), dict(crlf=True, lone_cr=True),
          dict(undecodable=True)][seed]
    path = messy_ascii_csv(tmp_path / "s.csv", n=1500, seed=seed, **kw)
    scanned = []
    real = columns._scanned

    def spy(*a):
        got = real(*a)
        scanned.append(got is not None)
        return got

    monkeypatch.setattr(columns, "_scanned", spy)
    opts = {"key": "key"} if kw.get("key", True) else {}
    if kw.get("ts", True):
        opts["ts"] = "ts"
    if "delim" in kw:
        opts["delimiter"] = kw["delim"]
    a = _chunks(path, opts, chunk, True, monkeypatch)
    b = _chunks(path, opts, chunk, False, monkeypatch)
    assert a == b
    assert sum(len(c[0]) for c in a[0]) > 700
    assert any(scanned) or seed >= 7  # (blocks with a lone \r or bytes not UTF-8: _block)
    assert all(scanned) == (seed < 7)


def test_a_hash_collision_falls_back(tmp_path, monkeypatch):
    from shiftwatch.streams import csv_kernel

    path = messy_ascii_csv(tmp_path / "s.csv", n=500, seed=9)
    want = _chunks(path, {"key": "key", "ts": "ts"}, 1 << 16, False, monkeypatch)
    monkeypatch.setattr(csv_kernel, "same_key_bytes", lambda *a: False)
    assert _chunks(path, {"key": "key", "ts": "ts"}, 1 << 16, True, monkeypatch) == want


def test_the_magnitude_limit():
    for text in ("1e300", "-1e300", f"{MAX_ABS:.17g}", "9" * 40):
        buf = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        got, x = _number(buf, 0, buf.shape[0], _POW10)
        assert got == 2 or x == float(text)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_lines_ending_with_a_carriage_return_alone_are_read_block_by_block(tmp_path, kind):
    """A file whose lines end with ``\\r`` alone: the same items as the record path, in many
    chunks (the reader cuts at a ``\\r`` too, so it never holds the whole file)."""
    from shiftwatch.records import DeadLetter
    from shiftwatch.streams.files import JsonlSource
    from shiftwatch.streams.jsonl_columns import jsonl_columns

    rng = random.Random(3)
    rows = []
    for i in range(600):
        v = rng.choice([f"{rng.gauss(0, 1):.4f}", "oops"]) if i % 50 == 7 else f"{i / 9:.3f}"
        rows.append(f"k{i % 4},{i},{v}" if kind == "csv" else
                    f'{{"key": "k{i % 4}", "ts": {i}, "value": {v if v != "oops" else 0}}}')
    head = "key,ts,value\r" if kind == "csv" else ""
    path = tmp_path / f"cr.{kind}"
    path.write_bytes((head + "\r".join(rows) + "\r").encode())
    make = (lambda: CsvSource(path, key="key", ts="ts")) if kind == "csv" else (
        lambda: JsonlSource(path, key="key", ts="ts"))
    want = [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", it["key"], it["ts"], it["value"]) for it in make()]
    src = make()
    chunks = list(columns.csv_columns(src, 300) if kind == "csv" else jsonl_columns(src, 300))
    assert _items_of_chunks(chunks) == want and len(want) == 600
    assert len(chunks) > 20


def _items_of_chunks(chunks):
    return chunk_items(chunks, lambda c, i: (
        "rec", c.keys[i], None if c.ts is None else float(c.ts[i]), float(c.values[i])))


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [16, 50, 1 << 16])
def test_a_line_too_long_is_a_dead_letter_on_both_paths(tmp_path, monkeypatch, kind, seed,
                                                        chunk):
    """Lines of MAX_LINE_CHARS characters or more (here 40) are dead letters with their first
    characters, read in pieces by the record path and by the column readers alike, whatever
    the line ends (\\n, \\r\\n, \\r, mixed) and wherever the reads cut them."""
    from shiftwatch.records import DeadLetter
    from shiftwatch.streams import lines
    from shiftwatch.streams.files import JsonlSource
    from shiftwatch.streams.jsonl_columns import jsonl_columns

    monkeypatch.setattr(lines, "MAX_LINE_CHARS", 40)
    monkeypatch.setattr(lines, "_LONG_HEAD", 12)
    rng = random.Random(seed)
    ends = ["\n", "\r\n", "\r", None][seed % 4]
    rows = []
    for i in range(300):
        n = rng.choice([0, 0, 0, 0, rng.randrange(30, 45), rng.randrange(45, 200)])
        if kind == "csv":
            row = f"k{i % 3},{i},{i / 7:.3f}" if not n else f"k{i % 3},{i}," + "7" * n
        else:
            row = (f'{{"key": "k{i % 3}", "ts": {i}, "value": {i / 7:.3f}}}' if not n else
                   f'{{"key": "k{i % 3}", "ts": {i}, "value": 1, "pad": "{"x" * n}"}}')
        rows.append(row + (ends or rng.choice(["\n", "\r\n", "\r"])))
    if seed % 2:
        rows[-1] = rows[-1].rstrip("\r\n") + "9" * rng.randrange(0, 60)  # no line end
    head = "key,ts,value\n" if kind == "csv" else ""
    path = tmp_path / f"long.{kind}"
    path.write_bytes((head + "".join(rows)).encode())
    make = (lambda: CsvSource(path, key="key", ts="ts")) if kind == "csv" else (
        lambda: JsonlSource(path, key="key", ts="ts"))
    want = [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", it["key"], it["ts"], it["value"]) for it in make()]
    src = make()
    reader = columns.csv_columns(src, chunk) if kind == "csv" else jsonl_columns(src, chunk)
    got = _items_of_chunks(reader)
    assert got == want
    longs = [w for w in want if w[0] == "dead" and "characters or more" in w[1]["reason"]]
    assert len(longs) > 20
    assert all(len(w[1]["raw"]) == 12 for w in longs)


def _table_block(keys, hashes):
    raw = "".join(k + "\n" for k in keys).encode()
    buf = np.frombuffer(raw, dtype=np.uint8)
    ends = np.cumsum([len(k.encode()) + 1 for k in keys])
    kst = np.r_[0, ends[:-1]].astype(np.int64)
    ken = (ends - 1).astype(np.int64)
    return buf, raw, kst, ken, np.array(hashes, dtype=np.uint64), np.arange(len(keys))


def test_the_key_table_keeps_keys_across_blocks():
    """Same bytes, same code, in any later block; a key whose hash is another's gets its
    own code; two new keys of one block with one hash: None (the block is read otherwise);
    thousands of keys (the table grows and is rehashed) keep their codes."""
    from shiftwatch.streams.columns import _KeyTable

    t = _KeyTable()
    assert t.codes(*_table_block(["a", "b", "a"], [5, 7, 5])).tolist() == [0, 1, 0]
    assert t.codes(*_table_block(["c", "a", "b", "é"], [5, 5, 7, 9])).tolist() == [2, 0, 1, 3]
    assert t.keys == ["a", "b", "c", "é"]
    assert t.codes(*_table_block(["x", "y"], [11, 11])) is None
    rng = random.Random(0)
    names = [f"key-{i}" for i in range(5000)]
    want = {}
    for _ in range(40):
        block = [rng.choice(names) for _ in range(300)]
        got = t.codes(*_table_block(block, [int.from_bytes(
            hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") for k in block]))
        for k, c in zip(block, got.tolist(), strict=True):
            assert want.setdefault(k, c) == c and t.keys[c] == k
    assert len(t.keys) == 4 + len(want) and t.tab.shape[0] >= 2 * len(t.keys)
