"""A JSON Lines file read in columns (:mod:`shiftwatch.streams.jsonl_columns`) gives the items
of the record path (:class:`~shiftwatch.streams.files.JsonlSource`), item for item.

Seeded files with bad lines of every kind (invalid JSON, lines that are not objects, missing
fields, values and ts that are strings, booleans, null, objects, NaN, huge or overlong
numbers, numeric, string and list keys, blank and whitespace lines, CRLF, a byte-order mark,
bytes that are not UTF-8, deep nesting, a truncated ``.gz``) are read both ways, in chunks
cut in the middle of lines.
"""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from test_columnar_replay_helpers import chunk_items
from test_columnar_replay_helpers import norm_key as _norm_key
from test_columnar_replay_helpers import spell as _spell

from shiftwatch.deploy.columnar import source_columns
from shiftwatch.records import DeadLetter
from shiftwatch.streams import jsonl_columns as jc
from shiftwatch.streams.columns import columns_eligible, csv_columns
from shiftwatch.streams.files import CsvSource, JsonlSource
from shiftwatch.streams.jsonl_columns import ColumnsUnfit, jsonl_columns

# Lines that are not records, or records the fast path must leave to the record rule.
_BAD_LINES = [
    "{oops", "[1, 2]", '"text"', "42", "null", "{}", "{ }", '{"key": "k1"}',
    '{"key": "k1", "ts": 1, "value": 1}{"x": 1}', '{"key": "k1"},{"value": 1}',
    '{"value": "}', '{"value": 1, "value": "x"}', '{"value": 2, "value": 3}',
    "\ufeff{\"value\": 1}", '{"value": 1}\x00', "{\"value\": 1}\x0c", '{"value": 1.}',
    '{"a": ' + "[" * 70 + "]" * 70 + ', "value": 1}',
    '{"a": {"b": {"c": 1}}, "value": 0.25, "key": "k2", "ts": 5}',
    '{"tags": [1, 2, {"x": null}], "value": -3.5, "key": "k3", "ts": 6}',
    '  {"value": 1.5, "key": "k4", "ts": 7}  ', '\t{"value": 1.5, "key": "k4", "ts": 7}',
    '{"value": 1.5, "key": "k4", "ts": 7, "note": "a } and a { in a string"}',
]
_BAD_VALUES = ['"1.5"', '""', "true", "false", "null", '{"x": 1}', "1e400", "-1e400", "1e200",
               "-1e151", "1e150", "NaN", "Infinity", "-Infinity", "1e-400", "-0", "-0.0",
               "12345678901234567890", "-9223372036854775809", "1234567890123456789",
               "123456789012345678", "1.0e5", "5E-3", "1" * 120, "0." + "1" * 120,
               "1e9999999999", '"abc"']
_BAD_TS = ['"12"', '"abc"', '""', "null", "true", "1e400", "1e300", '"2024-01-01"', "NaN",
           "[3]", "{}", "12345678901234567890"]
_BAD_KEYS = ['{"a": 1}', '""', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', "null",
             '"a\\"b"', '["x", 1]', '["x", ["y", 2]]', "[]", "-9223372036854775809",
             "123456789012345678901234567", "[-9223372036854775809]"]
_BLANKS = ["", "   ", "\t", "\x0c", "\u00a0", " \t "]


def messy_jsonl(path, n=2000, keys=7, seed=0, ts=True, key=True, crlf=False, bad=0.06,
                gz=False, shift=3.0, key_kind="str"):
    """A JSON Lines file of ``n`` lines ``{"key", "ts", "value"}``, about ``bad`` of them
    broken in some way; ``key_kind`` ``"str"``, ``"int"``, ``"float"`` or ``"list"``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        j = rng.randrange(keys)
        k = {"str": f'"k{j}"', "int": str(j * 1000), "float": f"{j}.5",
             "list": f'["k{j}", {j}]'}[key_kind]
        t = str(i // 2) if rng.random() > 0.03 else repr(float(i - 40))
        level = shift if i > n // 2 else 0.0
        v = repr(round(rng.gauss(level, 1.0), rng.randrange(1, 17)))
        if rng.random() < 0.02:
            v = f"{rng.gauss(level, 1.0):.3e}"
        if rng.random() < 0.02:
            v = str(rng.randrange(-50, 50))
        fields = []
        drop = None
        if rng.random() < bad:
            which = rng.randrange(5)
            if which == 0:
                v = rng.choice(_BAD_VALUES)
            elif which == 1 and ts:
                t = rng.choice(_BAD_TS)
            elif which == 2 and key:
                k = rng.choice(_BAD_KEYS)
            elif which == 3:
                drop = rng.choice(["key", "ts", "value"])
            else:
                out.append(rng.choice(_BAD_LINES + _BLANKS))
                continue
        if key and drop != "key":
            fields.append(f'"key": {k}' if rng.random() < 0.5 else f'"key":{k}')
        if ts and drop != "ts":
            fields.append(f'"ts": {t}')
        if drop != "value":
            fields.append(f'"value": {v}')
        rng.shuffle(fields)
        out.append("{" + ", ".join(fields) + "}")
    text = ("\r\n" if crlf else "\n").join(out) + ("\n" if seed % 2 else "")
    data = ("\ufeff" if seed % 4 == 1 else "").encode() + text.encode("utf-8", "surrogatepass")
    if seed % 3 == 0:
        data = data.replace(b'"k3"', b'"k\xff3"', 2)  # not UTF-8
    if gz:
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def record_items(src):
    """The record path's items: ("dead", record) or ("rec", key, ts, value), spelled out."""
    return [("dead", it.to_record()) if isinstance(it, DeadLetter) else
            ("rec", _spell(_norm_key(it.get("key"))), _spell(it.get("ts")),
             _spell(it["value"])) for it in src]


def column_items(chunks):
    chunks = list(chunks)
    for c in chunks:
        assert np.all(np.diff(c.lines) > 0)
        assert len(c.lines) == len(c.keys) == len(c.values)
    return chunk_items(chunks, lambda c, i: (
        "rec", _spell(c.keys[i]), _spell(None if c.ts is None else float(c.ts[i])),
        _spell(float(c.values[i]))))


def _compare(path, opts, chunk, expect_fast=0.5, monkeypatch=None):
    src = JsonlSource(path, **opts)
    want = record_items(src)
    blank = src.blank_lines
    src = JsonlSource(path, **opts)
    slow = []
    if monkeypatch is not None:  # count the lines read by the record rule
        real = jc._slow_line
        monkeypatch.setattr(jc, "_slow_line", lambda *a: slow.append(1) or real(*a))
    got = column_items(jsonl_columns(src, chunk))
    assert got == want
    assert src.blank_lines == blank
    n_rec = sum(1 for w in want if w[0] == "rec")
    if monkeypatch is not None:
        assert n_rec - len(slow) >= expect_fast * n_rec  # most records by the fast path
    return want


_CASES = [dict(), dict(ts=False), dict(key=False), dict(crlf=True), dict(gz=True),
          dict(bad=0.3), dict(key_kind="int"), dict(key_kind="float"), dict(key_kind="list"),
          dict(bad=0.0), dict(crlf=True, gz=True, bad=0.2)]


@pytest.mark.parametrize("seed", range(len(_CASES)))
@pytest.mark.parametrize("chunk", [1 << 16, 211, 40, 7])
def test_column_reader_gives_the_record_path_items(monkeypatch, tmp_path, seed, chunk):
    kw = _CASES[seed]
    path = messy_jsonl(tmp_path / ("s.jsonl.gz" if kw.get("gz") else "s.jsonl"), n=900,
                       seed=seed, **kw)
    opts = {"key": "key"} if kw.get("key", True) else {}
    if kw.get("ts", True):
        opts["ts"] = "ts"
    want = _compare(path, opts, chunk, 0.5 if kw.get("bad", 0.06) < 0.3 else 0.2,
                    monkeypatch)
    n_dead = sum(1 for w in want if w[0] == "dead")
    assert n_dead > (0 if kw.get("bad") == 0.0 else 10)


def test_every_bad_line_alone_and_in_a_block(tmp_path):
    """Each bad line, value, ts and key between good lines, one file per kind."""
    good = '{"key": "k", "ts": 1, "value": 2.5}'
    lines = list(_BAD_LINES + _BLANKS)
    lines += ['{"key": "k", "ts": 1, "value": ' + v + "}" for v in _BAD_VALUES]
    lines += ['{"key": "k", "ts": ' + t + ', "value": 1}' for t in _BAD_TS]
    lines += ['{"key": ' + k + ', "ts": 1, "value": 1}' for k in _BAD_KEYS]
    lines += ['{"key": "k", "ts": 1}', '{"ts": 1, "value": 1}', '{"key": "k", "value": 1}',
              '{"key":"k","ts":1,"value":1,"meta":{"value":"x"}}', "{" + " " * 300 + "}"]
    body = "\n".join(x for line in lines for x in (good, line)) + "\n"
    path = tmp_path / "all.jsonl"
    path.write_text(body, encoding="utf-8", errors="surrogatepass")
    for chunk in (1 << 16, 50):
        want = _compare(path, {"key": "key", "ts": "ts"}, chunk)
        assert sum(1 for w in want if w[0] == "dead") > 40
    one = tmp_path / "one.jsonl"  # each line as a whole block
    for line in lines:
        one.write_text(f"{good}\n{line}\n{line}\n", encoding="utf-8", errors="surrogatepass")
        _compare(one, {"key": "key", "ts": "ts"}, 1 << 16)


def test_blocks_that_only_look_simple(tmp_path):
    """Lines of one "{" and one "}" each, whose block parses though the lines do not (a
    string across lines), and lines of several objects: the record rule reads them."""
    lines = ['{"value": "}', '{"value": 1}', '{"value": ","}', '{"value": 2}',
             '{"value": 3},{"value": 4}', '{"value": 5}', '{"value": [{"a": 1}', '{}]}',
             '{"value": "{"}', '{"value": "}"}']
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    want = _compare(path, {}, 1 << 16)
    assert [w[0] for w in want].count("rec") == 3


def test_dotted_fields_and_loose_values(tmp_path):
    rng = random.Random(4)
    lines = []
    for i in range(600):
        v = rng.choice([repr(rng.gauss(0, 1)), '"2.5"', "true", "null", '"x"'])
        meta = {"k": f"s{i % 5}"} if rng.random() > 0.05 else rng.choice([{}, [], 3])
        lines.append(json.dumps({"m": meta, "t": {"s": i}}).rstrip("}")
                     + f', "v": {{"x": {v}}}}}')
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for loose in (False, True):
        _compare(path, {"key": "m.k", "ts": "t.s", "value": "v.x", "loose": loose}, 300)


def test_a_damaged_gz_file_and_a_last_line_without_newline(tmp_path):
    path = messy_jsonl(tmp_path / "s.jsonl.gz", n=3000, seed=8, gz=True)
    data = path.read_bytes()
    for cut in (len(data) * 2 // 3, len(data) - 9, 200):
        bad = tmp_path / f"cut{cut}.jsonl.gz"
        bad.write_bytes(data[:cut])
        for chunk in (1 << 16, 333):
            want = _compare(bad, {"key": "key", "ts": "ts"}, chunk)
            assert "file is truncated after line" in want[-1][1]["reason"]
    plain = tmp_path / "p.jsonl"
    plain.write_text('{"value": 1}\n\n{"value": 2}')  # no newline at the end
    assert len(_compare(plain, {}, 5)) == 2
    cr = tmp_path / "cr.jsonl"
    cr.write_bytes(b'{"value": 1}\r{"value": 2}\r\r\n{"value": x}\r{"value": 3}\r')
    for chunk in (1, 3, 1 << 16):
        assert len(_compare(cr, {}, chunk)) == 4


def test_a_long_line(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text('{"value": 1, "pad": "' + "x" * 300_000 + '"}\n{"value": 2}\n'
                    '{"value": 3, "pad": "' + "y" * 1_100_000 + '"}\n')
    want = _compare(path, {}, 1 << 16)
    assert [w[0] for w in want] == ["rec", "rec", "dead"]


@pytest.mark.parametrize("lines, what", [
    (['{"key": "a", "value": 1}', '{"key": "a", "value": [1, 2]}'], "a value that is a list"),
    (['{"key": 1, "value": 1}', '{"key": 1.0, "value": 1}'], "written differently"),
    (['{"key": true, "value": 1}', '{"key": 1, "value": 1}'], "written differently"),
    (['{"key": 0.0, "value": 1}', '{"key": -0.0, "value": 1}'], "written differently"),
    (['{"key": [1], "value": 1}', '{"key": [1.0], "value": 1}'], "written differently"),
    (['{"key": [{"a": 1}], "value": 1}'], "cannot be hashed"),
    (['{"key": NaN, "value": 1}'], "NaN key"),
])
def test_what_columns_cannot_hold(tmp_path, lines, what):
    path = tmp_path / "u.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ColumnsUnfit, match=what):
        list(jsonl_columns(JsonlSource(path, key="key")))


def test_eligibility_and_dispatch(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"key": "a", "ts": 1, "value": 1, "y": 0}\n')
    assert columns_eligible(JsonlSource(path, key="key", ts="ts"))
    assert columns_eligible(JsonlSource(path, value="meta.v", loose=True))
    assert not columns_eligible(JsonlSource(path, value=["value", "ts"]))
    assert not columns_eligible(JsonlSource(path, y="y"))
    assert not columns_eligible(JsonlSource(path, task="y"))
    assert not columns_eligible(JsonlSource(path, extra=["z"]))
    assert not columns_eligible(JsonlSource(path, ts="ts", ts_format="iso"))
    assert not columns_eligible(type("Sub", (JsonlSource,), {})(path))
    src = JsonlSource(path, key="key", ts="ts")
    chunks = list(source_columns(src))
    assert [c.keys for c in chunks] == [["a"]]
    csv = tmp_path / "s.csv"
    csv.write_text("key,ts,value\na,1,2\n")
    assert columns_eligible(CsvSource(csv, key="key", ts="ts"))
    assert [c.keys for c in source_columns(CsvSource(csv, key="key"))] == [["a"]]
    with pytest.raises(ValueError, match="cannot be read in columns"):
        jsonl_columns(CsvSource(csv))
    with pytest.raises(ValueError, match="cannot be read in columns"):
        csv_columns(src)
